-- Sliding window: the current aligned window's count plus the previous one's weighted by
-- its overlap. The arithmetic and the decision are those of algorithm/sliding_window.rs,
-- which documents them.
--
-- KEYS[1]  the key: a hash holding every rule of the call site.
-- ARGV[1]  "1" to count the call when every rule admits it, "0" to only peek.
-- ARGV[2]  now in µs since the epoch, or "0" for the server's TIME.
-- ARGV[3], ARGV[4]  count, window_us of rule 0; then rule 1; ...
-- Returns  {allowed 1|0, rule_index (0-based), remaining, reset_after_us, retry_after_us}.
--
-- Hash fields: alg = "sliding_window"; per rule "<count>:<window_us>" =
-- "<window_start>:<calls in it>:<calls in the window before>".
-- Numbers are doubles: every value stays an integer below 2^53. Division goes through
-- divmod, which corrects the rounding of a / b, and products that may exceed 2^53 through
-- muldiv.
local ALG = 'sliding_window'

local function divmod(a, b)
    local q = math.floor(a / b)
    local r = a - q * b
    if r < 0 then
        q, r = q - 1, r + b
    elseif r >= b then
        q, r = q + 1, r - b
    end
    return q, r
end

-- floor(a * b / d) and the remainder, exact for 0 <= b <= d < 2^52 however large a * b:
-- long multiplication over the bits of a, keeping the partial remainder below d.
local function muldiv(a, b, d)
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

local function int(x)
    return string.format('%.0f', x)
end

local key = KEYS[1]
local consume = ARGV[1] == '1'
local now = tonumber(ARGV[2])
if now == 0 then
    if redis.replicate_commands then
        redis.replicate_commands()
    end
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local n = (#ARGV - 2) / 2
local fields = {'alg'}
for i = 1, n do
    fields[i + 1] = ARGV[2 * i + 1] .. ':' .. ARGV[2 * i + 2]
end
local stored = redis.call('HMGET', key, unpack(fields))
if stored[1] and stored[1] ~= ALG then
    return redis.error_reply('key ' .. key .. ' holds ' .. stored[1] .. ' state, not ' .. ALG)
end

-- Per rule: window, elapsed e, window start, curr, prev, W = ceil(prev * (w - e) / w).
local windows, elapsed, starts, curr, prev, weighted = {}, {}, {}, {}, {}, {}
local denied, denied_retry = nil, -1
for i = 1, n do
    local count = tonumber(ARGV[2 * i + 1])
    local w = tonumber(ARGV[2 * i + 2])
    local _, e = divmod(now, w)
    windows[i], elapsed[i], starts[i] = w, e, now - e
    curr[i], prev[i] = 0, 0
    if stored[i + 1] then
        local s, c, p = string.match(stored[i + 1], '^(%d+):(%d+):(%d+)$')
        s = tonumber(s)
        if s == starts[i] then
            curr[i], prev[i] = tonumber(c), tonumber(p)
        elseif s + w == starts[i] then
            prev[i] = tonumber(c)
        end
    end
    local q, r = muldiv(prev[i], w - e, w)
    if r > 0 then
        q = q + 1
    end
    weighted[i] = q
    if curr[i] + 1 + weighted[i] > count then
        local retry
        if curr[i] < count then
            retry = w - muldiv(w, count - curr[i] - 1, prev[i]) - e
        else
            retry = (w - e) + w - muldiv(w, count - 1, curr[i])
        end
        if retry > denied_retry then
            denied, denied_retry = i, retry
        end
    end
end

if denied then
    local reset = windows[denied] - elapsed[denied]
    if curr[denied] > 0 then
        reset = reset + windows[denied]
    end
    return {0, denied - 1, 0, reset, denied_retry}
end

local binding, least = 1, nil
for i = 1, n do
    local remaining = tonumber(ARGV[2 * i + 1]) - curr[i] - 1 - weighted[i]
    if least == nil or remaining < least then
        binding, least = i, remaining
    end
end

if consume then
    local args = {'alg', ALG}
    local needed = 0
    for i = 1, n do
        args[#args + 1] = fields[i + 1]
        args[#args + 1] = int(starts[i]) .. ':' .. int(curr[i] + 1) .. ':' .. int(prev[i])
        if 2 * windows[i] - elapsed[i] > needed then
            needed = 2 * windows[i] - elapsed[i]
        end
    end
    redis.call('HSET', key, unpack(args))
    local ms, rem = divmod(needed, 1000)
    if rem > 0 then
        ms = ms + 1
    end
    redis.call('PEXPIRE', key, int(ms + 1000))
end

return {1, binding - 1, least, 2 * windows[binding] - elapsed[binding], 0}
