-- The settle of a string-state algorithm (settle.lua): the reservation's units taken or
-- given back, rule by rule, then the algorithm's check script, which answers as a peek.
-- A template (scripts/sources.rs, `compose!`): each line `--@ name` is replaced by the
-- fragment name.lua, or by the part sources.rs names so:
--   names    the algorithm's NAME and SIZE (state.lua), ARGS (refund.lua), CAL
--            (calendar_check.lua) and the calls a call takes, one line each;
--   now, located, found  as in state_gives_back.lua;
--   take     the algorithm's take of more units (<algorithm>_take.lua);
--   give     its give-back of units (<algorithm>_refund.lua);
--   check    the algorithm's check script (state_check.lua).
--@ names
--@ settle
local function settle()
    -- The key's expiry as the value's header holds it, once a take has moved it.
    local moved
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
        if signed < 0 then
            -- A rule counting calls keeps its one.
        elseif period_start then
            --@ calendar_settle
        else
            if p then
                --@ found
                if TAKE then
                    --@ take
                else
                    --@ give
                end
            end
        end
    end
end
settle()
--@ check
