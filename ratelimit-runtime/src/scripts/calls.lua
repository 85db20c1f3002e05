    -- A rule counting calls comes with its count negated (Rule::signed_count): it takes
    -- one of any call (`units`; a draw's calls), and its record keeps the negated count
    -- (`signed`), so that it is never the record of the rule of the same figures counting
    -- units.
    --
    -- Reads `cost`, `calls_taken`; sets `count`; defines `signed`, `units`.
    local signed, units = count, cost
    if count < 0 then
        count, units = -count, calls_taken
    end
