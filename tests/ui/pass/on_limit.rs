//! `on_limit` gives what a refused call returns: required for non-`Result` returns, allowed
//! for `Result`s.
#![deny(warnings)]

use redis_ratelimit::{rate_limiter, RateLimitError};

fn assert_send<T: Send>(_: T) {}

fn busy(err: RateLimitError) -> String {
    format!("busy: {err}")
}

fn ignore(_: RateLimitError) {}

fn fallback<T: Default>(_: RateLimitError) -> T {
    T::default()
}

mod responses {
    pub fn too_many(err: redis_ratelimit::RateLimitError) -> (u16, String) {
        (429, err.to_string())
    }
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL, on_limit = busy)]
async fn greet(name: &str) -> String {
    format!("hello {name}")
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL, on_limit = ignore)]
async fn unit() {}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL, on_limit = ignore)]
async fn explicit_unit() -> () {}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL, on_limit = fallback::<u32>)]
async fn generic_handler() -> u32 {
    1
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL, on_limit = fallback)]
async fn inferred_handler() -> Option<u32> {
    Some(1)
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL, on_limit = responses::too_many)]
async fn handler() -> (u16, String) {
    (200, "ok".to_owned())
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL, on_limit = to_string_error)]
async fn result_with_on_limit() -> Result<u8, String> {
    Ok(1)
}

fn to_string_error(err: RateLimitError) -> Result<u8, String> {
    Err(err.to_string())
}

fn main() {
    assert_send(greet("ann"));
    assert_send(unit());
    assert_send(explicit_unit());
    assert_send(generic_handler());
    assert_send(inferred_handler());
    assert_send(handler());
    assert_send(result_with_on_limit());
}
