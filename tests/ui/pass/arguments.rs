//! Every argument, in every accepted spelling.
#![deny(warnings)]

use std::net::IpAddr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis_ratelimit::{rate_limiter, Limiter, RateLimitError};

fn assert_send<T: Send>(_: T) {}

#[rate_limiter(rules(
    rule(count = 10, time = 60),
    rule(count = 20, time = 2, unit = MINUTES),
    rule(count = 1, time = 250, unit = MILLISECONDS),
    rule(unit = hours, time = 1, count = 1000),
    rule(count = 5000, time = 1, unit = Days),
    rule(count = 1, time = 1, unit = SECONDS),
    rule(count = 2000000, calendar = MONTH),
    rule(calendar = day, count = 100, calls = true),
))]
async fn rule_calls() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules(
    "10/minute",
    "10/60s",
    "20 per 2 minutes",
    "5/second",
    "1000/day",
    "3 / 500 ms",
    "7 PER 3 HOURS",
    "1/d",
    "2000000 per calendar month",
    "100 calls per calendar day",
))]
async fn rule_strings() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(prevent_duplicate = true)]
async fn duplicates_only() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(
    rules("10/minute"),
    prevent_duplicate = true,
    prevent_duplicate_rule = rule(count = 2, time = 10, unit = SECONDS)
)]
async fn duplicates_and_rules() -> Result<(), RateLimitError> {
    Ok(())
}

/// For each `name: [arguments]`, `async fn name() -> Result<(), RateLimitError>` under
/// `#[rate_limiter(rules("10/minute"), arguments)]`, and a check that its future is `Send`.
macro_rules! guarded {
    ($($name:ident: [$($arg:tt)*])+) => {
        $(
            #[rate_limiter(rules("10/minute"), $($arg)*)]
            async fn $name() -> Result<(), RateLimitError> {
                Ok(())
            }
        )+

        fn assert_guarded_futures_are_send() {
            $(assert_send($name());)+
        }
    };
}

guarded! {
    no_duplicates: [prevent_duplicate = false]
    per_ip: [limit_type = IP]
    per_user: [limit_type = USER_ID]
    global: [limit_type = Global]
    custom: [limit_type = CUSTOM, by = "constant"]
    key_and_message: [key = "myapp:", message = "slow down"]
    empty_key_and_raw_message: [key = "", message = r#"a "raw" message"#]
    sliding_log: [algorithm = SLIDING_LOG]
    fixed_window: [algorithm = FIXED_WINDOW]
    sliding_window: [algorithm = sliding_window]
    token_bucket: [algorithm = TOKEN_BUCKET]
    limiter_static: [limiter = LAZY]
    limiter_ref: [limiter = leaked()]
    named: [name = "billing::send_invoice"]
    named_with_slashes: [name = "api/v2/orders.create-1"]
    constant_cost: [cost = 5]
}

#[rate_limiter(rules("10/minute"), limit_type = IP, by = addr.ip())]
async fn per_ip_by(addr: std::net::SocketAddr) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("10/minute"), limit_type = user_id, by = format!("{}-{}", org, user))]
async fn per_user_by(org: &str, user: u64) -> Result<(), RateLimitError> {
    Ok(())
}

static LAZY: LazyLock<Limiter> = LazyLock::new(Limiter::memory);

fn leaked() -> &'static Limiter {
    Box::leak(Box::new(Limiter::memory().timeout(Duration::from_millis(5))))
}

#[rate_limiter(rules("10/minute"), limiter = shared)]
async fn limiter_arc(shared: Arc<Limiter>) -> Result<(), RateLimitError> {
    Ok(())
}

struct Client {
    name: &'static str,
    limiter: Limiter,
}

impl Client {
    #[rate_limiter(
        rules("10/minute"),
        limiter = &self.limiter,
        limit_type = CUSTOM,
        by = self.name
    )]
    async fn call(&self) -> Result<(), RateLimitError> {
        Ok(())
    }
}

#[rate_limiter(
    crate = ::redis_ratelimit,
    limiter = redis_ratelimit::global(),
    on_limit = Err,
    message = "everything at once",
    key = "all:",
    algorithm = FIXED_WINDOW,
    by = who,
    limit_type = CUSTOM,
    prevent_duplicate_rule = rule(count = 1, time = 1),
    prevent_duplicate = true,
    rules("1/s", rule(count = 2, time = 2)),
)]
async fn all_arguments_in_any_order(who: IpAddr) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("10/minute"), limit_type = CUSTOM, by = tenant, cost = batch.len() as u64)]
async fn cost_of_a_borrowed_argument(tenant: &str, batch: Vec<u8>) -> Result<Vec<u8>, RateLimitError> {
    Ok(batch)
}

struct Uploader {
    pending: Vec<u8>,
}

impl Uploader {
    #[rate_limiter(rules("10/minute"), limit_type = GLOBAL, cost = self.pending.len() as u64)]
    async fn flush(&mut self) -> Result<Vec<u8>, RateLimitError> {
        Ok(std::mem::take(&mut self.pending))
    }
}

fn main() {
    assert_guarded_futures_are_send();
    assert_send(rule_calls());
    assert_send(rule_strings());
    assert_send(duplicates_only());
    assert_send(duplicates_and_rules());
    assert_send(per_ip_by("127.0.0.1:80".parse().unwrap()));
    assert_send(per_user_by("org", 1));
    assert_send(limiter_arc(Arc::new(Limiter::memory())));
    let client = Client {
        name: "c",
        limiter: Limiter::memory(),
    };
    assert_send(client.call());
    assert_send(all_arguments_in_any_order([127, 0, 0, 1].into()));
    assert_send(cost_of_a_borrowed_argument("acme", vec![1, 2]));
    let mut uploader = Uploader { pending: vec![1] };
    assert_send(uploader.flush());
}
