-- The members a sliding-log check or draw named `id` added (sliding_log_add.lua), for
-- its units `from`..`to` (`id`, then `id .. 2`, ...; `suffix` 'c' after `id` for its
-- calls): scored at `score` by a ZADD with `flag` ('NX' adds them, 'XX' re-scores them),
-- or removed (`score` nil); in batches, as Lua's stack bounds the arguments of one call.
-- Returns how many it added or removed. Composed (sources.rs) before the settle and the
-- give-back of the sliding log.
--
-- Defines `members`.
local function members(key, id, from, to, suffix, score, flag)
    local args, n, changed = {}, 0, 0
    for k = from, to do
        local member = id .. suffix
        if k > 1 then
            member = member .. k
        end
        if score then
            args[n + 1], args[n + 2], n = score, member, n + 2
        else
            args[n + 1], n = member, n + 1
        end
        if n >= 1000 or k == to then
            if score then
                changed = changed + redis.call('ZADD', key, flag, unpack(args, 1, n))
            else
                changed = changed + redis.call('ZREM', key, unpack(args, 1, n))
            end
            n = 0
        end
    end
    return changed
end
