        -- Fixed window: only while the record still counts the window the units were
        -- counted in.
        --
        -- Reads `start`, `at`, `window`, `units`, `key`, `p`; sets `calls`, `given`.
        if start <= at and at < start + window and calls > 0 then
            calls = calls - units
            if calls < 0 then
                calls = 0
            end
            redis.call('SETRANGE', key, p + 23, struct.pack('<d', calls))
            given = given + 1
        end
