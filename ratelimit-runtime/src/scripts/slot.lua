-- Calls in flight (slot.rs): a check that also takes a slot of the key's set, all or
-- nothing. Composed after a check's script as the function `check`
-- (templates/slot_check.lua), or alone, after `local check`, for a slot taken without
-- rules (Limiter::acquire, templates/slot_alone.lua). The rules' fragments
-- are not changed by it: what they read and answer stays theirs.
--
-- KEYS[2]      the key's slots: a ZSET of slot ids, each scored by the end of its lease
--              (µs), in the same hash slot as KEYS[1] (slot::slots_key)
-- ARGV[1]      the check's numbers (preamble.lua); only `now` (the second) is read here
-- ARGV[#ARGV]  the slot, always the last argument: struct '<dd' (the most slots held at
--              once, the lease in µs), then the slot's id (16 bytes, made by the client)
-- Returns      {-1, in_use} when every slot is taken, having checked no rule and written
--              nothing; else the check's own answer, the slot taken when it admits the
--              call; without rules, {-2, free}: the slot taken, `free` slots left.
--
-- A slot whose lease ended is free: its holder stopped renewing it (slot_renew.lua).
-- A re-sent check whose slot is held already answers as the rules do, taking nothing
-- more: the slot's id is the client's, so running it twice holds one slot (a set with
-- room takes it again in place; a full one finds it held).
--
-- Defines `slots`, `slot`, `most`, `lease`, `slot_id`, `now`.
local slots = KEYS[2]
local slot = ARGV[#ARGV]
local most, lease = struct.unpack('<dd', slot)
local slot_id = string.sub(slot, 17)
local now = struct.unpack('<d', ARGV[1], 9)
-- Then (sources.rs) time.lua, then slot_take.lua.
