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
//!   the connection they were sent on.

use std::fmt;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use futures_util::StreamExt;
use redis::{ConnectionAddr, RedisConnectionInfo, RedisError, Value};

use super::dial::Endpoint;
use super::failure::Failure;
use super::link::Link;
use super::node::Node;
use super::refresh::{Refresh, Refreshing};

/// How long the watcher waits before trying the next sentinel.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(200);

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
    pub fn new(
        sentinels: Vec<Endpoint>,
        master_name: Box<str>,
        settings: RedisConnectionInfo,
    ) -> Sentinel {
        Sentinel {
            shared: Arc::new(Shared {
                sentinels,
                master_name,
                settings,
                master: ArcSwapOption::empty(),
                master_refresh: Refresh::new(),
            }),
            watching: OnceLock::new(),
        }
    }

    /// A connection to the master. The first call asks the sentinels for it; a master that
    /// cannot be reached is asked for again, once.
    pub async fn link(&self) -> Result<Link, Failure> {
        self.watching
            .get_or_init(|| watch(Arc::downgrade(&self.shared)));
        let shared = &self.shared;
        let seen = shared.master_refresh.mark();
        if let Some(node) = shared.master.load_full() {
            match node.next().await {
                Err(Failure::Unreachable(_)) => {}
                link => return link,
            }
        }
        shared.resolve(seen).await?;
        match shared.master.load_full() {
            Some(node) => node.next().await,
            None => Err(Failure::NoServer("the sentinels named no master")),
        }
    }

    /// A connection in place of `broken`, after a call on it failed: the master may have
    /// changed.
    pub async fn replace(&self, broken: &Link) -> Result<Link, Failure> {
        let seen = self.shared.master_refresh.mark();
        broken.close();
        self.shared.resolve(seen).await?;
        self.link().await
    }

    /// After a `READONLY` answer (the master was demoted): a connection to the new one.
    pub async fn redirect(&self, failure: &Failure) -> Option<Link> {
        if !matches!(failure, Failure::ReadOnly(_)) {
            return None;
        }
        let seen = self.shared.master_refresh.mark();
        self.shared.resolve(seen).await.ok()?;
        self.link().await.ok()
    }
}

impl Shared {
    /// Asks the sentinels for the master, unless that was done since `seen` (see
    /// [`Refresh`]).
    fn resolve(&self, seen: u64) -> Refreshing<'_> {
        self.master_refresh.run(seen, self.ask_sentinels())
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
            shared.resolve(seen).await.map_err(Lost::Master)?;
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
