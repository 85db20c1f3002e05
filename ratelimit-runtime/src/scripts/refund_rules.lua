local given = 0
for i = 0, rules - 1 do
    local count, window = struct.unpack('<dd', numbers, 16 * i + 25)
