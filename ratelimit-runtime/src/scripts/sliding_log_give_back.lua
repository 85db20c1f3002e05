-- Gives back a draw of the sliding log (backend::GiveBack): of its members (named as
-- sliding_log_add.lua names a check's, scored at the time it held them until), the used
-- ones are scored at their last spend and the others removed, its calls alike (a large
-- draw's weighted entry, sliding_log.lua, is replaced by one of the units used); then, by
-- what was removed, each calendar rule's counter of the period it was counted in
-- (sliding_log_periods.lua). By name, so that a give-back sent twice changes the key once.
-- scripts/sources.rs composes it, after sliding_log_members.lua.
--
-- KEYS[1]  the key
-- ARGV[1]  refund.lua's numbers: the time the draw was counted at, its units, now
--          (unused), then count, window per rule
-- ARGV[2]  the draw's id
-- ARGV[3]  struct '<ddddd': the units used, unused; the calls used, unused; the last spend
-- Returns  how many units and calls it removed
--
-- Reads `WEIGHED`, `members`, `windowed_calls`; defines `period_numbers`, `id`, `key`,
-- `moment`, `used`, `unused`, `used_calls`, `unused_calls`, `last`, `spent`, `delta`,
-- `delta_calls`, `removed`.
local period_numbers, id, key = ARGV[1], ARGV[2], KEYS[1]
local moment = struct.unpack('<d', period_numbers)
local used, unused, used_calls, unused_calls, last = struct.unpack('<ddddd', ARGV[3])
-- The used are re-scored (sliding_log_members.lua), the others removed.
local spent, delta = string.format('%d', last), 0
if used + unused < WEIGHED then
    members(key, id, 1, used, '', spent, 'XX')
    delta = -members(key, id, used + 1, used + unused, '', nil)
elseif redis.call('ZREM', key, 'W' .. struct.pack('<d', used + unused) .. id) == 1 then
    delta = -unused
    if used > 0 then
        redis.call('ZADD', key, string.format('%d', 4503599627370496 + last),
            'W' .. struct.pack('<d', used) .. id)
    end
end
-- Calls are members only for rules counting calls over a window (sliding_log_calls.lua):
-- without one there are none to name, however many calls the draw stood for, and the
-- units removed tell the first run (which alone moves the calendar counters).
local delta_calls = 0
if windowed_calls then
    members(key, id, 1, used_calls, 'c', '-' .. spent, 'XX')
    delta_calls = -members(key, id, used_calls + 1, used_calls + unused_calls, 'c', nil)
elseif delta < 0 then
    delta_calls = -unused_calls
end
local removed = -delta - delta_calls
