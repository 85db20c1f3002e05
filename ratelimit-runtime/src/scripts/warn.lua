    -- warn_at (warn_args.lua), before bind.lua: a rule admitting the call is crossed when
    -- the call takes it from below warn_at % of its count to at or above it
    -- (warning::crosses; exact while count * 100 stays below 2^53).
    --
    -- Reads `warn_at`, `retry`, `count`, `left`, `units`, `i`; sets `warned`.
    if warn_at and retry == 0 then
        local used = count - left
        if used * 100 < warn_at * count and (used + units) * 100 >= warn_at * count then
            warned = (warned or '') .. struct.pack('<dd', i, used + units)
        end
    end
