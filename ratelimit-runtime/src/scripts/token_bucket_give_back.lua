        -- The draw's unused units were its last slots, ending at the `tat` it left (its
        -- witness, which its first such rule still holds when no later charge came): the
        -- frontier moves back over them. Otherwise they come back by refill.
        --
        -- Reads `tat`, `witness`, `units`, `key`, `p`, `interval`; sets `moved`, `given`.
        if moved == nil then
            moved = tat ~= witness
        end
        if not moved and units > 0 then
            redis.call('SETRANGE', key, p + 15, struct.pack('<d', tat - units * interval))
            given = given + 1
        end
