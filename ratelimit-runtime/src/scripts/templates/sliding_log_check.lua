-- The sliding log's check script (sliding_log.lua). A template (scripts/sources.rs,
-- `compose!`): each line `--@ name` is replaced by the fragment name.lua. preamble.lua
-- lists what each fragment does.
--@ preamble
--@ warn_args
--@ weighed
--@ sliding_log
--@ blocked
--@ hold
local moment, periods, period_reach = now, nil, 0
--@ sliding_log_rules
for i = 0, rules - 1 do
    --@ rule_numbers
    --@ sliding_log_rule
    --@ calendar
    if period_start then
        --@ sliding_log_calendar
        --@ fixed_count
    end
    --@ warn
    --@ bind
end
--@ sliding_log_rerun
-- The log is trimmed to its rules' longest window (at least 1 µs, so that a check's own
-- entries, added before the trim, stay when every rule is a calendar rule); the key lives
-- as long as the calendar rules' periods too.
local trim = reach
if period_reach > reach then
    reach = period_reach
    if trim < 1 then
        trim = 1
    end
end
--@ block
--@ expiry
--@ streak
--@ warn_rerun
--@ sliding_log_add
--@ warn_reply
--@ reply
