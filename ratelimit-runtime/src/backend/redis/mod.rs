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

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::{Cmd, Script, Value};
use tokio::time::{timeout_at, Instant};

mod block;
mod breaker;
mod check_all;
mod cluster;
mod config;
mod dial;
mod failure;
mod link;
mod most_limited;
mod node;
mod operator;
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

use super::{GiveBack, Refund, Request, Settle};
use crate::clock::{explicit_us, Clock, SystemClock};
use crate::decision::{CountedBy, RawDecision, Receipt};
use crate::BackendError;
use breaker::Health;
use cluster::Cluster;
use dial::{Endpoint, Options};
use failure::Failure;
use link::Link;
use node::Node;
use sentinel::Sentinel;
use target::Layout;

/// How many servers (or connections) one command is sent to at most, following redirects
/// (`MOVED`, `ASK`, `READONLY`) and failovers: a few suffice while a Cluster or Sentinel
/// changes masters.
const MAX_HOPS: usize = 5;

/// The Redis backend: checks and resets under the configuration's timeout, each server
/// behind a breaker of its own.
pub(crate) struct RedisBackend {
    /// What it was built from.
    config: RedisConfig,
    /// Built from `config` at first use, so that a limiter's options change only the
    /// configuration (`configure`).
    topology: OnceLock<Topology>,
    /// Whether checks carry this process's clock, the server having refused `TIME` in
    /// scripts (see [`check`](Self::check)).
    client_clock: AtomicBool,
}

/// Where a key's commands go; each topology is a file of its own.
enum Topology {
    Single(Node),
    Cluster(Cluster),
    Sentinel(Sentinel),
}

/// A server a topology found: the one it holds, or one it shares.
enum NodeRef<'a> {
    Held(&'a Node),
    Shared(Arc<Node>),
}

/// Where one attempt of a command goes.
struct Hop<'a> {
    node: NodeRef<'a>,
    /// A connection of `node` that broke in the last attempt: this one goes on its
    /// replacement.
    broken: Option<Link>,
    /// Send `ASKING` first.
    asking: bool,
}

impl RedisBackend {
    /// A backend as `config` says; it builds its servers, and connects, on first use.
    pub fn new(config: RedisConfig) -> Self {
        RedisBackend {
            config,
            topology: OnceLock::new(),
            client_clock: AtomicBool::new(false),
        }
    }

    /// Changes the configuration by `change`: a limiter's options (`timeout`, `breaker`,
    /// `with_tls_ca`), set before its first check. The servers are built at first use
    /// from the configuration then.
    pub fn configure(&mut self, change: impl FnOnce(&mut RedisConfig)) {
        change(&mut self.config);
        self.topology = OnceLock::new();
    }

    /// Where the keys' commands go, built at the first call.
    fn topology(&self) -> &Topology {
        self.topology.get_or_init(|| Topology::new(&self.config))
    }

