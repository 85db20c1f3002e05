use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("10/minute"), prevent_duplicate_rule = rule(count = 1, time = 10))]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
