//! The Redis backend: one EVALSHA per check over shared multiplexed connections.
//!
//! Where Redis runs ([`target`] reads the URL, [`config`] holds it with the timeout, the
//! breaker and the TLS roots): one server (TCP, TLS or a Unix socket), a [`Cluster`] or the
//! master a [`Sentinel`] names. Each topology finds the server for a key; a [`Node`] holds
//! one server's connections, and this file sends, re-sends and times commands the same for
//! all. What goes wrong is a [`Failure`] of the layer's own, worded for the limiter in
//! [`failure`].
//!
//! | redis-rs does | we do ourselves, and why |
//! |---|---|
//! | the RESP codec: commands written, replies and error answers read | per-runtime connections ([`node`], [`pool`]): redis-rs drives a connection on the runtime that made it, and a limiter outlives and spans runtimes |
//! | the connection's setup: `AUTH`, `SELECT` | dialling ([`dial`]): TCP keepalive and user timeout (half-open connections), rustls with a private CA and no process-wide provider ([`tls`]), one timeout for the whole connect |
//! | [`Cmd`] and its arguments; the scripts' SHA1 ([`redis::Script`]) | counted writes ([`write_counter`], [`link`]): knowing a command was never written is what lets it be sent again without counting a check twice; redis-rs's own retries do not know |
//! | pub/sub, for Sentinel's `+switch-master` | Cluster routing ([`cluster`]): one key per check, so a slot map and `MOVED`/`ASK` are all it needs, with at-most-once re-sends and `EVAL` on `NOSCRIPT` per node |
//! | a URL's server part: host, port, user, password, database | Sentinel routing ([`sentinel`]): moving at once on `+switch-master`, and sentinels asked with the URL's credentials only when they require them; the URL forms with many hosts ([`target`]) |
//!
//! Connection policy ([`node`], [`pool`], [`link`], [`dial`]):
//! - each Tokio runtime that checks gets two multiplexed connections of its own, made on its
//!   first check and driven by that runtime, taking its checks in turn. So a limiter works
//!   from every runtime at once (a `static` limiter shared by `#[tokio::test]`s, actix-web's
//!   runtime per worker) and after the runtime that first used it has shut down, and no
//!   check ever waits for another runtime's threads. A runtime's connections close when it
//!   shuts down;
//! - a connection that stopped (the server closed or killed it, or restarted; or three calls
//!   in a row got no answer in time; or TCP keepalive found its peer gone) is re-made by
//!   the next call that finds it so, in one attempt, without backoff, timed out after
//!   [`CONNECT_TIMEOUT`](dial::CONNECT_TIMEOUT) or the check's timeout if shorter. A
//!   failed connect is not remembered (a wrong password fixed in the ACL works at the next
//!   call); calls waiting for the same connection share that attempt. So while Redis is
//!   down each call costs a refused connect and fails as
//!   [`Unavailable`](crate::BackendErrorKind::Unavailable), and the first call after Redis
//!   is back succeeds;
//! - counted at most once: a command is sent again only when it was certainly not written
//!   (its connection was known to be broken, or could not be made, before it was sent, or
//!   broke before anything was written on it since), or when running it twice counts it
//!   once ([`script::rerun_is_harmless`], and `DEL`), or when Redis redirected it
//!   (`MOVED`, `ASK`, `READONLY`: it did not run). A check whose connection broke after it
//!   was sent may have run: it is reported as failed,
//!   [`Unavailable`](crate::BackendErrorKind::Unavailable), and the limiter's fail-open or
//!   fail-closed policy applies;
//! - a server that does not know a script (first use, `SCRIPT FLUSH`, a restart) answers
//!   NOSCRIPT without running anything; that check is then sent as an `EVAL` with the
//!   script's body to the same node (a `SCRIPT LOAD` on a Cluster would have to reach every
//!   node, and fails while one is down);
//! - every check and reset is timed here (the configuration's timeout, connecting
//!   included) and goes through the [`breaker`]: while it is open, it fails in microseconds
//!   without touching Redis.

use std::future::Future;
use std::sync::Arc;

use redis::{Cmd, Value};

mod breaker;
mod cluster;
mod config;
mod dial;
mod failure;
mod link;
mod node;
mod pool;
mod refresh;
mod script;
mod sentinel;
mod target;
#[cfg(feature = "tls")]
mod tls;
mod write_counter;

pub use breaker::Breaker;
pub(crate) use config::RedisConfig;

use super::Request;
use crate::decision::RawDecision;
use crate::BackendError;
use breaker::{Admission, BreakerState};
use cluster::Cluster;
use dial::{Endpoint, Options};
use failure::Failure;
use link::Link;
use node::Node;
use sentinel::Sentinel;
use target::Layout;

/// How many times one command follows redirects (`MOVED`, `ASK`, `READONLY`) before it
/// fails: a few suffice while a Cluster or Sentinel changes masters.
const MAX_REDIRECTS: usize = 5;

