-- For the string-state algorithms, after state.lua and blocked.lua.
-- What a write needs, filled in per rule by the algorithm: the records of this check (only
-- its rules, in its order: rule 0's numbers r1 .. r5, which save.lua packs with the
-- header, then the others' records, packed), how long from `now` the state written
-- matters, and how far ahead a write of the same rules can ever need (expiry.lua,
-- save.lua). Rule 0 apart, a write of one rule makes one string: each string costs Redis
-- an allocation, hashing and collection.
local records, needed, reach = '', 0, 0
local r1, r2, r3, r4, r5

-- The loop over the rules, which the algorithm's file continues and bind.lua ends. Rule i
-- (0-based) has `count` and `window`, and `p`, the byte where its record starts in the
-- state, or nil (when `p == first`, its numbers are x0, y0, z0 above). The next check
-- with the same rules finds each at its place; a rule found elsewhere (the rules
-- changed) is still used, and one not found starts empty. A block's record, of count 0,
-- is never found.
for i = 0, rules - 1 do
    local count, window = count0, window0
    if i > 0 then
        count, window = struct.unpack('<dd', numbers, 16 * i + 25)
    end
