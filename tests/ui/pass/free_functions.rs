//! Free functions keep their attributes, visibility, inner attributes and docs; the
//! returned future is `Send`.
#![deny(warnings)]

use redis_ratelimit::{rate_limiter, RateLimitError};

fn assert_send<T: Send>(_: T) {}

/// Documented, and the docs stay on the function.
#[rate_limiter(rules("10/minute"))]
#[allow(unused_variables)] // `unused` would be denied if this attribute were dropped
pub async fn send_code(phone: String, unused: u8) -> Result<String, RateLimitError> {
    #![allow(unused_mut)] // likewise for this inner attribute
    let mut reply = format!("code sent to {phone}");
    Ok(reply)
}

#[rate_limiter(rules("10/minute"), limit_type = CUSTOM, by = phone)]
pub(crate) async fn borrowed<'a>(phone: &'a str, _other: &str) -> Result<&'a str, RateLimitError> {
    Ok(phone)
}

#[rate_limiter(rules("10/minute"), limit_type = CUSTOM, by = key)]
async fn generic<K, V: Clone + Send>(
    key: K,
    value: &V,
    extra: impl AsRef<str> + Send,
) -> Result<(K, V, usize), RateLimitError>
where
    K: std::fmt::Display + Send,
{
    Ok((key, value.clone(), extra.as_ref().len()))
}

#[rate_limiter(rules("10/minute"), limit_type = GLOBAL)]
async unsafe fn dangerous(p: *const u8) -> Result<u8, RateLimitError> {
    Ok(unsafe { *p })
}

/// `by` may name a value that is not `Send`: it is only borrowed to build the key, before
/// the first `.await`.
#[rate_limiter(rules("10/minute"), limit_type = CUSTOM, by = std::rc::Rc::new(id))]
async fn not_send_identity(id: u32) -> Result<u32, RateLimitError> {
    Ok(id)
}

/// Early returns, `?` and a tail expression in the body work as before.
#[rate_limiter(rules("10/minute"), limit_type = GLOBAL)]
async fn early(n: i32) -> Result<i32, RateLimitError> {
    if n < 0 {
        return Ok(0);
    }
    let doubled = Ok::<_, RateLimitError>(n * 2)?;
    Ok(doubled)
}

fn main() {
    assert_send(send_code("+1 555 0100".into(), 0));
    assert_send(borrowed("+1 555 0100", ""));
    assert_send(generic("k", &1u8, "extra"));
    drop(unsafe { dangerous(&0) }); // a raw pointer argument: not `Send`, as without the attribute
    assert_send(not_send_identity(1));
    assert_send(early(1));
}
