-- Limiter::block (src/limiter.rs): blocks a key for a while, whatever algorithm keeps its
-- state, writing the block where and as a refusal with block_for writes it (block.lua,
-- then save.lua or sliding_log_add.lua), so that every check reads it as it reads those
-- (blocked.lua): answered by rule 0, consuming nothing, until the block ends. A block never
-- shortens another: a key blocked longer already is left as it is.
--
-- Where the block goes:
--   a string state (state.lua): the state named in capitals, its records kept, and the
--     block as its last record (0, until, rule 0, zeros to the record's size);
--   a sliding log (sliding_log.lua): the member 'B' .. struct '<dd' (until, rule 0) scored
--     +inf, in place of a block the log held;
--   nothing: a sorted set holding only that member, as a sliding log blocked before its
--     first entry; the string-state scripts read it too (state.lua), and whichever
--     algorithm admits the key's next call after the block replaces it with its own state.
-- The key then lives at least until the block ends plus the margin of one second the
-- checks keep (expiry.lua); a key that would live longer keeps its expiry.
--
-- KEYS[1]  the key
-- ARGV[1]  how long to block it, µs (integer text)
-- ARGV[2]  now in µs since the epoch (integer text), or 0 to read Redis TIME
-- Returns  1 when the block was written, 0 when the key was blocked at least as long.
--
-- Defines `key`, `block_for`, `now`.

local key = KEYS[1]
local block_for, now = tonumber(ARGV[1]), tonumber(ARGV[2])
-- Then (sources.rs) time.lua, then block_key_write.lua.
