//! Sentinel: checks go to the master that the sentinels name, and follow it when they
//! fail it over.
//!
//! After a failover the old master keeps accepting writes until the sentinels demote it
//! (10-20 s), and what it counts then is lost: so the limiter moves at once.
//! - A thread of the backend's own subscribes to a sentinel's `+switch-master`
//!   notifications (the next sentinel when one goes away) and moves checks to the new
//!   master as soon as one arrives, asking again after each (re)subscription in case one
//!   was missed. No check ever waits on that thread.
//! - The master is also asked for again when it answers `READONLY`, refuses connections or
//!   breaks one; calls that need that at once share one question.
//! - Moving swaps the master for the checks that start after; those already sent finish on
//!   the connection they were sent on. Each master is a [`Node`] of its own: the new one
//!   starts with its breaker closed.

use std::fmt;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use futures_util::StreamExt;
use redis::{ConnectionAddr, RedisConnectionInfo, RedisError, Value};
use tokio::time::Instant;

use super::dial::Endpoint;
use super::failure::Failure;
use super::node::Node;
use super::refresh::{Refresh, Refreshing};

/// How long the watcher waits before trying the next sentinel.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(200);

/// How long the watcher's question to the sentinels may take (each sentinel's connect is
/// bounded too).
const WATCHER_QUESTION: Duration = Duration::from_secs(5);

pub(super) struct Sentinel {
    shared: Arc<Shared>,
    /// Set once the watcher thread has started.
    watching: OnceLock<()>,
}

struct Shared {
    sentinels: Vec<Endpoint>,
    master_name: Box<str>,
    /// Credentials and database for the master.
    settings: RedisConnectionInfo,
    master: ArcSwapOption<Node>,
    /// Asking the sentinels for the master.
    master_refresh: Refresh,
}

impl Sentinel {
    /// `shown` is what messages call the master and its sentinels.
    pub fn new(
        sentinels: Vec<Endpoint>,
        master_name: Box<str>,
        settings: RedisConnectionInfo,
        shown: &str,
    ) -> Sentinel {
        let breaker = sentinels[0].options.breaker;
        Sentinel {
            shared: Arc::new(Shared {
                sentinels,
                master_name,
                settings,
                master: ArcSwapOption::empty(),
                master_refresh: Refresh::new(breaker, format!("the sentinels of {shown}")),
            }),
            watching: OnceLock::new(),
        }
    }

    /// What a call notes before it uses the master, to pass to
    /// [`reroute`](Self::reroute) when that failed.
    pub fn mark(&self) -> u64 {
        self.shared.master_refresh.mark()
    }

    /// The master. The first call asks the sentinels for it (and starts following their
    /// failovers), unless that was done since `seen`.
    pub async fn node(&self, seen: u64, deadline: Instant) -> Result<Arc<Node>, Failure> {
        self.watching
            .get_or_init(|| watch(Arc::downgrade(&self.shared)));
        if let Some(node) = self.shared.master.load_full() {
            return Ok(node);
        }
        self.reroute(seen, deadline).await
    }

    /// The master after a call to the last one failed (it could not be reached, broke a
    /// connection, or answered `READONLY`): the sentinels are asked again first, unless that
    /// was done since `seen`.
    pub async fn reroute(&self, seen: u64, deadline: Instant) -> Result<Arc<Node>, Failure> {
        self.shared.resolve(seen, deadline).await?;
        self.shared
            .master
            .load_full()
            .ok_or(Failure::NoServer("the sentinels named no master"))
    }
}

impl Shared {
    /// Asks the sentinels for the master, unless that was done since `seen` (see
    /// [`Refresh`]).
    fn resolve(&self, seen: u64, deadline: Instant) -> Refreshing<'_> {
        self.master_refresh
            .run(seen, deadline, self.ask_sentinels())
    }

    async fn ask_sentinels(&self) -> Result<(), Failure> {
        let mut failure = None;
        let mut ask = redis::cmd("SENTINEL");
        ask.arg("get-master-addr-by-name").arg(&*self.master_name);
        for sentinel in &self.sentinels {
            let reply = match sentinel.query_once(&ask).await {
                Err(Failure::Answer(err)) if self.may_authenticate(err.code()) => {
                    self.authenticated(sentinel).query_once(&ask).await
                }
                reply => reply,
            };
            match reply {
                Ok(Value::Array(address)) => {
                    match read_address(&address) {
                        Some((host, port)) => {
                            self.move_to(&host, port);
                            return Ok(());
                        }
                        None => failure = Some(Failure::Unexpected(
                            "a sentinel answered get-master-addr-by-name with something unexpected"
                                .into(),
                        )),
                    }
                }
                Ok(_) => failure = Some(Failure::UnknownMaster),
                Err(err) => failure = Some(err),
            }
        }
        Err(failure.unwrap_or(Failure::NoServer("no sentinel answered")))
    }

    /// Whether an error answer of `code` is a sentinel asking for credentials that the URL
    /// has. Sentinels rarely require them, so they are asked without first.
    fn may_authenticate(&self, code: &str) -> bool {
        code == "NOAUTH" && self.settings.password().is_some()
    }

    /// `sentinel` with the URL's credentials.
    fn authenticated(&self, sentinel: &Endpoint) -> Endpoint {
        sentinel.with_settings(self.settings.clone().set_db(0))
    }

    /// Sends checks to the master at `host:port` from now on.
    fn move_to(&self, host: &str, port: u16) {
        let current = self.master.load();
        if let Some(node) = current.as_ref() {
            if let ConnectionAddr::Tcp(h, p) = node.endpoint().info.addr() {
                if h == host && *p == port {
                    return;
                }
            }
        }
        let endpoint = self.sentinels[0]
            .at(host, port)
            .with_settings(self.settings.clone());
        self.master.store(Some(Arc::new(Node::new(endpoint))));
        tracing::info!(
            master = %self.master_name,
            address = %format_args!("{host}:{port}"),
            "rate limiting follows the sentinels to a new master"
        );
    }
}

