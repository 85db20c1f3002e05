//! The policy arguments on trait impl methods under `#[async_trait]`: the check, and with
//! `charge_if` the settlement, run in the boxed future.
#![deny(warnings)]

use async_trait::async_trait;
use redis_ratelimit::{rate_limiter, RateLimitError, Rule};

static TIERS: [Rule; 2] = [Rule::per_minute(10), Rule::per_hour(100)];

#[async_trait]
pub trait Auth {
    async fn login(&self, name: &str, password: &str) -> Result<String, RateLimitError>;
    async fn tiers(&self, pro: bool) -> Result<(), RateLimitError>;
    async fn greet(&self) -> String;
}

pub struct Service {
    limit: Vec<Rule>,
}

fn busy(_: RateLimitError) -> String {
    "busy".to_owned()
}

#[async_trait]
impl Auth for Service {
    #[rate_limiter(
        rules("3/minute"),
        limit_type = CUSTOM,
        by = name,
        charge_if = Result::is_err,
        block_for = "15 minutes",
        wait = "2s",
        shadow = true,
    )]
    async fn login(&self, name: &str, password: &str) -> Result<String, RateLimitError> {
        if password.is_empty() {
            return Ok(String::new());
        }
        Ok(format!("{name} in"))
    }

    #[rate_limiter(
        rules = if pro { &TIERS[..] } else { &self.limit },
        prevent_duplicate = true,
        limit_type = GLOBAL,
    )]
    async fn tiers(&self, pro: bool) -> Result<(), RateLimitError> {
        let _ = pro;
        Ok(())
    }

    #[rate_limiter(
        rules("1/minute"),
        limit_type = GLOBAL,
        on_limit = busy,
        charge_if = |text: &String| text.is_empty(),
    )]
    async fn greet(&self) -> String {
        "hello".to_owned()
    }
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    let service = Service {
        limit: vec![Rule::per_second(1)],
    };
    assert_send(&service.login("ann", "secret"));
    assert_send(&service.tiers(true));
    assert_send(&service.greet());
}
