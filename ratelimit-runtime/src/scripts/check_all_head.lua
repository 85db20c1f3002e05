-- The head of a list's script (Limiter::check_all; backend/redis/script/all.rs composes
-- it, then each check function, then check_all.lua): the list's own state, which the
-- check functions and check_all.lua share. Reads nothing.
--
-- list_time      the TIME reply the list is counted at: read by the first check that
--                reads the time, then used by the others (nil until then).
-- admitted       whether every check judged so far is admitted.
-- failed         the error a check answered (another algorithm's key), if any.
-- reached        the index of the check check_all.lua's `judge_from` judges now.
-- write_all      once every check is judged: whether each writes what it counts.
-- write_refused  once every check is judged: whether a refused check writes the
--                lock-out it starts (not when a check failed: then nothing is written).
-- judge_from     check_all.lua's function judging the checks from an index on.
--
-- Defines `list_time`, `admitted`, `failed`, `reached`, `write_all`, `write_refused`,
-- `judge_from`.
local list_time, failed, reached, write_all, write_refused, judge_from
local admitted = true
