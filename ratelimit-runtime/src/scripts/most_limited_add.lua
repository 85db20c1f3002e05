-- Refusals of one site's identities in one minute (limiter/most_limited.rs): adds each
-- identity's refusals, keeps the CAP heaviest members (ZREMRANGEBYRANK drops the lowest
-- scores, ties the lowest members in byte order), and keeps the set an hour after its
-- minute.
--
-- KEYS[1]  {prefix}limited:{site}:minute
-- ARGV[1]  CAP; ARGV[2] the set's expiry, in seconds since the epoch; then pairs of
--          identity and refusals
-- Returns  the members the set holds
--
-- Defines `key`, `held`, `over`; may return the answer.
local key = KEYS[1]
for i = 3, #ARGV, 2 do
    redis.call('ZINCRBY', key, ARGV[i + 1], ARGV[i])
end
local held = redis.call('ZCARD', key)
local over = held - tonumber(ARGV[1])
if over > 0 then
    redis.call('ZREMRANGEBYRANK', key, '0', string.format('%d', over - 1))
    held = held - over
end
redis.call('EXPIREAT', key, ARGV[2])
return held
