-- The sliding log's refund of a check with calendar rules (sliding_log_refund.lua). A
-- template (scripts/sources.rs, `compose!`): each line `--@ name` is replaced by the
-- fragment name.lua, or by `periods`, the calendar counters' change
-- (templates/sliding_log_periods.lua).
--@ sliding_log_calls
--@ sliding_log_refund
--@ periods
return removed
