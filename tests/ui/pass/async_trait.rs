//! `#[rate_limiter]` below `#[async_trait]` on a trait impl's methods: the guard runs in the
//! boxed future async-trait builds, when the future runs, and every argument form works.
#![deny(warnings)]

use std::sync::Arc;

use async_trait::async_trait;
use redis_ratelimit::{rate_limiter, Limiter, RateLimitError};

#[async_trait]
pub trait Codes {
    async fn send(&self, phone: &str) -> Result<String, RateLimitError>;
    async fn resend(&mut self) -> app::Result<u8>;
    async fn greet(&self) -> String;
    async fn shared<T: Send + Sync + 'static>(self: Arc<Self>, value: T) -> Result<T, RateLimitError>;
}

mod app {
    pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
}

pub struct Sms {
    tenant: String,
    limiter: &'static Limiter,
    sent: u8,
}

fn busy(err: RateLimitError) -> String {
    format!("busy: {err}")
}

#[async_trait]
impl Codes for Sms {
    /// Per tenant and phone, on the service's own limiter.
    #[rate_limiter(
        rules("1/minute"),
        limit_type = CUSTOM,
        by = format_args!("{}/{phone}", self.tenant),
        limiter = self.limiter,
    )]
    async fn send(&self, phone: &str) -> Result<String, RateLimitError> {
        Ok(format!("sent to {phone}"))
    }

    #[rate_limiter(rules("1/minute"), limit_type = GLOBAL, limiter = self.limiter)]
    async fn resend(&mut self) -> app::Result<u8> {
        self.sent += 1;
        Ok(self.sent)
    }

    #[rate_limiter(rules("1/minute"), limit_type = GLOBAL, on_limit = busy, limiter = self.limiter)]
    async fn greet(&self) -> String {
        "hello".to_owned()
    }

    #[rate_limiter(rules("1/minute"), limit_type = GLOBAL, limiter = self.limiter)]
    async fn shared<T: Send + Sync + 'static>(self: Arc<Self>, value: T) -> Result<T, RateLimitError> {
        Ok(value)
    }
}

fn assert_send<T: Send>(_: &T) {}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let limiter: &'static Limiter = Box::leak(Box::new(Limiter::memory()));
    let mut sms = Sms {
        tenant: "acme".to_owned(),
        limiter,
        sent: 0,
    };
    // Building the future checks nothing; running it does.
    let pending = sms.send("+1 555 0100");
    assert_send(&pending);
    drop(pending);
    assert_eq!(sms.send("+1 555 0100").await.unwrap(), "sent to +1 555 0100");
    assert!(matches!(
        sms.send("+1 555 0100").await,
        Err(RateLimitError::Limited { .. })
    ));
    assert!(sms.send("+1 555 0199").await.is_ok());

    assert_eq!(sms.resend().await.unwrap(), 1);
    assert!(sms.resend().await.unwrap_err().is::<RateLimitError>());
    assert_eq!(sms.sent, 1);

    assert_eq!(sms.greet().await, "hello");
    assert!(sms.greet().await.starts_with("busy: "));

    let sms = Arc::new(sms);
    assert_eq!(Arc::clone(&sms).shared(7u8).await.unwrap(), 7);
    assert!(sms.shared(8u8).await.is_err());
}
