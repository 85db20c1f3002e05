//! Any error type with `From<RateLimitError>` receives a refused call's error.
#![deny(warnings)]

use std::error::Error;
use std::fmt;

use redis_ratelimit::{rate_limiter, RateLimitError};

fn assert_send<T: Send>(_: T) {}

#[derive(Debug)]
pub enum ApiError {
    RateLimited(RateLimitError),
    NotFound,
}

impl From<RateLimitError> for ApiError {
    fn from(err: RateLimitError) -> Self {
        ApiError::RateLimited(err)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::RateLimited(err) => err.fmt(f),
            ApiError::NotFound => f.write_str("not found"),
        }
    }
}

impl Error for ApiError {}

/// An alias is taken for a `Result` when it is named `Result` (`api::Result<T>`, like
/// `io::Result<T>`); any other name needs `on_limit`.
pub mod api {
    pub type Result<T> = std::result::Result<T, super::ApiError>;
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL)]
async fn own_error(found: bool) -> Result<u8, ApiError> {
    if found {
        Ok(1)
    } else {
        Err(ApiError::NotFound)
    }
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL)]
async fn alias() -> api::Result<u8> {
    Ok(1)
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL)]
async fn full_path() -> ::std::result::Result<u8, ApiError> {
    Ok(1)
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL)]
async fn boxed_send_sync() -> Result<u8, Box<dyn Error + Send + Sync>> {
    Err("plain errors still convert".into())
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL)]
async fn boxed() -> Result<u8, Box<dyn Error>> {
    Ok(1)
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL)]
async fn dyn_error_with_question_mark(text: &str) -> Result<u8, Box<dyn Error + Send + Sync>> {
    Ok(text.parse::<u8>()?)
}

fn main() {
    assert_send(own_error(true));
    assert_send(alias());
    assert_send(full_path());
    assert_send(boxed_send_sync());
    let _not_send_but_fine = boxed();
    assert_send(dyn_error_with_question_mark("1"));
}
