//! Everything a Redis backend is built from ([`RedisConfig`]): validated as the limiter is
//! built, complete before the backend builds its servers (at first use), never changed
//! under them.

use std::fmt;
use std::time::Duration;

use super::breaker::Breaker;
use super::target::{self, Target};
#[cfg(feature = "tls")]
use super::tls::Tls;
use crate::ConfigError;

/// Where Redis runs and how to talk to it. The limiter's builder methods change it in the
/// backend (`RedisBackend::configure`), which reads it when it builds its servers.
#[derive(Clone)]
pub(crate) struct RedisConfig {
    pub(super) target: Target,
    /// How long one check (or reset) may take, connecting included.
    pub(super) timeout: Duration,
    pub(super) breaker: Breaker,
    /// Whom TLS connections trust: `Some` exactly for the `rediss…://` forms.
    #[cfg(feature = "tls")]
    pub(super) tls: Option<Tls>,
}

impl RedisConfig {
    /// The configuration of the Redis at `url` (every form [`target`] reads), with
    /// `timeout` and the default breaker; TLS URLs trust the system's roots.
    pub fn new(url: &str, timeout: Duration) -> Result<RedisConfig, ConfigError> {
        let target = target::parse(url)?;
        #[cfg(not(feature = "tls"))]
        debug_assert!(
            !target.tls,
            "TLS URLs are refused without the `tls` feature"
        );
        Ok(RedisConfig {
            #[cfg(feature = "tls")]
            tls: target.tls.then(Tls::default),
            target,
            timeout,
            breaker: Breaker::DEFAULT,
        })
    }

    /// How long an operator's command or a poll may take: the check timeout, or 1 s if
    /// longer (a check's budget is too tight for reading a hash or a whole key).
    pub fn operator_timeout(&self) -> Duration {
        self.timeout.max(Duration::from_secs(1))
    }

    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    pub fn set_breaker(&mut self, breaker: Breaker) {
        self.breaker = breaker;
    }

    /// Trusts the CA certificates in `pem` instead of the system's roots.
    #[cfg(feature = "tls")]
    pub fn trust_ca(&mut self, pem: &[u8]) -> Result<(), ConfigError> {
        if self.tls.is_none() {
            return Err(ConfigError::new(
                "`with_tls_ca` applies to TLS URLs (`rediss://`, `rediss+cluster://`, \
                 `rediss+sentinel://`), and this limiter's URL is not one",
            ));
        }
        self.tls = Some(Tls::trusting(pem)?);
        Ok(())
    }
}

/// Never the URL: it may hold a password.
impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("RedisConfig");
        debug
            .field("servers", &self.target.shown)
            .field("timeout", &self.timeout)
            .field("breaker", &self.breaker);
        #[cfg(feature = "tls")]
        debug.field(
            "tls",
            &self.tls.as_ref().map(|tls| match tls.has_private_ca() {
                true => "private CA",
                false => "system roots",
            }),
        );
        debug.finish()
    }
}
