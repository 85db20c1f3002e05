-- A draw's hold (algorithm::draw_hold_us), once the time it is counted at is known: the
-- hold it asks for, never more than a quarter of a rule's window, nor past the last µs
-- of the UTC day it is counted in when a rule counts in calendar periods. (The fixed and
-- sliding window's draws record nothing of their hold; the client bounds it by their
-- aligned windows itself.)
--
-- Reads `draw`, `rules`, `window0`, `numbers`, `now`; sets `hold`.
if draw then
    for i = 0, rules - 1 do
        local window = window0
        if i > 0 then
            window = struct.unpack('<d', numbers, 16 * i + 33)
        end
        local limit
        if window < 0 then
            limit = now % 86400000000
            if limit < 0 then
                limit = limit + 86400000000
            end
            limit = 86400000000 - limit - 1
        else
            limit = window % 4
            if limit < 0 then
                limit = limit + 4
            end
            limit = (window - limit) / 4
        end
        if limit < hold then
            hold = limit
        end
    end
end
