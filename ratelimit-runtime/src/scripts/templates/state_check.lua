-- The check script of a string-state algorithm (the fixed window, the sliding window, the
-- token bucket; state.lua). A template (scripts/sources.rs, `compose!`): each line
-- `--@ name` is replaced by the fragment name.lua, or by the part sources.rs names so:
--   names       the algorithm's NAME, SIZE, LATEST, HEAD, OWN (state.lua) and CAL
--               (calendar_check.lua), one line each;
--   arithmetic  what state.lua needs first (muldiv.lua for the sliding window), or nothing;
--   draw_hold   hold.lua for the token bucket, or nothing;
--   moment      how the token bucket clamps a calendar rule's moment
--               (token_bucket_calendar.lua), or nothing;
--   algorithm   the algorithm's arithmetic for one rule (<algorithm>.lua), which sets
--               `left`, `reset_after` and `retry` for warn.lua and bind.lua.
-- preamble.lua lists what each fragment does.
--@ preamble
--@ warn_args
--@ names
--@ arithmetic
--@ state
--@ blocked
--@ draw_hold
local moment = now
--@ records
for i = 0, rules - 1 do
    --@ rule_numbers
    --@ moment
    --@ calendar
    --@ find
    --@ calls
    if period_start then
        --@ calendar_check
        --@ fixed_count
        --@ warn
        --@ bind
    end
    if not period_start then
        --@ algorithm
        --@ warn
        --@ bind
    end
end
--@ block
--@ expiry
--@ streak
--@ save
--@ drawn
--@ warn_reply
--@ reply
