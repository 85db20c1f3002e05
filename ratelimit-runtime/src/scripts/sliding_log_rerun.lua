-- A re-sent check found denied, whose first run was admitted (its id is there: it took
-- the units it now finds missing), answers as that run did, for the rule that denied it,
-- and, as one that no longer consumes, writes nothing and starts no block.
--
-- Reads `denied_retry`, `NEVER`, `call`, `key`, `first`, `denied_left`, `numbers`,
-- `denied_reset`; sets `least`, `binding`, `reset`, `binding_count`, `consume`, `denied`.
if denied and consume and denied_retry ~= NEVER and call('ZSCORE', key, first) then
    binding, least = denied, denied_left
    binding_count, reset = struct.unpack('<dd', numbers, 16 * denied + 25)
    if binding_count < 0 then
        binding_count = -binding_count
    end
    -- A calendar rule's (calendar.lua) admitted a call until its period's end.
    if reset < 0 then
        reset = denied_reset
    end
    denied, consume = nil, false
end
