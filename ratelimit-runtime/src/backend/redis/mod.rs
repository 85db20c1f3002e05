//! The Redis backend: one EVALSHA per check over two shared, self-reconnecting connections.
//!
//! Connection policy, tuned so that a restarted Redis is used again at once and a dead one
//! fails calls fast instead of holding them:
//! - [`CONNECTIONS`] [`ConnectionManager`]s per backend, made on first use (they need a
//!   Tokio runtime, which `Limiter::redis` may be called without), taking calls in turn and
//!   multiplexing them;
//! - a broken connection is re-made by the manager in one attempt, without backoff, when a
//!   call finds it broken; a call that found it broken (or refused) is retried once on the
//!   new one. So while Redis is down each call costs a refused connect or two and fails as
//!   [`Unavailable`](BackendErrorKind::Unavailable), and the first call after Redis is back,
//!   or from a new runtime after the one that connected has gone, succeeds. A check whose
//!   reply was lost with its connection may so be counted twice: that errs towards limiting,
//!   and only when a connection breaks mid-call;
//! - connects time out after [`CONNECT_TIMEOUT`] so a black-holed host cannot stall the
//!   shared reconnect; answers are not timed here, the limiter times every call.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, Script, ServerErrorKind, Value,
};
use tokio::sync::OnceCell;

mod script;

use super::{Backend, Request};
use crate::decision::RawDecision;
use crate::{BackendError, BackendErrorKind, ConfigError};

/// How many multiplexed connections a backend spreads its checks over. Redis answers a
/// connection's pipelined commands in one batch; over a single connection it then idles
/// while the client turns those replies into the next batch. Over two, it serves one
/// connection's batch meanwhile: with `scripts/bench-redis`'s workload, the fixed window and
/// token bucket make 10-20% more checks per second, the sliding log (for which Redis is
/// already busier) a few percent.
const CONNECTIONS: usize = 2;

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The URL forms `RedisBackend::new` accepts, for error messages.
const ACCEPTED_URLS: &str =
    "redis://[[user]:password@]host[:port][/db] or unix:///path/to/redis.sock[?db=N]";

pub(crate) struct RedisBackend {
    client: redis::Client,
    /// `host:port` or the socket path: what messages name, since the URL may hold a password.
    address: Box<str>,
    connections: [OnceCell<ConnectionManager>; CONNECTIONS],
    /// Which connection the next call takes, modulo [`CONNECTIONS`].
    turn: AtomicUsize,
}

impl RedisBackend {
    /// Validates `url`; connects on first use.
    pub fn new(url: &str) -> Result<Self, ConfigError> {
        // Only the scheme is ever quoted back: the rest may carry a password.
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        match scheme {
            Some("redis" | "unix" | "redis+unix" | "valkey" | "valkey+unix") => {}
            // Failing here beats failing at the first check, deep in a request.
            Some(tls @ ("rediss" | "valkeys")) => {
                return Err(ConfigError::new(format!(
                    "`{tls}://` (TLS) is not supported by this build; use a TLS-terminating \
                     proxy such as stunnel, or one of {ACCEPTED_URLS}"
                )))
            }
            Some(other) if is_scheme(other) => {
                return Err(ConfigError::new(format!(
                    "unsupported Redis URL scheme `{other}://`; expected {ACCEPTED_URLS}"
                )))
            }
            _ => {
                return Err(ConfigError::new(format!(
                    "invalid Redis URL; expected {ACCEPTED_URLS}"
                )))
            }
        }
        // redis-rs's messages name the part that is wrong, never the URL itself.
        let client = redis::Client::open(url).map_err(|e| {
            ConfigError::new(format!("invalid Redis URL ({e}); expected {ACCEPTED_URLS}"))
        })?;
        let address = client.get_connection_info().addr().to_string().into();
        Ok(RedisBackend {
            client,
            address,
            connections: Default::default(),
            turn: AtomicUsize::new(0),
        })
    }

