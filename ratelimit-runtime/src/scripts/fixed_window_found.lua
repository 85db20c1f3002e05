    -- Fixed window: the record of rule i, found (find.lua) at `p`: its window's start and
    -- the units counted in it. The algorithm's refund, take or give-back follows
    -- (sources.rs), then the `end` of this `if`.
        local start, calls = struct.unpack('<dd', state, p + 16)
