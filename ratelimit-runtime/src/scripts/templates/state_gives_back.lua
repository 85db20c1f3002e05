-- The refund and the give-back of a string-state algorithm (refund.lua, give_back.lua):
-- each rule's units (and calls) given back to the record that counts them. A template
-- (scripts/sources.rs, `compose!`): each line `--@ name` is replaced by the fragment
-- name.lua, or by the part sources.rs names so:
--   names    the algorithm's NAME and SIZE (state.lua), ARGS (refund.lua), TAKE (false)
--            and CAL (calendar_check.lua), one line each;
--   head     what was taken: the refund's one call, or give_back.lua;
--   now      time.lua where the algorithm reads the time (the token bucket's refund), or
--            nothing;
--   located  what the algorithm needs of a rule before its record (token_interval.lua
--            for the token bucket), or nothing;
--   found    the rule's record read at `p` (<algorithm>_found.lua);
--   part     the algorithm's give-back of the record (<algorithm>_refund.lua, or the
--            token bucket's token_bucket_give_back.lua).
--@ names
--@ head
--@ refund
--@ now
local given = 0
for i = 0, rules - 1 do
    local count, window = struct.unpack('<dd', numbers, 16 * i + 25)
    local moment = at
    --@ calendar
    --@ find
    --@ calls
    --@ located
    if period_start then
        --@ calendar_settle
    else
        if p then
            --@ found
            --@ part
        end
    end
end
return given
