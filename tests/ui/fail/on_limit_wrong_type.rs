use redis_ratelimit::{rate_limiter, RateLimitError};

fn busy(_: RateLimitError) -> &'static str {
    "busy"
}

#[rate_limiter(rules("10/minute"), on_limit = busy)]
async fn count() -> u32 {
    1
}

fn main() {}
