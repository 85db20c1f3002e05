-- Warnings (warning.rs): ARGV[3], one byte, the percentage of a rule's count whose
-- crossing this check reports (warn.lua); absent for a check that asks for none, which
-- pays for these lines alone. (A check taking a slot has the slot last, at least 32
-- bytes: never one byte.) `warned` collects the crossings, struct '<dd' (rule index,
-- units used after the check) each.
--
-- Defines `warn_at`, `warned`.
local warn_at, warned = ARGV[3], nil
if warn_at then
    if #warn_at == 1 then
        warn_at = string.byte(warn_at)
    else
        warn_at = nil
    end
end
