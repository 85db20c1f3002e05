
-- Writes the records of this check. The expiry moves only when the state written would
-- outlive it (it matters `needed + lag` µs more from the caller's clock), with the margin
-- of one second, to `ms`, far enough for the writes after it too
-- (algorithm::extend_expiry); otherwise SET keeps it
-- (KEEPTTL), which saves Redis rewriting it. Redis 5 and 6 (no REDIS_VERSION_NUM) always
-- set it.
if ms then
    if expires < clock + needed + lag + 1000000 or not redis.REDIS_VERSION_NUM then
        expires = clock + ms * 1000
        redis.call('SET', key, NAME .. struct.pack('<d', expires) .. records, 'PX', ms)
    else
        redis.call('SET', key, NAME .. struct.pack('<d', expires) .. records, 'KEEPTTL')
    end
end
