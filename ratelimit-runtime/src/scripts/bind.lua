    -- The binding rule, as algorithm::decide chooses it from this rule's `left` (units
    -- left now), `reset_after` and `retry` (0 when the rule admits the call): among the
    -- rules that deny the call, the one with the largest retry (ties: lowest index); when
    -- none does, the one with the least left (ties: lowest index).
    --
    -- Reads `retry`, `i`, `left`, `reset_after`, `count`, `units`; sets `denied_retry`,
    -- `denied_reset`, `denied_left`, `denied`, `binding_units`, `reset`, `least`,
    -- `binding_count`, `binding`.
    if retry > 0 then
        if retry > denied_retry then
            denied, denied_left, denied_reset, denied_retry = i, left, reset_after, retry
        end
    elseif not least or left < least then
        binding, binding_count, least, reset, binding_units = i, count, left, reset_after, units
    end
