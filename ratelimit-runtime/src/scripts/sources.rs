// The scripts' sources, each composed from the fragments it shares with the others (see
// preamble.lua for the order and what each fragment does). Included (`include!`) by
// backend/redis/script.rs and by the tests that EVAL the scripts, so both run exactly the
// same text.
//
// The string-state algorithms name themselves for state.lua in one line here: NAME, the
// bytes of a record (SIZE), and the offset in a record of a time a check is never counted
// before (LATEST: the window's start), if any.

/// The sliding log's script.
pub const SLIDING_LOG: &str = concat!(
    include_str!("preamble.lua"),
    include_str!("sliding_log.lua"),
    include_str!("bind.lua"),
    include_str!("expiry.lua"),
    include_str!("sliding_log_add.lua"),
    include_str!("reply.lua"),
);

/// The fixed window's script.
pub const FIXED_WINDOW: &str = concat!(
    include_str!("preamble.lua"),
    "local NAME, SIZE, LATEST = 'fixed_window', 32, 16\n",
    include_str!("state.lua"),
    include_str!("fixed_window.lua"),
    include_str!("bind.lua"),
    include_str!("expiry.lua"),
    include_str!("save.lua"),
    include_str!("reply.lua"),
);

/// The sliding window's script.
pub const SLIDING_WINDOW: &str = concat!(
    include_str!("preamble.lua"),
    "local NAME, SIZE, LATEST = 'sliding_window', 40, 16\n",
    include_str!("muldiv.lua"),
    include_str!("state.lua"),
    include_str!("sliding_window.lua"),
    include_str!("bind.lua"),
    include_str!("expiry.lua"),
    include_str!("save.lua"),
    include_str!("reply.lua"),
);

/// The token bucket's script.
pub const TOKEN_BUCKET: &str = concat!(
    include_str!("preamble.lua"),
    "local NAME, SIZE, LATEST = 'token_bucket', 24, nil\n",
    include_str!("state.lua"),
    include_str!("token_bucket.lua"),
    include_str!("bind.lua"),
    include_str!("expiry.lua"),
    include_str!("save.lua"),
    include_str!("reply.lua"),
);
