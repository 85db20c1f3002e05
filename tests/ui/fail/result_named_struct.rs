use redis_ratelimit::rate_limiter;

pub struct QueryResult {
    pub rows: Vec<u32>,
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL)]
async fn query() -> QueryResult {
    QueryResult { rows: Vec::new() }
}

fn main() {}
