    -- A calendar rule (calendar.lua): its units in the record of the period the check was
    -- counted in, while the key still holds it, given back (never below 0) or, with TAKE,
    -- taken (even past the count). CAL as in calendar_check.lua.
    --
    -- Reads `p`, `state`, `CAL`, `TAKE`, `units`, `key`; sets `given`.
    if p then
        local held = struct.unpack('<d', state, p + 16 + CAL)
        if TAKE then
            held = held + units
        elseif held > units then
            held = held - units
        else
            held = 0
        end
        redis.call('SETRANGE', key, p + 15 + CAL, struct.pack('<d', held))
        given = given + 1
    end
