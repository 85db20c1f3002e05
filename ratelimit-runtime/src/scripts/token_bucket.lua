-- Token bucket as GCRA: one theoretical arrival time (tat) per rule
-- (algorithm/token_bucket.rs). Its records (state.lua): count, window_us, tat_us.
-- A tat ahead of `now` is counted in full, so time never runs backwards here without a
-- clamp. The expiry moves to cover the longest burst span (the latest tat an admitted
-- call can leave), not just this write's tat, so that the writes after it keep it.

local NAME, SIZE = 'token_bucket', 24
local state, expires, err = load(NAME, SIZE)
if err then
    return err
end

local records = ''
-- The latest tat any admitted call can leave (the longest burst span), and this call's.
local reach, needed = 0, 0
for i = 0, rules - 1 do
    local count, window = struct.unpack('<dd', numbers, 16 * i + 25)
    -- T = ceil(window / count), count * T the burst span.
    local r = window % count
    if r < 0 then
        r = r + count
    end
    local interval = (window - r) / count
    if r > 0 then
        interval = interval + 1
    end
    local burst = count * interval
    local ahead = 0
    local p = state and record(state, NAME, SIZE, i, count, window)
    if p then
        local tat = struct.unpack('<d', state, p + 16)
        if tat > now then
            ahead = tat - now
        end
    end
    -- floor((burst - ahead) / T), units left now
    local left = burst - ahead
    if left < 0 then
        left = 0
    end
    r = left % interval
    if r < 0 then
        r = r + interval
    end
    left = (left - r) / interval
    local after = ahead + cost * interval
    if cost > count then
        bind(i, count, left, ahead, NEVER)
    elseif after > burst then
        bind(i, count, left, ahead, after - burst)
    else
        bind(i, count, left, after, 0)
    end
    if burst > reach then
        reach = burst
    end
    if after > needed then
        needed = after
    end
    if consume then
        records = records .. struct.pack('<ddd', count, window, now + after)
    end
end

if consume and not denied then
    save(NAME, expires, records, needed, reach)
end
