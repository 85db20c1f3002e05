-- Sliding log: one ZSET member per admitted unit, scored by its time in µs
-- (algorithm/sliding_log.rs). An entry at s is inside a window w at now iff s > now - w.
--
-- Counted at most once: a consuming check carries an id made by the client (ARGV[2],
-- unique per check, the same in a re-sent command), and its units are the members id,
-- id .. 2, ..., id .. cost. A check whose id is already present ran before (its reply was
-- lost): it writes nothing and answers admitted, as the first run did, with the figures
-- of the log without its own entries.
--
-- Numbers reach redis.call as numbers, which Redis formats exactly; `..` would format
-- them with %.14g and lose digits.

-- Rule i's (0-based) count and window are at bytes 16i + 25 and 16i + 33.
local longest = 0
for i = 0, rules - 1 do
    local window = struct.unpack('<d', numbers, 16 * i + 33)
    if window > longest then
        longest = window
    end
end

local id = ARGV[2]
-- The score of this check's entries when it ran before; false when it did not.
local seen = false
if consume then
    seen = redis.call('ZSCORE', key, id)
end
-- Never count before the newest entry.
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
if newest then
    newest = tonumber(newest)
    if newest > now then
        now = newest
        lag = now - clock
    end
end

for i = 0, rules - 1 do
    local count, window = struct.unpack('<dd', numbers, 16 * i + 25)
    -- Stale entries are skipped here; only an admitted check trims them (see below).
    local inside = redis.call('ZCOUNT', key, now - window + 1, '+inf')
    local left = count - inside
    if left < 0 then
        left = 0
    end
    if seen then
        -- The first run's figures: without its own entries, admitted.
        if tonumber(seen) > now - window then
            left = left + cost
        end
        if left > count then
            left = count
        end
        if left < cost then
            left = cost
        end
        bind(i, count, left, window, 0)
    elseif cost <= left then
        -- The call's entries are the last to leave.
        bind(i, count, left, window, 0)
    else
        local reset_after = 0
        if inside > 0 then
            reset_after = newest + window - now
        end
        local retry = NEVER
        if cost <= count then
            -- The window's entries are the newest `inside`; the oldest
            -- `inside - (count - cost)` of them must leave, the last of which is the
            -- (count - cost + 1)-th newest entry.
            local rank = cost - count - 1
            local must_leave = tonumber(redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2])
            retry = must_leave + window - now
        end
        bind(i, count, left, reset_after, retry)
    end
end

-- Only an admitted check trims, as its own entries become the newest: a later check from a
-- clock behind is counted at the newest entry, and an entry trimmed at a newer time could
-- still be inside its windows. A peek, a denial and a re-run write nothing.
if consume and not seen and not denied then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - longest)
    if cost == 1 then
        redis.call('ZADD', key, now, id)
    else
        -- In batches, as Lua's stack bounds the arguments of one call.
        local args = {}
        local k = 1
        while k <= cost do
            local n = 0
            while k <= cost and n < 1000 do
                args[2 * n + 1] = now
                if k == 1 then
                    args[2 * n + 2] = id
                else
                    args[2 * n + 2] = id .. k
                end
                n, k = n + 1, k + 1
            end
            redis.call('ZADD', key, unpack(args, 1, 2 * n))
        end
    end
    -- The longest window from the time counted at, from the caller's clock.
    redis.call('PEXPIRE', key, ttl_ms(longest + lag))
end
