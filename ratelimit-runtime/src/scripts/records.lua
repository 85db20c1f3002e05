-- For the string-state algorithms, after state.lua and blocked.lua.
-- What a write needs, filled in per rule by the algorithm: the records of this check (only
-- its rules, in its order: rule 0's numbers r1 .. r5, which save.lua packs with the
-- header, then the others' records, packed), how long from `now` the state written
-- matters, and how far ahead a write of the same rules can ever need (expiry.lua,
-- save.lua). Rule 0 apart, a write of one rule makes one string: each string costs Redis
-- an allocation, hashing and collection.
--
-- Defines `records`, `needed`, `reach`, `r1`, `r2`, `r3`, `r4`, `r5`.
local records, needed, reach = '', 0, 0
local r1, r2, r3, r4, r5
