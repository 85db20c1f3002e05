-- Whether a rule of a sliding-log refund or give-back (its rules in ARGV[1], as refund.lua
-- reads them) counts calls over a window: only those rules' calls are members of the log
-- (sliding_log_add.lua); a calendar rule counting calls keeps a counter. Composed
-- (sources.rs) before sliding_log_refund.lua and sliding_log_give_back.lua.
--
-- Defines `windowed_calls`.
local windowed_calls = false
for i = 0, (#ARGV[1] - 24) / 16 - 1 do
    local count, window = struct.unpack('<dd', ARGV[1], 16 * i + 25)
    if count < 0 and window > 0 then
        windowed_calls = true
    end
end
