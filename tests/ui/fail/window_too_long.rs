use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules(rule(count = 1, time = 1000000000000, unit = DAYS), "1/213503982335d"))]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
