use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules(rule(count = 10, time = 0, unit = MINUTES)))]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
