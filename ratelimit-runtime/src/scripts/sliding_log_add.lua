
-- An admitted check (not a re-run) trims the entries outside the longest window and adds
-- its own. Only an admitted check trims, as its own entries become the newest: a later
-- check from a clock behind is counted at the newest entry, and an entry trimmed at a
-- newer time could still be inside its windows. A peek, a denial and a re-run write
-- nothing.
if ms then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - reach)
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
    redis.call('PEXPIRE', key, ms)
end
