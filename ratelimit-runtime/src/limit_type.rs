use std::fmt;

/// Whose budget a call is counted against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitType {
    /// Per client IP address (from `by = ...` or the [`RequestContext`](crate::RequestContext)).
    Ip,
    /// Per user id (from `by = ...` or the [`RequestContext`](crate::RequestContext)).
    UserId,
    /// One budget shared by every caller.
    Global,
    /// Per value of the attribute's `by = ...` expression.
    Custom,
}

impl LimitType {
    /// The key segment naming this type: `ip`, `user`, `global` or `custom`.
    pub const fn key_segment(self) -> &'static str {
        match self {
            LimitType::Ip => "ip",
            LimitType::UserId => "user",
            LimitType::Global => "global",
            LimitType::Custom => "custom",
        }
    }
}

impl fmt::Display for LimitType {
    /// The attribute's spelling: `IP`, `USER_ID`, `GLOBAL`, `CUSTOM`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimitType::Ip => "IP",
            LimitType::UserId => "USER_ID",
            LimitType::Global => "GLOBAL",
            LimitType::Custom => "CUSTOM",
        })
    }
}
