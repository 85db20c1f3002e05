// The scripts' sources, each composed from the fragments it shares with the others (see
// preamble.lua for the order and what each fragment does). Included (`include!`) by
// backend/redis/script.rs and by the tests that EVAL the scripts, so both run exactly the
// same text.
//
// The string-state algorithms describe their value for state.lua in one line here (see
// state.lua).

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
    "local NAME, SIZE, LATEST, HEAD = 'fixed_window', 32, true, '<c12ddddd'\n",
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
    "local NAME, SIZE, LATEST, HEAD = 'sliding_window', 40, true, '<c14dddddd'\n",
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
    "local NAME, SIZE, LATEST, HEAD = 'token_bucket', 24, false, '<c12dddd'\n",
    include_str!("state.lua"),
    include_str!("token_bucket.lua"),
    include_str!("bind.lua"),
    include_str!("expiry.lua"),
    include_str!("save.lua"),
    include_str!("reply.lua"),
);
