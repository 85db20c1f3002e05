use redis_ratelimit::{rate_limiter, RateLimitError};

struct Phone(String);

#[rate_limiter(rules("10/minute"), limit_type = CUSTOM, by = phone)]
async fn send_code(phone: Phone) -> Result<String, RateLimitError> {
    Ok(phone.0)
}

fn main() {}
