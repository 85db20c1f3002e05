    -- The sliding log's judging of rule i (count, window: rule_numbers.lua), as
    -- sliding_log_rules.lua describes it: the units inside its window, what is left, and
    -- when the call it cannot take now could pass.
    --
    -- Reads `cost`, `window`, `calls_taken`, `stamp`, `clocked`, `call`, `key`, `now`,
    -- `reach`, `longest`, `upto`, `weights`, `last`, `NEVER`; sets `has_calls`, `count`,
    -- `empty`, `newest`; defines `inside`, `units`, `calls`, `left`, `reset_after`,
    -- `retry`.
    local inside, units, calls = 0, cost, nil
    if count < 0 and window > 0 then
        count, units, calls, has_calls = -count, calls_taken, true, true
        local from = '-' .. stamp
        if clocked then
            from = '(-4503599627370496'
        end
        inside = call('ZCOUNT', key, from, string.format('(%d', window - now))
    elseif window == reach then
        inside = longest
    elseif window > empty then
        inside = call('ZCOUNT', key, string.format('(%d', now - window), upto)
        if inside == 0 then
            empty = window
        end
    end
    -- The units of the weighted entries inside the window (sliding_log.lua).
    if weights and not calls and window > 0 then
        for j = #weights - 1, 1, -2 do
            if weights[j] <= now - window then
                break
            end
            inside = inside + weights[j + 1]
        end
    end
    local left = count - inside
    if left < 0 then
        left = 0
    end
    -- The call's entries are the last to leave.
    local reset_after, retry = window, 0
    if units <= left then
        -- Admitted by this rule: the figures above.
    elseif calls then
        -- The newest call leaves last; the count-th newest must leave for one more. The
        -- counters of calendar rules are below the calls (sliding_log_calendar.lua).
        local below = call('ZCOUNT', key, '-inf', '(-4503599627370496')
        local newest_call = call('ZRANGE', key, string.format('%d', below),
            string.format('%d', below), 'WITHSCORES')[2]
        local must_leave = call('ZRANGE', key, string.format('%d', count - 1 + below),
            string.format('%d', count - 1 + below), 'WITHSCORES')[2]
        reset_after = window - now - tonumber(newest_call)
        retry = window - now - tonumber(must_leave)
    else
        reset_after = 0
        if inside > 0 then
            if not newest then
                -- The newest entry, of a unit (scored from 0) or weighted.
                newest = tonumber(call('ZRANGE', key, last, last, 'WITHSCORES')[2] or -1)
                if weights and #weights > 0 and weights[#weights - 1] > newest then
                    newest = weights[#weights - 1]
                end
            end
            reset_after = newest + window - now
        end
        retry = NEVER
        if units <= count then
            -- The window's entries are the newest `inside`; the oldest
            -- `inside - (count - cost)` of them must leave, the last of which is the
            -- (count - cost + 1)-th newest entry: the `nth` newest unit entry once the
            -- weighted entries newer than it are passed, newest first (each passed with
            -- the unit entries newer than it), or a weighted entry that holds it.
            local nth, must_leave = count - units + 1, nil
            if weights then
                for j = #weights - 1, 1, -2 do
                    local newer = call('ZCOUNT', key,
                        string.format('(%d', weights[j]), upto)
                    if newer >= nth then
                        break
                    elseif newer + weights[j + 1] >= nth then
                        must_leave = weights[j]
                        break
                    end
                    nth = nth - weights[j + 1]
                end
            end
            if not must_leave then
                local rank = string.format('%d', last - nth + 1)
                must_leave = tonumber(call('ZRANGE', key, rank, rank, 'WITHSCORES')[2])
            end
            retry = must_leave + window - now
        end
    end
