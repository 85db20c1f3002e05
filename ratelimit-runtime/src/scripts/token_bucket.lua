-- Token bucket as GCRA: one theoretical arrival time (tat) per rule. The arithmetic and
-- the decision are those of algorithm/token_bucket.rs, which documents them.
--
-- KEYS[1]  the key: a string holding every rule of the call site.
-- ARGV[1]  the numbers of the check, each a little-endian double (struct '<d'):
--            1: 1 to record the call when every rule admits it, 0 to only peek;
--            2: now in µs since the epoch, or 0 for the server's TIME;
--            3, 4: count, window_us of rule 0; then rule 1; ...
--          Binary, because Redis parses text numbers slower than this script's arithmetic.
-- Returns  {allowed 1|0, rule_index (0-based), remaining, reset_after_us, retry_after_us},
--          or an admitted call's short form (at the end).
--
-- The value: "token_bucket", the key's expiry in µs, then per rule of the last write
-- count, window_us, tat_us; every number a little-endian double (struct '<d'), exact for
-- the integers below 2^53 it holds. The layout, the three calls (TIME, GET, SET), which
-- rules a write keeps and when the expiry moves are those of fixed_window.lua, which
-- explains them. Only where it moves to differs: far enough to cover the longest burst
-- span (the latest tat an admitted call can leave), not just this write's tat, so that
-- the writes after it keep it.
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
local expires, c0, w0, t0 = 0
if state then
    local alg
    if #state % 24 == 20 and #state > 20 then
        alg, expires, c0, w0, t0 = struct.unpack('<c12dddd', state)
    end
    if alg ~= 'token_bucket' then
        local held = 'a value the limiter did not write'
        if #state % 32 == 20 and string.sub(state, 1, 12) == 'fixed_window' then
            held = 'fixed_window state'
        elseif #state % 40 == 22 and string.sub(state, 1, 14) == 'sliding_window' then
            held = 'sliding_window state'
        end
        return redis.error_reply('key ' .. key .. ' holds ' .. held .. ', not token_bucket')
    end
end

-- Rule 0's record is written with the header, once the expiry is known; the others here.
local count0, window0, tat0
local records = ''
local denied, denied_retry, denied_reset = nil, -1, 0
local binding, binding_count, least, reset
-- The latest tat any admitted call can leave (the longest burst span), and this call's.
local reach, needed = 0, 0
for i = 3, #numbers / 8, 2 do
    local count, window = struct.unpack('<dd', numbers, 8 * i - 7)
    -- T = ceil(window / count), count * T the burst span.
    local r = window % count
    if r < 0 then
        r = r + count
    end
    local interval = (window - r) / count
    if r > 0 then
        interval = interval + 1
    end
    local burst = count * interval
    local ahead = 0
    if state then
        -- Rule (i - 3) / 2 at its place in the last write.
        local at = 12 * i - 15
        local c, w, tat
        if i == 3 then
            c, w, tat = c0, w0, t0
        elseif at < #state then
            c, w, tat = struct.unpack('<ddd', state, at)
        end
        if c ~= count or w ~= window then
            for p = 21, #state, 24 do
                c, w, tat = struct.unpack('<ddd', state, p)
                if c == count and w == window then
                    break
                end
            end
        end
        if c == count and w == window and tat > now then
            ahead = tat - now
        end
    end
    local after = ahead + interval
    if after > burst then
        if after - burst > denied_retry then
            denied, denied_retry, denied_reset = i, after - burst, ahead
        end
    else
        -- floor((burst - after) / T)
        local room = burst - after
        r = room % interval
        if r < 0 then
            r = r + interval
        end
        room = (room - r) / interval
        if not least or room < least then
            binding, binding_count, least, reset = i, count, room, after
        end
    end
    if burst > reach then
        reach = burst
    end
    if after > needed then
        needed = after
    end
    if i == 3 then
        count0, window0, tat0 = count, window, now + after
    elseif consume then
        records = records .. struct.pack('<ddd', count, window, now + after)
    end
end

if denied then
    return {0, (denied - 3) / 2, 0, denied_reset, denied_retry}
end

if consume then
    local ms
    if expires < now + needed or not redis.REDIS_VERSION_NUM then
        local r = reach % 1000
        if r < 0 then
            r = r + 1000
        end
        ms = (reach - r) / 1000 + 1000
        if r > 0 then
            ms = ms + 1
        end
        expires = now + ms * 1000
    end
    local value = struct.pack('<c12dddd', 'token_bucket', expires, count0, window0, tat0)
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
