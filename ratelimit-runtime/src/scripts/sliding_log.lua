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
-- Times reach redis.call as integer text (see preamble.lua): `stamp` is `now`'s, made
-- from TIME's own text where the script read it.

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
local stamp
if time then
    stamp = time[1] .. string.sub('00000', #time[2]) .. time[2]
else
    stamp = string.format('%d', now)
end
-- Never count before the newest entry (algorithm::Clamp). The entries of the longest
-- window up to `now` are counted first: when they are all the key holds (the common
-- case), no entry is newer than `now`, and none is stale, so an admitted check has nothing
-- to trim. Otherwise one more count tells whether some entry is newer than `now` (a clock
-- stepped back), and only then is the newest entry read and the window counted again at
-- its time. `newest` is otherwise read only by a denial, which needs it.
local total = redis.call('ZCARD', key)
local longest, stale, newest = 0, false
if total > 0 then
    longest = redis.call('ZCOUNT', key, string.format('(%d', now - reach), stamp)
    if longest < total then
        if redis.call('ZCOUNT', key, '(' .. stamp, '+inf') > 0 then
            newest = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
            now = newest
            lag = now - clock
            stamp = string.format('%d', now)
            longest = redis.call('ZCOUNT', key, string.format('(%d', now - reach), '+inf')
        end
        stale = longest < total
    end
end

-- The loop over the rules, which bind.lua ends. Stale entries are skipped here; only an
-- admitted check trims them (sliding_log_add.lua). No entry is newer than `now` any more.
-- The longest window was counted above; a window no longer than one found empty is
-- empty too.
local empty = 0
if longest == 0 then
    empty = reach
end
for i = 0, rules - 1 do
    local count, window = struct.unpack('<dd', numbers, 16 * i + 25)
    local inside = 0
    if window == reach then
        inside = longest
    elseif window > empty then
        inside = redis.call('ZCOUNT', key, string.format('(%d', now - window), '+inf')
        if inside == 0 then
            empty = window
        end
    end
    local left = count - inside
    if left < 0 then
        left = 0
    end
    -- The call's entries are the last to leave.
    local reset_after, retry = window, 0
    if cost > left then
        reset_after = 0
        if inside > 0 then
            if not newest then
                newest = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
            end
            reset_after = newest + window - now
        end
        retry = NEVER
        if cost <= count then
            -- The window's entries are the newest `inside`; the oldest
            -- `inside - (count - cost)` of them must leave, the last of which is the
            -- (count - cost + 1)-th newest entry.
            local rank = string.format('%d', cost - count - 1)
            local must_leave = tonumber(redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2])
            retry = must_leave + window - now
        end
    end
