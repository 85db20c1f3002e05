-- For the scripts that keep a key's state in one string: the fixed window, the sliding
-- window and the token bucket. sources.rs sets, just above, NAME (the algorithm's name),
-- SIZE (a record's bytes), LATEST (true when a record's third number is a time a check is
-- never counted before: a window's start), HEAD (the struct format of the name, the
-- expiry and the first record, read at once) and OWN (that of a record's numbers after
-- count and window, which save.lua may rewrite alone).
--
-- The value is NAME, the key's expiry in µs (the script's clock), then per rule of the
-- last write a record of SIZE bytes: count, window_us, then the algorithm's own numbers;
-- every number a little-endian double (struct '<d'), exact for the integers below 2^53 it
-- holds (a calendar rule's record: its window -(4 * its period's first day since the epoch
-- + 1 for a day, 2 for a month), its units after the period's start where the
-- algorithm's numbers start with a time, alone in the token bucket's: calendar.lua).
-- Binary, because turning numbers into text and back costs more than the rest of
-- the arithmetic. A key under a block (block.lua) is named in capitals (as the attribute
-- spells the algorithm), and has one more, last record: 0 (a count no rule has, so no rule finds it), blocked_until_us, the index
-- of the rule that started the block, zeros to SIZE. So a check of a key without a block
-- spends nothing on blocks: its name says so. Each check makes three calls: TIME, GET,
-- and one write (save.lua): a SET of the state with its expiry, or a SETRANGE in place.
--
-- Reads `key`, `NAME`, `SIZE`, `HEAD`, `call`, `LATEST`, `clock`; sets `blocked_rule`,
-- `blocked_until`, `now`, `lag`; defines `state`, `expires`, `first`, `c0`, `w0`, `x0`,
-- `y0`, `z0`; may return the answer.

-- GET of a key that is no string answers an error, as a table (pcall): a sorted set is
-- refused with it, unless it holds only a block (a key blocked while it held nothing,
-- block_key.lua), which any algorithm reads.
local state = redis.pcall('GET', key)
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
        if type(state) == 'table' then
            -- A key blocked while it held nothing (block_key.lua): its block, and no state.
            local top = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
            if top[2] ~= 'inf' or call('ZCARD', key) ~= 1 then
                return state
            end
            blocked_until, blocked_rule = struct.unpack('<dd', top[1], 2)
            state = nil
        elseif alg == string.upper(NAME) then
            blocked_until, blocked_rule = struct.unpack('<dd', state, #state - SIZE + 9)
        else
            local held = 'a value the limiter did not write'
            for _, other in ipairs({{'fixed_window', 32}, {'sliding_window', 40}, {'token_bucket', 24}}) do
                local n = other[1]
                if #state >= #n + 8 + other[2] and (#state - #n - 8) % other[2] == 0
                    and string.lower(string.sub(state, 1, #n)) == n then
                    held = n .. ' state'
                end
            end
            return redis.error_reply('key ' .. key .. ' holds ' .. held .. ', not ' .. NAME)
        end
    end
    -- Never count before the latest such time of any record (algorithm::Clamp). The
    -- third number of a record is that time where there is one (LATEST).
    if LATEST and state then
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
