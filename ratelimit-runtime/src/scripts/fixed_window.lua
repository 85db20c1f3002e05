-- Fixed window: one counter per rule per window aligned to the epoch
-- (algorithm/fixed_window.rs). Its records (state.lua): count, window_us,
-- window_start_us, units counted in that window.

local NAME, SIZE = 'fixed_window', 32
local state, expires, err = load(NAME, SIZE)
if err then
    return err
end
-- Never count before a stored window's start.
clamp(state, NAME, SIZE, 16)

local records = ''
-- Until the last rule's current window ends.
local needed = 0
for i = 0, rules - 1 do
    local count, window = struct.unpack('<dd', numbers, 16 * i + 25)
    -- Until the window ends.
    local left = now % window
    if left < 0 then
        left = left + window
    end
    local start = now - left
    left = window - left
    local calls = 0
    local p = state and record(state, NAME, SIZE, i, count, window)
    if p then
        local s, k = struct.unpack('<dd', state, p + 16)
        if s == start then
            calls = k
        end
    end
    local retry = 0
    if cost > count then
        retry = NEVER
    elseif calls + cost > count then
        retry = left
    end
    bind(i, count, count - calls, left, retry)
    if left > needed then
        needed = left
    end
    if consume then
        records = records .. struct.pack('<dddd', count, window, start, calls + cost)
    end
end

if consume and not denied then
    save(NAME, expires, records, needed + lag, needed + lag)
end
