// The scripts' sources, each composed from the fragments it shares with the others (see
// preamble.lua, and refund.lua for the refunds, for the order and what each fragment
// does). Included (`include!`) by
// backend/redis/script.rs and by the tests that EVAL the scripts, so both run exactly the
// same text.
//
// The string-state algorithms describe their value for state.lua in one line here (see
// state.lua).

// The fragments that several scripts share, composed once here (`concat!` takes only
// literals, so the shared runs are macros that expand to one).

/// A check's head: the arguments and the warnings' arguments.
macro_rules! check_head {
    () => {
        concat!(include_str!("preamble.lua"), include_str!("warn_args.lua"))
    };
}

/// What follows a rule's decision: its warning, then its binding.
macro_rules! decided {
    () => {
        concat!(include_str!("warn.lua"), include_str!("bind.lua"))
    };
}

/// A check's tail: the block, the expiry and the streak, then what stores the state, then
/// the reply.
macro_rules! check_tail {
    ($($store:expr),+) => {
        concat!(
            include_str!("block.lua"),
            include_str!("expiry.lua"),
            include_str!("streak.lua"),
            $($store,)+
            include_str!("warn_reply.lua"),
            include_str!("reply.lua"),
        )
    };
}

/// The check of a string-state algorithm (state.lua): its calendar rules, then, when none
/// decided, the algorithm's own part. `state` comes before state.lua, `blocked` after
/// blocked.lua and `calendar` before calendar.lua.
macro_rules! state_check {
    (
        $name:literal, $size:literal, $latest:literal, $head:literal, $own:literal, CAL $cal:literal,
        state [$($state:expr),*], blocked [$($blocked:expr),*], calendar [$($calendar:expr),*],
        algorithm [$($algorithm:expr),+]
    ) => {
        concat!(
            check_head!(),
            "local NAME, SIZE, LATEST, HEAD, OWN = '", $name, "', ", $size, ", ", $latest,
            ", '", $head, "', '", $own, "'\n",
            "local CAL = ", $cal, "\n",
            $($state,)*
            include_str!("state.lua"),
            include_str!("blocked.lua"),
            $($blocked,)*
            "local moment = now\n",
            include_str!("records.lua"),
            $($calendar,)*
            include_str!("calendar.lua"),
            include_str!("find.lua"),
            include_str!("calls.lua"),
            include_str!("calendar_check.lua"),
            include_str!("fixed_count.lua"),
            decided!(),
            "if not period_start then\n",
            $($algorithm,)+
            decided!(),
            "end\n",
            check_tail!(include_str!("save.lua"), include_str!("drawn.lua")),
        )
    };
}

/// The first line of a string-state algorithm's refund, settle or give-back (refund.lua).
macro_rules! refund_name {
    ($name:literal, $size:literal, $args:literal) => {
        concat!("local NAME, SIZE, ARGS = '", $name, "', ", $size, ", ", $args, "\n")
    };
}

/// Whether a refund, settle or give-back reads the time (`now`, refund.lua): the token
/// bucket's refund and settle do.
macro_rules! refund_time {
    (true) => {
        include_str!("time.lua")
    };
    (false) => {
        ""
    };
}

/// The reservation's calls found at its moment (refund.lua), `now` read as `$now` says;
/// `located` comes after them.
macro_rules! located {
    ($now:tt $(, $located:expr)*) => {
        concat!(
            include_str!("refund.lua"),
            refund_time!($now),
            include_str!("refund_rules.lua"),
            "local moment = at\n",
            include_str!("calendar.lua"),
            include_str!("find.lua"),
            include_str!("calls.lua"),
            $($located,)*
        )
    };
}

/// An algorithm's part of a refund, settle or give-back, for one rule: its record read
/// where find.lua found it (`<name>_found.lua`, which opens `if p then`), then `part`,
/// then the `end` of that `if`.
macro_rules! on_record {
    ($name:literal, $($part:expr),+) => {
        concat!(include_str!(concat!($name, "_found.lua")), $($part,)+ "    end\n")
    };
}

/// Gives calls back: to their calendar counter when a calendar rule holds them, else by
/// the algorithm's `give_back` part.
macro_rules! give_calls_back {
    ($give_back:expr) => {
        concat!(
            "if period_start then\n",
            include_str!("calendar_settle.lua"),
            "else\n",
            $give_back,
            "end\nend\nreturn given\n",
        )
    };
}

/// The sliding log's settle, refund and give-back end alike: the calendar counters of the
/// calls removed.
macro_rules! sliding_log_periods {
    ($($last:expr),*) => {
        concat!(
            include_str!("sliding_log_periods.lua"),
            include_str!("calendar.lua"),
            include_str!("sliding_log_period.lua"),
            $($last,)*
        )
    };
}

