    -- A calendar rule (calendar.lua): a fixed window from period_start to period_end,
    -- judged here in place of the algorithm's arithmetic, inside templates/state_check.lua's
    -- `if period_start then`, before fixed_count.lua. Its record holds the units counted in the period, the CAL-th byte
    -- after the record's window (sources.rs): after the period's start where the
    -- algorithm's record starts with a time (LATEST), alone in the token bucket's.
    --
    -- Reads `p`, `first`, `y0`, `CAL`, `x0`, `state`, `period_end`, `now`, `consume`, `i`,
    -- `signed`, `window`, `units`, `period_start`, `OWN`, `count`; sets `needed`, `reach`,
    -- `r2`, `r1`, `r3`, `r5`, `r4`, `records`; defines `held`, `reset_after`, `left`,
    -- `retry`.
        local held = 0
        if p then
            if p == first then
                held = y0
                if CAL == 0 then
                    held = x0
                end
            else
                held = struct.unpack('<d', state, p + 16 + CAL)
            end
        end
        local reset_after = period_end - now
        if reset_after > needed then
            needed = reset_after
        end
        if reset_after > reach then
            reach = reset_after
        end
        if consume then
            if i == 0 then
                r1, r2 = signed, window
                if CAL == 0 then
                    r3 = held + units
                else
                    r3, r4, r5 = period_start, held + units, 0
                end
            elseif CAL == 0 then
                records = records .. struct.pack('<ddd', signed, window, held + units)
            else
                records = records .. struct.pack('<dd', signed, window)
                    .. struct.pack(OWN, period_start, held + units, 0)
            end
        end
        -- What is left, judged by fixed_count.lua, which follows.
        local left, retry = count - held, 0
