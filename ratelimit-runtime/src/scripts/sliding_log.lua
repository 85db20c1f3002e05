-- Sliding log: one ZSET member per admitted call, scored by its time in µs.
-- The same arithmetic as src/algorithm/sliding_log.rs; keep the two in step.
--
-- KEYS[1]  the key
-- ARGV[1]  the numbers of the check, each a little-endian double (struct '<d'):
--            1: 1 to consume (record the call if admitted), 0 to peek (answer the same,
--               write nothing);
--            2: now in µs since the epoch, or 0 to read Redis TIME (explicit times are
--               for tests);
--            3, 4: count, window_us of rule 0; 5, 6: of rule 1; ...
--          Binary, because Redis parses text numbers slower than a check's arithmetic.
-- Returns {allowed (1|0), rule_index (0-based binding rule), remaining, reset_after_us,
--          retry_after_us (0 when allowed)}
--       or an admitted call's short form (at the end).
--
-- An entry at s is inside a window w at now iff s > now - w. Every number stays an integer
-- below 2^53, so Lua's doubles hold it exactly. Numbers reach redis.call as numbers, which
-- Redis formats exactly; `..` would format them with %.14g and lose digits.
--
-- The script runs on every check, so it creates no closures or tables of its own; its
-- cost was measured in instructions per call with redis-server under callgrind.

local key = KEYS[1]
local numbers = ARGV[1]
local consume, now = struct.unpack('<dd', numbers)
consume = consume == 1
local rules = #numbers / 16 - 1
-- `now` as text, for member names.
local stamp
if now == 0 then
    -- Redis 7 replicates scripts by their effects; older servers must be asked to before
    -- a write may follow TIME.
    if not redis.REDIS_VERSION_NUM then
        redis.replicate_commands()
    end
    local t = redis.call('TIME')
    now = t[1] * 1000000 + t[2]
    stamp = t[1] .. '.' .. t[2]
else
    stamp = string.format('%d', now)
end

-- Rule i's (1-based) count and window are numbers 2i + 1 and 2i + 2: bytes 16i + 1, 16i + 9.
local longest = struct.unpack('<d', numbers, 25)
for i = 2, rules do
    local window = struct.unpack('<d', numbers, 16 * i + 9)
    if window > longest then
        longest = window
    end
end

-- A peek writes nothing, so it leaves stale entries in place; the ZCOUNTs skip them.
if consume then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - longest)
end
local total = redis.call('ZCARD', key)

local denied, denied_window, denied_retry = nil, 0, -1
local tightest, tightest_count, tightest_window, tightest_remaining = nil, 0, 0, 0
for i = 1, rules do
    local count, window = struct.unpack('<dd', numbers, 16 * i + 1)
    local inside
    if consume and window == longest then
        inside = total -- trimmed just above
    else
        inside = redis.call('ZCOUNT', key, now - window + 1, '+inf')
    end
    if inside >= count then
        -- The window's entries are the newest `inside`; the call may pass once the
        -- `inside - count + 1` oldest of them have left, the last of which has rank
        -- `total - count` overall.
        local must_leave = tonumber(redis.call('ZRANGE', key, total - count, total - count, 'WITHSCORES')[2])
        local retry = must_leave + window - now
        if retry > denied_retry then
            denied, denied_window, denied_retry = i, window, retry
        end
    else
        local remaining = count - inside - 1
        if tightest == nil or remaining < tightest_remaining then
            tightest, tightest_count, tightest_window, tightest_remaining = i, count, window, remaining
        end
    end
end

if denied then
    local newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
    return {0, denied - 1, 0, newest + denied_window - now, denied_retry}
end

if consume then
    -- Unique even for many calls in one microsecond: within one `now` the trimmed card
    -- only grows. NX guards the rare reuse when a test moves time backwards.
    local n = total
    while redis.call('ZADD', key, 'NX', now, stamp .. '-' .. n) == 0 do
        n = n + 1
    end
    -- The TTL: the longest window in whole ms rounded up, plus a 1 s margin
    -- (algorithm::ttl_us). A double's floor(a / b) may only round up, never down.
    local ms = math.floor((longest + 999) / 1000)
    if ms * 1000 > longest + 999 then
        ms = ms - 1
    end
    redis.call('PEXPIRE', key, ms + 1000)
end
-- The call just admitted is the last to leave the binding window, so reset_after is that
-- window. An admitted call answers with one integer,
-- (reset_after * count + remaining) * 64 + rule_index over the binding rule's count
-- (remaining < count), when a double holds it exactly: when
-- reset_after * count + remaining < 2^47, which keeps it below 2^53. A table costs Redis
-- more to send than the rest of the script's own work (see backend::redis::decode).
local short = tightest_window * tightest_count + tightest_remaining
if tightest <= 64 and short < 140737488355328 then
    return short * 64 + tightest - 1
end
return {1, tightest - 1, tightest_remaining, tightest_window, 0}
