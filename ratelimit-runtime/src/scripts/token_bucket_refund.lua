    -- Token bucket: what of the units has not refilled yet, as if they were the last to
    -- drain from a bucket full before them: until at + n * T, less what has passed
    -- since; the tat never goes below now (a full bucket).
    if p then
        local tat = struct.unpack('<d', state, p + 16)
        local from = now
        if at > from then
            from = at
        end
        local n = units
        if n > count then
            n = count
        end
        local held, ahead = at + n * interval - from, tat - from
        if held > 0 and ahead > 0 then
            if held < ahead then
                tat = tat - held
            else
                tat = from
            end
            redis.call('SETRANGE', key, p + 15, struct.pack('<d', tat))
            given = given + 1
        end
    end
