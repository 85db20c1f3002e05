// The scripts' sources, each composed at compile time from the fragments it shares with
// the others. Every fragment (`<name>.lua`) is a whole chunk: it parses alone, and says
// what it reads and defines. Where a script's structure (a loop over the rules, an `if`
// around a rule's part) spans fragments, it lives in a template (`templates/<name>.lua`),
// itself a whole chunk, whose lines `--@ name` are replaced by the fragment `name.lua`, or
// by a part named so here (see `compose!`). preamble.lua lists the check's fragments in
// their order, refund.lua the refund's. Included (`include!`) by
// backend/redis/script/mod.rs and by the tests that EVAL the scripts, so both run exactly
// the same text.

/// The const fns of `compose!`: a template's text with each marker line (spaces, `--@ `,
/// a name, its end) replaced by the text of the part of that name. A marker naming no part,
/// or a part no marker names, stops the build.
mod compose {
    /// The marker on the line at `start`, if it is one: where its name starts and ends, and
    /// where the line ends (past its newline).
    const fn marker(t: &[u8], start: usize) -> Option<(usize, usize, usize)> {
        let mut i = start;
        while i < t.len() && t[i] == b' ' {
            i += 1;
        }
        if i + 4 > t.len() || t[i] != b'-' || t[i + 1] != b'-' || t[i + 2] != b'@' {
            return None;
        }
        if t[i + 3] != b' ' {
            return None;
        }
        let line_end = line_end(t, start);
        let mut to = line_end;
        while to > i + 4 && (t[to - 1] == b'\n' || t[to - 1] == b' ') {
            to -= 1;
        }
        Some((i + 4, to, line_end))
    }

    /// Where the line at `start` ends, past its newline.
    const fn line_end(t: &[u8], start: usize) -> usize {
        let mut i = start;
        while i < t.len() && t[i] != b'\n' {
            i += 1;
        }
        if i < t.len() {
            i + 1
        } else {
            i
        }
    }

    /// The index in `parts` of the part named `t[from..to]`.
    const fn part(t: &[u8], from: usize, to: usize, parts: &[(&str, &str)]) -> usize {
        let mut k = 0;
        while k < parts.len() {
            let name = parts[k].0.as_bytes();
            if name.len() == to - from {
                let mut j = 0;
                while j < name.len() && name[j] == t[from + j] {
                    j += 1;
                }
                if j == name.len() {
                    return k;
                }
            }
            k += 1;
        }
        panic!("a template's marker names no part");
    }

    /// The template's lines in turn, each as its part (`Some`) or as it is: calls `f` on
    /// each piece's text. Written once for `len` and `bytes` as a macro, as const fns take
    /// no closures.
    macro_rules! each_piece {
        ($template:expr, $parts:expr, |$piece:ident| $body:block) => {{
            let t = $template.as_bytes();
            assert!($parts.len() <= 64, "at most 64 parts");
            let mut used = 0u64;
            let mut start = 0;
            while start < t.len() {
                let end;
                let $piece: &[u8] = match marker(t, start) {
                    Some((from, to, line_end)) => {
                        let k = part(t, from, to, $parts);
                        used |= 1 << k;
                        end = line_end;
                        $parts[k].1.as_bytes()
                    }
                    None => {
                        end = line_end(t, start);
                        t.split_at(end).0.split_at(start).1
                    }
                };
                $body
                start = end;
            }
            if !$parts.is_empty() && used != u64::MAX >> (64 - $parts.len()) {
                panic!("a part no marker of its template names");
            }
        }};
    }

    /// The composed text's length.
    pub const fn len(template: &str, parts: &[(&str, &str)]) -> usize {
        let mut len = 0;
        each_piece!(template, parts, |piece| {
            len += piece.len();
        });
        len
    }

    /// The composed text, `N` its [`len`].
    pub const fn bytes<const N: usize>(template: &str, parts: &[(&str, &str)]) -> [u8; N] {
        let mut out = [0; N];
        let mut at = 0;
        each_piece!(template, parts, |piece| {
            let (_, rest) = out.split_at_mut(at);
            rest.split_at_mut(piece.len()).0.copy_from_slice(piece);
            at += piece.len();
        });
        out
    }

    /// `bytes` as text: whole lines of UTF-8 texts, so UTF-8 too.
    pub const fn text(bytes: &'static [u8]) -> &'static str {
        match core::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => panic!("a composed script is not UTF-8"),
        }
    }
}

/// The template `templates/<template>.lua` composed: each marker of a fragment named in
/// `[...]` replaced by that fragment (`<fragment>.lua`), each of a part `name => text` by
/// its text.
macro_rules! compose {
    ($template:literal, [$($fragment:ident),* $(,)?] $(, $name:literal => $part:expr)* $(,)?) => {{
        const TEMPLATE: &str = include_str!(concat!("templates/", $template, ".lua"));
        const PARTS: &[(&str, &str)] = &[
            $((stringify!($fragment), include_str!(concat!(stringify!($fragment), ".lua"))),)*
            $(($name, $part),)*
        ];
        const LEN: usize = compose::len(TEMPLATE, PARTS);
        const BYTES: [u8; LEN] = compose::bytes(TEMPLATE, PARTS);
        compose::text(&BYTES)
    }};
}

