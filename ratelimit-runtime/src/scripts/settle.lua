-- Settles a reservation, then answers as a peek of cost 1 (Limiter::settle): a string-state
-- algorithm's settle script is this fragment, refund.lua's loop over the units rules (in
-- the function below, whose early returns leave the peek to run), and the algorithm's
-- check script, which answers the peek. scripts/sources.rs composes it.
--
-- KEYS[1]  the key
-- ARGV[1]  the peek's numbers, as preamble.lua reads them (a peek of cost 1 of every rule)
-- ARGV[2]  '+' to take units (actual above the reservation), '-' to give them back
-- ARGV[3]  refund.lua's numbers: the time the reservation was counted at, the difference
--          between the actual cost and the reservation, now, then every rule (rules
--          counting calls keep their one)
-- ARGV[4]  the reservation, in units (the token bucket's settle below it needs it)
-- Returns  the peek's answer (preamble.lua)
--
-- Each rule's record is rewritten in place (SETRANGE), where the key still counts the
-- reservation (algorithm::KeyState::settle documents the arithmetic).
local TAKE = ARGV[2] == '+'
local function settle()
    -- The key's expiry as the value's header holds it, once a take has moved it.
    local moved
