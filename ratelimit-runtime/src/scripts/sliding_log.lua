-- Sliding log: one ZSET member per admitted call, scored by its time in µs.
-- The same arithmetic as src/algorithm/sliding_log.rs; keep the two in step.
--
-- KEYS[1]  the key
-- ARGV[1]  "1" to consume (record the call if admitted), "0" to peek (answer the same, write nothing)
-- ARGV[2]  now in µs since the epoch, or "0" to read Redis TIME (explicit times are for tests)
-- ARGV[3], ARGV[4]  count, window_us of rule 0; ARGV[5], ARGV[6] of rule 1; ...
-- Returns {allowed (1|0), rule_index (0-based binding rule), remaining, reset_after_us,
--          retry_after_us (0 when allowed)}
--
-- An entry at s is inside a window w at now iff s > now - w. Every number stays an integer
-- below 2^53, so Lua's doubles hold it exactly. Numbers reach redis.call as numbers, which
-- Redis formats exactly; `..` would format them with %.14g and lose digits.

if redis.replicate_commands then
    redis.replicate_commands()
end

-- Exact floor(a / b) for integers a >= 0, b > 0 below 2^53 (a / b alone may round up).
local function floor_div(a, b)
    local q = math.floor(a / b)
    if q * b > a then
        q = q - 1
    elseif (q + 1) * b <= a then
        q = q + 1
    end
    return q
end

-- The key's time to live after a write: needed_us in whole ms rounded up, plus a 1 s
-- margin (algorithm::ttl_us in Rust).
local function ttl_ms(needed_us)
    return floor_div(needed_us + 999, 1000) + 1000
end

local key = KEYS[1]
local consume = ARGV[1] == '1'
local now = tonumber(ARGV[2])
if now == 0 then
    local t = redis.call('TIME')
    now = t[1] * 1000000 + t[2]
end

local counts, windows = {}, {}
local longest = 0
local rules = (#ARGV - 2) / 2
for i = 1, rules do
    counts[i] = tonumber(ARGV[2 * i + 1])
    windows[i] = tonumber(ARGV[2 * i + 2])
    if windows[i] > longest then
        longest = windows[i]
    end
end

-- A peek writes nothing, so it leaves stale entries in place; the ZCOUNTs skip them.
if consume then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - longest)
end
local total = redis.call('ZCARD', key)

local denied, denied_retry = nil, -1
local tightest, tightest_remaining = nil, nil
for i = 1, rules do
    local window, count = windows[i], counts[i]
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
            denied, denied_retry = i, retry
        end
    else
        local remaining = count - inside - 1
        if tightest == nil or remaining < tightest_remaining then
            tightest, tightest_remaining = i, remaining
        end
    end
end

if denied then
    local newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
    return {0, denied - 1, 0, newest + windows[denied] - now, denied_retry}
end

if consume then
    -- Unique even for many calls in one microsecond: within one `now` the trimmed card
    -- only grows. NX guards the rare reuse when a test moves time backwards.
    local n = total
    while redis.call('ZADD', key, 'NX', now, string.format('%d-%d', now, n)) == 0 do
        n = n + 1
    end
    redis.call('PEXPIRE', key, ttl_ms(longest))
end
-- The call just admitted is the last to leave the binding window.
return {1, tightest - 1, tightest_remaining, windows[tightest], 0}
