-- Reads `now`, `block_for`, `key`; defines `blocked_until`, `ms`, `pttl`, `kind`; may
-- return the answer.
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
