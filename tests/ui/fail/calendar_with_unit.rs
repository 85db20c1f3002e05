use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules(rule(count = 5000, unit = DAYS, calendar = day)))]
async fn complete() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
