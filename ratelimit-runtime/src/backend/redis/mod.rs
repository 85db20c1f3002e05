//! The Redis backend: one EVALSHA per check over shared multiplexed connections.
//!
//! Connection policy ([`connection`]):
//! - each Tokio runtime that checks gets two multiplexed connections of its own, made on its
//!   first check and driven by that runtime, taking its checks in turn. So a limiter works
//!   from every runtime at once (a `static` limiter shared by `#[tokio::test]`s, actix-web's
//!   runtime per worker) and after the runtime that first used it has shut down, and no
//!   check ever waits for another runtime's threads. A runtime's connections close when it
//!   shuts down;
//! - a connection that stopped (the server closed or killed it, or restarted) is re-made by
//!   the next call that finds it so, in one attempt, without backoff, timed out after
//!   [`CONNECT_TIMEOUT`](connection::CONNECT_TIMEOUT); calls waiting for the same
//!   connection share that attempt. So while Redis is down each call costs a refused
//!   connect and fails as [`Unavailable`](BackendErrorKind::Unavailable), and the first call
//!   after Redis is back succeeds. Answers are not timed here: the limiter times every call;
//! - counted at most once: a command is sent again only when it was certainly not written
//!   (its connection was known to be broken, or could not be made, before it was sent, or
//!   broke before anything was written on it since), or when running it twice counts it once ([`script::rerun_is_harmless`], and `DEL`). A
//!   check whose connection broke after it was sent may have run: it is reported as failed,
//!   [`Unavailable`](BackendErrorKind::Unavailable), and the limiter's fail-open or
//!   fail-closed policy applies;
//! - a server that does not know a script (first use, `SCRIPT FLUSH`, a restart) answers
//!   NOSCRIPT without running anything; that check is then sent as an `EVAL` with the
//!   script's body, which works the same on one node and on a Cluster.

use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

mod connection;
mod script;

use super::{Backend, Request};
use crate::decision::RawDecision;
use crate::{BackendError, BackendErrorKind, ConfigError};
use connection::{Connections, Link};

/// The URL forms `RedisBackend::new` accepts, for error messages.
const ACCEPTED_URLS: &str =
    "redis://[[user]:password@]host[:port][/db] or unix:///path/to/redis.sock[?db=N]";

pub(crate) struct RedisBackend {
    /// `host:port` or the socket path: what messages name, since the URL may hold a password.
    address: Box<str>,
    connections: Connections,
}

/// Why a command got no answer from Redis, or the answer Redis gave.
enum Failure {
    /// Redis answered with an error, or no connection could be made: nothing ran.
    Redis(RedisError),
    /// The connection broke before anything was written on it: the command did not run.
    Unsent(RedisError),
    /// The connection broke after the command may have been written: it may have run.
    Interrupted(RedisError),
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
            address,
            connections: Connections::new(client),
        })
    }

    /// Sends `command`, and once more on a new connection when the first one broke and
    /// either the command did not run or running it twice counts it once
    /// (`rerun_is_harmless`).
    async fn send(&self, command: &Cmd, rerun_is_harmless: bool) -> Result<Value, Failure> {
        let mut link = self.connections.next().await.map_err(Failure::Redis)?;
        match attempt(&mut link, command).await {
            Err(Failure::Unsent(_)) => {}
            Err(Failure::Interrupted(_)) if rerun_is_harmless => {}
            reply => return reply,
        }
        let mut link = self
            .connections
            .replace(&link)
            .await
            .map_err(Failure::Redis)?;
        attempt(&mut link, command).await
    }

    /// Maps a failure to what the limiter reports, naming the server, never the URL; the
    /// Redis error is the source, and its text ends the message.
    fn error(&self, key: &str, failure: Failure) -> BackendError {
        let address = &self.address;
        let err = match failure {
            Failure::Interrupted(err) => {
                let detail = format!(
                    "cannot reach Redis at {address}; is it running? The connection broke while \
                     `{key}` was checked, so the check may have been counted; it was not sent again"
                );
                return BackendError::new(BackendErrorKind::Unavailable, detail).with_source(err);
            }
            Failure::Redis(err) | Failure::Unsent(err) => err,
        };
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
                     URL and the user's ACL (it needs EVALSHA, EVAL and DEL)"
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

    async fn run(&self, request: &Request<'_>) -> Result<RawDecision, Failure> {
        let harmless = script::rerun_is_harmless(request.algorithm);
        let reply = match self.send(&script::evalsha(request), harmless).await {
            // NOSCRIPT: nothing ran. The body goes with this check, instead of a SCRIPT LOAD
            // that a Cluster would have to send to every node.
            Err(Failure::Redis(err))
                if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                self.send(&script::eval(request), harmless).await
            }
            reply => reply,
        }?;
        script::decode(&reply, request.rules).ok_or_else(|| {
            Failure::Redis(RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "the rate-limit script answered out of range",
                format!("{reply:?}"),
            )))
        })
    }
}

impl RedisBackend {
    /// Every field and value of the hash at `key` (none when it does not exist), through
    /// this runtime's connections: what the rule-override poller reads. Not timed here (the
    /// caller times it); bytes that are not UTF-8 are replaced, so such a value reads as
    /// malformed.
    pub(crate) async fn hash_fields(
        &self,
        key: &str,
    ) -> Result<Vec<(String, String)>, BackendError> {
        let mut hgetall = redis::cmd("HGETALL");
        hgetall.arg(key);
        // A read: sending it twice changes nothing.
        let reply = self
            .send(&hgetall, true)
            .await
            .map_err(|failure| self.error(key, failure))?;
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = redis::from_redis_value(reply).map_err(|err| {
            BackendError::new(
                BackendErrorKind::Command,
                format!(
                    "Redis at {} answered HGETALL {key} with something else than a hash: {err}",
                    self.address
                ),
            )
        })?;
        Ok(pairs
            .into_iter()
            .map(|(field, value)| {
                (
                    String::from_utf8_lossy(&field).into_owned(),
                    String::from_utf8_lossy(&value).into_owned(),
                )
            })
            .collect())
    }
}

/// Sends `command` on `link` once. A connection that fails is closed, so that the next
/// call makes a new one.
async fn attempt(link: &mut Link, command: &Cmd) -> Result<Value, Failure> {
    let writes = link.writes();
    let reply = link.send(command).await;
    reply.map_err(|err| {
        // Anything but an I/O or parse error is Redis's own answer.
        if !matches!(err.kind(), ErrorKind::Io | ErrorKind::Parse) {
            return Failure::Redis(err);
        }
        link.close();
        if link.writes() == writes {
            Failure::Unsent(err)
        } else {
            Failure::Interrupted(err)
        }
    })
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
            .map_err(|failure| self.error(request.key, failure))
    }

    async fn reset(&self, key: &str) -> Result<(), BackendError> {
        let mut del = redis::cmd("DEL");
        del.arg(key);
        // Deleting twice forgets the key once.
        self.send(&del, true)
            .await
            .map(drop)
            .map_err(|failure| self.error(key, failure))
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
