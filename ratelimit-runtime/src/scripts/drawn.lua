-- A string-state algorithm's draw admitted: its name joins the draws the key's records
-- count and have not had back, a hash beside the key (KEYS[2]); its give-back
-- (give_back.lua) changes the records only when it takes the name out of it. A reset
-- deletes the hash with the key, so a give-back of a draw made before it makes no room it
-- did not take. The hash expires no later than the key: its expiry after this write.
-- A draw is named by its check's id (ARGV[2]); the token bucket's, whose receipt keeps its
-- witness instead (token_bucket.lua), by its witness and the time it was counted at, as
-- struct '<dd': a later draw of as many units as an earlier one gave back leaves the
-- frontier, so its witness, where that one left it, and a give-back of the earlier one
-- sent again must not find it.
--
-- Reads `draw`, `denied`, `witness`, `now`, `ms`, `expires`, `clock`.
if draw and not denied then
    local name = ARGV[2]
    if witness then
        name = struct.pack('<dd', witness, now)
    end
    redis.call('HSET', KEYS[2], name, '1')
    local left = ms
    if not left then
        left = math.floor((expires - clock) / 1000)
    end
    if left < 1 then
        left = 1
    end
    redis.call('PEXPIRE', KEYS[2], string.format('%d', left))
end
