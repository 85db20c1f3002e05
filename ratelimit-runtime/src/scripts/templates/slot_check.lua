-- A check that also takes a slot (slot.lua): the algorithm's check script as the function
-- `check`, called only when a slot is free. A template (scripts/sources.rs, `compose!`):
-- each line `--@ name` is replaced by the fragment name.lua, or by `check`, the
-- algorithm's check script.
local function check()
    --@ check
end
--@ slot
--@ time
--@ slot_take
