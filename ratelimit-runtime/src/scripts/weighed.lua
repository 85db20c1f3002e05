-- The fewest units of a sliding-log draw recorded as one weighted entry (sliding_log.lua,
-- sliding_log_give_back.lua).
--
-- Defines `WEIGHED`.
local WEIGHED = 64