    /// The next connection in turn.
    async fn connection(&self) -> ConnectionManager {
        let turn = self.turn.fetch_add(1, Ordering::Relaxed) % CONNECTIONS;
        self.connections[turn]
            .get_or_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_number_of_retries(0)
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(None);
                ConnectionManager::new_lazy_with_config(self.client.clone(), config)
                    .expect("a valid connection manager configuration")
            })
            .await
            .clone()
    }

    /// Runs `command`, which calls `script` by its hash if any. The script is loaded when the
    /// server does not know it (first use, `SCRIPT FLUSH`, a restarted server), and the
    /// command is sent once more when its connection was refused or found broken: the
    /// manager has then started a new connect, which the retry waits for.
    async fn query<T: FromRedisValue>(
        &self,
        command: &Cmd,
        script: Option<&Script>,
    ) -> RedisResult<T> {
        let mut connection = self.connection().await;
        let (mut reconnected, mut loaded) = (false, false);
        loop {
            match command.query_async(&mut connection).await {
                Err(err) if err.is_connection_dropped() && !reconnected => reconnected = true,
                Err(err)
                    if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) && !loaded =>
                {
                    let Some(script) = script else {
                        return Err(err);
                    };
                    script.load_async(&mut connection).await?;
                    loaded = true;
                }
                reply => return reply,
            }
        }
    }

    /// Maps a Redis failure to what the limiter reports, naming the server, never the URL;
    /// the Redis error is the source, and its text ends the message.
    fn error(&self, key: &str, err: RedisError) -> BackendError {
        let address = &self.address;
        let (kind, detail) = match err.kind() {
            ErrorKind::Io if err.is_timeout() => (
                BackendErrorKind::Timeout,
                format!("Redis at {address} did not answer in time"),
            ),
            ErrorKind::Io => (
                BackendErrorKind::Unavailable,
                format!("cannot reach Redis at {address}; is it running?"),
            ),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::ReadOnly,
            ) => (
                BackendErrorKind::Unavailable,
                format!("Redis at {address} cannot serve writes right now"),
            ),
            ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => (
                BackendErrorKind::Misconfigured,
                format!(
                    "Redis at {address} refused the limiter; check the user and password in the \
                     URL and the user's ACL (it needs EVALSHA, SCRIPT LOAD and DEL)"
                ),
            ),
            _ if err.code() == Some("WRONGTYPE") => (
                BackendErrorKind::Command,
                format!(
                    "key `{key}` holds a value of another type (another algorithm's state, or data \
                     the limiter did not write); use one algorithm per key"
                ),
            ),
            _ => (
                BackendErrorKind::Command,
                format!("Redis at {address} failed the rate-limit check of `{key}`"),
            ),
        };
        BackendError::new(kind, detail).with_source(err)
    }

    async fn run(&self, request: &Request<'_>) -> Result<RawDecision, RedisError> {
        let reply: Value = self
            .query(
                &script::evalsha(request),
                Some(script::script(request.algorithm)),
            )
            .await?;
        script::decode(&reply, request.rules).ok_or_else(|| {
            RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "the rate-limit script answered out of range",
                format!("{reply:?}"),
            ))
        })
    }
}

/// Whether `s` looks like a URL scheme, and so is safe to quote back (it holds no password).
fn is_scheme(s: &str) -> bool {
    s.len() <= 16
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

impl Backend for RedisBackend {
    async fn check(&self, request: &Request<'_>) -> Result<RawDecision, BackendError> {
        self.run(request)
            .await
            .map_err(|err| self.error(request.key, err))
    }

    async fn reset(&self, key: &str) -> Result<(), BackendError> {
        let mut del = redis::cmd("DEL");
        del.arg(key);
        self.query::<()>(&del, None)
            .await
            .map_err(|err| self.error(key, err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_error(url: &str) -> String {
        RedisBackend::new(url).err().expect("rejected").to_string()
    }

    #[test]
    fn accepts_the_documented_url_forms() {
        for url in [
            "redis://127.0.0.1",
            "redis://127.0.0.1:6380/2",
            "redis://:secret@localhost:6379",
            "redis://user:secret@localhost:6379/0",
            "unix:///run/redis/redis.sock",
        ] {
            assert!(RedisBackend::new(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn tls_urls_are_rejected_up_front() {
        let message = config_error("rediss://:hunter2@127.0.0.1:6380");
        assert!(message.contains("TLS"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn other_schemes_are_rejected_with_the_accepted_forms() {
        let message = config_error("http://user:hunter2@127.0.0.1:6379");
        assert!(message.contains("`http://`"), "{message}");
        assert!(message.contains("redis://"), "{message}");
        assert!(message.contains("unix://"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn malformed_urls_never_print_the_password() {
        for url in [
            "127.0.0.1:6379",
            "hunter2",
            "redis://:hunter2@127.0.0.1:6379/notadb",
            "redis://:hunter2@0.0.0.0:6379",
            ":hunter2@host://x",
        ] {
            let message = config_error(url);
            assert!(message.contains("redis://"), "{message}");
            assert!(!message.contains("hunter2"), "{message}");
        }
    }

    #[test]
    fn messages_name_the_server_without_its_password() {
        let backend = RedisBackend::new("redis://:hunter2@127.0.0.1:6390/").unwrap();
        assert_eq!(&*backend.address, "127.0.0.1:6390");
    }
}
