-- A consuming check refused by a rule starts a block of the key when the check asks for
-- one (block_for): every check is refused from now until `now + block_for`
-- (blocked.lua). The refusal says so: no call passes before the block ends. The write
-- keeps the key at least as long as the block, and as long as what it holds matters
-- (expiry.lua); save.lua or sliding_log_add.lua writes the block. A consuming check that
-- is refused with block_for set is such a write: the fragments after this one know it so.
--
-- An escalating lock-out (lockout.rs) takes its duration from the schedule, ARGV[4], a
-- string of doubles (µs): the nth, n being its strikes: one more than the block it finds
-- (which has ended: blocked.lua answered otherwise) when that one was of a schedule and ended less
-- than 24 hours ago, else 1; the last duration repeats. The key then lives 24 hours past
-- the lock-out, so that the next one finds its streak (streak.lua keeps it).
--
-- Reads `denied`, `consume`, `escalating`, `now`, `NEVER`; sets `block_for`,
-- `blocked_strikes`, `blocked_rule`, `blocked_until`, `denied_retry`, `denied_reset`,
-- `needed`, `reach`.
if denied and consume and block_for then
    local remembered = 0
    if escalating then
        local schedule = ARGV[4]
        local strikes = 1
        if blocked_strikes and blocked_strikes > 0 and now < blocked_until + 86400000000 then
            strikes = blocked_strikes + 1
        end
        local nth = strikes
        if nth > #schedule / 8 then
            nth = #schedule / 8
        end
        block_for = struct.unpack('<d', schedule, 8 * nth - 7)
        blocked_strikes, remembered = strikes, 86400000000
    else
        blocked_strikes = 0
    end
    blocked_until, blocked_rule = now + block_for, denied
    if denied_retry ~= NEVER and denied_retry < block_for then
        denied_retry = block_for
    end
    if denied_reset < block_for then
        denied_reset = block_for
    end
    needed = block_for + remembered
    if needed > reach then
        reach = needed
    end
end
