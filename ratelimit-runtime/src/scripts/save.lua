
-- Writes the records of this check, with the key's expiry as expiry.lua moved it, or
-- keeping it (KEEPTTL), which saves Redis rewriting it.
if ms then
    expires = clock + ms * 1000
    redis.call('SET', key, struct.pack(HEAD, NAME, expires, r1, r2, r3, r4, r5) .. records,
        'PX', string.format('%d', ms))
elseif consume and not denied then
    redis.call('SET', key, struct.pack(HEAD, NAME, expires, r1, r2, r3, r4, r5) .. records,
        'KEEPTTL')
end
