-- An admitted write ends a block that has passed, but for an escalating lock-out's
-- (block.lua), kept while the next lock-out would continue its streak: less than 24 hours
-- after its end (algorithm::Block::end). The key then lives at least that long, whatever
-- the TTL of this write (expiry.lua), in whole ms rounded up, with the margin. (The strikes
-- are tested first: a key without a lock-out, the common case, pays one test.)
--
-- Reads `blocked_strikes`, `consume`, `denied`, `now`, `blocked_until`, `clock`; sets
-- `streak`, `ms`.
if blocked_strikes and blocked_strikes > 0 and consume and not denied
    and now < blocked_until + 86400000000 then
    streak = true
    if ms then
        local span = blocked_until + 86400000000 - clock
        local keep = math.ceil(span / 1000) + 1000
        if keep > ms then
            ms = keep
        end
    end
end
