-- Gives back a draw of the sliding log (sliding_log_give_back.lua). A template
-- (scripts/sources.rs, `compose!`): each line `--@ name` is replaced by the fragment
-- name.lua, or by `periods`, the calendar counters' change
-- (templates/sliding_log_periods.lua).
--@ weighed
--@ sliding_log_calls
--@ sliding_log_members
--@ sliding_log_give_back
--@ periods
return removed
