use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules())]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
