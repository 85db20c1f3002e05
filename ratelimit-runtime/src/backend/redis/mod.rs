//! The Redis backend: one EVALSHA per check over shared multiplexed connections.
//!
//! Where Redis runs ([`target`] reads the URL): one server (TCP, TLS or a Unix socket), a
//! [`Cluster`] or the master a [`Sentinel`] names. Each topology finds the server for a key;
//! a [`Node`] holds one server's connections, and this file sends, re-sends and maps errors
//! the same for all.
//!
//! Connection policy ([`connection`]):
//! - each Tokio runtime that checks gets two multiplexed connections of its own, made on its
//!   first check and driven by that runtime, taking its checks in turn. So a limiter works
//!   from every runtime at once (a `static` limiter shared by `#[tokio::test]`s, actix-web's
//!   runtime per worker) and after the runtime that first used it has shut down, and no
//!   check ever waits for another runtime's threads. A runtime's connections close when it
//!   shuts down;
//! - a connection that stopped (the server closed or killed it, or restarted; or three calls
//!   in a row got no answer in time; or TCP keepalive found its peer gone) is re-made by
//!   the next call that finds it so, in one attempt, without backoff, timed out after
//!   [`CONNECT_TIMEOUT`](connection::CONNECT_TIMEOUT) or the check's timeout if shorter. A
//!   failed connect is not remembered (a wrong password fixed in the ACL works at the next
//!   call); calls waiting for the same
//!   connection share that attempt. So while Redis is down each call costs a refused
//!   connect and fails as [`Unavailable`](BackendErrorKind::Unavailable), and the first call
//!   after Redis is back succeeds. Answers are not timed here: the limiter times every call;
//! - counted at most once: a command is sent again only when it was certainly not written
//!   (its connection was known to be broken, or could not be made, before it was sent, or
//!   broke before anything was written on it since), or when running it twice counts it
//!   once ([`script::rerun_is_harmless`], and `DEL`), or when Redis redirected it
//!   (`MOVED`, `ASK`, `READONLY`: it did not run). A
//!   check whose connection broke after it was sent may have run: it is reported as failed,
//!   [`Unavailable`](BackendErrorKind::Unavailable), and the limiter's fail-open or
//!   fail-closed policy applies;
//! - a server that does not know a script (first use, `SCRIPT FLUSH`, a restart) answers
//!   NOSCRIPT without running anything; that check is then sent as an `EVAL` with the
//!   script's body to the same node (a `SCRIPT LOAD` on a Cluster would have to reach every
//!   node, and fails while one is down).

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

mod cluster;
mod connection;
mod refresh;
mod script;
mod sentinel;
mod target;
mod tls;

use super::{Backend, Request};
use crate::decision::RawDecision;
use crate::{BackendError, BackendErrorKind, ConfigError};
use cluster::Cluster;
use connection::{Endpoint, Link, Node, Options};
use sentinel::Sentinel;
use target::Layout;

/// How many times one command follows redirects (`MOVED`, `ASK`, `READONLY`) before it
/// fails: a few suffice while a Cluster or Sentinel changes masters.
const MAX_REDIRECTS: usize = 5;

pub(crate) struct RedisBackend {
    /// Where the servers are, without credentials: what messages name.
    shown: Box<str>,
    options: Arc<Options>,
    topology: Topology,
}

/// Where a key's commands go; each topology is a file of its own.
enum Topology {
    Single(Node),
    Cluster(Cluster),
    Sentinel(Sentinel),
}

