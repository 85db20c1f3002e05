        -- Sliding window: into the current window's count while the reservation was
        -- counted in it, into the previous one's once a window has started since.
        --
        -- Reads `at_byte`, `key`, `n`, `units`; sets `given`.
        if at_byte then
            redis.call('SETRANGE', key, at_byte, struct.pack('<d', n + units))
            given = given + 1
        end
