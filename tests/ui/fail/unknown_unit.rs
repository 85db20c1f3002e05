use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules(rule(count = 10, time = 1, unit = WEEKS)))]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
