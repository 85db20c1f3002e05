use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules(rule(count = 18446744073709551616, time = 1)))]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
