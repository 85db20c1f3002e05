-- Reads a key for Limiter::inspect (src/inspect.rs), at one instant, writing nothing.
--
-- KEYS[1]  the key
-- Returns  {type, pttl} (TYPE's answer, and PTTL's: -2 absent, -1 no expiry, else ms),
--          then for a string its value (the string-state algorithms, scripts/state.lua),
--          for a sorted set every member and score (the sliding log, sliding_log.lua)
--
-- Defines `key`, `kind`, `pttl`; may return the answer.
local key = KEYS[1]
local kind = redis.call('TYPE', key)['ok']
local pttl = redis.call('PTTL', key)
if kind == 'string' then
    return {kind, pttl, redis.call('GET', key)}
elseif kind == 'zset' then
    return {kind, pttl, redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')}
end
return {kind, pttl}
