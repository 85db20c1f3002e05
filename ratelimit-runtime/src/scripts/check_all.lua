-- A list of checks as one (Limiter::check_all), all or nothing, on one server (or one
-- Cluster hash slot). backend/redis/script/all.rs composes the script: each algorithm's
-- check script (scripts/sources.rs) as a function of its own, called with the KEYS, ARGV
-- and `redis` one check of it would see, then this chunk.
--
-- Reads     the functions sliding_log, fixed_window, sliding_window and token_bucket,
--           defined before this chunk, each `function(KEYS, ARGV, redis)` returning its
--           check's reply (preamble.lua, reply.lua).
-- KEYS      each check's key, in the list's order.
-- ARGV[1]   each check's algorithm, one byte a check: 0 sliding log, 1 fixed window,
--           2 sliding window, 3 token bucket (Algorithm::ALL's order).
-- ARGV[5 * i - 3 .. 5 * i + 1]  check i's five arguments, as its own script reads them
--           (preamble.lua): its numbers, the sliding log's id, warn_at, a lock-out's
--           schedule, a draw ('' where a check has none).
-- Returns   {admitted (1|0), then each check's reply}, each as its check alone answers;
--           or the error a check answered (another algorithm's key), nothing written.
--
-- Each check runs once, with its writes held back: its `redis` is this chunk's, whose
-- `call` runs reads and keeps writes (the check scripts write only at their end, and use
-- no write's reply but ZADD NX's of a new sliding-log id, which is 1). Once every check
-- has answered, the writes of all of them run when all were admitted; else only those of
-- the refused checks, which write nothing but the lock-out they start.

local checks = #KEYS
local kinds = ARGV[1]
local run = {sliding_log, fixed_window, sliding_window, token_bucket}
local real = redis

-- The commands a check may write with; every other command it calls is a read.
local WRITES = {ZADD = true, ZREM = true, ZREMRANGEBYSCORE = true, PEXPIRE = true,
    SET = true, SETRANGE = true}
local held
local held_back = setmetatable({
    call = function(command, ...)
        if WRITES[command] then
            held[#held + 1] = {command, ...}
            return 1
        end
        return real.call(command, ...)
    end,
}, {__index = real})

local replies, writes = {0}, {}
local admitted = true
-- One KEYS and one ARGV for every check, refilled: a check reads them before it writes.
local keys, args = {}, {}
for i = 1, checks do
    local base = 5 * i - 3
    keys[1] = KEYS[i]
    args[1], args[2], args[3], args[4], args[5] =
        ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]
    held = {}
    -- The last check, every one before it admitted, writes at once: admitted, the list
    -- is; refused, it writes only the lock-out it starts, as a refused list does.
    local writer = held_back
    if i == checks and admitted then
        writer = real
    end
    local reply = run[string.byte(kinds, i) + 1](keys, args, writer)
    if type(reply) == 'table' then
        if reply.err then
            return reply
        end
        -- A refusal is a table whose first number is 0; every other reply admits.
        if reply[1] == 0 then
            admitted = false
        end
    end
    replies[i + 1], writes[i] = reply, held
end

for i = 1, checks do
    local reply = replies[i + 1]
    if admitted or (type(reply) == 'table' and reply[1] == 0) then
        for _, write in ipairs(writes[i]) do
            real.call(unpack(write))
        end
    end
end
if admitted then
    replies[1] = 1
end
return replies
