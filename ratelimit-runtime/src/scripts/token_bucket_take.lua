        -- Token bucket: the excess taken from now (or from the reservation, if later):
        -- the tat moves on by units * T from there, in debt past the burst span if need
        -- be.
        --
        -- Reads `now`, `at`, `units`, `interval`, `key`, `p`, `state`, `NAME`; sets `tat`,
        -- `given`, `moved`; defines `from`, `expires`.
        local from = now
        if at > from then
            from = at
        end
        if tat < from then
            tat = from
        end
        tat = tat + units * interval
        redis.call('SETRANGE', key, p + 15, struct.pack('<d', tat))
        given = given + 1
        -- A debt that outlives the key's expiry moves it (expiry.lua's arithmetic), in
        -- the key and in the value's header.
        local expires = moved or struct.unpack('<d', state, #NAME + 1)
        if expires < tat + 1000000 then
            local span = tat - now
            local r = span % 1000
            if r < 0 then
                r = r + 1000
            end
            local ms = (span - r) / 1000 + 1000
            if r > 0 then
                ms = ms + 1
            end
            redis.call('PEXPIRE', key, string.format('%d', ms))
            moved = now + ms * 1000
            redis.call('SETRANGE', key, #NAME, struct.pack('<d', moved))
        end
