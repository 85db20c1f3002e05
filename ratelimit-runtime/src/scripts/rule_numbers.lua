    -- Rule i's count and window: rule 0's as preamble.lua unpacked them with the check's
    -- other numbers, the others' from the check's numbers (ARGV[1]).
    --
    -- Reads `count0`, `window0`, `i`, `numbers`; defines `count`, `window`.
    local count, window = count0, window0
    if i > 0 then
        count, window = struct.unpack('<dd', numbers, 16 * i + 25)
    end
