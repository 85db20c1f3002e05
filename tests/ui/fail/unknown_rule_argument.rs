use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules(rule(count = 10, period = 60)))]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
