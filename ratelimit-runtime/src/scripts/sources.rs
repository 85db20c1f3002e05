// The scripts' sources, each composed from the fragments it shares with the others (see
// preamble.lua, and refund.lua for the refunds, for the order and what each fragment
// does). Included (`include!`) by
// backend/redis/script.rs and by the tests that EVAL the scripts, so both run exactly the
// same text.
//
// The string-state algorithms describe their value for state.lua in one line here (see
// state.lua).

/// The sliding log's script.
pub const SLIDING_LOG: &str = concat!(
    include_str!("preamble.lua"),
    include_str!("warn_args.lua"),
    include_str!("sliding_log.lua"),
    include_str!("blocked.lua"),
    include_str!("hold.lua"),
    "local moment, periods, period_reach = now, nil, 0\n",
    include_str!("sliding_log_rules.lua"),
    include_str!("calendar.lua"),
    include_str!("sliding_log_calendar.lua"),
    include_str!("warn.lua"),
    include_str!("bind.lua"),
    include_str!("sliding_log_rerun.lua"),
    // The log is trimmed to its rules' longest window (at least 1 µs, so that a check's
    // own entries, added before the trim, stay when every rule is a calendar rule); the
    // key lives as long as the calendar rules' periods too.
    "local trim = reach\nif period_reach > reach then\n    reach = period_reach\n    if trim < 1 then\n        trim = 1\n    end\nend\n",
    include_str!("block.lua"),
    include_str!("expiry.lua"),
    include_str!("streak.lua"),
    include_str!("warn_rerun.lua"),
    include_str!("sliding_log_add.lua"),
    include_str!("warn_reply.lua"),
    include_str!("reply.lua"),
);

/// The fixed window's script.
pub const FIXED_WINDOW: &str = concat!(
    include_str!("preamble.lua"),
    include_str!("warn_args.lua"),
    "local NAME, SIZE, LATEST, HEAD, OWN = 'fixed_window', 32, true, '<c12ddddd', '<dd'\n",
    "local CAL = 8\n",
    include_str!("state.lua"),
    include_str!("blocked.lua"),
    "local moment = now\n",
    include_str!("records.lua"),
    include_str!("calendar.lua"),
    include_str!("find.lua"),
    include_str!("calls.lua"),
    include_str!("calendar_check.lua"),
    include_str!("warn.lua"),
    include_str!("bind.lua"),
    "if not period_start then\n",
    include_str!("fixed_window.lua"),
    include_str!("warn.lua"),
    include_str!("bind.lua"),
    "end\n",
    include_str!("block.lua"),
    include_str!("expiry.lua"),
    include_str!("streak.lua"),
    include_str!("save.lua"),
    include_str!("warn_reply.lua"),
    include_str!("reply.lua"),
);

/// The sliding window's script.
pub const SLIDING_WINDOW: &str = concat!(
    include_str!("preamble.lua"),
    include_str!("warn_args.lua"),
    "local NAME, SIZE, LATEST, HEAD, OWN = 'sliding_window', 40, true, '<c14dddddd', '<ddd'\n",
    "local CAL = 8\n",
    include_str!("muldiv.lua"),
    include_str!("state.lua"),
    include_str!("blocked.lua"),
    "local moment = now\n",
    include_str!("records.lua"),
    include_str!("calendar.lua"),
    include_str!("find.lua"),
    include_str!("calls.lua"),
    include_str!("calendar_check.lua"),
    include_str!("warn.lua"),
    include_str!("bind.lua"),
    "if not period_start then\n",
    include_str!("sliding_window.lua"),
    include_str!("warn.lua"),
    include_str!("bind.lua"),
    "end\n",
    include_str!("block.lua"),
    include_str!("expiry.lua"),
    include_str!("streak.lua"),
    include_str!("save.lua"),
    include_str!("warn_reply.lua"),
    include_str!("reply.lua"),
);

/// The token bucket's script.
pub const TOKEN_BUCKET: &str = concat!(
    include_str!("preamble.lua"),
    include_str!("warn_args.lua"),
    "local NAME, SIZE, LATEST, HEAD, OWN = 'token_bucket', 24, false, '<c12dddd', '<d'\n",
    "local CAL = 0\n",
    include_str!("state.lua"),
    include_str!("blocked.lua"),
    include_str!("hold.lua"),
    "local moment = now\n",
    include_str!("records.lua"),
    include_str!("token_bucket_calendar.lua"),
    include_str!("calendar.lua"),
    include_str!("find.lua"),
    include_str!("calls.lua"),
    include_str!("calendar_check.lua"),
    include_str!("warn.lua"),
    include_str!("bind.lua"),
    "if not period_start then\n",
    include_str!("token_interval.lua"),
    include_str!("token_bucket.lua"),
    include_str!("warn.lua"),
    include_str!("bind.lua"),
    "end\n",
    include_str!("block.lua"),
    include_str!("expiry.lua"),
    include_str!("streak.lua"),
    include_str!("save.lua"),
    include_str!("warn_reply.lua"),
    include_str!("reply.lua"),
);

