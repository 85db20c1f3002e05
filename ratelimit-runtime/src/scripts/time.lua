-- `now` as the caller sent it (µs since the epoch), or, when it sent 0, from Redis TIME.
-- Redis 7 replicates scripts by their effects; older servers must be asked to before a
-- write may follow TIME.
--
-- Sets `now`.
if now == 0 then
    if not redis.REDIS_VERSION_NUM then
        redis.replicate_commands()
    end
    local time = redis.call('TIME')
    now = time[1] * 1000000 + time[2]
end