/// The sliding log's settle and give-back, which change a check's or draw's members by
/// name: `members` (sliding_log_members.lua) for `$script`, then the calendar counters.
macro_rules! sliding_log_by_name {
    ($script:literal $(, $last:expr)?) => {
        concat!(
            include_str!("sliding_log_members.lua"),
            include_str!($script),
            sliding_log_periods!($($last)?),
        )
    };
}

/// The fewest units of a sliding-log draw recorded as one weighted entry (sliding_log.lua).
macro_rules! weighed {
    () => {
        "local WEIGHED = 64\n"
    };
}

/// The sliding log's script.
pub const SLIDING_LOG: &str = concat!(
    check_head!(),
    weighed!(),
    include_str!("sliding_log.lua"),
    include_str!("blocked.lua"),
    include_str!("hold.lua"),
    "local moment, periods, period_reach = now, nil, 0\n",
    include_str!("sliding_log_rules.lua"),
    include_str!("calendar.lua"),
    include_str!("sliding_log_calendar.lua"),
    include_str!("fixed_count.lua"),
    // The end of sliding_log_calendar.lua's `if period_start`.
    "    end\n",
    decided!(),
    include_str!("sliding_log_rerun.lua"),
    // The log is trimmed to its rules' longest window (at least 1 µs, so that a check's
    // own entries, added before the trim, stay when every rule is a calendar rule); the
    // key lives as long as the calendar rules' periods too.
    "local trim = reach\nif period_reach > reach then\n    reach = period_reach\n    if trim < 1 then\n        trim = 1\n    end\nend\n",
    check_tail!(include_str!("warn_rerun.lua"), include_str!("sliding_log_add.lua")),
);

/// The fixed window's script.
pub const FIXED_WINDOW: &str = state_check! {
    "fixed_window", 32, true, "<c12ddddd", "<dd", CAL 8,
    state [], blocked [], calendar [],
    algorithm [include_str!("fixed_window.lua"), include_str!("fixed_count.lua")]
};

/// The sliding window's script.
pub const SLIDING_WINDOW: &str = state_check! {
    "sliding_window", 40, true, "<c14dddddd", "<ddd", CAL 8,
    state [include_str!("muldiv.lua")], blocked [], calendar [],
    algorithm [include_str!("sliding_window.lua")]
};

/// The token bucket's script.
pub const TOKEN_BUCKET: &str = state_check! {
    "token_bucket", 24, false, "<c12dddd", "<d", CAL 0,
    state [], blocked [include_str!("hold.lua")],
    calendar [include_str!("token_bucket_calendar.lua")],
    algorithm [include_str!("token_interval.lua"), include_str!("token_bucket.lua")]
};

/// Gives back units and calls of a string-state algorithm, `head` having read which (a
/// refund's, a give-back's): `part` for each rule.
macro_rules! gives_back {
    (
        $name:literal, $size:literal, $now:tt, CAL $cal:literal, $head:expr, $part:expr
        $(, $located:expr)?
    ) => {
        concat!(
            refund_name!($name, $size, 1),
            "local TAKE, CAL = false, ", $cal, "\n",
            $head,
            located!($now $(, $located)?),
            give_calls_back!(on_record!($name, $part)),
        )
    };
}

/// The refund of a string-state algorithm's check: its cost, and one call.
macro_rules! refund {
    ($name:literal, $size:literal, $now:tt, CAL $cal:literal $(, $located:expr)?) => {
        gives_back!(
            $name, $size, $now, CAL $cal, "local calls_taken = 1\n",
            include_str!(concat!($name, "_refund.lua")) $(, $located)?
        )
    };
}

/// The fixed window's refund.
pub const FIXED_WINDOW_REFUND: &str = refund!("fixed_window", 32, false, CAL 8);

/// The sliding window's refund.
pub const SLIDING_WINDOW_REFUND: &str = refund!("sliding_window", 40, false, CAL 8);

/// The token bucket's refund.
pub const TOKEN_BUCKET_REFUND: &str =
    refund!("token_bucket", 24, true, CAL 0, include_str!("token_interval.lua"));

// The settles: each settles a reservation, then runs the algorithm's check script above
// as a peek of cost 1, which answers (backend/redis/script.rs appends it, once per
// process).

/// The sliding log's settle: the reservation settled by name, then its calendar counters.
pub const SLIDING_LOG_SETTLE: &str = sliding_log_by_name!("sliding_log_settle.lua");

