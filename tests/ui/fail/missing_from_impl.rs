use redis_ratelimit::rate_limiter;

#[derive(Debug)]
pub enum ApiError {
    NotFound,
}

#[rate_limiter(rules("10/minute"))]
async fn lookup(found: bool) -> Result<u8, ApiError> {
    if found {
        Ok(1)
    } else {
        Err(ApiError::NotFound)
    }
}

fn main() {}
