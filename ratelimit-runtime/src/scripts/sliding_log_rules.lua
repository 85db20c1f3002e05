-- For the sliding log, after sliding_log.lua and blocked.lua.
-- Before the loop over the rules (templates/sliding_log_check.lua), whose rule i
-- sliding_log_rule.lua judges. Stale entries are skipped here; only an
-- admitted check trims them (sliding_log_add.lua). No entry is newer than `now` any more,
-- so counts up to `now` (`stamp`) count every entry of a window, and never a block.
-- The longest window was counted above; a window no longer than one found empty is
-- empty too.
--
-- A rule counting calls (count negated, calls.lua) counts one member per admitted check,
-- scored minus the check's time (sliding_log_add.lua): below every entry, so that no
-- count of entries includes it. Its window at `now` holds the scores in
-- [-now, window - now), newest first.
--
-- Reads `longest`, `reach`; defines `empty`, `has_calls`.
local empty, has_calls = 0, false
if longest == 0 then
    empty = reach
end
