-- Fixed window: one counter per rule per window aligned to the epoch. The arithmetic and
-- the decision are those of algorithm/fixed_window.rs, which documents them.
--
-- KEYS[1]  the key: a hash holding every rule of the call site.
-- ARGV[1]  "1" to count the call when every rule admits it, "0" to only peek.
-- ARGV[2]  now in µs since the epoch, or "0" for the server's TIME.
-- ARGV[3], ARGV[4]  count, window_us of rule 0; then rule 1; ...
-- Returns  {allowed 1|0, rule_index (0-based), remaining, reset_after_us, retry_after_us}.
--
-- Hash fields: alg = "fixed_window"; per rule "<count>:<window_us>" = "<window_start>:<calls>".
-- Numbers are doubles: every value stays an integer below 2^53, and division goes through
-- divmod, which corrects the rounding of a / b.
local ALG = 'fixed_window'

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

local starts, calls, ends = {}, {}, {}
local denied, denied_retry = nil, -1
for i = 1, n do
    local count = tonumber(ARGV[2 * i + 1])
    local window = tonumber(ARGV[2 * i + 2])
    local start = now - select(2, divmod(now, window))
    local c = 0
    if stored[i + 1] then
        local s, v = string.match(stored[i + 1], '^(%d+):(%d+)$')
        if tonumber(s) == start then
            c = tonumber(v)
        end
    end
    starts[i], calls[i], ends[i] = start, c, start + window
    if c >= count and ends[i] - now > denied_retry then
        denied, denied_retry = i, ends[i] - now
    end
end

if denied then
    return {0, denied - 1, 0, denied_retry, denied_retry}
end

local binding, least = 1, nil
for i = 1, n do
    local remaining = tonumber(ARGV[2 * i + 1]) - calls[i] - 1
    if least == nil or remaining < least then
        binding, least = i, remaining
    end
end

if consume then
    local args = {'alg', ALG}
    local last_end = 0
    for i = 1, n do
        args[#args + 1] = fields[i + 1]
        args[#args + 1] = int(starts[i]) .. ':' .. int(calls[i] + 1)
        if ends[i] > last_end then
            last_end = ends[i]
        end
    end
    redis.call('HSET', key, unpack(args))
    local ms, rem = divmod(last_end - now, 1000)
    if rem > 0 then
        ms = ms + 1
    end
    redis.call('PEXPIRE', key, int(ms + 1000))
end

return {1, binding - 1, least, ends[binding] - now, 0}
