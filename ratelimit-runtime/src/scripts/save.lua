
-- Writes the records of this check, with the key's expiry as expiry.lua moved it, or
-- keeping it (KEEPTTL), which saves Redis rewriting it.
if ms then
    expires = clock + ms * 1000
    redis.call('SET', key, NAME .. struct.pack('<d', expires) .. records, 'PX', string.format('%d', ms))
elseif consume and not denied then
    redis.call('SET', key, NAME .. struct.pack('<d', expires) .. records, 'KEEPTTL')
end
