-- A block's rule as stored is its index plus 65536 times its strikes: which lock-out of
-- an escalating schedule it is (block.lua; 0 for a block of one duration).
--
-- Reads `blocked_until`, `now`, `rules`, `clock`; sets `blocked_strikes`, `blocked_rule`;
-- may return the answer.
if blocked_rule and blocked_rule >= 65536 then
    blocked_strikes = (blocked_rule - blocked_rule % 65536) / 65536
    blocked_rule = blocked_rule % 65536
end

-- A key under a block (block.lua) refuses every check and peek, consuming nothing, until
-- the block ends (algorithm::Block): answered by the rule that started it (rule 0 when the
-- rules changed since), nothing remaining, and the block's remaining time from the
-- caller's clock as reset_after and retry_after.
if blocked_until and now < blocked_until then
    local rule = blocked_rule
    if rule >= rules then
        rule = 0
    end
    return {0, rule, 0, blocked_until - clock, blocked_until - clock}
end
