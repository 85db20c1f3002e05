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
-- The loop over the rules. Rule i (0-based) has `count` and `window`, and `p`, the byte
-- where its record starts in the state, or nil (when `p == first`, its numbers are x0, y0,
-- z0: state.lua). The next check with the same rules finds each at its place; a rule
-- found elsewhere (the rules changed) is still used, and one not found starts empty. A
-- block's record, of count 0, is never found.
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