/// The check of a string-state algorithm (templates/state_check.lua), with the parts that
/// template names.
macro_rules! state_check {
    (
        $name:literal, $size:literal, $latest:literal, $head:literal, $own:literal, CAL $cal:literal,
        $arithmetic:expr, $draw_hold:expr, $moment:expr, $algorithm:expr
    ) => {
        compose!(
            "state_check",
            [
                preamble, warn_args, state, blocked, records, rule_numbers, calendar, find, calls,
                calendar_check, fixed_count, warn, bind, block, expiry, streak, save, drawn,
                warn_reply, reply,
            ],
            "names" => concat!(
                "local NAME, SIZE, LATEST, HEAD, OWN = '", $name, "', ", $size, ", ", $latest,
                ", '", $head, "', '", $own, "'\n",
                "local CAL = ", $cal, "\n",
            ),
            "arithmetic" => $arithmetic,
            "draw_hold" => $draw_hold,
            "moment" => $moment,
            "algorithm" => $algorithm,
        )
    };
}

/// The sliding log's script.
pub const SLIDING_LOG: &str = compose!(
    "sliding_log_check",
    [
        preamble, warn_args, weighed, sliding_log, blocked, hold, sliding_log_rules, rule_numbers,
        sliding_log_rule, calendar, sliding_log_calendar, fixed_count, warn, bind,
        sliding_log_rerun, block, expiry, streak, warn_rerun, sliding_log_add, warn_reply, reply,
    ],
);

/// The fixed window's script.
pub const FIXED_WINDOW: &str = state_check!(
    "fixed_window", 32, true, "<c12ddddd", "<dd", CAL 8, "", "", "",
    concat!(include_str!("fixed_window.lua"), include_str!("fixed_count.lua"))
);

/// The sliding window's script.
pub const SLIDING_WINDOW: &str = state_check!(
    "sliding_window", 40, true, "<c14dddddd", "<ddd", CAL 8, include_str!("muldiv.lua"), "", "",
    include_str!("sliding_window.lua")
);

/// The token bucket's script.
pub const TOKEN_BUCKET: &str = state_check!(
    "token_bucket", 24, false, "<c12dddd", "<d", CAL 0, "", include_str!("hold.lua"),
    include_str!("token_bucket_calendar.lua"),
    concat!(include_str!("token_interval.lua"), include_str!("token_bucket.lua"))
);

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

/// Gives back units and calls of a string-state algorithm (templates/state_gives_back.lua),
/// `head` having read which (a refund's, a give-back's): `part` for each rule's record.
macro_rules! gives_back {
    (
        $name:literal, $size:literal, $now:tt, CAL $cal:literal, $head:expr, $part:expr,
        $located:expr
    ) => {
        compose!(
            "state_gives_back",
            [refund, calendar, find, calls, calendar_settle],
            "names" => concat!(
                "local NAME, SIZE, ARGS = '", $name, "', ", $size, ", 1\n",
                "local TAKE, CAL = false, ", $cal, "\n",
            ),
            "head" => $head,
            "now" => refund_time!($now),
            "located" => $located,
            "found" => include_str!(concat!($name, "_found.lua")),
            "part" => $part,
        )
    };
}

/// The refund of a string-state algorithm's check: its cost, and one call.
macro_rules! refund {
    ($name:literal, $size:literal, $now:tt, CAL $cal:literal, $located:expr) => {
        gives_back!(
            $name, $size, $now, CAL $cal, "local calls_taken = 1\n",
            include_str!(concat!($name, "_refund.lua")), $located
        )
    };
}

/// The fixed window's refund.
pub const FIXED_WINDOW_REFUND: &str = refund!("fixed_window", 32, false, CAL 8, "");

/// The sliding window's refund.
pub const SLIDING_WINDOW_REFUND: &str = refund!("sliding_window", 40, false, CAL 8, "");

/// The token bucket's refund.
pub const TOKEN_BUCKET_REFUND: &str =
    refund!("token_bucket", 24, true, CAL 0, include_str!("token_interval.lua"));

/// The sliding log's calendar counters after a settle, a refund or a give-back.
const SLIDING_LOG_PERIODS: &str =
    compose!("sliding_log_periods", [calendar, sliding_log_period]);

// The settles: each settles a reservation, then runs the algorithm's check script above
// as a peek of cost 1, which answers.

/// The sliding log's settle: the reservation settled by name, then its calendar counters,
/// then the check.
pub const SLIDING_LOG_SETTLE: &str = compose!(
    "sliding_log_settle",
    [sliding_log_members, sliding_log_settle],
    "periods" => SLIDING_LOG_PERIODS,
    "check" => SLIDING_LOG,
);