    /// The configuration this backend was built from.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    fn error(&self, key: &str, failure: Failure) -> BackendError {
        failure.into_backend_error(&self.config.target.shown, key, self.config.timeout)
    }

    /// When a call started now must have its answer.
    fn deadline(&self, timeout: Duration) -> Instant {
        let now = Instant::now();
        // A timeout too long to add is no timeout: a year will do.
        now.checked_add(timeout)
            .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
    }

    /// Sends `command` on `key`'s server, before `deadline`. Sends it again where Redis
    /// redirects it (it did not run), and once on a new connection, to wherever the key
    /// lives now, when the first one broke and either the command did not run or running it
    /// twice counts it once (`rerun_is_harmless`).
    async fn send(
        &self,
        key: &str,
        command: &Cmd,
        rerun_is_harmless: bool,
        deadline: Instant,
    ) -> Result<Value, Failure> {
        let mut seen = self.topology().mark();
        let mut hop = Hop {
            node: self.topology().node(key, seen, deadline).await?,
            broken: None,
            asking: false,
        };
        let (mut resent, mut rerouted) = (false, false);
        for _ in 0..MAX_HOPS {
            let failure = match hop.attempt(command, deadline).await {
                Ok(reply) => return Ok(reply),
                Err(failure) => failure,
            };
            let follow = match &failure {
                Failure::Unsent(_) => !std::mem::replace(&mut resent, true),
                Failure::Interrupted(_) => {
                    rerun_is_harmless && !std::mem::replace(&mut resent, true)
                }
                Failure::Unreachable(_) => !std::mem::replace(&mut rerouted, true),
                Failure::Moved(_) | Failure::Ask(_) | Failure::ReadOnly(_) => true,
                _ => false,
            };
            // With no time left, finding the server again would only be cut short.
            if !follow || Instant::now() >= deadline {
                return Err(failure);
            }
            // When the topology cannot say (its refresh failed), what happened here says
            // more than why it could not.
            let Ok(Some(next)) = self.topology().after(key, &failure, seen, deadline).await else {
                return Err(failure);
            };
            let same = next.node.is(&hop.node);
            if same && matches!(failure, Failure::Unreachable(_)) {
                return Err(failure);
            }
            seen = self.topology().mark();
            hop = Hop {
                // The connection to replace, when the command goes to the same server.
                broken: hop.broken.take().filter(|_| same),
                ..next
            };
        }
        Err(Failure::Redirects)
    }

    /// Sends `command` (a script's `EVALSHA`) for `key`; when the server does not know the
    /// script (NOSCRIPT: nothing ran), sends `eval()`, the script's body, instead of a
    /// `SCRIPT LOAD` that a Cluster would have to send to every node (`None`: the command
    /// was no script of ours, and NOSCRIPT is the answer).
    async fn send_script(
        &self,
        key: &str,
        command: &Cmd,
        eval: impl FnOnce() -> Option<Cmd>,
        harmless: bool,
        deadline: Instant,
    ) -> Result<Value, Failure> {
        match self.send(key, command, harmless, deadline).await {
            Err(Failure::NoScript) => match eval() {
                Some(eval) => self.send(key, &eval, harmless, deadline).await,
                None => Err(Failure::NoScript),
            },
            reply => reply,
        }
    }

    /// Runs `script`, whose body is `source`, for `key` with `args` after the script (see
    /// [`send_script`](Self::send_script)): its `EVALSHA`, and its `EVAL`, made only when
    /// the server does not know the script.
    async fn run_script(
        &self,
        key: &str,
        (script, source): (&Script, &str),
        args: impl Fn(&mut Cmd),
        harmless: bool,
        deadline: Instant,
    ) -> Result<Value, Failure> {
        let mut evalsha = script::evalsha_or_eval(true, source, script);
        args(&mut evalsha);
        let eval = || {
            let mut eval = script::evalsha_or_eval(false, source, script);
            args(&mut eval);
            Some(eval)
        };
        self.send_script(key, &evalsha, eval, harmless, deadline)
            .await
    }

    async fn run(&self, request: &Request<'_>, deadline: Instant) -> Result<RawDecision, Failure> {
        let harmless = script::rerun_is_harmless(request.algorithm);
        let key = request.key;
        let invocation = script::Invocation::new(request);
        let eval = || Some(invocation.eval());
        let reply = self
            .send_script(key, &invocation.evalsha(), eval, harmless, deadline)
            .await?;
        invocation.decode(&reply).ok_or_else(|| {
            Failure::Unexpected(
                format!("the rate-limit script answered out of range: {reply:?}").into(),
            )
        })
    }

    /// Every field and value of the hash at `key` (none when it does not exist), through
    /// this runtime's connections: what the rule-override poller reads. Timed out after
    /// the check timeout or 1 s, whichever is longer; bytes that are not UTF-8 are replaced,
    /// so such a value reads as malformed.
    pub(crate) async fn hash_fields(
        &self,
        key: &str,
    ) -> Result<Vec<(String, String)>, BackendError> {
        let mut hgetall = redis::cmd("HGETALL");
        hgetall.arg(key);
        // A read: sending it twice changes nothing.
        let reply = self.operate(key, &hgetall, true).await?;
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

impl Hop<'_> {
    /// Sends `command` to this hop's server when its breaker lets it, before `deadline`,
    /// and tells the breaker how it went. A connection that breaks is closed (so that the
    /// next call makes a new one) and kept in `broken`.
    async fn attempt(&mut self, command: &Cmd, deadline: Instant) -> Result<Value, Failure> {
        let node: &Node = &self.node;
        let pass = node.admit()?;
        let (broken, asking) = (&mut self.broken, self.asking);
        let sent = async {
            let mut link = match broken.take() {
                Some(broken) => node.replace(&broken).await?,
                None => node.next().await?,
            };
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
                    let unsent = link.writes() == writes;
                    *broken = Some(link);
                    Err(match unsent {
                        true => Failure::Unsent(err),
                        false => Failure::Interrupted(err),
                    })
                }
            }
        };
        let outcome = timeout_at(deadline, sent)
            .await
            .unwrap_or(Err(Failure::Timeout));
        pass.record(match &outcome {
            Ok(_) => Health::Answered,
            Err(failure) => failure.health(),
        });
        outcome
    }
}

