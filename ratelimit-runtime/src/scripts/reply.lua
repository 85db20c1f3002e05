-- The answer (see algorithm::decide). Durations were computed at the time the check is
-- counted at; `lag` turns them into durations from the caller's clock.
--
-- Reads `denied`, `denied_retry`, `NEVER`, `lag`, `denied_left`, `denied_reset`, `least`,
-- `consume`, `binding_units`, `draw`, `binding`, `now`, `witness`, `binding_count`,
-- `answer_at`; sets `reset`; defines `remaining`, `short`; may return the answer.
if denied then
    local retry = -1
    if denied_retry ~= NEVER then
        retry = denied_retry + lag
    end
    return {0, denied, denied_left, denied_reset + lag, retry}
end
-- What is left after a check; now, for a peek.
local remaining = least
if consume then
    remaining = least - binding_units
end
reset = reset + lag
-- An admitted call answers with one integer,
-- (reset_after * (count + 1) + remaining) * 64 + rule_index over the binding rule's
-- count (remaining <= count), when a double holds it exactly: when
-- reset_after * (count + 1) + remaining < 2^47, which keeps it below 2^53. A table costs
-- Redis more to send than a check's arithmetic (see backend::redis::script::decode).
--
--
-- A check that asks for it (answer_at: a string-state algorithm's refund needs it) also
-- sends the time it was counted at: the short form and that time as struct '<dd' (a
-- string costs Redis far less to make than a table, but still about as much as a tenth
-- of the check's arithmetic), or the table with the time as a sixth number.
if draw then
    return {1, binding, remaining, reset, 0, now, witness or 0}
end
local short = reset * (binding_count + 1) + remaining
if binding < 64 and short < 140737488355328 then
    if answer_at then
        return struct.pack('<dd', short * 64 + binding, now)
    end
    return short * 64 + binding
end
if answer_at then
    return {1, binding, remaining, reset, 0, now}
end
return {1, binding, remaining, reset, 0}
