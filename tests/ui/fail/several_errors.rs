use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(
    rules(rule(count = 0, time = 60), "often"),
    limit_type = PER_IP,
    algorithm = LEAKY_BUCKET,
    limiter = ,
    colour = "blue",
    message = "slow down",
    message = "again",
    name = "",
    cost = 0,
)]
fn send_code() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
