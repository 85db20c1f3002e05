    -- Token bucket: the record of rule i, found (find.lua) at `p`: its tat. The
    -- algorithm's refund, take or give-back follows (sources.rs), then the `end` of this
    -- `if`.
        local tat = struct.unpack('<d', state, p + 16)
