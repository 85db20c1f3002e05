use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules(rule(count = 10, time = 60, time = 120)))]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