impl Topology {
    /// The servers `config` names, not connected yet.
    fn new(config: &RedisConfig) -> Topology {
        let options = Arc::new(Options::new(config));
        let endpoint = |info| Endpoint {
            info,
            options: options.clone(),
        };
        let shown = &config.target.shown;
        match config.target.layout.clone() {
            Layout::Single(info) => Topology::Single(Node::new(endpoint(info))),
            Layout::Cluster(seeds) => Topology::Cluster(Cluster::new(
                seeds.into_iter().map(endpoint).collect(),
                shown,
            )),
            Layout::Sentinel {
                sentinels,
                master_name,
                master,
            } => Topology::Sentinel(Sentinel::new(
                sentinels.into_iter().map(endpoint).collect(),
                master_name,
                master,
                shown,
            )),
        }
    }

    /// A mark to pass to [`after`](Self::after), taken before what the topology knows is
    /// used.
    fn mark(&self) -> u64 {
        match self {
            Topology::Single(_) => 0,
            Topology::Cluster(cluster) => cluster.mark(),
            Topology::Sentinel(sentinel) => sentinel.mark(),
        }
    }

    /// The server for `key`; found first when not known yet.
    async fn node(&self, key: &str, seen: u64, deadline: Instant) -> Result<NodeRef<'_>, Failure> {
        Ok(match self {
            Topology::Single(node) => NodeRef::Held(node),
            Topology::Cluster(cluster) => {
                NodeRef::Shared(cluster.node_for(key, seen, deadline).await?)
            }
            Topology::Sentinel(sentinel) => NodeRef::Shared(sentinel.node(seen, deadline).await?),
        })
    }

    /// Where `key`'s command goes after `failure`: the server found again after one that
    /// could not be reached, broke a connection or was demoted; the node a Cluster
    /// redirected it to. `None` when nowhere.
    async fn after(
        &self,
        key: &str,
        failure: &Failure,
        seen: u64,
        deadline: Instant,
    ) -> Result<Option<Hop<'_>>, Failure> {
        let hop = |node, asking| {
            Some(Hop {
                node,
                broken: None,
                asking,
            })
        };
        let lost = matches!(
            failure,
            Failure::Unreachable(_) | Failure::Unsent(_) | Failure::Interrupted(_)
        );
        // A demoted server: a Cluster or the sentinels name its successor; a single
        // server has none.
        let demoted = matches!(failure, Failure::ReadOnly(_));
        Ok(match (self, failure) {
            (Topology::Cluster(cluster), Failure::Moved(address)) => hop(
                NodeRef::Shared(cluster.moved(address, seen, deadline).await?),
                false,
            ),
            (Topology::Cluster(cluster), Failure::Ask(address)) => {
                hop(NodeRef::Shared(cluster.asked(address)?), true)
            }
            _ if !(lost || demoted) => None,
            (Topology::Single(node), _) if lost => hop(NodeRef::Held(node), false),
            (Topology::Single(_), _) => None,
            (Topology::Cluster(cluster), _) => hop(
                NodeRef::Shared(cluster.reroute(key, seen, deadline).await?),
                false,
            ),
            (Topology::Sentinel(sentinel), _) => hop(
                NodeRef::Shared(sentinel.reroute(seen, deadline).await?),
                false,
            ),
        })
    }
}

impl Deref for NodeRef<'_> {
    type Target = Node;

    fn deref(&self) -> &Node {
        match self {
            NodeRef::Held(node) => node,
            NodeRef::Shared(node) => node,
        }
    }
}

impl NodeRef<'_> {
    /// Whether `other` is the same server.
    fn is(&self, other: &NodeRef<'_>) -> bool {
        std::ptr::eq::<Node>(&**self, &**other)
    }
}

/// `request` at this process's clock, unless it has a time of its own.
fn with_client_clock<'a>(request: &Request<'a>) -> Request<'a> {
    Request {
        now_us: request
            .now_us
            .or_else(|| Some(explicit_us(SystemClock.now_us()))),
        ..*request
    }
}

