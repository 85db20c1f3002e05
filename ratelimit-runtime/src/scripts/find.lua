    -- The record of rule i (count, window) in the string `state`, as records.lua describes:
    -- `p`, where it starts, or nil. Shared by the checks and the refunds.
    --
    -- Reads `state`, `first`, `i`, `SIZE`, `c0`, `w0`, `count`, `window`; defines `p`.
    local p
    if state then
        p = first + i * SIZE
        local c, w = c0, w0
        if i > 0 then
            c = nil
            if p < #state then
                c, w = struct.unpack('<dd', state, p)
            end
        end
        if c ~= count or w ~= window then
            p = nil
            for q = first, #state, SIZE do
                c, w = struct.unpack('<dd', state, q)
                if c == count and w == window then
                    p = q
                    break
                end
            end
        end
    end
