-- Fixed window: one counter per rule per window aligned to the epoch. The arithmetic and
-- the decision are those of algorithm/fixed_window.rs, which documents them.
--
-- KEYS[1]  the key: a string holding every rule of the call site.
-- ARGV[1]  the numbers of the check, each a little-endian double (struct '<d'):
--            1: 1 to count the call when every rule admits it, 0 to only peek;
--            2: now in µs since the epoch, or 0 for the server's TIME;
--            3, 4: count, window_us of rule 0; then rule 1; ...
--          Binary, because Redis parses text numbers slower than this script's arithmetic.
-- Returns  {allowed 1|0, rule_index (0-based), remaining, reset_after_us, retry_after_us},
--          or an admitted call's short form (at the end).
--
-- The value: "fixed_window", the key's expiry in µs, then per rule of the last write
-- count, window_us, window_start_us, calls; every number a little-endian double (struct
-- '<d'), exact for the integers below 2^53 it holds. Binary, because turning numbers into
-- text and back costs more here than the rest of the arithmetic. Each check makes three
-- calls: TIME, GET, and one SET that writes the state and its expiry together.
--
-- A write stores the rules of this check only, in its order, so the next check with the
-- same rules finds each at its place; a rule found elsewhere (the rules changed) is still
-- used, and one not found starts empty. The expiry moves only when the state written would
-- outlive it, to ceil(needed_us / 1000) + 1000 ms; otherwise SET keeps it (KEEPTTL), which
-- saves Redis rewriting it. Redis 5 and 6 (no REDIS_VERSION_NUM) always set it.
--
-- Numbers are doubles: `a % b` is a - floor(a / b) * b, exact but for a / b rounding up
-- to the next integer, which leaves it negative by exactly b; the code adds b back.

local key = KEYS[1]
local numbers = ARGV[1]
local consume, now = struct.unpack('<dd', numbers)
consume = consume == 1
if now == 0 then
    -- Redis 7 replicates a script's effects by itself; before it, TIME followed by a
    -- write needs asking for that.
    if not redis.REDIS_VERSION_NUM then
        redis.replicate_commands()
    end
    local t = redis.call('TIME')
    now = t[1] * 1000000 + t[2]
end

local state = redis.call('GET', key)
-- The header and rule 0's record, read at once.
local expires, c0, w0, s0, k0 = 0
if state then
    local alg
    if #state % 32 == 20 and #state > 20 then
        alg, expires, c0, w0, s0, k0 = struct.unpack('<c12ddddd', state)
    end
    if alg ~= 'fixed_window' then
        local held = 'a value the limiter did not write'
        if #state % 40 == 22 and string.sub(state, 1, 14) == 'sliding_window' then
            held = 'sliding_window state'
        elseif #state % 24 == 20 and string.sub(state, 1, 12) == 'token_bucket' then
            held = 'token_bucket state'
        end
        return redis.error_reply('key ' .. key .. ' holds ' .. held .. ', not fixed_window')
    end
end

-- Rule 0's record is written with the header, once the expiry is known; the others here.
local count0, window0, start0, calls0
local records = ''
local denied, denied_retry = nil, -1
local binding, binding_count, least, reset
local needed = 0
for i = 3, #numbers / 8, 2 do
    local count, window = struct.unpack('<dd', numbers, 8 * i - 7)
    local left = now % window
    if left < 0 then
        left = left + window
    end
    local start = now - left
    left = window - left
    local calls = 0
    if state then
        -- Rule (i - 3) / 2 at its place in the last write.
        local at = 16 * i - 27
        local c, w, s, k
        if i == 3 then
            c, w, s, k = c0, w0, s0, k0
        elseif at < #state then
            c, w, s, k = struct.unpack('<dddd', state, at)
        end
        if c ~= count or w ~= window then
            for p = 21, #state, 32 do
                c, w, s, k = struct.unpack('<dddd', state, p)
                if c == count and w == window then
                    break
                end
            end
        end
        if s == start and c == count and w == window then
            calls = k
        end
    end
    if calls >= count then
        if left > denied_retry then
            denied, denied_retry = i, left
        end
    elseif not least or count - calls - 1 < least then
        binding, binding_count, least, reset = i, count, count - calls - 1, left
    end
    if left > needed then
        needed = left
    end
    if i == 3 then
        count0, window0, start0, calls0 = count, window, start, calls + 1
    elseif consume then
        records = records .. struct.pack('<dddd', count, window, start, calls + 1)
    end
end

if denied then
    return {0, (denied - 3) / 2, 0, denied_retry, denied_retry}
end

if consume then
    local ms
    if expires < now + needed or not redis.REDIS_VERSION_NUM then
        local r = needed % 1000
        if r < 0 then
            r = r + 1000
        end
        ms = (needed - r) / 1000 + 1000
        if r > 0 then
            ms = ms + 1
        end
        expires = now + ms * 1000
    end
    local value = struct.pack('<c12ddddd', 'fixed_window', expires, count0, window0, start0, calls0)
    if ms then
        redis.call('SET', key, value .. records, 'PX', ms)
    else
        redis.call('SET', key, value .. records, 'KEEPTTL')
    end
end

-- An admitted call answers with one integer,
-- (reset_after * count + remaining) * 64 + rule_index over the binding rule's count
-- (remaining < count), when a double holds it exactly: when
-- reset_after * count + remaining < 2^47, which keeps it below 2^53. A table costs Redis
-- more to send than this script's arithmetic (see backend::redis::decode).
local index = (binding - 3) / 2
local short = reset * binding_count + least
if index < 64 and short < 140737488355328 then
    return short * 64 + index
end
return {1, index, least, reset, 0}
