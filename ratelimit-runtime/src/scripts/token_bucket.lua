-- Token bucket as GCRA: one theoretical arrival time (tat) per rule. The arithmetic and
-- the decision are those of algorithm/token_bucket.rs, which documents them.
--
-- KEYS[1]  the key: a hash holding every rule of the call site.
-- ARGV[1]  "1" to record the call when every rule admits it, "0" to only peek.
-- ARGV[2]  now in µs since the epoch, or "0" for the server's TIME.
-- ARGV[3], ARGV[4]  count, window_us of rule 0; then rule 1; ...
-- Returns  {allowed 1|0, rule_index (0-based), remaining, reset_after_us, retry_after_us}.
--
-- Hash fields: alg = "token_bucket"; per rule "<count>:<window_us>" = "<tat_us>".
-- Numbers are doubles: every value stays an integer below 2^53, and division goes through
-- divmod, which corrects the rounding of a / b.
local ALG = 'token_bucket'

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

-- Per rule: T (emission interval), count * T (burst span), tat' - now, d = tat' + T - now.
local interval, burst, ahead, after = {}, {}, {}, {}
local denied, denied_retry = nil, -1
for i = 1, n do
    local count = tonumber(ARGV[2 * i + 1])
    local window = tonumber(ARGV[2 * i + 2])
    interval[i] = divmod(window + count - 1, count)
    burst[i] = count * interval[i]
    ahead[i] = 0
    if stored[i + 1] then
        local tat = tonumber(stored[i + 1])
        if tat > now then
            ahead[i] = tat - now
        end
    end
    after[i] = ahead[i] + interval[i]
    if after[i] > burst[i] and after[i] - burst[i] > denied_retry then
        denied, denied_retry = i, after[i] - burst[i]
    end
end

if denied then
    return {0, denied - 1, 0, ahead[denied], denied_retry}
end

local binding, least = 1, nil
for i = 1, n do
    local remaining = divmod(burst[i] - after[i], interval[i])
    if least == nil or remaining < least then
        binding, least = i, remaining
    end
end

if consume then
    local args = {'alg', ALG}
    local needed = 0
    for i = 1, n do
        args[#args + 1] = fields[i + 1]
        args[#args + 1] = int(now + after[i])
        if after[i] > needed then
            needed = after[i]
        end
    end
    redis.call('HSET', key, unpack(args))
    local ms, rem = divmod(needed, 1000)
    if rem > 0 then
        ms = ms + 1
    end
    redis.call('PEXPIRE', key, int(ms + 1000))
end

return {1, binding - 1, least, after[binding], 0}
