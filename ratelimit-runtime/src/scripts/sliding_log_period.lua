        -- A rule listed twice has one counter, changed once.
        --
        -- Reads `i`, `period_numbers`, `count`, `window`, `delta`, `delta_calls`; sets
        -- `period_start`.
        for j = 0, i - 1 do
            local c, w = struct.unpack('<dd', period_numbers, 16 * j + 25)
            if period_start and c == count and w == -((-window) % 4) then
                period_start = nil
            end
        end
        if period_start then
            local change = delta
            if count < 0 then
                change = delta_calls
            end
            local member = 'P' .. struct.pack('<dd', count, window)
            local held = redis.call('ZSCORE', KEYS[1], member)
            if held and change ~= 0 then
                held = -tonumber(held) - 4503599627370496 + change
                if held < 0 then
                    held = 0
                end
                redis.call('ZADD', KEYS[1], string.format('%d', -4503599627370496 - held), member)
            end
        end
