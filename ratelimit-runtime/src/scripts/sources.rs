// The scripts' sources, each composed from the fragments it shares with the others (see
// preamble.lua). Included (`include!`) by backend/redis/script.rs and by the tests that
// EVAL the scripts, so both run exactly the same text.

/// The sliding log's script.
pub const SLIDING_LOG: &str = concat!(
    include_str!("preamble.lua"),
    include_str!("sliding_log.lua"),
    include_str!("reply.lua"),
);

/// The fixed window's script.
pub const FIXED_WINDOW: &str = concat!(
    include_str!("preamble.lua"),
    include_str!("state.lua"),
    include_str!("fixed_window.lua"),
    include_str!("reply.lua"),
);

/// The sliding window's script.
pub const SLIDING_WINDOW: &str = concat!(
    include_str!("preamble.lua"),
    include_str!("state.lua"),
    include_str!("sliding_window.lua"),
    include_str!("reply.lua"),
);

/// The token bucket's script.
pub const TOKEN_BUCKET: &str = concat!(
    include_str!("preamble.lua"),
    include_str!("state.lua"),
    include_str!("token_bucket.lua"),
    include_str!("reply.lua"),
);