/// The sliding log's refund of a check with calendar rules (others are a ZREM).
pub const SLIDING_LOG_REFUND: &str = compose!(
    "sliding_log_refund",
    [sliding_log_calls, sliding_log_refund],
    "periods" => SLIDING_LOG_PERIODS,
);

/// The settle (templates/state_settle.lua) of a string-state algorithm, then its `check`.
macro_rules! settle {
    (
        $name:literal, $size:literal, $now:tt, CAL $cal:literal, $located:expr, $check:expr
    ) => {
        compose!(
            "state_settle",
            [settle, refund, calendar, find, calls, calendar_settle],
            "names" => concat!(
                "local NAME, SIZE, ARGS = '", $name, "', ", $size, ", 3\n",
                "local CAL = ", $cal, "\n",
                "local calls_taken = 1\n",
            ),
            "now" => refund_time!($now),
            "located" => $located,
            "found" => include_str!(concat!($name, "_found.lua")),
            "take" => include_str!(concat!($name, "_take.lua")),
            "give" => include_str!(concat!($name, "_refund.lua")),
            "check" => $check,
        )
    };
}

/// The fixed window's settle.
pub const FIXED_WINDOW_SETTLE: &str = settle!("fixed_window", 32, false, CAL 8, "", FIXED_WINDOW);

/// The sliding window's settle.
pub const SLIDING_WINDOW_SETTLE: &str =
    settle!("sliding_window", 40, false, CAL 8, "", SLIDING_WINDOW);

/// The token bucket's settle.
pub const TOKEN_BUCKET_SETTLE: &str = settle!(
    "token_bucket", 24, true, CAL 0, include_str!("token_interval.lua"), TOKEN_BUCKET
);

/// Gives back a draw of the sliding log (backend::GiveBack).
pub const SLIDING_LOG_GIVE_BACK: &str = compose!(
    "sliding_log_give_back",
    [weighed, sliding_log_calls, sliding_log_members, sliding_log_give_back],
    "periods" => SLIDING_LOG_PERIODS,
);

/// Gives back a draw of a string-state algorithm, once (give_back.lua).
macro_rules! give_back {
    ($name:literal, $size:literal, CAL $cal:literal, $give_back:expr, $located:expr) => {
        gives_back!(
            $name, $size, false, CAL $cal, include_str!("give_back.lua"), $give_back, $located
        )
    };
}

/// Gives back a draw of the fixed window, once.
pub const FIXED_WINDOW_GIVE_BACK: &str =
    give_back!("fixed_window", 32, CAL 8, include_str!("fixed_window_refund.lua"), "");

/// Gives back a draw of the sliding window, once.
pub const SLIDING_WINDOW_GIVE_BACK: &str =
    give_back!("sliding_window", 40, CAL 8, include_str!("sliding_window_refund.lua"), "");

/// Gives back a draw of the token bucket, once.
pub const TOKEN_BUCKET_GIVE_BACK: &str = give_back!(
    "token_bucket",
    24,
    CAL 0,
    include_str!("token_bucket_give_back.lua"),
    include_str!("token_interval.lua")
);

// Calls in flight (slot.rs): a check that also takes a slot is its algorithm's check
// script as a function, called when a slot is free (templates/slot_check.lua); a slot
// taken without rules has no check (templates/slot_alone.lua).

/// A check that takes a slot: the template slot_check.lua around `check`.
macro_rules! taking_slot {
    ($check:expr) => {
        compose!("slot_check", [slot, time, slot_take], "check" => $check)
    };
}

/// The sliding log's check that takes a slot.
pub const SLIDING_LOG_SLOT: &str = taking_slot!(SLIDING_LOG);

/// The fixed window's check that takes a slot.
pub const FIXED_WINDOW_SLOT: &str = taking_slot!(FIXED_WINDOW);

/// The sliding window's check that takes a slot.
pub const SLIDING_WINDOW_SLOT: &str = taking_slot!(SLIDING_WINDOW);

/// The token bucket's check that takes a slot.
pub const TOKEN_BUCKET_SLOT: &str = taking_slot!(TOKEN_BUCKET);

/// A slot taken without rules.
pub const SLOT_ALONE: &str = compose!("slot_alone", [slot, time, slot_take]);

/// A slot's renewal.
pub const SLOT_RENEW: &str = concat!(
    include_str!("slot_renew.lua"),
    include_str!("time.lua"),
    include_str!("slot_renew_lease.lua"),
);

/// How many slots of a key are held.
pub const SLOTS_IN_USE: &str = include_str!("slots_in_use.lua");

/// `Limiter::block`'s script (backend/redis/block.rs).
pub const BLOCK_KEY: &str = concat!(
    include_str!("block_key.lua"),
    include_str!("time.lua"),
    include_str!("block_key_write.lua"),
);

/// The driver of a list of checks as one script (`Limiter::check_all`), after each
/// algorithm's check script as a function (backend/redis/script/all.rs composes it).
pub const CHECK_ALL: &str = include_str!("check_all.lua");
