use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules(rule(count = 5000, calendar = WEEK)))]
async fn complete() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
