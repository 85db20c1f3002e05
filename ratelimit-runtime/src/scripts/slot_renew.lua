-- Renews one slot's lease (slot.rs): the holder of a slot runs this every third of its
-- lease while its call runs, so that only the slots of a holder that stopped (its process
-- died) lapse.
--
-- KEYS[1]  the key's slots (slot.lua)
-- ARGV[1]  struct '<dd': now in µs (0: Redis TIME), the lease in µs
-- ARGV[2]  the slot's id
-- Returns  1 when the slot was held and its lease now ends `lease` from now; 0 when it
--          is no longer held (it lapsed, or the key was reset): it is not taken again,
--          since another call may hold that place now.
--
-- Defines `slots`, `now`, `lease`, `ends`; may return the answer.
local slots = KEYS[1]
local now, lease = struct.unpack('<dd', ARGV[1])
local ends = redis.call('ZSCORE', slots, ARGV[2])
if not ends then
    return 0
end
-- Then (sources.rs) time.lua, then slot_renew_lease.lua.
