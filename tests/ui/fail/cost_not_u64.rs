use redis_ratelimit::{rate_limiter, RateLimitError};

#[rate_limiter(rules("10/minute"), cost = batch.len())]
async fn upload(batch: Vec<u8>) -> Result<(), RateLimitError> {
    Ok(())
}

fn main() {}
