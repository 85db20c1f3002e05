    -- Sliding window (algorithm/sliding_window.rs), for one rule: its records are count,
    -- window_us, window_start_us, units in that window, units in the window before.
    -- Products that may pass 2^53 go through the long multiplication of muldiv.lua.
    --
    -- Reads `window`, `now`, `p`, `x0`, `y0`, `z0`, `first`, `state`, `muldiv`, `count`,
    -- `units`, `NEVER`, `consume`, `i`, `signed`; sets `reach`, `needed`, `r5`, `r4`, `r3`,
    -- `r2`, `r1`, `records`; defines `w`, `e`, `start`, `curr`, `prev`, `weighted`, `left`,
    -- `reset_after`, `retry`.
    local w = window
    local e = now % w
    if e < 0 then
        e = e + w
    end
    local start = now - e
    local curr, prev = 0, 0
    if p then
        local s, sc, sp = x0, y0, z0
        if p ~= first then
            s, sc, sp = struct.unpack('<ddd', state, p + 16)
        end
        if s == start then
            curr, prev = sc, sp
        elseif s + w == start then
            prev = sc
        end
    end
    -- W = ceil(prev * (w - e) / w)
    local weighted = 0
    if prev > 0 then
        local q, r = muldiv(prev, w - e, w)
        if r > 0 then
            q = q + 1
        end
        weighted = q
    end
    local left = count - curr - weighted
    if left < 0 then
        left = 0
    end
    local reset_after, retry = 2 * w - e, 0
    if units > left then
        if curr == 0 then
            reset_after = w - e
        end
        if units > count then
            retry = NEVER
        elseif curr + units <= count then
            retry = w - muldiv(w, count - curr - units, prev) - e
        else
            retry = (w - e) + w - muldiv(w, count - units, curr)
        end
    end
    -- Until the end of the next window, the longest over the rules.
    if 2 * w - e > needed then
        needed, reach = 2 * w - e, 2 * w - e
    end
    if consume then
        if i == 0 then
            r1, r2, r3, r4, r5 = signed, w, start, curr + units, prev
        else
            records = records .. struct.pack('<ddddd', signed, w, start, curr + units, prev)
        end
    end
