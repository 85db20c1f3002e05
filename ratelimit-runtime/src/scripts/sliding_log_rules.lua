-- For the sliding log, after sliding_log.lua and blocked.lua.
-- The loop over the rules, which bind.lua ends. Stale entries are skipped here; only an
-- admitted check trims them (sliding_log_add.lua). No entry is newer than `now` any more,
-- so counts up to `now` (`stamp`) count every entry of a window, and never a block.
-- The longest window was counted above; a window no longer than one found empty is
-- empty too.
local empty = 0
if longest == 0 then
    empty = reach
end
for i = 0, rules - 1 do
    local count, window = count0, window0
    if i > 0 then
        count, window = struct.unpack('<dd', numbers, 16 * i + 25)
    end
    local inside = 0
    if window == reach then
        inside = longest
    elseif window > empty then
        inside = redis.call('ZCOUNT', key, string.format('(%d', now - window), stamp)
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
                newest = tonumber(redis.call('ZRANGE', key, last, last, 'WITHSCORES')[2])
            end
            reset_after = newest + window - now
        end
        retry = NEVER
        if cost <= count then
            -- The window's entries are the newest `inside`; the oldest
            -- `inside - (count - cost)` of them must leave, the last of which is the
            -- (count - cost + 1)-th newest entry.
            local rank = string.format('%d', cost - count + last)
            local must_leave = tonumber(redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2])
            retry = must_leave + window - now
        end
    end
