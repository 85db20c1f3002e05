-- Lapsed slots are dropped only when they could be in the way: a set with room admits
-- whatever lapsed, and holds now most `most` slots.
--
-- Reads `slots`, `most`, `now`, `slot_id`, `check`, `lease`; defines `in_use`, `answer`,
-- `t`; may return the answer.
local in_use = redis.call('ZCARD', slots)
if in_use >= most then
    redis.call('ZREMRANGEBYSCORE', slots, '-inf', string.format('%d', now))
    in_use = redis.call('ZCARD', slots)
    if redis.call('ZSCORE', slots, slot_id) then
        in_use = in_use - 1
    elseif in_use >= most then
        return {-1, in_use}
    end
end
local answer
if check then
    answer = check()
else
    answer = {-2, most - in_use - 1}
end
local t = type(answer)
if t == 'number' or t == 'string' or answer[1] ~= 0 then
    redis.call('ZADD', slots, string.format('%d', now + lease), slot_id)
    -- The set outlives its longest lease by a second, and no holder shortens it.
    local ms = math.floor(lease / 1000) + 1000
    if redis.call('PTTL', slots) < ms then
        redis.call('PEXPIRE', slots, ms)
    end
end
return answer
