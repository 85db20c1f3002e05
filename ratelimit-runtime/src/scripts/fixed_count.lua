    -- A count fixed until `reset_after` (a fixed window, a calendar period), after its
    -- fragment set `left` (the count less the units held) and `retry` (0): a settle past
    -- the reservation may leave it in debt (Limiter::settle), and a call it cannot take
    -- now waits for the reset, or never passes.
    --
    -- Reads `units`, `count`, `NEVER`, `reset_after`; sets `left`, `retry`.
    if left < 0 then
        left = 0
    end
    if units > count then
        retry = NEVER
    elseif units > left then
        retry = reset_after
    end
