
-- The TTL, in ms, of a write (an admitted check): for state that matters `reach` µs more
-- from the time counted at, so `reach + lag` from the caller's clock (which PX is relative
-- to), whole ms rounded up, plus a one-second margin (algorithm::ttl_us). nil when the
-- check writes nothing.
local ms
if consume and not denied and not seen then
    local span = reach + lag
    local r = span % 1000
    if r < 0 then
        r = r + 1000
    end
    ms = (span - r) / 1000 + 1000
    if r > 0 then
        ms = ms + 1
    end
end