/// Starts the thread that follows `+switch-master`; it ends within a second of the
/// backend being dropped.
fn watch(shared: Weak<Shared>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let Ok(runtime) = runtime else {
        tracing::warn!("cannot start the sentinel watcher; failovers are followed on errors only");
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("ratelimit-sentinel".into())
        .spawn(move || runtime.block_on(follow(shared)));
    if let Err(err) = spawned {
        tracing::warn!(%err, "cannot start the sentinel watcher; failovers are followed on errors only");
    }
}

async fn follow(shared: Weak<Shared>) {
    for turn in 0.. {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let sentinel = strong.sentinels[turn % strong.sentinels.len()].clone();
        let master_name = strong.master_name.clone();
        drop(strong);
        if let Err(lost) = listen(&shared, &sentinel, &master_name).await {
            tracing::debug!(
                %lost,
                "lost the sentinel's notifications; trying the next one"
            );
        }
        tokio::time::sleep(RESUBSCRIBE_AFTER).await;
    }
}

/// `[host, port]`, as a sentinel names a master.
fn read_address(address: &[Value]) -> Option<(String, u16)> {
    let [host, port] = address else {
        return None;
    };
    let host = redis::from_redis_value(host.clone()).ok()?;
    let port = redis::from_redis_value(port.clone()).ok()?;
    Some((host, port))
}

/// Why the watcher stopped listening to a sentinel (logged at debug level).
enum Lost {
    Subscription(RedisError),
    Closed,
    Master(Failure),
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lost::Subscription(err) => write!(f, "{err}"),
            Lost::Closed => f.write_str("the sentinel closed the connection"),
            Lost::Master(failure) => write!(f, "asking for the master failed: {failure:?}"),
        }
    }
}

/// Follows one sentinel's `+switch-master` notifications until its connection ends or the
/// backend is dropped.
async fn listen(shared: &Weak<Shared>, sentinel: &Endpoint, master_name: &str) -> Result<(), Lost> {
    let Some(strong) = shared.upgrade() else {
        return Ok(());
    };
    let mut subscriber = sentinel.subscriber().await.map_err(Lost::Subscription)?;
    if let Err(err) = subscriber.subscribe("+switch-master").await {
        if !strong.may_authenticate(err.code().unwrap_or_default()) {
            return Err(Lost::Subscription(err));
        }
        subscriber = strong
            .authenticated(sentinel)
            .subscriber()
            .await
            .map_err(Lost::Subscription)?;
        subscriber
            .subscribe("+switch-master")
            .await
            .map_err(Lost::Subscription)?;
    }
    drop(strong);
    // A switch may have happened while nobody listened.
    match shared.upgrade() {
        Some(shared) => {
            let seen = shared.master_refresh.mark();
            let deadline = Instant::now() + WATCHER_QUESTION;
            shared.resolve(seen, deadline).await.map_err(Lost::Master)?;
        }
        None => return Ok(()),
    }
    let mut messages = subscriber.on_message();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(1), messages.next()).await;
        let Some(shared) = shared.upgrade() else {
            return Ok(());
        };
        match message {
            // Timed out: only to notice a dropped backend.
            Err(_) => continue,
            Ok(None) => return Err(Lost::Closed),
            Ok(Some(message)) => {
                // `<master name> <old ip> <old port> <new ip> <new port>`
                let payload: String = message.get_payload().map_err(Lost::Subscription)?;
                let fields: Vec<&str> = payload.split(' ').collect();
                if let [name, _, _, host, port] = fields[..] {
                    if name == master_name {
                        if let Ok(port) = port.parse() {
                            shared.move_to(host, port);
                        }
                    }
                }
            }
        }
    }
}
