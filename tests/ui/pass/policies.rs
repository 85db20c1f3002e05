//! The policy arguments: rules chosen per call, `charge_if`, `block_for`, `wait`, `shadow`,
//! alone and together, on free functions and methods.
#![deny(warnings)]

use std::sync::Arc;

use redis_ratelimit::{rate_limiter, RateLimitError, Rule};

fn assert_send<T: Send>(_: T) {}

static FREE: [Rule; 1] = [Rule::per_minute(10)];
static PRO: [Rule; 2] = [Rule::per_minute(100), Rule::per_hour(1000)];

struct User {
    id: u64,
    pro: bool,
    extra: Vec<Rule>,
}

fn plan_rules(user: &User) -> &'static [Rule] {
    if user.pro {
        &PRO
    } else {
        &FREE
    }
}

#[rate_limiter(rules = plan_rules(&user), limit_type = USER_ID, by = user.id)]
async fn static_slice(user: User) -> Result<u64, RateLimitError> {
    Ok(user.id)
}

#[rate_limiter(rules = &user.extra, limit_type = USER_ID, by = user.id)]
async fn borrowed_vec(user: &User) -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules = vec![Rule::per_second(n)], limit_type = GLOBAL)]
async fn owned_vec(n: u64) -> Result<u64, RateLimitError> {
    Ok(n)
}

#[rate_limiter(rules = shared.clone(), limit_type = GLOBAL)]
async fn shared_slice(shared: Arc<[Rule]>) -> Result<(), RateLimitError> {
    drop(shared);
    Ok(())
}

#[rate_limiter(rules = &FREE, prevent_duplicate = true, limit_type = GLOBAL)]
async fn per_call_and_duplicates() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(
    rules = plan_rules(user),
    prevent_duplicate = true,
    prevent_duplicate_rule = rule(count = 1, time = 10),
    limit_type = USER_ID,
    by = user.id,
)]
async fn per_call_and_a_duplicate_rule(user: &User) -> Result<(), RateLimitError> {
    Ok(())
}

#[derive(Debug)]
enum LoginError {
    BadPassword,
    Limited(RateLimitError),
}

impl From<RateLimitError> for LoginError {
    fn from(err: RateLimitError) -> Self {
        LoginError::Limited(err)
    }
}

impl std::fmt::Display for LoginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for LoginError {}

#[rate_limiter(rules("3/minute"), limit_type = CUSTOM, by = name, charge_if = Result::is_err)]
async fn login(name: &str, password: &str) -> Result<String, LoginError> {
    if password.is_empty() {
        return Err(LoginError::BadPassword);
    }
    let len: u8 = password.len().try_into().map_err(|_| LoginError::BadPassword)?;
    Ok(format!("{name}:{len}"))
}

#[rate_limiter(
    rules("3/minute"),
    limit_type = CUSTOM,
    by = name,
    charge_if = |r: &Result<String, LoginError>| matches!(r, Err(LoginError::BadPassword)),
)]
async fn login_closure(name: &str) -> Result<String, LoginError> {
    Ok(name.to_owned())
}

#[rate_limiter(rules("3/minute"), limit_type = GLOBAL, charge_if = |r| r.is_err())]
async fn inferred_closure() -> Result<u8, RateLimitError> {
    Ok(1)
}

fn failed<T, E>(result: &Result<T, E>) -> bool {
    result.is_err()
}

// The body's `return` of a `Box<MyError>` is coerced to the declared error type, as in the
// function it was written in.
#[rate_limiter(rules("3/minute"), limit_type = GLOBAL, charge_if = failed)]
async fn boxed_error(fail: bool) -> Result<u8, Box<dyn std::error::Error + Send + Sync>> {
    if fail {
        return Err(Box::new(LoginError::BadPassword));
    }
    let n: u8 = "7".parse()?;
    Ok(n)
}

fn busy(_: RateLimitError) -> String {
    "busy".to_owned()
}

#[rate_limiter(rules("3/minute"), limit_type = GLOBAL, on_limit = busy, charge_if = String::is_empty)]
async fn not_a_result(text: String) -> String {
    text
}

fn never(_: &()) -> bool {
    false
}

fn ignore(_: RateLimitError) {}

#[rate_limiter(rules("3/minute"), limit_type = GLOBAL, on_limit = ignore, charge_if = never)]
async fn unit() {}

#[rate_limiter(rules("3/minute"), limit_type = GLOBAL, on_limit = busy_display, charge_if = |_| true)]
async fn impl_trait() -> impl std::fmt::Display + Send {
    7
}

fn busy_display(_: RateLimitError) -> u8 {
    0
}

#[rate_limiter(rules("3/minute"), limit_type = GLOBAL, block_for = "15 minutes")]
async fn block_minutes() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("3/minute"), limit_type = GLOBAL, block_for = "900s", wait = "500ms")]
async fn block_and_wait() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("3/minute"), limit_type = GLOBAL, wait = "2s")]
async fn wait_seconds() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("3/minute"), limit_type = GLOBAL, shadow = true)]
async fn shadow() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("3/minute"), limit_type = GLOBAL, shadow = false)]
async fn enforced() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("3/minute", "100/hour"), limit_type = GLOBAL, warn_at = 80)]
async fn warned() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(rules("3/minute"), limit_type = GLOBAL, warn_at = 1, shadow = true)]
async fn warned_in_shadow() -> Result<(), RateLimitError> {
    Ok(())
}

#[rate_limiter(
    rules = plan_rules(&user),
    limit_type = USER_ID,
    by = user.id,
    charge_if = Result::is_err,
    block_for = "1 hour",
    wait = "2s",
    shadow = true,
    cost = 2,
)]
async fn every_policy(user: User) -> Result<u64, RateLimitError> {
    Ok(user.id)
}

struct Accounts {
    failures: u32,
}

impl Accounts {
    #[rate_limiter(
        rules("5/minute"),
        limit_type = CUSTOM,
        by = name,
        charge_if = Result::is_err,
        block_for = "15 minutes",
    )]
    async fn login(&mut self, name: &str) -> Result<(), RateLimitError> {
        self.failures += 1;
        let _ = name;
        Ok(())
    }

    #[rate_limiter(rules = plan_rules(user), limit_type = USER_ID, by = user.id, charge_if = Result::is_ok)]
    async fn lookup(&self, user: &User) -> Result<u32, RateLimitError> {
        Ok(self.failures)
    }
}

fn user() -> User {
    User {
        id: 1,
        pro: false,
        extra: vec![Rule::per_second(1)],
    }
}

fn main() {
    assert_send(static_slice(user()));
    let user = user();
    assert_send(borrowed_vec(&user));
    assert_send(owned_vec(3));
    assert_send(shared_slice(Arc::from(vec![Rule::per_second(1)])));
    assert_send(per_call_and_duplicates());
    assert_send(per_call_and_a_duplicate_rule(&user));
    assert_send(login("ann", "secret"));
    assert_send(login_closure("ann"));
    assert_send(inferred_closure());
    assert_send(boxed_error(true));
    assert_send(not_a_result(String::new()));
    assert_send(unit());
    assert_send(impl_trait());
    assert_send(block_minutes());
    assert_send(block_and_wait());
    assert_send(wait_seconds());
    assert_send(shadow());
    assert_send(warned());
    assert_send(warned_in_shadow());
    assert_send(enforced());
    assert_send(every_policy(self::user()));
    let mut accounts = Accounts { failures: 0 };
    assert_send(accounts.login("ann"));
    assert_send(accounts.lookup(&user));
}
