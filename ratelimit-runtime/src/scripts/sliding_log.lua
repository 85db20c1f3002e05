-- Sliding log: one ZSET member per admitted unit, scored by its time in µs
-- (algorithm/sliding_log.rs). An entry at s is inside a window w at now iff s > now - w.
--
-- Counted at most once: a consuming check carries an id made by the client (ARGV[2],
-- unique per check, the same in a re-sent command), and its units are the members id,
-- id .. 2, ..., id .. cost. A check whose id is already present ran before (its reply was
-- lost): it writes nothing and answers admitted, as the first run did, with the figures
-- of the log without its own entries (sliding_log_add.lua). The id is looked up only
-- where the answer depends on it: by the ZADD NX of an admitted check, and for a denial.
--
-- A block (block.lua) is one member scored +inf, whose name is 'B' then the block's end
-- and rule as struct '<dd': above every entry, so no count up to `now` includes it, and a
-- version without blocks counts it as an entry newer than any other. It is found where a
-- count finds more members than entries up to `now`.
--
-- Times reach redis.call as integer text (see preamble.lua): `stamp` is `now`'s, made
-- from TIME's own text where the script read it.
--
-- Reads `window0`, `rules`, `numbers`, `time`, `call`, `key`, `clock`, `draw`, `cost`,
-- `WEIGHED`, `consume`; sets `blocked_rule`, `blocked_until`, `now`, `lag`; defines
-- `expires`, `needed`, `reach`, `id`, `stamp`, `total`, `longest`, `stale`, `newest`,
-- `block`, `last`, `upto`, `clocked`, `unheld`, `weights`, `wstale`, `first`, `weighed`.

-- The longest window: how long the key's entries matter after a write; a write always
-- moves the expiry (expiry.lua).
local expires, needed, reach = 0, 0, window0
-- A calendar rule's window is negative (calendar.lua), and counts nothing in the log.
if reach < 0 then
    reach = 0
end
for i = 1, rules - 1 do
    local window = struct.unpack('<d', numbers, 16 * i + 33)
    if window > reach then
        reach = window
    end
end

local id = ARGV[2]
local stamp
if time then
    stamp = time[1] .. string.sub('00000', #time[2]) .. time[2]
else
    stamp = string.format('%d', now)
end
-- Never count before the newest entry (algorithm::Clamp). The entries of the longest
-- window up to `now` are counted first: when they are all the key holds (the common
-- case), no entry is newer than `now`, none is stale and there is no block, so an
-- admitted check has nothing to trim. Otherwise one more count tells whether some member
-- is above `now`: a block, or entries newer than `now` (a clock stepped back), and only
-- then is the top member read (and the one below it, under a block), and the window
-- counted again at the newest entry's time. `newest` is otherwise read only by a denial,
-- which needs it. `last` is the newest entry's rank, below a block.
--
-- A key that has had a draw holds entries after the time they were counted at (units held
-- until they may be spent, sliding_log_add.lua), and so keeps its clock apart: the member
-- 'K' scored 2^52 + the newest time a write was counted at (above every entry, below a
-- block). Its entries above `now` are then held units, counted by every rule (`upto`,
-- and the calls' range in sliding_log_rules.lua), not a clock stepped back.
-- Once no held unit is above `now` (`unheld`), the newest entry is the clock again: an
-- admitted write removes 'K'.
--
-- A draw of WEIGHED units or more (a draw may stand for millions of checks) is one
-- weighted entry, not a member per unit: the member 'W' then struct '<d' of its units then
-- its id, scored 2^52 + the time they are held until, in the band of 'K' (which every
-- draw writes, and which stays while any weighted entry does). Smaller draws keep a member
-- per unit: a weighted entry costs every check of its key a few more commands for as long
-- as it counts (a window), held units only until their hold passes. A count of a window
-- adds the units of the weighted entries inside it (`weights`, read once, those of the
-- longest window: time, units, ... ascending; nil while there are none; `band` is how
-- many members the band holds, 'K' included; `wstale` whether some are outside the
-- longest window).
local total = call('ZCARD', key)
local longest, stale, newest, block, last = 0, false, nil, nil, '-1'
local upto, clocked, unheld, weights, wstale = stamp, false, false
if total > 0 then
    longest = call('ZCOUNT', key, string.format('(%d', now - reach), stamp)
    if longest < total then
        local above = call('ZCOUNT', key, '(' .. stamp, '+inf')
        if above > 0 then
            local top = call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
            if top[2] == 'inf' then
                block, last = top[1], '-2'
                blocked_until, blocked_rule = struct.unpack('<dd', block, 2)
                total, above = total - 1, above - 1
                if above > 0 then
                    top = call('ZRANGE', key, last, last, 'WITHSCORES')
                end
            end
            if above > 0 and tonumber(top[2]) >= 4503599627370496 then
                clocked, upto = true, '(4503599627370496'
                local counted, band = tonumber(top[2]), above
                if above > 1 then
                    band = call('ZCOUNT', key, '4503599627370496', '(+inf')
                end
                if top[1] ~= 'K' then
                    counted = tonumber(call('ZSCORE', key, 'K') or top[2])
                end
                counted = counted - 4503599627370496
                total = total - band
                last = string.format('%d', -1 - band)
                if block then
                    last = string.format('%d', -2 - band)
                end
                if counted > now then
                    now = counted
                    lag = now - clock
                    stamp = string.format('%d', now)
                    longest = call('ZCOUNT', key, string.format('(%d', now - reach), upto)
                elseif above == 1 then
                    -- Nothing held above `now` (the draws' holds have passed): the window
                    -- counted above is all, and a write drops 'K' (sliding_log_add.lua), so
                    -- that the key's later checks take the common path again.
                    unheld = true
                else
                    longest = call('ZCOUNT', key, string.format('(%d', now - reach), upto)
                end
                if band > 1 then
                    -- The weighted entries of the longest window, oldest first; older
                    -- ones are stale.
                    local listed = call('ZRANGEBYSCORE', key,
                        string.format('(%d', 4503599627370496 + now - reach), '(+inf',
                        'WITHSCORES')
                    weights = {}
                    for j = 1, #listed, 2 do
                        local member = listed[j]
                        if string.byte(member) == 87 then
                            weights[#weights + 1] = tonumber(listed[j + 1]) - 4503599627370496
                            weights[#weights + 1] = struct.unpack('<d', member, 2)
                        end
                    end
                    wstale = #weights / 2 < band - 1
                end
            elseif above > 0 then
                newest = tonumber(top[2])
                now = newest
                lag = now - clock
                stamp = string.format('%d', now)
                upto = stamp
                longest = call('ZCOUNT', key, string.format('(%d', now - reach), stamp)
            end
        end
        stale = longest < total
    end
end
-- A check's or a draw's first member (its weighted entry): what tells a re-sent one.
local first, weighed = id
if draw and cost >= WEIGHED then
    first, weighed = 'W' .. struct.pack('<d', cost) .. id, true
end
-- A re-sent check whose first run was admitted is not refused by a block started since:
-- it answers as that run did (sliding_log_add.lua, sliding_log_rerun.lua).
if blocked_until and consume and call('ZSCORE', key, first) then
    blocked_until = nil
end
