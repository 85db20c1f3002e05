-- How many slots of a key are held (slot.rs): their leases not ended.
--
-- KEYS[1]  the key's slots (slot.lua)
-- ARGV[1]  now in µs as integer text, or 0 for Redis TIME
-- Returns  the number of slots whose lease ends after now
--
-- Defines `now`; may return the answer.
local now = tonumber(ARGV[1])
if now == 0 then
    local time = redis.call('TIME')
    now = time[1] * 1000000 + time[2]
end
return redis.call('ZCOUNT', KEYS[1], string.format('(%d', now), '+inf')
