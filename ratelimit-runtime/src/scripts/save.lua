-- Writes the records of this check, with the key's expiry as expiry.lua moved it, or
-- keeping it (KEEPTTL), which saves Redis rewriting it. An admitted check writes its
-- rules' records alone, under NAME (ending a block that has passed); a refusal that
-- starts a block keeps what the key counted and writes the block as its last record,
-- under NAME in capitals (state.lua). The common write, of one rule whose record the
-- key holds alone under NAME, keeping the expiry, rewrites only that record's own
-- numbers (OWN) in place: SETRANGE costs Redis less than making and storing a new value.
--
-- Reads `denied`, `consume`, `block_for`, `ms`, `clock`, `state`, `NAME`, `SIZE`, `first`,
-- `blocked_until`, `blocked_rule`, `blocked_strikes`, `call`, `key`, `streak`, `HEAD`,
-- `r1`, `r2`, `r3`, `r4`, `r5`, `records`, `rules`, `c0`, `w0`, `OWN`; sets `expires`.
if denied then
    if consume and block_for then
        if ms then
            expires = clock + ms * 1000
        end
        -- The records the key holds, without the record of a block that has passed.
        local counted = ''
        if state then
            local last = #state
            if string.sub(state, 1, #NAME) ~= NAME then
                last = last - SIZE
            end
            counted = string.sub(state, first, last)
        end
        local value = struct.pack('<c' .. #NAME .. 'd', string.upper(NAME), expires) .. counted
            .. struct.pack('<ddd', 0, blocked_until, blocked_rule + 65536 * blocked_strikes)
            .. string.rep('\0', SIZE - 24)
        if ms then
            call('SET', key, value, 'PX', string.format('%d', ms))
        else
            call('SET', key, value, 'KEEPTTL')
        end
    end
elseif streak then
    -- The records under NAME in capitals, and the passed block's record kept (streak.lua).
    if ms then
        expires = clock + ms * 1000
    end
    local value = struct.pack(HEAD, string.upper(NAME), expires, r1, r2, r3, r4, r5) .. records
        .. string.sub(state, #state - SIZE + 1)
    if ms then
        call('SET', key, value, 'PX', string.format('%d', ms))
    else
        call('SET', key, value, 'KEEPTTL')
    end
elseif ms then
    expires = clock + ms * 1000
    call('SET', key, struct.pack(HEAD, NAME, expires, r1, r2, r3, r4, r5) .. records,
        'PX', string.format('%d', ms))
elseif consume then
    -- The key holds one record, this rule's (a block's record, of count 0, is no rule's):
    -- its own numbers start at byte first + 16, offset first + 15 from 0.
    if rules == 1 and #state == first - 1 + SIZE and c0 == r1 and w0 == r2 then
        call('SETRANGE', key, first + 15, struct.pack(OWN, r3, r4, r5))
    else
        call('SET', key, struct.pack(HEAD, NAME, expires, r1, r2, r3, r4, r5) .. records,
            'KEEPTTL')
    end
end