/// The sliding log's refund of a check with calendar rules (others are a ZREM).
pub const SLIDING_LOG_REFUND: &str = concat!(
    include_str!("sliding_log_calls.lua"),
    include_str!("sliding_log_refund.lua"),
    sliding_log_periods!("return removed\n")
);

/// The settle (settle.lua) of a string-state algorithm.
macro_rules! settle {
    ($name:literal, $size:literal, $now:tt, CAL $cal:literal $(, $located:expr)?) => {
        concat!(
            refund_name!($name, $size, 3),
            "local CAL = ", $cal, "\n",
            "local calls_taken = 1\n",
            include_str!("settle.lua"),
            located!($now $(, $located)?),
            "if signed < 0 then\nelseif period_start then\n",
            include_str!("calendar_settle.lua"),
            "else\n",
            on_record!(
                $name,
                "if TAKE then\n",
                include_str!(concat!($name, "_take.lua")),
                "else\n",
                include_str!(concat!($name, "_refund.lua")),
                "end\n"
            ),
            "end\nend\nend\nsettle()\n",
        )
    };
}

/// The fixed window's settle (settle.lua).
pub const FIXED_WINDOW_SETTLE: &str = settle!("fixed_window", 32, false, CAL 8);

/// The sliding window's settle (settle.lua).
pub const SLIDING_WINDOW_SETTLE: &str = settle!("sliding_window", 40, false, CAL 8);

/// The token bucket's settle (settle.lua).
pub const TOKEN_BUCKET_SETTLE: &str =
    settle!("token_bucket", 24, true, CAL 0, include_str!("token_interval.lua"));

/// Gives back a draw of the sliding log (backend::GiveBack).
pub const SLIDING_LOG_GIVE_BACK: &str = concat!(
    weighed!(),
    include_str!("sliding_log_calls.lua"),
    sliding_log_by_name!("sliding_log_give_back.lua", "return removed\n")
);

/// Gives back a draw of a string-state algorithm, once (give_back.lua).
macro_rules! give_back {
    ($name:literal, $size:literal, CAL $cal:literal, $give_back:expr $(, $located:expr)?) => {
        gives_back!(
            $name, $size, false, CAL $cal, include_str!("give_back.lua"), $give_back
            $(, $located)?
        )
    };
}

/// Gives back a draw of the fixed window, once.
pub const FIXED_WINDOW_GIVE_BACK: &str =
    give_back!("fixed_window", 32, CAL 8, include_str!("fixed_window_refund.lua"));

/// Gives back a draw of the sliding window, once.
pub const SLIDING_WINDOW_GIVE_BACK: &str =
    give_back!("sliding_window", 40, CAL 8, include_str!("sliding_window_refund.lua"));

/// Gives back a draw of the token bucket, once.
pub const TOKEN_BUCKET_GIVE_BACK: &str = give_back!(
    "token_bucket",
    24,
    CAL 0,
    include_str!("token_bucket_give_back.lua"),
    include_str!("token_interval.lua")
);

// Calls in flight (slot.rs): a check's script that also takes a slot is
// `local function check()`, then the check's script above, then `SLOT`, which closes the
// function and calls it only when a slot is free; a slot taken without rules is
// `local check` then `SLOT`. Composed once per process (backend/redis/script.rs), so that
// every check script above is used as it is.

/// The slot's part of a check that takes one (see slot.lua).
#[allow(dead_code)] // the tests that EVAL the check scripts do not use it
pub const SLOT: &str =
    concat!(include_str!("slot.lua"), include_str!("time.lua"), include_str!("slot_take.lua"));

/// A slot's renewal.
#[allow(dead_code)] // the tests that EVAL the check scripts do not use it
pub const SLOT_RENEW: &str = concat!(
    include_str!("slot_renew.lua"),
    include_str!("time.lua"),
    include_str!("slot_renew_lease.lua"),
);

/// How many slots of a key are held.
#[allow(dead_code)] // the tests that EVAL the check scripts do not use it
pub const SLOTS_IN_USE: &str = include_str!("slots_in_use.lua");

/// `Limiter::block`'s script (backend/redis/block.rs).
#[allow(dead_code)] // the tests that EVAL the check scripts do not use it
pub const BLOCK_KEY: &str = concat!(
    include_str!("block_key.lua"),
    include_str!("time.lua"),
    include_str!("block_key_write.lua"),
);

/// The driver of a list of checks as one script (`Limiter::check_all`), after each
/// algorithm's check script as a function (backend/redis/script/all.rs composes it).
#[allow(dead_code)] // the tests that EVAL the check scripts do not use it
pub const CHECK_ALL: &str = include_str!("check_all.lua");
