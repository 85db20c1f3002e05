-- A list of checks as one (Limiter::check_all), all or nothing, on one server (or one
-- Cluster hash slot). backend/redis/script/all.rs composes the script: each algorithm's
-- check script (scripts/sources.rs) as a function of its own, called with the KEYS and
-- ARGV one check of it would get, then this chunk.
--
-- Reads     the functions sliding_log, fixed_window, sliding_window and token_bucket,
--           defined before this chunk, each `function(KEYS, ARGV)` returning its check's
--           reply (preamble.lua, reply.lua).
-- KEYS      each check's key, in the list's order.
-- ARGV[1]   each check's algorithm, one byte a check: 0 sliding log, 1 fixed window,
--           2 sliding window, 3 token bucket (Algorithm::ALL's order).
-- ARGV[5 * i - 3 .. 5 * i + 1]  check i's five arguments, as its own script reads them
--           (preamble.lua): its numbers, the sliding log's id, warn_at, a lock-out's
--           schedule, a draw ('' where a check has none). The first check's numbers carry
--           the list's time (0: Redis TIME, read once here); every check is counted at it.
-- Returns   {admitted (1|0), then each check's reply}: when admitted, every check's reply
--           to its consuming self; else each check's reply to its peek (nothing written),
--           but for a refused consuming check that starts a block, which is counted (its
--           refusal writes the block) and answers as it does alone.
--
-- Phase 1 peeks every check; phase 2 runs each check itself, only when all passed, so a
-- refusal writes nothing but blocks. Both phases run at one time, so a check that passed
-- its peek passes itself (a key named twice in one list would not: the client sends such
-- a list as several).

local checks = #KEYS
local kinds = ARGV[1]
local run = {sliding_log, fixed_window, sliding_window, token_bucket}
local _, now = struct.unpack('<dd', ARGV[2])
if now == 0 then
    -- Redis 7 replicates scripts by their effects; older servers must be asked to before
    -- a write may follow TIME.
    if not redis.REDIS_VERSION_NUM then
        redis.replicate_commands()
    end
    local time = redis.call('TIME')
    now = time[1] * 1000000 + time[2]
end
local at = struct.pack('<d', now)

local replies = {0}
local admitted = true
for i = 1, checks do
    local numbers = ARGV[5 * i - 3]
    local reply = run[string.byte(kinds, i) + 1]({KEYS[i]}, {'\0\0\0\0\0\0\0\0' .. at .. string.sub(numbers, 17)})
    -- A refusal is a table whose first number is 0; every other reply admits.
    if type(reply) == 'table' and reply[1] == 0 then
        admitted = false
    end
    replies[i + 1] = reply
end

for i = 1, checks do
    local base = 5 * i - 3
    local numbers = ARGV[base]
    local call = struct.unpack('<d', numbers)
    local reply = replies[i + 1]
    -- A consuming check with a block has a call of at least 4 (or negated: preamble.lua).
    local blocks = call >= 4 or call <= -4
    if admitted or (blocks and type(reply) == 'table' and reply[1] == 0) then
        local own = string.sub(numbers, 1, 8) .. at .. string.sub(numbers, 17)
        replies[i + 1] = run[string.byte(kinds, i) + 1](
            {KEYS[i]},
            {own, ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]}
        )
    end
end
if admitted then
    replies[1] = 1
end
return replies
