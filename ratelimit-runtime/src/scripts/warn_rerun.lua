-- (The sliding log, before sliding_log_add.lua.) A re-run (its id is there: the first run
-- was admitted, and answered its own crossings) crosses nothing.
--
-- Reads `call`, `key`, `first`; sets `warned`.
if warned and call('ZSCORE', key, first) then
    warned = nil
end
