//! Which return types are taken for a `Result`: `Result<..>` and paths ending in
//! `::Result<..>`; any other type, whatever its name, goes through `on_limit`.
#![deny(warnings)]

use redis_ratelimit::{rate_limiter, RateLimitError};

mod app {
    /// An application's own `Result` alias, named `Result`.
    pub type Result<T> = std::result::Result<T, super::RateLimitError>;
}

/// A struct whose name ends in `Result`: not a `Result`.
#[derive(Debug, Default, PartialEq)]
pub struct QueryResult {
    pub rows: Vec<u32>,
    pub limited: bool,
}

fn limited_query(_: RateLimitError) -> QueryResult {
    QueryResult {
        rows: Vec::new(),
        limited: true,
    }
}

#[rate_limiter(rules("1/minute"), limit_type = GLOBAL)]
async fn alias() -> app::Result<u8> {
    Ok(1)
}

mod fmt {
    pub use std::fmt::Result;
}

/// `fmt::Result` is `Result<(), fmt::Error>`, written without its arguments: not known to
/// be a `Result`, so it needs `on_limit`.
#[rate_limiter(rules("1/minute"), limit_type = GLOBAL, on_limit = format_failed)]
async fn io() -> fmt::Result {
    Ok(())
}

fn format_failed(_: RateLimitError) -> fmt::Result {
    Err(std::fmt::Error)
}

#[rate_limiter(rules("1/minute"), limit_type = GLOBAL)]
async fn full_path() -> ::core::result::Result<u8, Box<dyn std::error::Error + Send + Sync>> {
    Ok(1)
}

#[rate_limiter(rules("1/minute"), limit_type = GLOBAL, on_limit = limited_query)]
async fn query() -> QueryResult {
    QueryResult {
        rows: vec![1, 2],
        limited: false,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(alias().await.unwrap(), 1);
    assert!(alias().await.is_err());
    io().await.unwrap();
    assert!(io().await.is_err());
    assert_eq!(full_path().await.unwrap(), 1);
    assert!(full_path().await.is_err());
    assert_eq!(query().await.rows, vec![1, 2]);
    assert!(query().await.limited);
}