/// Checks and resets fail at once while the breaker of the key's server is open, and with
/// [`BackendError::timeout`] when no answer came in time.
impl RedisBackend {
    /// Runs `request` atomically.
    ///
    /// Time comes from the server's `TIME` inside the script. Some servers refuse `TIME` in
    /// scripts (some managed services; `rename-command TIME ""`): the first check that
    /// meets the refusal, which ran nothing, is sent again with this process's clock, and
    /// if that passes every later check carries it too, with one warning. The scripts
    /// still never let a key's time run backwards (a check older than the key's state is
    /// counted at the state's time), but instances' clocks now matter.
    pub(crate) async fn check(&self, request: &Request<'_>) -> Result<RawDecision, BackendError> {
        let deadline = self.deadline(self.config.timeout);
        if self.client_clock.load(Ordering::Relaxed) {
            return self
                .run(&with_client_clock(request), deadline)
                .await
                .map_err(|failure| self.error(request.key, failure));
        }
        match self.run(request, deadline).await {
            Err(failure) if request.now_us.is_none() && failure.refuses_a_command_in_scripts() => {
                let answer = self.run(&with_client_clock(request), deadline).await;
                if answer.is_ok() && !self.client_clock.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        target: "redis_ratelimit",
                        server = %self.config.target.shown,
                        "the server refuses TIME in scripts: checks now carry this process's \
                         clock, so the clocks of the instances sharing these limits matter \
                         (keep them in sync, e.g. with NTP)"
                    );
                }
                answer
            }
            answer => answer,
        }
        .map_err(|failure| self.error(request.key, failure))
    }

    /// Gives back what `refund.receipt` took (see [`Refund`]), when Redis counted it: the
    /// sliding log's is re-sent like its check (it removes members by name), the others
    /// never once they may have run.
    pub(crate) async fn refund(&self, refund: &Refund<'_>) -> Result<(), BackendError> {
        if !counted_here(&refund.receipt) {
            return Ok(());
        }
        let key = refund.key;
        let deadline = self.deadline(self.config.timeout);
        let harmless = refund.rerun_is_harmless();
        let eval = || refund.eval();
        self.send_script(key, &refund.command(), eval, harmless, deadline)
            .await
            .map(drop)
            .map_err(|failure| self.error(key, failure))
    }

    /// Settles what `settle.receipt` reserved and answers as its peek (see [`Settle`]), in
    /// one round trip; the sliding log's is re-sent like its check (it settles members by
    /// name), the others never once they may have run. `None`: nothing to settle here.
    pub(crate) async fn settle(
        &self,
        settle: &Settle<'_>,
    ) -> Result<Option<RawDecision>, BackendError> {
        if !counted_here(&settle.receipt) {
            return Ok(None);
        }
        let key = settle.peek.key;
        let deadline = self.deadline(self.config.timeout);
        let harmless = settle.rerun_is_harmless();
        let eval = || Some(settle.command(true));
        let reply = self
            .send_script(key, &settle.command(false), eval, harmless, deadline)
            .await
            .map_err(|failure| self.error(key, failure))?;
        settle.decode(&reply).map(Some).ok_or_else(|| {
            self.error(
                key,
                Failure::Unexpected(
                    format!("the settle script answered out of range: {reply:?}").into(),
                ),
            )
        })
    }

    /// Gives back what the draw `give_back.receipt` names did not use, and re-times what it
    /// used (see [`GiveBack`]), in one round trip; nothing for a receipt of nothing or of
    /// another backend. Sent twice, it changes the key once, so it is re-sent like a
    /// sliding-log check.
    pub(crate) async fn give_back(&self, give_back: &GiveBack) -> Result<(), BackendError> {
        let receipt = &give_back.receipt;
        if receipt.is_empty() || receipt.counted_by != CountedBy::Redis {
            return Ok(());
        }
        let key = &give_back.key;
        let [evalsha, eval] = script::give_back(give_back);
        let deadline = self.deadline(self.config.timeout);
        self.send_script(key, &evalsha, || Some(eval), true, deadline)
            .await
            .map(drop)
            .map_err(|failure| self.error(key, failure))
    }

    /// [`give_back`](Self::give_back) of each of `give_backs`, sent at once (one command
    /// per key, each to its key's server), answered in their order.
    pub(crate) async fn give_back_all(
        &self,
        give_backs: &[GiveBack],
    ) -> Vec<Result<(), BackendError>> {
        futures_util::future::join_all(give_backs.iter().map(|g| self.give_back(g))).await
    }

    /// Forgets `key`.
    pub(crate) async fn reset(&self, key: &str) -> Result<(), BackendError> {
        let mut del = redis::cmd("DEL");
        // The key's slots and draws too: in its hash slot, so one command on a Cluster as
        // well.
        del.arg(key)
            .arg(script::slots_key(key))
            .arg(script::drawn_key(key));
        let deadline = self.deadline(self.config.timeout);
        // Deleting twice forgets the key once.
        self.send(key, &del, true, deadline)
            .await
            .map(drop)
            .map_err(|failure| self.error(key, failure))
    }
}

