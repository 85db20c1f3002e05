    -- Sliding window: into the current window's count while the reservation was counted
    -- in it, into the previous one's once a window has started since.
    if p then
        local start, curr, prev = struct.unpack('<ddd', state, p + 16)
        local n, at_byte = 0, nil
        if start <= at and at < start + window then
            n, at_byte = curr, p + 23
        elseif at < start and start - at <= window then
            n, at_byte = prev, p + 31
        end
        if at_byte then
            redis.call('SETRANGE', key, at_byte, struct.pack('<d', n + units))
            given = given + 1
        end
    end
