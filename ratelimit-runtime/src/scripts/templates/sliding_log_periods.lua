-- The sliding log's calendar counters (sliding_log_calendar.lua) after a settle or a
-- refund: each calendar rule's counter of the period the check was counted in (`moment`)
-- moves by what the settle or refund changed of the check's entries: `delta` units
-- (negative: given back), `delta_calls` for a calendar rule counting calls; never below
-- 0. Only a change of entries, which are named, moves them, so that a settle or refund
-- sent twice moves them once. `period_numbers` holds the rules as preamble.lua's ARGV[1]
-- does. A template (sources.rs): each `--@ name` line is the fragment name.lua.
if delta ~= 0 or delta_calls ~= 0 then
    for i = 0, (#period_numbers - 24) / 16 - 1 do
        local count, window = struct.unpack('<dd', period_numbers, 16 * i + 25)
        --@ calendar
        --@ sliding_log_period
    end
end
