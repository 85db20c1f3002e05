-- A string-state algorithm's draw admitted: its name joins the draws the key's records
-- count and have not had back, a hash beside the key (KEYS[2]); its give-back
-- (give_back.lua) changes the records only when it takes the name out of it. A reset
-- deletes the hash with the key, so a give-back of a draw made before it makes no room it
-- did not take. The hash expires no later than the key: its expiry after this write.
-- A draw is named by its check's id (ARGV[2]), the token bucket's by its witness, as
-- struct '<d' (what its receipt keeps: token_bucket.lua).
--
-- Reads `draw`, `denied`, `witness`, `ms`, `expires`, `clock`.
if draw and not denied then
    local name = ARGV[2]
    if witness then
        name = struct.pack('<d', witness)
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