// Calls in flight (`slot.rs`): a slot is taken by the check's own script; these renew and
// release it.
impl RedisBackend {
    /// Renews the lease of the slot `id` of `key` for `lease_us` more; `false` when it is
    /// no longer held. Sends this process's clock where the server refuses `TIME`.
    pub(crate) async fn renew_slot(
        &self,
        key: &str,
        id: crate::concurrency::SlotId,
        lease_us: u64,
    ) -> Result<bool, BackendError> {
        let slots = script::slots_key(key);
        let now_us = match self.client_clock.load(Ordering::Relaxed) {
            true => SystemClock.now_us(),
            false => 0,
        };
        let [evalsha, eval] = script::renew_slot(&slots, id, lease_us, now_us);
        let deadline = self.deadline(self.config.timeout);
        // A renewal run twice renews once.
        let reply = self
            .send_script(&slots, &evalsha, || Some(eval), true, deadline)
            .await
            .map_err(|failure| self.error(key, failure))?;
        Ok(reply == Value::Int(1))
    }

    /// Frees the slot `id` of `key`.
    pub(crate) async fn release_slot(
        &self,
        key: &str,
        id: crate::concurrency::SlotId,
    ) -> Result<(), BackendError> {
        let slots = script::slots_key(key);
        let mut zrem = redis::cmd("ZREM");
        zrem.arg(&slots).arg(&id.0[..]);
        let deadline = self.deadline(self.config.timeout);
        // Removing twice frees once.
        self.send(&slots, &zrem, true, deadline)
            .await
            .map(drop)
            .map_err(|failure| self.error(key, failure))
    }

    /// How many slots of `key` are held now. A read: sending it twice changes nothing.
    pub(crate) async fn slots_in_use(&self, key: &str) -> Result<u64, BackendError> {
        let slots = script::slots_key(key);
        let now_us = match self.client_clock.load(Ordering::Relaxed) {
            true => SystemClock.now_us(),
            false => 0,
        };
        let [evalsha, eval] = script::slots_in_use(&slots, now_us);
        let deadline = self.deadline(self.config.timeout);
        let reply = self
            .send_script(&slots, &evalsha, || Some(eval), true, deadline)
            .await
            .map_err(|failure| self.error(key, failure))?;
        match reply {
            Value::Int(n) if n >= 0 => Ok(n as u64),
            other => Err(self.error(
                key,
                Failure::Unexpected(format!("counting slots answered {other:?}").into()),
            )),
        }
    }
}

/// Whether Redis counted what `receipt` names, so that a refund or settle of it has
/// something to do here: not a decision that took nothing, nor one another backend made.
fn counted_here(receipt: &Receipt) -> bool {
    !receipt.is_empty() && receipt.counted_by == CountedBy::Redis
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Breaker, RedisBackend, RedisConfig};
    use crate::decision::{CountedBy, Receipt};

    #[test]
    fn options_change_the_configuration_and_build_no_server() {
        let config = RedisConfig::new("redis+cluster://127.0.0.1:1,127.0.0.1:2", Duration::ZERO);
        let mut backend = RedisBackend::new(config.expect("a URL"));
        backend.configure(|config| config.set_breaker(Breaker::never()));
        backend.configure(|config| config.set_timeout(Duration::from_millis(7)));
        assert!(
            backend.topology.get().is_none(),
            "nothing is built before first use"
        );
        assert_eq!(backend.config().timeout, Duration::from_millis(7));
        assert_eq!(backend.config().breaker, Breaker::never());
        assert_eq!(backend.config().operator_timeout(), Duration::from_secs(1));

        // Built once, at the first call, from the configuration then.
        let built: *const _ = backend.topology();
        assert!(std::ptr::eq(built, backend.topology()));
        assert!(matches!(backend.topology(), super::Topology::Cluster(_)));
    }

    #[test]
    fn nothing_to_refund_or_settle_sends_nothing() {
        assert!(!super::counted_here(&Receipt::NONE));
        let counted_in_memory = Receipt {
            cost: 1,
            counted_by: CountedBy::Memory,
            ..Receipt::NONE
        };
        assert!(!super::counted_here(&counted_in_memory));
        let counted_by_redis = Receipt {
            counted_by: CountedBy::Redis,
            ..counted_in_memory
        };
        assert!(super::counted_here(&counted_by_redis));
    }
}
