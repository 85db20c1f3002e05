-- Gives back a draw of the sliding log (backend::GiveBack): of its members (named as
-- sliding_log_add.lua names a check's, scored at the time it held them until), the used
-- ones are scored at their last spend and the others removed, its calls alike; then, by
-- what was removed, each calendar rule's counter of the period it was counted in
-- (sliding_log_periods.lua). By name, so that a give-back sent twice changes the key once.
-- scripts/sources.rs composes it.
--
-- KEYS[1]  the key
-- ARGV[1]  refund.lua's numbers: the time the draw was counted at, its units, now
--          (unused), then count, window per rule
-- ARGV[2]  the draw's id
-- ARGV[3]  struct '<ddddd': the units used, unused; the calls used, unused; the last spend
-- Returns  how many members it removed
local period_numbers, id, key = ARGV[1], ARGV[2], KEYS[1]
local moment = struct.unpack('<d', period_numbers)
local used, unused, used_calls, unused_calls, last = struct.unpack('<ddddd', ARGV[3])
-- Scores the members `from`..`to` (`suffix` 'c' for calls) at `score`, or removes them
-- (`score` nil); in batches, as Lua's stack bounds the arguments of one call. Returns how
-- many it removed.
local function settle(from, to, suffix, score)
    local args, n, removed = {}, 0, 0
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
                redis.call('ZADD', key, 'XX', unpack(args, 1, n))
            else
                removed = removed + redis.call('ZREM', key, unpack(args, 1, n))
            end
            n = 0
        end
    end
    return removed
end
local spent = string.format('%d', last)
settle(1, used, '', spent)
local delta = -settle(used + 1, used + unused, '', nil)
settle(1, used_calls, 'c', '-' .. spent)
local delta_calls = -settle(used_calls + 1, used_calls + unused_calls, 'c', nil)
local removed = -delta - delta_calls
