-- Reads `ends`, `now`, `slots`, `lease`; defines `ms`; may return the answer.
if tonumber(ends) <= now then
    redis.call('ZREM', slots, ARGV[2])
    return 0
end
redis.call('ZADD', slots, string.format('%d', now + lease), ARGV[2])
local ms = math.floor(lease / 1000) + 1000
if redis.call('PTTL', slots) < ms then
    redis.call('PEXPIRE', slots, ms)
end
return 1
