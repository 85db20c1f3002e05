-- Sliding window: the current aligned window's count plus the previous one's weighted by
-- its overlap. The arithmetic and the decision are those of algorithm/sliding_window.rs,
-- which documents them.
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
-- The value: "sliding_window", the key's expiry in µs, then per rule of the last write
-- count, window_us, window_start_us, calls in that window, calls in the window before;
-- every number a little-endian double (struct '<d'), exact for the integers below 2^53 it
-- holds. The layout, the three calls (TIME, GET, SET), which rules a write keeps and when
-- the expiry moves are those of fixed_window.lua, which explains them.
--
-- Numbers are doubles: `a % b` is a - floor(a / b) * b, exact but for a / b rounding up
-- to the next integer, which leaves it negative by exactly b; the code adds b back.
-- Products that may pass 2^53 go through muldiv.

-- floor(a * b / d) and the remainder, exact for 0 <= b <= d < 2^52 however large a * b.
-- Below 2^52 the product and `%` are exact; above, long multiplication over the bits of
-- a keeps the partial remainder below d.
local function muldiv(a, b, d)
    local p = a * b
    if p < 4503599627370496 then
        local r = p % d
        if r < 0 then
            r = r + d
        end
        return (p - r) / d, r
    end
    local q, r = 0, 0
    local bit = 1
    while bit * 2 <= a do
        bit = bit * 2
    end
    while bit >= 1 do
        q, r = q * 2, r * 2
        if r >= d then
            q, r = q + 1, r - d
        end
        if a >= bit then
            a = a - bit
            r = r + b
            if r >= d then
                q, r = q + 1, r - d
            end
        end
        bit = bit / 2
    end
    return q, r
end

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
local expires, c0, cw0, s0, sc0, sp0 = 0
if state then
    local alg
    if #state % 40 == 22 and #state > 22 then
        alg, expires, c0, cw0, s0, sc0, sp0 = struct.unpack('<c14dddddd', state)
    end
    if alg ~= 'sliding_window' then
        local held = 'a value the limiter did not write'
        if #state % 32 == 20 and string.sub(state, 1, 12) == 'fixed_window' then
            held = 'fixed_window state'
        elseif #state % 24 == 20 and string.sub(state, 1, 12) == 'token_bucket' then
            held = 'token_bucket state'
        end
        return redis.error_reply('key ' .. key .. ' holds ' .. held .. ', not sliding_window')
    end
end

-- Rule 0's record is written with the header, once the expiry is known; the others here.
local count0, window0, start0, curr0, prev0
local records = ''
local denied, denied_retry, denied_reset = nil, -1, 0
local binding, binding_count, least, reset
local needed = 0
for i = 3, #numbers / 8, 2 do
    local count, w = struct.unpack('<dd', numbers, 8 * i - 7)
    local e = now % w
    if e < 0 then
        e = e + w
    end
    local start = now - e
    local curr, prev = 0, 0
    if state then
        -- Rule (i - 3) / 2 at its place in the last write.
        local at = 20 * i - 37
        local c, cw, s, sc, sp
        if i == 3 then
            c, cw, s, sc, sp = c0, cw0, s0, sc0, sp0
        elseif at < #state then
            c, cw, s, sc, sp = struct.unpack('<ddddd', state, at)
        end
        if c ~= count or cw ~= w then
            for p = 23, #state, 40 do
                c, cw, s, sc, sp = struct.unpack('<ddddd', state, p)
                if c == count and cw == w then
                    break
                end
            end
        end
        if c == count and cw == w then
            if s == start then
                curr, prev = sc, sp
            elseif s + w == start then
                prev = sc
            end
        end
    end
    -- W = ceil(prev * (w - e) / w)
    local weighted = 0
    if prev > 0 then
        local q, r = muldiv(prev, w - e, w)
        if r > 0 then
            q = q + 1
        end
        weighted = q
    end
    if curr + 1 + weighted > count then
        local retry
        if curr < count then
            retry = w - muldiv(w, count - curr - 1, prev) - e
        else
            retry = (w - e) + w - muldiv(w, count - 1, curr)
        end
        if retry > denied_retry then
            denied, denied_retry, denied_reset = i, retry, w - e
            if curr > 0 then
                denied_reset = denied_reset + w
            end
        end
    elseif not least or count - curr - 1 - weighted < least then
        binding, binding_count, least, reset = i, count, count - curr - 1 - weighted, 2 * w - e
    end
    if 2 * w - e > needed then
        needed = 2 * w - e
    end
    if i == 3 then
        count0, window0, start0, curr0, prev0 = count, w, start, curr + 1, prev
    elseif consume then
        records = records .. struct.pack('<ddddd', count, w, start, curr + 1, prev)
    end
end

if denied then
    return {0, (denied - 3) / 2, 0, denied_reset, denied_retry}
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
    local value = struct.pack('<c14dddddd', 'sliding_window', expires, count0, window0, start0,
        curr0, prev0)
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
