    -- The token bucket keeps no latest time to clamp a check's time to (state.lua, LATEST):
    -- for a calendar rule, a record of a later period (the clock stepped back over its
    -- start) counts the check in that period, as the other algorithms' clamp does
    -- (algorithm/calendar.rs, judge). A record's window is -(4 * its first day + 1, 2 or 3)
    -- (calendar.lua); this rule's window is still -1, -2 or -3 here.
    --
    -- Reads `now`, `window`, `state`, `first`, `SIZE`, `count`; sets `moment`.
    moment = now
    if window < 0 and state then
        for q = first, #state, SIZE do
            local c, w = struct.unpack('<dd', state, q)
            if c == count and w < 0 and (-w) % 4 == -window then
                local start = (-w + window) / 4 * 86400000000
                if start > moment then
                    moment = start
                end
            end
        end
    end
