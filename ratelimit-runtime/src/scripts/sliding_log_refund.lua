-- Gives back one admitted check of the sliding log whose rules count in calendar periods
-- (a check without them is refunded by a ZREM of its members alone): its members, as
-- sliding_log_add.lua names them, then, when they were there (a second run finds them
-- gone), its units (its call, for a calendar rule counting calls) in each calendar
-- counter of the period it was counted in (sliding_log_periods.lua). scripts/sources.rs
-- composes it.
--
-- KEYS[1]  the key
-- ARGV[1]  refund.lua's numbers: the time the check was counted at (unused: its first
--          member's score says it), its cost, now (unused), then count, window per rule
-- ARGV[2]  the check's id
-- Returns  how many members it removed
--
-- Reads `windowed_calls`; defines `period_numbers`, `id`, `_`, `cost`, `moment`, `members`,
-- `removed`, `delta`, `delta_calls`.
local period_numbers, id = ARGV[1], ARGV[2]
local _, cost = struct.unpack('<dd', period_numbers)
local moment = tonumber(redis.call('ZSCORE', KEYS[1], id))
local members = {id}
if windowed_calls then
    members[2] = id .. 'c'
end
local removed = 0
-- In batches, as Lua's stack bounds the arguments of one call.
for k = 2, cost + 1 do
    if k <= cost then
        members[#members + 1] = id .. k
    end
    if #members >= 1000 or (k > cost and #members > 0) then
        removed = removed + redis.call('ZREM', KEYS[1], unpack(members))
        members = {}
    end
end
local delta, delta_calls = 0, 0
if removed > 0 then
    delta, delta_calls = -cost, -1
end
