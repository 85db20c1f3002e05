        -- Fixed window: into the window the reservation was counted in, while the record
        -- still counts it.
        --
        -- Reads `start`, `at`, `window`, `key`, `p`, `calls`, `units`; sets `given`.
        if start <= at and at < start + window then
            redis.call('SETRANGE', key, p + 23, struct.pack('<d', calls + units))
            given = given + 1
        end
