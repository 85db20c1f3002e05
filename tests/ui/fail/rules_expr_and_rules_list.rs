use redis_ratelimit::{rate_limiter, RateLimitError, Rule};

static TIERS: [Rule; 1] = [Rule::per_minute(10)];

#[rate_limiter(rules("10/minute"), rules = &TIERS)]
async fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
