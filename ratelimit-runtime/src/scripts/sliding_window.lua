-- Sliding window: the current aligned window's count plus the previous one's weighted by
-- its overlap (algorithm/sliding_window.rs). Its records (state.lua): count, window_us,
-- window_start_us, units in that window, units in the window before.
--
-- Products that may pass 2^53 go through muldiv.

-- floor(a * b / d) and the remainder, exact for 0 <= b <= d < 2^52 however large a * b.
-- Below 2^52 the product and `%` are exact; above, long multiplication over the bits of
-- a keeps the partial remainder below d.
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

local NAME, SIZE = 'sliding_window', 40
local state, expires, err = load(NAME, SIZE)
if err then
    return err
end
-- Never count before a stored window's start.
clamp(state, NAME, SIZE, 16)

local records = ''
-- Until the end of the next window, the longest over the rules.
local needed = 0
for i = 0, rules - 1 do
    local count, w = struct.unpack('<dd', numbers, 16 * i + 25)
    local e = now % w
    if e < 0 then
        e = e + w
    end
    local start = now - e
    local curr, prev = 0, 0
    local p = state and record(state, NAME, SIZE, i, count, w)
    if p then
        local s, sc, sp = struct.unpack('<ddd', state, p + 16)
        if s == start then
            curr, prev = sc, sp
        elseif s + w == start then
            prev = sc
        end
    end
    -- W = ceil(prev * (w - e) / w)
    local weighted = 0
    if prev > 0 then
        local q, r = muldiv(prev, w - e, w)
        if r > 0 then
            q = q + 1
        end
        weighted = q
    end
    local left = count - curr - weighted
    if left < 0 then
        left = 0
    end
    local reset_after, retry = 2 * w - e, 0
    if cost > left then
        if curr == 0 then
            reset_after = w - e
        end
        if cost > count then
            retry = NEVER
        elseif curr + cost <= count then
            retry = w - muldiv(w, count - curr - cost, prev) - e
        else
            retry = (w - e) + w - muldiv(w, count - cost, curr)
        end
    end
    bind(i, count, left, reset_after, retry)
    if 2 * w - e > needed then
        needed = 2 * w - e
    end
    if consume then
        records = records .. struct.pack('<ddddd', count, w, start, curr + cost, prev)
    end
end

if consume and not denied then
    save(NAME, expires, records, needed + lag, needed + lag)
end
