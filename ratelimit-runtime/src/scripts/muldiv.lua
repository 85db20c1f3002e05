-- For the sliding window, before the loop over the rules (a function, the one closure of
-- its script: the long multiplication is too long to repeat at each use).
--
-- floor(a * b / d) and the remainder, exact for 0 <= b <= d < 2^52 however large a * b.
-- Below 2^52 the product and `%` are exact; above, long multiplication over the bits of
-- a keeps the partial remainder below d.
--
-- Defines `muldiv`.
local function muldiv(a, b, d)
    local p = a * b
    if p < 4503599627370496 then
        local r = p % d
        if r < 0 then
            r = r + d
        end
        return (p - r) / d, r
    end
    local q, r = 0, 0
    local bit = 1
    while bit * 2 <= a do
        bit = bit * 2
    end
    while bit >= 1 do
        q, r = q * 2, r * 2
        if r >= d then
            q, r = q + 1, r - d
        end
        if a >= bit then
            a = a - bit
            r = r + b
            if r >= d then
                q, r = q + 1, r - d
            end
        end
        bit = bit / 2
    end
    return q, r
end

