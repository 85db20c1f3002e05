    -- A calendar rule (calendar.lua) of the sliding log: not one entry per unit (a month
    -- of tokens would be millions), but one counter member per rule and period, named
    -- 'P' then struct '<dd' of its count (negative counting calls) and its record's window
    -- (calendar.lua), scored -(2^52 + the units counted): below every entry and every
    -- call (scored -now > -2^52), so that no count of them includes it, and no trim of
    -- theirs removes it. An admitted check with calendar rules replaces every counter by
    -- its own rules' (sliding_log_add.lua), so that a period past is forgotten.
    -- sliding_log_rules.lua has judged it as a rule of nothing counted: its figures are
    -- replaced here.
        -- As ARGV gave it: sliding_log_rules.lua leaves a calendar rule's count as it is.
    --
    -- Reads `cost`, `calls_taken`, `window`, `call`, `key`, `period_end`, `now`, `consume`;
    -- sets `units`, `count`, `reset_after`, `period_reach`, `periods`, `retry`, `left`;
    -- defines `signed`, `member`, `held`.
        local signed = count
        units = cost
        if signed < 0 then
            count, units = -signed, calls_taken
        end
        local member = 'P' .. struct.pack('<dd', signed, window)
        local held = call('ZSCORE', key, member)
        if held then
            held = -tonumber(held) - 4503599627370496
        else
            held = 0
        end
        reset_after = period_end - now
        if reset_after > period_reach then
            period_reach = reset_after
        end
        if consume then
            if not periods then
                periods = {}
            end
            periods[#periods + 1] = string.format('%d', -4503599627370496 - held - units)
            periods[#periods + 1] = member
        end
        -- What is left, judged by fixed_count.lua, which follows.
        left, retry = count - held, 0
