-- For the scripts that keep a key's state in one string: the fixed window, the sliding
-- window and the token bucket. sources.rs sets, just above, NAME (the algorithm's name),
-- SIZE (a record's bytes), LATEST (true when a record's third number is a time a check is
-- never counted before: a window's start) and HEAD (the struct format of the name, the
-- expiry and the first record, read at once).
--
-- The value is NAME, the key's expiry in µs (the script's clock), then per rule of the
-- last write a record of SIZE bytes: count, window_us, then the algorithm's own numbers;
-- every number a little-endian double (struct '<d'), exact for the integers below 2^53 it
-- holds. Binary, because turning numbers into text and back costs more than the rest of
-- the arithmetic. Each check makes three calls: TIME, GET, and one SET that writes the
-- state and its expiry together (save.lua).

local state = redis.call('GET', key)
local expires = 0
-- Where the records start; the first record's numbers (count, window, then the
-- algorithm's own: x0, y0, z0 as it has them), read with the header.
local first, c0, w0, x0, y0, z0 = #NAME + 9
if state then
    local alg
    if #state >= first - 1 + SIZE and (#state - first + 1) % SIZE == 0 then
        -- HEAD: the name, the expiry, then the first record.
        alg, expires, c0, w0, x0, y0, z0 = struct.unpack(HEAD, state)
    end
    if alg ~= NAME then
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
    -- Never count before the latest such time of any record (algorithm::Clamp). The
    -- third number of a record is that time where there is one (LATEST).
    if LATEST then
        if x0 > now then
            now = x0
        end
        for p = first + SIZE + 16, #state, SIZE do
            local t = struct.unpack('<d', state, p)
            if t > now then
                now = t
            end
        end
        lag = now - clock
    end
end

-- What a write needs, filled in per rule by the algorithm: the records of this check (only
-- its rules, in its order: rule 0's numbers r1 .. r5, which save.lua packs with the
-- header, then the others' records, packed), how long from `now` the state written
-- matters, and how far ahead a write of the same rules can ever need (expiry.lua,
-- save.lua). Rule 0 apart, a write of one rule makes one string: each string costs Redis
-- an allocation, hashing and collection.
local records, needed, reach = '', 0, 0
local r1, r2, r3, r4, r5

-- The loop over the rules, which the algorithm's file continues and bind.lua ends. Rule i
-- (0-based) has `count` and `window`, and `p`, the byte where its record starts in the
-- state, or nil (when `p == first`, its numbers are x0, y0, z0 above). The next check with the same rules finds each at its place; a rule found
-- elsewhere (the rules changed) is still used, and one not found starts empty.
for i = 0, rules - 1 do
    local count, window = struct.unpack('<dd', numbers, 16 * i + 25)
    local p
    if state then
        p = first + i * SIZE
        local c, w = c0, w0
        if i > 0 then
            c = nil
            if p < #state then
                c, w = struct.unpack('<dd', state, p)
            end
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
