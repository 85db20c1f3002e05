-- A list of checks as one (Limiter::check_all), all or nothing, on one server (or one
-- Cluster hash slot). backend/redis/script/all.rs composes the script: check_all_head.lua
-- (the list's state, read and set here), then each algorithm's check script as a function
-- of its own, then this chunk.
--
-- Reads     the functions sliding_log, fixed_window, sliding_window and token_bucket,
--           each `function(KEYS, ARGV, i)`: check i's script as it is, but that it reads
--           TIME once a list (`list_time`), and that where its writes start (after
--           streak.lua) it first clears `admitted` if it refuses and calls
--           `judge_from(i + 1)`, then writes only when `write_all`, or when it refuses and
--           `write_refused` (its lock-out); then it answers as its script does. A check
--           may answer before that point: refused under a block, or an error.
-- KEYS      each check's key, in the list's order, each once.
-- ARGV[1]   two bytes a check: its algorithm (0 sliding log, 1 fixed window, 2 sliding
--           window, 3 token bucket: Algorithm::ALL's order), and how many arguments it
--           sends (2 to 5).
-- ARGV[2 ..]  each check's arguments in turn, as its own script reads them
--           (preamble.lua): its numbers, the sliding log's id, then, up to the last it
--           has, warn_at, a lock-out's schedule, a draw ('' where a check has none
--           before one it has; an argument not sent reads as nil, as in its script).
-- Returns   {admitted (1|0), then each check's reply}, each as its check alone answers;
--           or the error a check answered (another algorithm's key), nothing written.
--
-- So each check runs once and in order, its reads and decisions first; the checks after
-- it run inside it (a Lua call, which keeps its locals on the stack: nothing to allocate
-- or hold back), and once the last is judged every check writes, last first, or none but
-- the refused ones' lock-outs. Each key is in the list once, so no check's writes change
-- what another read; and a script is atomic, so nobody sees between.

local checks = #KEYS
local kinds = ARGV[1]
local run = {sliding_log, fixed_window, sliding_window, token_bucket}
local replies = {0}
-- One KEYS and one ARGV for every check, refilled: a check reads them before the next
-- check's judging starts, but a draw's writes (drawn.lua), and a list of two or more has
-- no draw (Check::allowance).
local keys, args = {}, {}
-- Where the next check's arguments start.
local at = 2

-- Judges check i and, within it (or here, after a check answering before its writes),
-- the checks after it; once all are judged, sets what they write.
judge_from = function(i)
    reached = i
    while i <= checks do
        local kind, sent = string.byte(kinds, 2 * i - 1, 2 * i)
        keys[1] = KEYS[i]
        -- The arguments a check does not send are nil, as the last ones of its script.
        args[1], args[2], args[3], args[4], args[5] = unpack(ARGV, at, at + sent - 1)
        at = at + sent
        local answer = run[kind + 1](keys, args, i)
        replies[i + 1] = answer
        if reached > i then
            -- It judged the checks after it, and has written and answered.
            return
        end
        -- Answered before its writes: a refusal (first number 0), or an error.
        if type(answer) == 'table' then
            if answer.err then
                failed, i = answer, checks
            elseif answer[1] == 0 then
                admitted = false
            end
        end
        i = i + 1
        reached = i
    end
    write_refused = not failed
    write_all = admitted and write_refused
end

judge_from(1)
if failed then
    return failed
end
if admitted then
    replies[1] = 1
end
return replies
