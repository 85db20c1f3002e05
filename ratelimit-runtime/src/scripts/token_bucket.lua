    -- Token bucket as GCRA (algorithm/token_bucket.rs), for one rule: its records are
    -- count, window_us, tat_us. A tat ahead of `now` is counted in full, so time never
    -- runs backwards here without a clamp. The expiry moves to cover the longest burst
    -- span (the latest tat an admitted call can leave), not just this write's tat, so
    -- that the writes after it keep it.
    --
    -- T (interval, token_interval.lua), count * T the burst span.
    --
    -- Reads `count`, `interval`, `p`, `x0`, `first`, `state`, `now`, `hold`, `units`,
    -- `NEVER`, `consume`, `draw`, `i`, `signed`, `window`; sets `reach`, `needed`,
    -- `witness`, `r3`, `r2`, `r1`, `records`; defines `burst`, `ahead`, `left`, `r`,
    -- `after`, `reset_after`, `retry`.
    local burst = count * interval
    local ahead = 0
    if p then
        local tat = x0
        if p ~= first then
            tat = struct.unpack('<d', state, p + 16)
        end
        if tat > now then
            ahead = tat - now
        end
    end
    -- A draw is charged as if at `now + hold` (it must still conform at `now`).
    if ahead < hold then
        ahead = hold
    end
    -- floor((burst - ahead) / T): units left now.
    local left = burst - ahead
    if left < 0 then
        left = 0
    end
    local r = left % interval
    if r < 0 then
        r = r + interval
    end
    left = (left - r) / interval
    local after = ahead + units * interval
    local reset_after, retry = after, 0
    if units > count then
        reset_after, retry = ahead, NEVER
    elseif after > burst then
        reset_after, retry = ahead, after - burst
    end
    if burst > reach then
        reach = burst
    end
    if after > needed then
        needed = after
    end
    if consume then
        -- A draw's witness: its first such rule's `tat`, which a give-back finds unmoved
        -- while no later charge came.
        if draw and not witness then
            witness = now + after
        end
        if i == 0 then
            r1, r2, r3 = signed, window, now + after
        else
            records = records .. struct.pack('<ddd', signed, window, now + after)
        end
    end
