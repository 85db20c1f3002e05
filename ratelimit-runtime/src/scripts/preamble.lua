-- What every script starts with. scripts/sources.rs composes each script from fragments,
-- in this order:
--   preamble.lua   the protocol, the time, the variables the other fragments share;
--   state.lua      (the string-state algorithms) reads the key, opens the loop over rules;
--   <algorithm>    the algorithm's arithmetic for one rule (the sliding log opens its loop);
--   bind.lua       the binding rule's choice, and the end of the loop;
--   expiry.lua     the TTL of a write;
--   save.lua       (the string-state algorithms) writes the state; the sliding log's own
--                  write is sliding_log_add.lua;
--   reply.lua      the answer.
-- The arithmetic is that of src/algorithm/*.rs, which documents it; keep the two in step.
--
-- KEYS[1]  the key
-- ARGV[1]  the numbers of the check, each a little-endian double (struct '<d'):
--            1: 1 to consume (record the call if admitted), 0 to peek (write nothing);
--            2: now in µs since the epoch, or 0 to read Redis TIME (explicit times are
--               for tests);
--            3: the call's cost, in units of every rule (at least 1);
--            4, 5: count, window_us of rule 0 (bytes 25 and 33); 6, 7: of rule 1; ...
--               (rule i's count at byte 16 * i + 25)
--          Binary, because Redis parses text numbers slower than a check's arithmetic.
-- ARGV[2]  the sliding log's id of a consuming check (see sliding_log.lua)
-- Returns  {allowed (1|0), rule_index (0-based binding rule), remaining, reset_after_us,
--          retry_after_us (0 when allowed, -1 when the call can never pass)},
--          or an admitted call's short form (see reply.lua).
--
-- Every number stays an integer below 2^53, so Lua's doubles hold it exactly. Numbers
-- are doubles: `a % b` is a - floor(a / b) * b, exact but for a / b rounding up to the
-- next integer, which leaves it negative by exactly b; the code adds b back.
--
-- A script runs on every check, so it creates no closures or tables on the common path
-- (each costs allocations and garbage collection): the fragments are plain code, composed
-- in sequence, some of them opening or closing the loop over the rules. Numbers go to
-- redis.call as integer text made with string.format('%d', ..): a Lua number argument is
-- formatted by Redis with '%.17g', which costs several times a whole command. The cost is
-- measured in instructions per check with redis-server under callgrind
-- (scripts/bench-instructions).

local key = KEYS[1]
local numbers = ARGV[1]
local consume, now, cost = struct.unpack('<ddd', numbers)
consume = consume == 1
local rules = (#numbers - 24) / 16
-- Redis TIME's reply (seconds, µs as text), when the script reads it.
local time
if now == 0 then
    -- Redis 7 replicates scripts by their effects; older servers must be asked to before
    -- a write may follow TIME.
    if not redis.REDIS_VERSION_NUM then
        redis.replicate_commands()
    end
    time = redis.call('TIME')
    now = time[1] * 1000000 + time[2]
end
-- The caller's clock. A script that finds state newer than it counts the check at the
-- state's time instead (algorithm::Clamp): it moves `now` there and sets `lag` to the
-- difference, which the answer's durations and the key's expiry add back.
local clock, lag = now, 0
-- retry_after of a call that can never pass: its cost is above a rule's count.
local NEVER = math.huge

-- The binding rule so far (bind.lua), and the denying rule that frees up last.
local denied, denied_left, denied_reset, denied_retry = nil, 0, 0, 0
local binding, binding_count, least, reset

