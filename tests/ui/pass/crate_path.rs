//! `crate = path` for a facade re-exported under another name.
#![deny(warnings)]

extern crate redis_ratelimit as renamed;

mod reexport {
    pub use redis_ratelimit::*;
}

use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("10/minute"), crate = renamed)]
async fn via_extern_crate() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("10/minute"), crate = crate::reexport)]
async fn via_module() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("10/minute"), crate = ::redis_ratelimit)]
async fn explicit_default() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {
    drop(via_extern_crate());
    drop(via_module());
    drop(explicit_default());
}
