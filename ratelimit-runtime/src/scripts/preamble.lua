-- What every check's script starts with. scripts/sources.rs composes each script from
-- fragments, in this order:
--   preamble.lua   the protocol, the time, the variables the other fragments share;
--   state.lua      reads the key, its block, and the time the check is counted at
--                  (sliding_log.lua for the sliding log);
--   blocked.lua    the refusal of a key under a block;
--   records.lua    what the loop over the rules fills in (the sliding log's:
--                  sliding_log_rules.lua), then, for each rule, rule_numbers.lua and
--                  find.lua, its record;
--   calendar.lua   a rule counting in calendar periods: its period, and the window its
--                  record is stored under (before find.lua);
--   calls.lua      a rule counting calls takes one unit of any call;
--   calendar_check.lua  a calendar rule's arithmetic, in place of the algorithm's
--                  (sliding_log_calendar.lua for the sliding log);
--   <algorithm>    the algorithm's arithmetic for one rule;
--   fixed_count.lua  what is left of a count fixed until a reset, after calendar_check.lua,
--                  sliding_log_calendar.lua and the fixed window's fixed_window.lua;
--   bind.lua       the binding rule's choice, the last of the loop;
--   sliding_log_rerun.lua  (the sliding log) a re-sent check answers as it did;
--   block.lua      a refusal that starts a block;
--   expiry.lua     the TTL of a write;
--   save.lua       writes the state (sliding_log_add.lua for the sliding log);
--   reply.lua      the answer.
-- The arithmetic is that of src/algorithm/*.rs, which documents it; keep the two in step.
--
-- KEYS[1]  the key
-- ARGV[1]  the numbers of the check, each a little-endian double (struct '<d'):
--            1: the call: 0 to peek (write nothing), 1 to consume (record the call if
--               admitted), 2 to consume and answer with the time the check was counted
--               at (a string-state algorithm's refund needs it; see reply.lua), 3 to
--               draw an allowance (ARGV[5]); plus 4 * block_for in µs: a consuming
--               check refused by a rule then blocks the key that long (block.lua); all
--               negated for an escalating lock-out, whose schedule is then ARGV[4]
--               (block.lua);
--            2: now in µs since the epoch, or 0 to read Redis TIME (explicit times are
--               for tests);
--            3: the call's cost, in units of every rule (at least 1);
--            4, 5: count, window_us of rule 0 (bytes 25 and 33); 6, 7: of rule 1; ...
--               (rule i's count at byte 16 * i + 25); a rule counting calls has its
--               count negated, and takes one of any call (calls.lua); a rule counting
--               in calendar periods has window -1 (a UTC day), -2 (a UTC month) or -3
--               (a UTC year)
--          Binary, because Redis parses text numbers slower than a check's arithmetic;
--          block_for shares the first number so that a check of one rule stays within
--          44 bytes, which Redis keeps in one allocation.
-- ARGV[2]  the sliding log's id of a consuming check (see sliding_log.lua); any id for a
--          draw of another algorithm (unread)
-- ARGV[3]  a consuming check's warn_at, one byte (warn_args.lua)
-- ARGV[4]  an escalating lock-out's schedule (block.lua)
-- ARGV[5]  a draw's (backend::Draw) struct '<dd': the calls it takes of a rule counting
--          calls, and the hold it asks for in µs (hold.lua shortens it): its units are
--          recorded as spent that long after the time it is counted at. It answers as a
--          string-state check asking for its time does, as a table with a seventh number:
--          the token bucket's witness (token_bucket.lua), else 0 (reply.lua).
--          Each optional argument has its place; one before a place that is sent goes
--          empty, and a check needing none sends none (backend/redis/script/check.rs).
-- Returns  {allowed (1|0), rule_index (0-based binding rule), remaining, reset_after_us,
--          retry_after_us (0 when allowed, -1 when the call can never pass)},
--          or an admitted call's short form (see reply.lua), which a check that asks for
--          it sends with the time it was counted at.
--
-- Every number stays an integer below 2^53, so Lua's doubles hold it exactly. Numbers
-- are doubles: `a % b` is a - floor(a / b) * b, exact but for a / b rounding up to the
-- next integer, which leaves it negative by exactly b; the code adds b back.
--
-- A script runs on every check, so it creates no closures or tables on the common path
-- (each costs allocations and garbage collection): the fragments are plain code, composed
-- in sequence, the loop over the rules written in templates/state_check.lua and
-- sliding_log_check.lua. Numbers go to
-- redis.call as integer text made with string.format('%d', ..): a Lua number argument is
-- formatted by Redis with '%.17g', which costs several times a whole command. The cost is
-- measured in instructions per check with redis-server under callgrind
-- (scripts/bench-instructions).
--
-- Defines `key`, `numbers`, `call`, `consume`, `now`, `cost`, `count0`, `window0`,
-- `block_for`, `answer_at`, `escalating`, `draw`, `calls_taken`, `hold`, `witness`,
-- `rules`, `time`, `clock`, `lag`, `NEVER`, `denied`, `denied_left`, `denied_reset`,
-- `denied_retry`, `binding`, `binding_count`, `binding_units`, `least`, `reset`,
-- `blocked_until`, `blocked_rule`, `blocked_strikes`, `streak`.

local key = KEYS[1]
local numbers = ARGV[1]
-- redis.call, looked up once: each lookup costs a check about what an addition of its
-- arithmetic does, and the fragments call it several times a check.
local call = redis.call
-- Rule 0's count and window come with the rest: the one rule of most checks costs no
-- second unpack.
local consume, now, cost, count0, window0 = struct.unpack('<ddddd', numbers)
-- How long a refusal blocks the key (nil: no block), and whether the answer carries the
-- time the check was counted at (reply.lua). A plain check has neither, and pays for
-- neither: every variable a check does not use stays nil, set by one instruction.
local block_for, answer_at, escalating
-- A draw: the calls it takes of each rule counting calls (1 for a check), its hold (0 for
-- a check), and the token bucket's witness (token_bucket.lua).
local draw, calls_taken, hold, witness = false, 1, 0, nil
if consume == 2 then
    -- Every programmatic check of a string-state algorithm: decoded without arithmetic.
    answer_at = true
elseif consume > 2 or consume < 0 then
    -- Negated: an escalating lock-out (block.lua).
    if consume < 0 then
        consume, escalating = -consume, true
    end
    local call = consume % 4
    if consume > 3 then
        block_for = (consume - call) / 4
    end
    answer_at, consume = call >= 2, call
    if call == 3 then
        draw = true
        calls_taken, hold = struct.unpack('<dd', ARGV[5])
    end
end
consume = consume > 0
local rules = (#numbers - 24) / 16
-- Redis TIME's reply (seconds, µs as text), when the script reads it.
local time
if now == 0 then
    -- Redis 7 replicates scripts by their effects; older servers must be asked to before
    -- a write may follow TIME.
    if not redis.REDIS_VERSION_NUM then
        redis.replicate_commands()
    end
    time = call('TIME')
    now = time[1] * 1000000 + time[2]
end
-- The caller's clock. A script that finds state newer than it counts the check at the
-- state's time instead (algorithm::Clamp): it moves `now` there and sets `lag` to the
-- difference, which the answer's durations and the key's expiry add back.
local clock, lag = now, 0
-- retry_after of a call that can never pass: its cost is above a rule's count.
local NEVER = math.huge

-- The binding rule so far (bind.lua), and the denying rule that frees up last. The key's
-- block, as the state holds it (blocked.lua, block.lua): until when (nil: none), and the
-- rule that started it.
local denied, denied_left, denied_reset, denied_retry = nil, 0, 0, 0
local binding, binding_count, binding_units, least, reset, blocked_until, blocked_rule
-- Which lock-out of an escalating schedule the key's block is (blocked.lua, block.lua),
-- and whether a write keeps a block that has passed, to remember its streak (streak.lua).
local blocked_strikes, streak

