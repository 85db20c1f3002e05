use redis_ratelimit::rate_limiter;

#[rate_limiter(rules("10/minute"))]
async fn ping() {}

fn main() {}