/// The Redis backend: checks and resets under the configuration's timeout and breaker.
pub(crate) struct RedisBackend {
    /// What it was built from.
    config: RedisConfig,
    topology: Topology,
    breaker: BreakerState,
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

impl RedisBackend {
    /// A backend as `config` says; it connects on first use.
    pub fn new(config: &RedisConfig) -> Self {
        let options = Arc::new(Options::new(config));
        let endpoint = |info| Endpoint {
            info,
            options: options.clone(),
        };
        let topology = match config.target.layout.clone() {
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
            )),
        };
        RedisBackend {
            config: config.clone(),
            topology,
            breaker: BreakerState::new(config.breaker),
        }
    }

    /// The configuration this backend was built from.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// Runs `work` on `key`'s server when the breaker lets it, within the timeout, and
    /// tells the breaker how it went.
    async fn guarded<T>(
        &self,
        key: &str,
        work: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, BackendError> {
        let pass = match self.breaker.admit() {
            Admission::Send(pass) => pass,
            Admission::Refuse(err) => return Err(err),
        };
        let timeout = self.config.timeout;
        let result = match tokio::time::timeout(timeout, work).await {
            Ok(result) => result.map_err(|failure| self.error(key, failure)),
            Err(_) => Err(BackendError::timeout(timeout)),
        };
        pass.record(&result);
        result
    }

    fn error(&self, key: &str, failure: Failure) -> BackendError {
        failure.into_backend_error(&self.config.target.shown, key)
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
        let mut link = self.topology.link(key).await?;
        let (mut asking, mut resent) = (false, false);
        for _ in 0..MAX_REDIRECTS {
            let failure = match attempt(&mut link, command, asking).await {
                Ok(reply) => return Ok(reply),
                Err(failure) => failure,
            };
            let may_resend = match &failure {
                Failure::Unsent(_) => true,
                Failure::Interrupted(_) => rerun_is_harmless,
                _ => false,
            };
            (link, asking) = if may_resend && !resent {
                resent = true;
                (self.topology.replace(key, &link).await?, false)
            } else {
                match self.topology.redirect(key, &failure).await {
                    Some(redirect) => (redirect.link, redirect.asking),
                    None => return Err(failure),
                }
            };
        }
        Err(Failure::Redirects)
    }

    async fn run(&self, request: &Request<'_>) -> Result<RawDecision, Failure> {
        let harmless = script::rerun_is_harmless(request.algorithm);
        let key = request.key;
        let reply = match self.send(key, &script::evalsha(request), harmless).await {
            // NOSCRIPT: nothing ran. The body goes with this check, instead of a SCRIPT LOAD
            // that a Cluster would have to send to every node.
            Err(Failure::NoScript) => self.send(key, &script::eval(request), harmless).await,
            reply => reply,
        }?;
        script::decode(&reply, request.rules).ok_or_else(|| {
            Failure::Unexpected(
                format!("the rate-limit script answered out of range: {reply:?}").into(),
            )
        })
    }

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
            let what = format!("HGETALL answered something else than a hash: {err}");
            self.error(key, Failure::Unexpected(what.into()))
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
    match reply {
        Ok(reply) => Failure::from_reply(reply),
        Err(err) => {
            link.close();
            Err(if link.writes() == writes {
                Failure::Unsent(err)
            } else {
                Failure::Interrupted(err)
            })
        }
    }
}

impl Topology {
    /// A connection to the server for `key`.
    async fn link(&self, key: &str) -> Result<Link, Failure> {
        match self {
            Topology::Single(node) => node.next().await,
            Topology::Cluster(cluster) => cluster.link(key).await,
            Topology::Sentinel(sentinel) => sentinel.link().await,
        }
    }

    /// A connection for `key` in place of `broken`, on which a call just failed.
    async fn replace(&self, key: &str, broken: &Link) -> Result<Link, Failure> {
        match self {
            Topology::Single(node) => node.replace(broken).await,
            Topology::Cluster(cluster) => cluster.replace(key, broken).await,
            Topology::Sentinel(sentinel) => sentinel.replace(broken).await,
        }
    }

    /// Where to send `key`'s command again after `failure`, if anywhere.
    async fn redirect(&self, key: &str, failure: &Failure) -> Option<Redirect> {
        match self {
            Topology::Single(_) => None,
            Topology::Cluster(cluster) => cluster.redirect(key, failure).await,
            Topology::Sentinel(sentinel) => sentinel.redirect(failure).await.map(|link| Redirect {
                link,
                asking: false,
            }),
        }
    }
}

/// Checks and resets fail at once while the breaker is open, and with
/// [`BackendError::timeout`] when no answer came in time.
impl RedisBackend {
    /// Runs `request` atomically.
    pub(crate) async fn check(&self, request: &Request<'_>) -> Result<RawDecision, BackendError> {
        self.guarded(request.key, self.run(request)).await
    }

    /// Forgets `key`.
    pub(crate) async fn reset(&self, key: &str) -> Result<(), BackendError> {
        let mut del = redis::cmd("DEL");
        del.arg(key);
        // Deleting twice forgets the key once.
        self.guarded(key, async { self.send(key, &del, true).await.map(drop) })
            .await
    }
}
