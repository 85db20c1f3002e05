use redis_ratelimit::{rate_limiter, RateLimitError, Rule};

static TIERS: [Rule; 1] = [Rule::per_minute(10)];

#[rate_limiter(
    rules = &TIERS,
    rules = &TIERS,
    charge_if = Result::is_err,
    charge_if = Result::is_ok,
    block_for = "1 hour",
    block_for = "2 hours",
    wait = "1s",
    wait = "2s",
    shadow = true,
    shadow = false,
)]
async fn login() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
