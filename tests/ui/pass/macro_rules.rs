//! `#[rate_limiter]` in a `macro_rules!` macro of the user's: the return type and
//! `on_limit` may come from the macro's fragments, whose hygiene is the macro's.
#![deny(warnings)]

use redis_ratelimit::{rate_limiter, RateLimitError};

macro_rules! guarded {
    ($name:ident -> $ret:ty) => {
        #[rate_limiter(rules("10/minute"), limit_type = GLOBAL)]
        async fn $name() -> $ret {
            Ok(())
        }
    };
    ($name:ident -> $ret:ty, on_limit = $on_limit:path) => {
        #[rate_limiter(rules("10/minute"), limit_type = GLOBAL, on_limit = $on_limit)]
        async fn $name() -> $ret {
            "done"
        }
    };
}

fn busy(_: RateLimitError) -> &'static str {
    "busy"
}

guarded!(result -> Result<(), RateLimitError>);
guarded!(boxed -> Result<(), Box<dyn std::error::Error + Send + Sync>>);
guarded!(text -> &'static str, on_limit = busy);

fn main() {
    drop(result());
    drop(boxed());
    drop(text());
}
