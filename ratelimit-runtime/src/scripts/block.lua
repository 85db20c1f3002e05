
-- A consuming check refused by a rule starts a block of the key when the check asks for
-- one (block_for): every check is refused from now until `now + block_for`
-- (blocked.lua). The refusal says so: no call passes before the block ends. The write
-- keeps the key at least as long as the block, and as long as what it holds matters
-- (expiry.lua); save.lua or sliding_log_add.lua writes the block. A consuming check that
-- is refused with block_for set is such a write: the fragments after this one know it so.
if denied and consume and block_for then
    blocked_until, blocked_rule = now + block_for, denied
    if denied_retry ~= NEVER and denied_retry < block_for then
        denied_retry = block_for
    end
    if denied_reset < block_for then
        denied_reset = block_for
    end
    needed = block_for
    if block_for > reach then
        reach = block_for
    end
end
