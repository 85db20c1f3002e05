use redis_ratelimit::rate_limiter;

#[rate_limiter(rules("10/minute"))]
struct Handler;

fn main() {}
