    -- Fixed window (algorithm/fixed_window.rs), for one rule: its records are count,
    -- window_us, window_start_us, units counted in that window.
    -- Until the window ends.
    --
    -- Reads `now`, `window`, `p`, `x0`, `y0`, `first`, `state`, `consume`, `i`, `signed`,
    -- `units`, `count`; sets `reach`, `needed`, `r4`, `r3`, `r2`, `r1`, `records`; defines
    -- `reset_after`, `start`, `calls`, `left`, `retry`.
    local reset_after = now % window
    if reset_after < 0 then
        reset_after = reset_after + window
    end
    local start = now - reset_after
    reset_after = window - reset_after
    local calls = 0
    if p then
        local s, k = x0, y0
        if p ~= first then
            s, k = struct.unpack('<dd', state, p + 16)
        end
        if s == start then
            calls = k
        end
    end
    -- Until the last rule's current window ends.
    if reset_after > needed then
        needed, reach = reset_after, reset_after
    end
    if consume then
        if i == 0 then
            r1, r2, r3, r4 = signed, window, start, calls + units
        else
            records = records .. struct.pack('<dddd', signed, window, start, calls + units)
        end
    end
    -- What is left, judged by fixed_count.lua, which follows.
    local left, retry = count - calls, 0