/// Where to send a command again after Redis answered it with an error.
struct Redirect {
    link: Link,
    /// Send `ASKING` first.
    asking: bool,
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
        let target = target::parse(url)?;
        let options = Arc::new(Options::new(target.tls));
        let endpoint = |info| Endpoint {
            info,
            options: options.clone(),
        };
        let topology = match target.layout {
            Layout::Single(info) => Topology::Single(Node::new(endpoint(info))),
            Layout::Cluster(seeds) => {
                Topology::Cluster(Cluster::new(seeds.into_iter().map(endpoint).collect()))
            }
            Layout::Sentinel {
                sentinels,
                master_name,
                master,
            } => Topology::Sentinel(Sentinel::new(
                sentinels.into_iter().map(endpoint).collect(),
                master_name,
                master,
                options.clone(),
            )),
        };
        Ok(RedisBackend {
            shown: target.shown,
            options,
            topology,
        })
    }

    /// Trusts the CA certificates in `pem` instead of the system's roots.
    pub fn trust_ca(&self, pem: &[u8]) -> Result<(), ConfigError> {
        match &self.options.tls {
            Some(tls) => tls.trust(pem),
            None => Err(ConfigError::new(
                "`with_tls_ca` applies to TLS URLs (`rediss://`, `rediss+cluster://`, \
                 `rediss+sentinel://`), and this limiter's URL is not one",
            )),
        }
    }

    /// Connects take no longer than `timeout`, a check's.
    pub fn limit_connect_timeout(&self, timeout: Duration) {
        self.options.limit_connect_timeout(timeout);
    }

    /// Sends `command` on `key`'s server. Sends it again where Redis redirects it (it did
    /// not run), and once on a new connection when the first one broke and either the
    /// command did not run or running it twice counts it once (`rerun_is_harmless`).
    async fn send(
        &self,
        key: &str,
        command: &Cmd,
        rerun_is_harmless: bool,
    ) -> Result<Value, Failure> {
        let mut link = self.topology.link(key).await.map_err(Failure::Redis)?;
        let (mut asking, mut resent) = (false, false);
        for _ in 0..MAX_REDIRECTS {
            let failure = match attempt(&mut link, command, asking).await {
                Ok(reply) => return Ok(reply),
                Err(failure) => failure,
            };
            let may_resend = match &failure {
                Failure::Unsent(_) => true,
                Failure::Interrupted(_) => rerun_is_harmless,
                Failure::Redis(_) => false,
            };
            (link, asking) = if may_resend && !resent {
                resent = true;
                let link = self.topology.replace(key, &link).await;
                (link.map_err(Failure::Redis)?, false)
            } else if let Failure::Redis(err) = &failure {
                match self.topology.redirect(key, err).await {
                    Some(redirect) => (redirect.link, redirect.asking),
                    None => return Err(failure),
                }
            } else {
                return Err(failure);
            };
        }
        Err(Failure::Redis(RedisError::from((
            ErrorKind::Io,
            "Redis kept redirecting the command",
        ))))
    }

    /// Maps a failure to what the limiter reports, naming the server, never the URL; the
    /// Redis error is the source, and its text ends the message.
    fn error(&self, key: &str, failure: Failure) -> BackendError {
        let shown = &self.shown;
        let err = match failure {
            Failure::Interrupted(err) => {
                let detail = format!(
                    "cannot reach {shown}; is it running? The connection broke while `{key}` was \
                     checked, so the check may have been counted; it was not sent again"
                );
                return BackendError::new(BackendErrorKind::Unavailable, detail).with_source(err);
            }
            Failure::Redis(err) | Failure::Unsent(err) => err,
        };
        let (kind, detail) = match err.kind() {
            ErrorKind::Io if err.is_timeout() => (
                BackendErrorKind::Timeout,
                format!("{shown} did not answer in time"),
            ),
            ErrorKind::Io => (
                BackendErrorKind::Unavailable,
                format!("cannot reach {shown}; is it running?"),
            ),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::ReadOnly,
            ) => (
                BackendErrorKind::Unavailable,
                format!("{shown} cannot serve writes right now"),
            ),
            ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => (
                BackendErrorKind::Misconfigured,
                format!(
                    "{shown} refused the limiter; check the user and password in the URL and \
                     the user's ACL (it needs EVALSHA, EVAL and DEL)"
                ),
            ),
            // A TLS certificate that is not trusted, no trusted roots: retrying cannot help.
            ErrorKind::InvalidClientConfig => (
                BackendErrorKind::Misconfigured,
                format!("cannot connect to {shown} as configured"),
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
                format!("{shown} failed the rate-limit check of `{key}`"),
            ),
        };
        BackendError::new(kind, detail).with_source(err)
    }

    async fn run(&self, request: &Request<'_>) -> Result<RawDecision, Failure> {
        let harmless = script::rerun_is_harmless(request.algorithm);
        let key = request.key;
        let invocation = script::Invocation::new(request);
        let reply = match self.send(key, &invocation.evalsha(), harmless).await {
            // NOSCRIPT: nothing ran. The body goes with this check, instead of a SCRIPT LOAD
            // that a Cluster would have to send to every node.
            Err(Failure::Redis(err))
                if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                self.send(key, &invocation.eval(), harmless).await
            }
            reply => reply,
        }?;
        invocation.decode(&reply).ok_or_else(|| {
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
            .send(key, &hgetall, true)
            .await
            .map_err(|failure| self.error(key, failure))?;
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = redis::from_redis_value(reply).map_err(|err| {
            BackendError::new(
                BackendErrorKind::Command,
                format!(
                    "{} answered HGETALL {key} with something else than a hash: {err}",
                    self.shown
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

/// Sends `command` on `link` once (after `ASKING` when `asking`). A connection that fails
/// is closed, so that the next call makes a new one.
async fn attempt(link: &mut Link, command: &Cmd, asking: bool) -> Result<Value, Failure> {
    let writes = link.writes();
    let reply = if asking {
        link.send_asking(command).await
    } else {
        link.send(command).await
    };
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

impl Topology {
    /// A connection to the server for `key`.
    async fn link(&self, key: &str) -> redis::RedisResult<Link> {
        match self {
            Topology::Single(node) => node.next().await,
            Topology::Cluster(cluster) => cluster.link(key).await,
            Topology::Sentinel(sentinel) => sentinel.link().await,
        }
    }

    /// A connection for `key` in place of `broken`, on which a call just failed.
    async fn replace(&self, key: &str, broken: &Link) -> redis::RedisResult<Link> {
        match self {
            Topology::Single(node) => node.replace(broken).await,
            Topology::Cluster(cluster) => cluster.replace(key, broken).await,
            Topology::Sentinel(sentinel) => sentinel.replace(broken).await,
        }
    }

    /// Where to send `key`'s command again after Redis answered `err`, if anywhere.
    async fn redirect(&self, key: &str, err: &RedisError) -> Option<Redirect> {
        match self {
            Topology::Single(_) => None,
            Topology::Cluster(cluster) => cluster.redirect(key, err).await,
            Topology::Sentinel(sentinel) => sentinel.redirect(err).await.map(|link| Redirect {
                link,
                asking: false,
            }),
        }
    }
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
        self.send(key, &del, true)
            .await
            .map(drop)
            .map_err(|failure| self.error(key, failure))
    }
}
