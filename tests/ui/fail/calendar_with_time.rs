use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules(rule(count = 2000000, calendar = MONTH, time = 60)))]
async fn complete() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
