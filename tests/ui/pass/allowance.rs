use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("1000/second", "50000/hour"), limit_type = CUSTOM, by = api_key, allowance = "250ms")]
async fn search(api_key: &str) -> Result<(), RateLimitError> {
    let _ = api_key;
    Ok(())
}

fn main() {
    let _ = search("acme");
}
