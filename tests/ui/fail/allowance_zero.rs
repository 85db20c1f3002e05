use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("1000/second"), limit_type = GLOBAL, allowance = "0ms")]
async fn search() -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
