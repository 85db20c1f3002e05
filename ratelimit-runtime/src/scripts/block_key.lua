-- Limiter::block (src/limiter.rs): blocks a key for a while, whatever algorithm keeps its
-- state, writing the block where and as a refusal with block_for writes it (block.lua,
-- then save.lua or sliding_log_add.lua), so that every check reads it as it reads those
-- (blocked.lua): answered by rule 0, consuming nothing, until the block ends. A block never
-- shortens another: a key blocked longer already is left as it is.
--
-- Where the block goes:
--   a string state (state.lua): the state named in capitals, its records kept, and the
--     block as its last record (0, until, rule 0, zeros to the record's size);
--   a sliding log (sliding_log.lua): the member 'B' .. struct '<dd' (until, rule 0) scored
--     +inf, in place of a block the log held;
--   nothing: a sorted set holding only that member, as a sliding log blocked before its
--     first entry; the string-state scripts read it too (state.lua), and whichever
--     algorithm admits the key's next call after the block replaces it with its own state.
-- The key then lives at least until the block ends plus the margin of one second the
-- checks keep (expiry.lua); a key that would live longer keeps its expiry.
--
-- KEYS[1]  the key
-- ARGV[1]  how long to block it, µs (integer text)
-- ARGV[2]  now in µs since the epoch (integer text), or 0 to read Redis TIME
-- Returns  1 when the block was written, 0 when the key was blocked at least as long.

local key = KEYS[1]
local block_for, now = tonumber(ARGV[1]), tonumber(ARGV[2])
if now == 0 then
    if not redis.REDIS_VERSION_NUM then
        redis.replicate_commands()
    end
    local time = redis.call('TIME')
    now = time[1] * 1000000 + time[2]
end
local blocked_until = now + block_for
-- The TTL the block needs, in whole ms rounded up, with the margin (algorithm::ttl_us).
local ms = math.ceil(block_for / 1000) + 1000
local pttl = redis.call('PTTL', key)
if pttl > ms then
    ms = pttl
end
local kind = redis.call('TYPE', key)['ok']

if kind == 'none' or kind == 'zset' then
    local top = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    if top[2] == 'inf' then
        if struct.unpack('<d', top[1], 2) >= blocked_until then
            return 0
        end
        redis.call('ZREM', key, top[1])
    end
    redis.call('ZADD', key, '+inf', 'B' .. struct.pack('<dd', blocked_until, 0))
    redis.call('PEXPIRE', key, string.format('%d', ms))
    return 1
end

if kind == 'string' then
    local state = redis.call('GET', key)
    for _, form in ipairs({{'fixed_window', 32}, {'sliding_window', 40}, {'token_bucket', 24}}) do
        local name, size = form[1], form[2]
        local head = string.sub(state, 1, #name)
        if #state >= #name + 8 + size and (#state - #name - 8) % size == 0
            and (head == name or head == string.upper(name)) then
            -- The records the key holds, without the record of its block, if any.
            local counted = string.sub(state, #name + 9)
            if head ~= name then
                if struct.unpack('<d', state, #state - size + 9) >= blocked_until then
                    return 0
                end
                counted = string.sub(state, #name + 9, #state - size)
            end
            local value = struct.pack('<c' .. #name .. 'd', string.upper(name), now + ms * 1000)
                .. counted .. struct.pack('<ddd', 0, blocked_until, 0) .. string.rep('\0', size - 24)
            redis.call('SET', key, value, 'PX', string.format('%d', ms))
            return 1
        end
    end
    return redis.error_reply('key ' .. key .. ' holds a value the limiter did not write')
end

return redis.error_reply('key ' .. key .. ' is a ' .. kind .. ', which the limiter never writes')
