-- (Before reply.lua.) An admitted check that crossed a rule's warning share answers in
-- full, with the time it was counted at and its crossings (warn.lua):
-- {1, binding, remaining, reset_after_us, 0, at_us, crossings}; a draw's with its witness
-- before the crossings (reply.lua).
--
-- Reads `warned`, `denied`, `draw`, `binding`, `least`, `binding_units`, `reset`, `lag`,
-- `now`, `witness`; may return the answer.
if warned and not denied then
    if draw then
        return {1, binding, least - binding_units, reset + lag, 0, now, witness or 0, warned}
    end
    return {1, binding, least - binding_units, reset + lag, 0, now, warned}
end
