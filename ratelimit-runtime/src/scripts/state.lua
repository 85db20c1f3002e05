-- For the scripts that keep a key's state in one string: the fixed window, the sliding
-- window and the token bucket. sources.rs sets NAME (the algorithm's name), SIZE (a
-- record's bytes) and LATEST (the offset in a record of a time the check must not be
-- counted before, or nil) just above.
--
-- The value is NAME, the key's expiry in µs (the script's clock), then per rule of the
-- last write a record of SIZE bytes: count, window_us, then the algorithm's own numbers;
-- every number a little-endian double (struct '<d'), exact for the integers below 2^53 it
-- holds. Binary, because turning numbers into text and back costs more than the rest of
-- the arithmetic. Each check makes three calls: TIME, GET, and one SET that writes the
-- state and its expiry together (save.lua).

local state = redis.call('GET', key)
local expires = 0
-- Where the records start.
local first = #NAME + 9
if state then
    if #state >= first - 1 + SIZE and (#state - first + 1) % SIZE == 0
        and string.sub(state, 1, #NAME) == NAME then
        expires = struct.unpack('<d', state, #NAME + 1)
    else
        local held = 'a value the limiter did not write'
        for _, other in ipairs({{'fixed_window', 32}, {'sliding_window', 40}, {'token_bucket', 24}}) do
            local n = other[1]
            if #state >= #n + 8 + other[2] and (#state - #n - 8) % other[2] == 0
                and string.sub(state, 1, #n) == n then
                held = n .. ' state'
            end
        end
        return redis.error_reply('key ' .. key .. ' holds ' .. held .. ', not ' .. NAME)
    end
    -- Never count before the latest such time of any record (algorithm::Clamp).
    if LATEST then
        for p = first + LATEST, #state, SIZE do
            local t = struct.unpack('<d', state, p)
            if t > now then
                now = t
            end
        end
        lag = now - clock
    end
end

-- What a write needs, filled in per rule by the algorithm: the records of this check (only
-- its rules, in its order), how long from `now` the state written matters, and how far
-- ahead a write of the same rules can ever need (expiry.lua, save.lua).
local records, needed, reach = '', 0, 0

-- The loop over the rules, which the algorithm's file continues and bind.lua ends. Rule i
-- (0-based) has `count` and `window`, and `p`, the byte where its record starts in the
-- state, or nil. The next check with the same rules finds each at its place; a rule found
-- elsewhere (the rules changed) is still used, and one not found starts empty.
for i = 0, rules - 1 do
    local count, window = struct.unpack('<dd', numbers, 16 * i + 25)
    local p
    if state then
        p = first + i * SIZE
        local c, w
        if p < #state then
            c, w = struct.unpack('<dd', state, p)
        end
        if c ~= count or w ~= window then
            p = nil
            for q = first, #state, SIZE do
                c, w = struct.unpack('<dd', state, q)
                if c == count and w == window then
                    p = q
                    break
                end
            end
        end
    end