/// The fixed window's refund.
pub const FIXED_WINDOW_REFUND: &str = concat!(
    "local NAME, SIZE, NOW, ARGS = 'fixed_window', 32, false, 1\n",
    "local calls_taken = 1\n",
    "local TAKE, CAL = false, 8\n",
    include_str!("refund.lua"),
    "local moment = at\n",
    include_str!("calendar.lua"),
    include_str!("find.lua"),
    include_str!("calls.lua"),
    "if period_start then\n",
    include_str!("calendar_settle.lua"),
    "else\n",
    include_str!("fixed_window_refund.lua"),
    "end\nend\nreturn given\n",
);

/// The sliding window's refund.
pub const SLIDING_WINDOW_REFUND: &str = concat!(
    "local NAME, SIZE, NOW, ARGS = 'sliding_window', 40, false, 1\n",
    "local calls_taken = 1\n",
    "local TAKE, CAL = false, 8\n",
    include_str!("refund.lua"),
    "local moment = at\n",
    include_str!("calendar.lua"),
    include_str!("find.lua"),
    include_str!("calls.lua"),
    "if period_start then\n",
    include_str!("calendar_settle.lua"),
    "else\n",
    include_str!("sliding_window_refund.lua"),
    "end\nend\nreturn given\n",
);

/// The token bucket's refund.
pub const TOKEN_BUCKET_REFUND: &str = concat!(
    "local NAME, SIZE, NOW, ARGS = 'token_bucket', 24, true, 1\n",
    "local calls_taken = 1\n",
    "local TAKE, CAL = false, 0\n",
    include_str!("refund.lua"),
    "local moment = at\n",
    include_str!("calendar.lua"),
    include_str!("find.lua"),
    include_str!("calls.lua"),
    include_str!("token_interval.lua"),
    "if period_start then\n",
    include_str!("calendar_settle.lua"),
    "else\n",
    include_str!("token_bucket_refund.lua"),
    "end\nend\nreturn given\n",
);

// The settles: each settles a reservation, then runs the algorithm's check script above
// as a peek of cost 1, which answers (backend/redis/script.rs appends it, once per
// process).

/// The sliding log's settle: the reservation settled by name, then its calendar counters.
pub const SLIDING_LOG_SETTLE: &str = concat!(
    include_str!("sliding_log_settle.lua"),
    include_str!("sliding_log_periods.lua"),
    include_str!("calendar.lua"),
    include_str!("sliding_log_period.lua"),
);

/// The sliding log's refund of a check with calendar rules (others are a ZREM).
pub const SLIDING_LOG_REFUND: &str = concat!(
    include_str!("sliding_log_refund.lua"),
    include_str!("sliding_log_periods.lua"),
    include_str!("calendar.lua"),
    include_str!("sliding_log_period.lua"),
    "return removed\n",
);

/// The fixed window's settle (settle.lua).
pub const FIXED_WINDOW_SETTLE: &str = concat!(
    "local NAME, SIZE, NOW, ARGS = 'fixed_window', 32, false, 3\n",
    "local CAL = 8\n",
    "local calls_taken = 1\n",
    include_str!("settle.lua"),
    include_str!("refund.lua"),
    "local moment = at\n",
    include_str!("calendar.lua"),
    include_str!("find.lua"),
    include_str!("calls.lua"),
    "if signed < 0 then\nelseif period_start then\n",
    include_str!("calendar_settle.lua"),
    "elseif TAKE then\n",
    include_str!("fixed_window_take.lua"),
    "else\n",
    include_str!("fixed_window_refund.lua"),
    "end\nend\nend\nsettle()\n",
);

