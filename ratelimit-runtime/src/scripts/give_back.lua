-- Gives back a draw of a string-state algorithm (backend::GiveBack), once: what it did
-- not use, as a refund of it would (refund.lua, then the algorithm's fragment), but for
-- the token bucket (token_bucket_give_back.lua). scripts/sources.rs composes it.
--
-- KEYS[1]  the key
-- KEYS[2]  the draws the key's records count and have not had back, a hash beside the
--          key in its hash slot (drawn.lua): a give-back whose draw is not there (sent
--          again, or the key was reset since) changes nothing
-- ARGV[1]  refund.lua's numbers: the time the draw was counted at, its unused units,
--          now (unused), then count, window per rule
-- ARGV[2]  struct '<dd': its unused calls (what a rule counting calls gets back,
--          calls.lua), and the token bucket's witness
-- ARGV[3]  the draw's name in KEYS[2]: its check's id, the token bucket's witness and
--          time as struct '<dd'
-- Returns  how many records it changed
--
-- Defines `calls_taken`, `witness`, `moved`; may return the answer.
if redis.call('HDEL', KEYS[2], ARGV[3]) == 0 then
    return 0
end
local calls_taken, witness = struct.unpack('<dd', ARGV[2])
-- Whether a later charge moved the token bucket's frontier (token_bucket_give_back.lua).
local moved
