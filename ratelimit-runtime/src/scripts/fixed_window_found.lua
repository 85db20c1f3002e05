    -- Fixed window: the record of rule i, found (find.lua) at `p`: its window's start and
    -- the units counted in it. The algorithm's refund, take or give-back follows
    -- (templates/state_gives_back.lua, state_settle.lua: inside `if p then`).
    --
    -- Reads `state`, `p`; defines `start`, `calls`.
        local start, calls = struct.unpack('<dd', state, p + 16)