/// The sliding window's settle (settle.lua).
pub const SLIDING_WINDOW_SETTLE: &str = concat!(
    "local NAME, SIZE, NOW, ARGS = 'sliding_window', 40, false, 3\n",
    "local CAL = 8\n",
    "local calls_taken = 1\n",
    include_str!("settle.lua"),
    include_str!("refund.lua"),
    "local moment = at\n",
    include_str!("calendar.lua"),
    include_str!("find.lua"),
    include_str!("calls.lua"),
    "if signed < 0 then\nelseif period_start then\n",
    include_str!("calendar_settle.lua"),
    "elseif TAKE then\n",
    include_str!("sliding_window_take.lua"),
    "else\n",
    include_str!("sliding_window_refund.lua"),
    "end\nend\nend\nsettle()\n",
);

/// The token bucket's settle (settle.lua).
pub const TOKEN_BUCKET_SETTLE: &str = concat!(
    "local NAME, SIZE, NOW, ARGS = 'token_bucket', 24, true, 3\n",
    "local CAL = 0\n",
    "local calls_taken = 1\n",
    include_str!("settle.lua"),
    include_str!("refund.lua"),
    "local moment = at\n",
    include_str!("calendar.lua"),
    include_str!("find.lua"),
    include_str!("calls.lua"),
    include_str!("token_interval.lua"),
    "if signed < 0 then\nelseif period_start then\n",
    include_str!("calendar_settle.lua"),
    "elseif TAKE then\n",
    include_str!("token_bucket_take.lua"),
    "else\n",
    include_str!("token_bucket_refund.lua"),
    "end\nend\nend\nsettle()\n",
);

/// Gives back a draw of the sliding log (backend::GiveBack).
pub const SLIDING_LOG_GIVE_BACK: &str = concat!(
    include_str!("sliding_log_give_back.lua"),
    include_str!("sliding_log_periods.lua"),
    include_str!("calendar.lua"),
    include_str!("sliding_log_period.lua"),
    "return removed\n",
);

/// Gives back a draw of the fixed window, once.
pub const FIXED_WINDOW_GIVE_BACK: &str = concat!(
    "local NAME, SIZE, NOW, ARGS = 'fixed_window', 32, false, 1\n",
    "local TAKE, CAL = false, 8\n",
    include_str!("give_back.lua"),
    include_str!("refund.lua"),
    "local moment = at\n",
    include_str!("calendar.lua"),
    include_str!("find.lua"),
    include_str!("calls.lua"),
    "if period_start then\n",
    include_str!("calendar_settle.lua"),
    "else\n",
    include_str!("fixed_window_refund.lua"),
    "end\nend\nreturn given\n",
);

/// Gives back a draw of the sliding window, once.
pub const SLIDING_WINDOW_GIVE_BACK: &str = concat!(
    "local NAME, SIZE, NOW, ARGS = 'sliding_window', 40, false, 1\n",
    "local TAKE, CAL = false, 8\n",
    include_str!("give_back.lua"),
    include_str!("refund.lua"),
    "local moment = at\n",
    include_str!("calendar.lua"),
    include_str!("find.lua"),
    include_str!("calls.lua"),
    "if period_start then\n",
    include_str!("calendar_settle.lua"),
    "else\n",
    include_str!("sliding_window_refund.lua"),
    "end\nend\nreturn given\n",
);

/// Gives back a draw of the token bucket, once.
pub const TOKEN_BUCKET_GIVE_BACK: &str = concat!(
    "local NAME, SIZE, NOW, ARGS = 'token_bucket', 24, false, 1\n",
    "local TAKE, CAL = false, 0\n",
    include_str!("give_back.lua"),
    include_str!("refund.lua"),
    "local moment = at\n",
    include_str!("calendar.lua"),
    include_str!("find.lua"),
    include_str!("calls.lua"),
    include_str!("token_interval.lua"),
    "if period_start then\n",
    include_str!("calendar_settle.lua"),
    "else\n",
    include_str!("token_bucket_give_back.lua"),
    "end\nend\nreturn given\n",
);

// Calls in flight (slot.rs): a check's script that also takes a slot is
// `local function check()`, then the check's script above, then `SLOT`, which closes the
// function and calls it only when a slot is free; a slot taken without rules is
// `local check` then `SLOT`. Composed once per process (backend/redis/script.rs), so that
// every check script above is used as it is.

/// The slot's part of a check that takes one (see slot.lua).
#[allow(dead_code)] // the tests that EVAL the check scripts do not use it
pub const SLOT: &str = include_str!("slot.lua");

/// A slot's renewal.
#[allow(dead_code)] // the tests that EVAL the check scripts do not use it
pub const SLOT_RENEW: &str = include_str!("slot_renew.lua");

/// How many slots of a key are held.
#[allow(dead_code)] // the tests that EVAL the check scripts do not use it
pub const SLOTS_IN_USE: &str = include_str!("slots_in_use.lua");
