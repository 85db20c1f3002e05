    -- Token bucket: the record of rule i, found (find.lua) at `p`: its tat. The
    -- algorithm's refund, take or give-back follows
    -- (templates/state_gives_back.lua, state_settle.lua: inside `if p then`).
    --
    -- Reads `state`, `p`; defines `tat`.
        local tat = struct.unpack('<d', state, p + 16)
