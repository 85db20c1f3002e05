use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules(rule(count = 0, time = 60)))]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
