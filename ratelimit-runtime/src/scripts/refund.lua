-- Gives back the units of one admitted check of a string-state algorithm, as far as the
-- key still holds them (algorithm::Counter::refund, which documents the arithmetic; keep
-- the two in step). scripts/sources.rs composes it: NAME and SIZE (as for state.lua),
-- ARGS (which argument holds its numbers: 1; a settle's are its third, see settle.lua),
-- this fragment, time.lua where the algorithm reads the time (the token bucket), then
-- the loop over the rules (templates/state_gives_back.lua): find.lua, the algorithm's
-- <algorithm>_found.lua and <algorithm>_refund.lua.
--
-- KEYS[1]  the key
-- ARGV[1]  little-endian doubles (struct '<d'): the time the check was counted at (µs),
--          its cost, now in µs (0: Redis TIME; read by the token bucket alone), then
--          count, window_us per rule (rule i's count at byte 16 * i + 25)
-- Returns  how many rules gave units back
--
-- Each rule's numbers are rewritten in place (SETRANGE), which keeps the key's expiry and
-- its block. A key that holds nothing of this algorithm has nothing to give back.
--
-- Reads `ARGS`, `NAME`, `SIZE`; defines `key`, `numbers`, `at`, `cost`, `now`, `reserved`,
-- `rules`, `state`, `first`, `name`, `c0`, `w0`; may return the answer.

local key = KEYS[1]
local numbers = ARGV[ARGS]
local at, cost, now = struct.unpack('<ddd', numbers)
-- A settle's reservation, which its difference is part of (its fourth argument); a refund
-- gives back its whole cost: nil.
local reserved = ARGV[ARGS + 1] and tonumber(ARGV[ARGS + 1])
local rules = (#numbers - 24) / 16
local state = redis.call('GET', key)
local first = #NAME + 9
if not state or #state < first - 1 + SIZE or (#state - first + 1) % SIZE ~= 0 then
    return 0
end
local name = string.sub(state, 1, #NAME)
if name ~= NAME and name ~= string.upper(NAME) then
    return 0
end
local c0, w0 = struct.unpack('<dd', state, first)
-- Then (templates/state_gives_back.lua) time.lua where the algorithm reads it, then the
-- loop over the rules.
