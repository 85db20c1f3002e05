-- For the scripts that keep a key's state in one string: the fixed window, the sliding
-- window and the token bucket. The value is the algorithm's name, the key's expiry in µs
-- (the script's clock), then per rule of the last write a record of `size` bytes: count,
-- window_us, then the algorithm's own numbers; every number a little-endian double
-- (struct '<d'), exact for the integers below 2^53 it holds. Binary, because turning
-- numbers into text and back costs more than the rest of the arithmetic. Each check makes
-- three calls: TIME, GET, and one SET that writes the state and its expiry together.

-- The state of the key: the value (nil when absent), its expiry, and an error reply when
-- the key holds something else.
local function load(name, size)
    local state = redis.call('GET', key)
    if not state then
        return nil, 0
    end
    local head = #name + 8
    if #state > head and (#state - head) % size == 0 and string.sub(state, 1, #name) == name then
        -- struct.unpack also answers the next position, which is no error.
        local expires = struct.unpack('<d', state, #name + 1)
        return state, expires
    end
    local held = 'a value the limiter did not write'
    for _, other in ipairs({{'fixed_window', 32}, {'sliding_window', 40}, {'token_bucket', 24}}) do
        local n = other[1]
        if #state > #n + 8 and (#state - #n - 8) % other[2] == 0 and string.sub(state, 1, #n) == n then
            held = n .. ' state'
        end
    end
    return nil, 0, redis.error_reply('key ' .. key .. ' holds ' .. held .. ', not ' .. name)
end

-- The byte where the record of rule i (0-based) with this count and window starts in
-- `state`, or nil. A write stores the rules of its check only, in its order, so the next
-- check with the same rules finds each at its place; a rule found elsewhere (the rules
-- changed) is still used, and one not found starts empty.
local function record(state, name, size, i, count, window)
    local p = #name + 9 + i * size
    if p < #state then
        local c, w = struct.unpack('<dd', state, p)
        if c == count and w == window then
            return p
        end
    end
    for q = #name + 9, #state, size do
        local c, w = struct.unpack('<dd', state, q)
        if c == count and w == window then
            return q
        end
    end
end

-- The latest time the state records in the number at `offset` of every record (a
-- window's start), to count the check at no earlier time (algorithm::Clamp).
local function clamp(state, name, size, offset)
    if state then
        for p = #name + 9 + offset, #state, size do
            local t = struct.unpack('<d', state, p)
            if t > now then
                now = t
            end
        end
        lag = now - clock
    end
end

-- Writes the records of this check. The expiry moves only when the state written would
-- outlive it (matters `needed` µs more, from the caller's clock), to ttl_ms(reach), far
-- enough for the writes after it too (algorithm::extend_expiry); otherwise SET keeps it
-- (KEEPTTL), which saves Redis rewriting it. Redis 5 and 6 (no REDIS_VERSION_NUM) always
-- set it.
local function save(name, expires, records, needed, reach)
    local ms
    if expires < clock + needed or not redis.REDIS_VERSION_NUM then
        ms = ttl_ms(reach)
        expires = clock + ms * 1000
    end
    local value = name .. struct.pack('<d', expires) .. records
    if ms then
        redis.call('SET', key, value, 'PX', ms)
    else
        redis.call('SET', key, value, 'KEEPTTL')
    end
end

