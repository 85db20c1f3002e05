use async_trait::async_trait;
use redis_ratelimit::rate_limiter;

#[async_trait]
trait Greeter {
    async fn greet(&self) -> String;
}

struct English;

#[async_trait]
impl Greeter for English {
    #[rate_limiter(rules("10/minute"), limit_type = GLOBAL)]
    async fn greet(&self) -> String {
        "hello".to_owned()
    }
}

fn main() {}
