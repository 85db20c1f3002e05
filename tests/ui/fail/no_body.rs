use redis_ratelimit::{rate_limiter, RateLimitError};

trait Api {
    #[rate_limiter(rules("10/minute"))]
    async fn call(&self) -> Result<(), RateLimitError>;
}

fn main() {}
