    -- Sliding window: the record of rule i, found (find.lua) at `p`, and the count the
    -- units counted at `at` are in: `n` units, at byte `at_byte` (nil: neither window
    -- holds them any more). The algorithm's refund, take or give-back follows
    -- (templates/state_gives_back.lua, state_settle.lua: inside `if p then`).
    --
    -- Reads `state`, `p`, `at`, `window`; defines `start`, `curr`, `prev`, `n`, `at_byte`.
        local start, curr, prev = struct.unpack('<ddd', state, p + 16)
        local n, at_byte = 0, nil
        if start <= at and at < start + window then
            n, at_byte = curr, p + 23
        elseif at < start and start - at <= window then
            n, at_byte = prev, p + 31
        end
