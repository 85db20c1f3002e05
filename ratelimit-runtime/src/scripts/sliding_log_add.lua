-- An admitted check adds its entries, and trims those outside the longest window (when
-- sliding_log.lua found any). Only an admitted check trims, as its own entries become the
-- newest: a later check from a clock behind is counted at the newest entry, and an entry
-- trimmed at a newer time could still be inside its windows. A peek and a denial write
-- nothing, but for a refusal that starts a block, which writes the block (replacing one
-- that has passed). An admitted write ends a block that has passed.
--
-- A re-run (the id is present: the first run was admitted) writes nothing either, and
-- answers admitted as the first run did: its own entries, counted above, were not there
-- then, so each rule had `cost` more left (a re-run found denied: sliding_log_rerun.lua).
-- A draw's entries (a large one's weighted entry, in the band above the log) and calls
-- are scored `hold` after `now`, and it moves the key's clock member (sliding_log.lua), as
-- every later write does.
--
-- Reads `stamp`, `draw`, `now`, `hold`, `weighed`, `ms`, `denied`, `block`, `call`, `key`,
-- `blocked_until`, `blocked_rule`, `blocked_strikes`, `first`, `streak`, `stale`,
-- `has_calls`, `trim`, `wstale`, `periods`, `id`, `calls_taken`, `unheld`, `clocked`,
-- `cost`, `binding_units`, `binding_count`; sets `least`; defines `held`, `score`.
local held, score = stamp, stamp
if draw then
    held = string.format('%d', now + hold)
    score = held
    if weighed then
        score = string.format('%d', 4503599627370496 + now + hold)
    end
end
if ms then
    if denied then
        if block then
            call('ZREM', key, block)
        end
        call('ZADD', key, '+inf',
            'B' .. struct.pack('<dd', blocked_until, blocked_rule + 65536 * blocked_strikes))
        call('PEXPIRE', key, string.format('%d', ms))
    elseif call('ZADD', key, 'NX', score, first) == 1 then
        if block and not streak then
            call('ZREM', key, block)
        end
        if stale and has_calls then
            -- The entries, and the calls below them (sliding_log_rules.lua).
            call('ZREMRANGEBYSCORE', key, '0', string.format('%d', now - trim))
            call('ZREMRANGEBYSCORE', key, string.format('%d', trim - now), '(0')
        elseif stale then
            -- Above the calendar rules' counters (sliding_log_calendar.lua).
            call('ZREMRANGEBYSCORE', key, '(-4503599627370496',
                string.format('%d', now - trim))
        end
        if wstale then
            -- Weighted entries outside the longest window ('K' is put back below).
            call('ZREMRANGEBYSCORE', key, '4503599627370496',
                string.format('%d', 4503599627370496 + now - trim))
        end
        if periods then
            -- The counters of this check's calendar rules replace every other.
            call('ZREMRANGEBYSCORE', key, '-inf', '(-4503599627370496')
            call('ZADD', key, unpack(periods))
        end
        if has_calls then
            call('ZADD', key, '-' .. held, id .. 'c')
            for k = 2, calls_taken do
                call('ZADD', key, '-' .. held, id .. 'c' .. k)
            end
        end
        if unheld and not draw then
            call('ZREM', key, 'K')
        elseif clocked or draw then
            call('ZADD', key, 'GT', string.format('%d', 4503599627370496 + now), 'K')
        end
        if cost > 1 and not weighed then
            -- In batches, as Lua's stack bounds the arguments of one call.
            local args = {}
            local k = 2
            while k <= cost do
                local n = 0
                while k <= cost and n < 1000 do
                    args[2 * n + 1] = held
                    args[2 * n + 2] = id .. k
                    n, k = n + 1, k + 1
                end
                call('ZADD', key, unpack(args, 1, 2 * n))
            end
        end
        call('PEXPIRE', key, string.format('%d', ms))
    else
        least = least + binding_units
        if least > binding_count then
            least = binding_count
        end
    end
end
