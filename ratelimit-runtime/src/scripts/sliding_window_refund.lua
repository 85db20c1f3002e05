        -- Sliding window: from the current window's count while the units were counted in
        -- it, from the previous one's once a window has started since.
        --
        -- Reads `units`, `key`, `at_byte`; sets `n`, `given`.
        if n > 0 then
            n = n - units
            if n < 0 then
                n = 0
            end
            redis.call('SETRANGE', key, at_byte, struct.pack('<d', n))
            given = given + 1
        end
