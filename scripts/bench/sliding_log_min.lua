-- The baseline for scripts/bench-redis: a minimal one-rule ZSET sliding log
-- (100 per 60 s), the least any Redis sliding-log limiter must do per check.
-- KEYS[1] = key. Returns 1 when admitted, 0 when denied.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000000)
local count = redis.call('ZCARD', KEYS[1])
if count >= 100 then
    return 0
end
redis.call('ZADD', KEYS[1], now, now .. '-' .. count)
redis.call('PEXPIRE', KEYS[1], 61000)
return 1
