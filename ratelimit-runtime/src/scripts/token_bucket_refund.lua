        -- Token bucket: what of the units given back has not refilled yet, as if the m
        -- units of the reservation they are part of were the last to drain from a bucket
        -- full before them, and these the last of those: all n until at + (m - n) * T,
        -- then less what has passed since, none after at + m * T; the tat never goes
        -- below now (a full bucket). Keep in step with algorithm/token_bucket.rs.
        --
        -- Reads `now`, `at`, `units`, `reserved`, `count`, `interval`, `key`, `p`; sets
        -- `tat`, `given`; defines `from`, `n`, `m`, `held`, `ahead`.
        local from = now
        if at > from then
            from = at
        end
        local n, m = units, reserved or units
        if n > count then
            n = count
        end
        if m > count then
            m = count
        end
        local held, ahead = at + m * interval - from, tat - from
        if held > n * interval then
            held = n * interval
        end
        if held > 0 and ahead > 0 then
            if held < ahead then
                tat = tat - held
            else
                tat = from
            end
            redis.call('SETRANGE', key, p + 15, struct.pack('<d', tat))
            given = given + 1
        end
