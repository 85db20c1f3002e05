-- The TTL, in ms, when a write (an admitted check, or one that starts a block) moves the
-- key's expiry: when the state written would outlive it (it matters `needed + lag` µs
-- more from the caller's clock) with the margin of one second (algorithm::Counter::keep),
-- or on Redis 5 and 6 (no REDIS_VERSION_NUM), which cannot keep it. The TTL covers
-- `reach + lag` µs (far enough for the writes after it too), whole ms rounded up, plus the
-- margin (algorithm::ttl_us). nil when the check writes nothing or keeps the expiry.
--
-- Reads `consume`, `denied`, `block_for`, `expires`, `clock`, `needed`, `lag`, `reach`,
-- `hold`; defines `ms`.
local ms
if consume and (not denied or block_for)
    and (expires < clock + needed + lag + 1000000 or not redis.REDIS_VERSION_NUM) then
    local span = reach + lag + hold
    local r = span % 1000
    if r < 0 then
        r = r + 1000
    end
    ms = (span - r) / 1000 + 1000
    if r > 0 then
        ms = ms + 1
    end
end
