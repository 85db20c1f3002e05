-- Settles a reservation of the sliding log, then answers as a peek of cost 1
-- (Limiter::settle): sliding_log_members.lua, this fragment, then the sliding log's
-- check script, which answers the peek. scripts/sources.rs composes it.
--
-- KEYS[1]  the key
-- ARGV[1]  the peek's numbers, as preamble.lua reads them (a peek of cost 1 of every rule)
-- ARGV[2]  the id of the check that made the reservation (its members are id, id .. 2,
--          ..., id .. cost: sliding_log_add.lua)
-- ARGV[3]  struct '<ddd': the time it was counted at (unused: its first member's score
--          says it), the cost it reserved, the actual
-- Returns  the peek's answer (preamble.lua)
--
-- By name: a settle to fewer units removes the members above `actual`; to more, adds
-- id .. k for k above the reservation at the reservation's time, while the check's first
-- member is still there (it is still counted), even past a rule's count. So a settle sent
-- twice changes the key once. Its call, for rules counting calls, stays. Returns how
-- many entries it added (negative: removed), by which sliding_log_periods.lua changes the
-- calendar rules' counters, and the check's time.
--
-- Reads `members`; defines `settle`, `delta`, `moment`, `period_numbers`, `delta_calls`.
local function settle()
    local key, id = KEYS[1], ARGV[2]
    local at, reserved, actual = struct.unpack('<ddd', ARGV[3])
    if actual == reserved then
        return 0, 0
    end
    -- The check's time, from its first member (the reply of a sliding-log check does not
    -- carry it).
    local take, stamp = actual > reserved, redis.call('ZSCORE', key, id)
    if not stamp then
        -- Its entries are gone: nothing is counted any more, nothing to give back.
        return 0, 0
    end
    -- The members above the actual removed, or those above the reservation added at the
    -- check's time (sliding_log_members.lua).
    if take then
        return members(key, id, reserved + 1, actual, '', stamp, 'NX'), tonumber(stamp)
    end
    return -members(key, id, actual + 1, reserved, '', nil), tonumber(stamp)
end
local delta, moment = settle()
local period_numbers, delta_calls = ARGV[1], 0
