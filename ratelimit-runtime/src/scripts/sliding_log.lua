-- Sliding log: one ZSET member per admitted unit, scored by its time in µs
-- (algorithm/sliding_log.rs). An entry at s is inside a window w at now iff s > now - w.
--
-- Counted at most once: a consuming check carries an id made by the client (ARGV[2],
-- unique per check, the same in a re-sent command), and its units are the members id,
-- id .. 2, ..., id .. cost. A check whose id is already present ran before (its reply was
-- lost): it writes nothing and answers admitted, as the first run did, with the figures
-- of the log without its own entries (sliding_log_add.lua). The id is looked up only
-- where the answer depends on it: by the ZADD NX of an admitted check, and for a denial.
--
-- Numbers reach redis.call as numbers, which Redis formats exactly; `..` would format
-- them with %.14g and lose digits.

-- The longest window: how long the key's entries matter after a write; a write always
-- moves the expiry (expiry.lua).
local expires, needed, reach = 0, 0, 0
for i = 0, rules - 1 do
    local window = struct.unpack('<d', numbers, 16 * i + 33)
    if window > reach then
        reach = window
    end
end

local id = ARGV[2]
-- Never count before the newest entry (algorithm::Clamp).
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
if newest then
    newest = tonumber(newest)
    if newest > now then
        now = newest
        lag = now - clock
    end
end

-- The loop over the rules, which bind.lua ends. Stale entries are skipped here; only an
-- admitted check trims them (sliding_log_add.lua).
for i = 0, rules - 1 do
    local count, window = struct.unpack('<dd', numbers, 16 * i + 25)
    local inside = redis.call('ZCOUNT', key, now - window + 1, '+inf')
    local left = count - inside
    if left < 0 then
        left = 0
    end
    -- The call's entries are the last to leave.
    local reset_after, retry = window, 0
    if cost > left then
        reset_after = 0
        if inside > 0 then
            reset_after = newest + window - now
        end
        retry = NEVER
        if cost <= count then
            -- The window's entries are the newest `inside`; the oldest
            -- `inside - (count - cost)` of them must leave, the last of which is the
            -- (count - cost + 1)-th newest entry.
            local rank = cost - count - 1
            local must_leave = tonumber(redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2])
            retry = must_leave + window - now
        end
    end
