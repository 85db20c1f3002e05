-- Gives back the units of one admitted check of a string-state algorithm, as far as the
-- key still holds them (algorithm::Counter::refund, which documents the arithmetic; keep
-- the two in step). scripts/sources.rs composes it: NAME and SIZE (as for state.lua),
-- NOW (whether it reads the time), ARGS (which argument holds its numbers: 1; a settle's
-- are its third, see settle.lua), this fragment, find.lua, the algorithm's
-- <algorithm>_refund.lua, and the end of the loop.
--
-- KEYS[1]  the key
-- ARGV[1]  little-endian doubles (struct '<d'): the time the check was counted at (µs),
--          its cost, now in µs (0: Redis TIME; read by the token bucket alone), then
--          count, window_us per rule (rule i's count at byte 16 * i + 25)
-- Returns  how many rules gave units back
--
-- Each rule's numbers are rewritten in place (SETRANGE), which keeps the key's expiry and
-- its block. A key that holds nothing of this algorithm has nothing to give back.

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
if NOW and now == 0 then
    if not redis.REDIS_VERSION_NUM then
        redis.replicate_commands()
    end
    local time = redis.call('TIME')
    now = time[1] * 1000000 + time[2]
end
local given = 0
for i = 0, rules - 1 do
    local count, window = struct.unpack('<dd', numbers, 16 * i + 25)
