-- Gives back a draw of a string-state algorithm (backend::GiveBack), once: what it did
-- not use, as a refund of it would (refund.lua, then the algorithm's fragment), but for
-- the token bucket (token_bucket_give_back.lua). scripts/sources.rs composes it.
--
-- KEYS[1]  the key
-- KEYS[2]  the give-back's mark, in the key's hash slot, set with it: a give-back sent
--          again finds it and changes nothing
-- ARGV[1]  refund.lua's numbers: the time the draw was counted at, its unused units,
--          now (unused), then count, window per rule
-- ARGV[2]  struct '<dd': its unused calls (what a rule counting calls gets back,
--          calls.lua), and the token bucket's witness
-- ARGV[3]  the mark's lifetime in ms: as long as the draw's records may still change
-- Returns  how many records it changed
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) then
    return 0
end
local calls_taken, witness = struct.unpack('<dd', ARGV[2])
-- Whether a later charge moved the token bucket's frontier (token_bucket_give_back.lua).
local moved
