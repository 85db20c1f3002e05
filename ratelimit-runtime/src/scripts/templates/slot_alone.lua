-- A slot taken without rules (slot.lua, Limiter::acquire): no check to call. A template
-- (scripts/sources.rs, `compose!`): each line `--@ name` is replaced by the fragment
-- name.lua.
local check
--@ slot
--@ time
--@ slot_take
