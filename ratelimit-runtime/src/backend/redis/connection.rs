//! The connections to one Redis server (a [`Node`]): a few multiplexed connections for
//! each Tokio runtime that checks. Every topology (one server, a Cluster's masters, the
//! master a Sentinel names) sends through nodes.
//!
//! redis-rs drives a multiplexed connection with a task (writing the queued commands,
//! reading the replies), spawned on the runtime that connects. A limiter is shared by
//! runtimes that come and go (a `static` limiter used by many `#[tokio::test]`s, actix-web's
//! runtime per worker): a connection driven by one of them stops when that runtime shuts
//! down, and stalls whenever that runtime's threads are busy with something else. So each
//! runtime checks over connections of its own, made and driven on it, and no check ever
//! depends on another runtime. A runtime's connections close when it shuts down; the next
//! runtime to check makes its own.
//!
//! (Driving every connection on one thread the backend owns would serve all runtimes with
//! two connections, but each check then crosses threads twice and Redis gets its commands in
//! smaller batches: on a two-core machine `examples/loadgen` made 15-35% fewer checks per
//! second that way.)

use std::collections::HashMap;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use redis::aio::{AsyncStream, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo,
    RedisConnectionInfo, RedisError, RedisResult, Value,
};
use socket2::{SockRef, TcpKeepalive};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::runtime::{self, Handle};
use tokio::sync::watch;

#[cfg(feature = "tls")]
use super::tls::Tls;

/// How many multiplexed connections each runtime spreads its checks over. Redis answers a
/// connection's pipelined commands in one batch; over a single connection it then idles
/// while the client turns those replies into the next batch. Over two, it serves one
/// connection's batch meanwhile: with `scripts/bench-redis`'s workload, the fixed window and
/// token bucket make 10-20% more checks per second, the sliding log (for which Redis is
/// already busier) a few percent.
const CONNECTIONS: usize = 2;

/// How long one connection attempt (connect, TLS, AUTH, SELECT) may take unless the
/// limiter's check timeout is shorter.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// After this many calls in a row on one connection got no answer in time, it is made anew:
/// a half-open socket (a peer that vanished without closing, a black-holed route) otherwise
/// fails every call until the kernel gives up on it.
const TIMEOUTS_BEFORE_REBUILD: u32 = 3;

/// TCP keepalive probes start after this much silence, and the kernel drops a connection
/// whose written data has gone unacknowledged for [`USER_TIMEOUT`].
const KEEPALIVE: Duration = Duration::from_secs(5);
const USER_TIMEOUT: Duration = Duration::from_secs(10);

/// One Redis server's connections, by runtime.
pub(super) struct Node {
    endpoint: Endpoint,
    runtimes: RwLock<HashMap<runtime::Id, Arc<Pool>>>,
}

/// How to reach one server.
#[derive(Clone)]
pub(super) struct Endpoint {
    pub info: ConnectionInfo,
    pub options: Arc<Options>,
}

/// What every connection of a backend shares.
#[derive(Default)]
pub(super) struct Options {
    /// Set for the `rediss…://` forms.
    #[cfg(feature = "tls")]
    pub tls: Option<Tls>,
    /// A connect's timeout in µs; 0 means [`CONNECT_TIMEOUT`].
    connect_timeout_us: AtomicU64,
}

/// One runtime's connections: [`CONNECTIONS`] slots taking calls in turn.
#[derive(Default)]
struct Pool {
    slots: [Arc<Slot>; CONNECTIONS],
    /// Which slot the next call takes, modulo [`CONNECTIONS`].
    turn: AtomicUsize,
}

type Slot = Mutex<State>;

#[derive(Default)]
enum State {
    /// Never connected, or the last connect failed: the next call starts one.
    #[default]
    Idle,
    Connected(Link),
    /// A connect under way; every call waiting for this slot shares it.
    Connecting(watch::Receiver<Option<RedisResult<Link>>>),
}

/// A handle to one connection, cheap to clone.
#[derive(Clone)]
pub(super) struct Link {
    connection: MultiplexedConnection,
    /// Cleared when the connection's driver stops (the connection broke, or its runtime shut
    /// down), or when a call found the connection broken. A command is never written on a
    /// link found closed before it is sent.
    open: Arc<AtomicBool>,
    /// How many writes to the socket have succeeded.
    writes: Arc<AtomicU64>,
    /// How many calls wait for a reply on this connection.
    waiting: Arc<AtomicUsize>,
    /// How many calls in a row gave up waiting (timed out) before their reply came.
    unanswered: Arc<AtomicU32>,
    slot: Arc<Slot>,
}

impl Link {
    /// A mark to compare with after a failed [`send`](Self::send): while it is unchanged,
    /// nothing was written on this connection, so neither was the command.
    pub(super) fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Sends `command` and waits for its reply. An error that is not Redis's answer (I/O,
    /// or an unreadable reply) leaves unknown whether the command ran.
    pub(super) async fn send(&mut self, command: &Cmd) -> RedisResult<Value> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let mut wait = Waited {
            waiting: &self.waiting,
            unanswered: &self.unanswered,
            open: &self.open,
            answered: false,
        };
        let reply = command.query_async(&mut self.connection).await;
        wait.answered = true;
        reply
    }

    /// Sends `ASKING` and then `command`, in one write: a Cluster node runs a command on a
    /// slot being migrated to it only right after `ASKING` on the same connection.
    pub(super) async fn send_asking(&mut self, command: &Cmd) -> RedisResult<Value> {
        let mut asking = redis::pipe();
        asking.cmd("ASKING").ignore().add_command(command.clone());
        let reply: Vec<Value> = asking.query_async(&mut self.connection).await?;
        reply.into_iter().next().ok_or_else(|| {
            RedisError::from((ErrorKind::UnexpectedReturnType, "no reply after ASKING"))
        })
    }

    /// Marks this connection broken: the next call to use it makes a new one instead.
    pub(super) fn close(&self) {
        self.open.store(false, Ordering::Release);
    }

    fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}

impl Node {
    /// Connects on first use; nothing starts before.
    pub(super) fn new(endpoint: Endpoint) -> Self {
        Node {
            endpoint,
            runtimes: RwLock::default(),
        }
    }

    pub(super) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The next connection in turn of the current runtime. When its slot holds none, or one
    /// known to be broken, a new connection is made first; an error then means nothing was
    /// sent.
    pub(super) async fn next(&self) -> RedisResult<Link> {
        let pool = self.pool()?;
        let slot = pool.turn.fetch_add(1, Ordering::Relaxed) % CONNECTIONS;
        self.get(&pool.slots[slot]).await
    }

    /// A working connection in place of `broken`, on which a call just failed: a new one
    /// unless another call has replaced it already.
    pub(super) async fn replace(&self, broken: &Link) -> RedisResult<Link> {
        broken.close();
        self.get(&broken.slot).await
    }

    /// The current runtime's connections.
    fn pool(&self) -> RedisResult<Arc<Pool>> {
        let id = Handle::try_current()
            .map_err(|_| {
                RedisError::from((
                    ErrorKind::Client,
                    "a rate-limit check must run inside a Tokio runtime",
                ))
            })?
            .id();
        if let Some(pool) = read(&self.runtimes).get(&id) {
            return Ok(pool.clone());
        }
        let mut runtimes = self
            .runtimes
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        // The connections of runtimes that have shut down have closed: forget them (also a
        // live runtime's whose connects failed; it gets new slots, which change nothing).
        runtimes.retain(|_, pool| pool.slots.iter().any(|slot| lock(slot).is_in_use()));
        Ok(runtimes.entry(id).or_default().clone())
    }

    async fn get(&self, slot: &Arc<Slot>) -> RedisResult<Link> {
        let link = self.connected(slot).await?;
        if link.waiting.load(Ordering::Relaxed) > 0 {
            return Ok(link);
        }
        // Nothing sent on it is waiting for a reply, so nothing may have read its socket for
        // a while: the server may have closed it since (a restart, an idle timeout), unseen
        // while the runtime's threads were busy elsewhere. Yielding lets the runtime poll its
        // sockets first; a closed connection's driver then stops, and the command goes on a
        // new connection instead of being written on one that cannot answer.
        tokio::task::yield_now().await;
        if link.is_open() {
            Ok(link)
        } else {
            self.connected(slot).await
        }
    }

    /// `slot`'s connection, made first if it has none that works.
    async fn connected(&self, slot: &Arc<Slot>) -> RedisResult<Link> {
        let mut connecting = {
            let mut state = lock(slot);
            match &*state {
                State::Connected(link) if link.is_open() => return Ok(link.clone()),
                State::Connecting(connecting) if connecting.has_changed().is_ok() => {
                    connecting.clone()
                }
                // Idle, a closed connection, or a connect that stopped with its runtime.
                _ => {
                    let connecting = self.connect(slot);
                    *state = State::Connecting(connecting.clone());
                    connecting
                }
            }
        };
        let outcome = connecting.wait_for(Option::is_some).await;
        match outcome.as_deref() {
            Ok(Some(result)) => result.clone(),
            // Only when the runtime is shutting down, and this call with it.
            _ => Err(RedisError::from((
                ErrorKind::Client,
                "the runtime shut down while connecting to Redis",
            ))),
        }
    }

    /// Starts a connect for `slot` as a task of the current runtime, so that it goes on for
    /// the calls that wait for it when the one that started it gives up; the slot holds the
    /// result when it ends.
    fn connect(&self, slot: &Arc<Slot>) -> watch::Receiver<Option<RedisResult<Link>>> {
        let (done, connecting) = watch::channel(None);
        let (endpoint, slot) = (self.endpoint.clone(), slot.clone());
        tokio::spawn(async move {
            let result = open(&endpoint, &slot).await;
            *lock(&slot) = match &result {
                Ok(link) => State::Connected(link.clone()),
                Err(_) => State::Idle,
            };
            done.send_replace(Some(result));
        });
        connecting
    }
}

impl State {
    /// Whether this slot holds a connection that works, or a connect under way.
    fn is_in_use(&self) -> bool {
        match self {
            State::Idle => false,
            State::Connected(link) => link.is_open(),
            State::Connecting(connecting) => connecting.has_changed().is_ok(),
        }
    }
}

/// Makes a connection to `endpoint` for `slot` and spawns its driver on the current runtime.
async fn open(endpoint: &Endpoint, slot: &Arc<Slot>) -> RedisResult<Link> {
    let (connection, driver, writes) = endpoint.connect().await?;
    let open = Arc::new(AtomicBool::new(true));
    let closed = CloseOnDrop(open.clone());
    // The driver ends when the connection breaks (the commands queued then are never
    // written) or when the last handle is dropped; it is dropped when its runtime shuts down.
    tokio::spawn(async move {
        let _closed = closed;
        driver.await;
    });
    Ok(Link {
        connection,
        open,
        writes,
        waiting: Arc::default(),
        unanswered: Arc::default(),
        slot: slot.clone(),
    })
}

/// A connection's driver: it must be polled for the connection to work.
type Driver = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl Endpoint {
    /// The server at `host:port` that a topology found (a Cluster's master, the master
    /// sentinels name), reached with `settings` (credentials, database) and `options`.
    pub(super) fn tcp(
        host: &str,
        port: u16,
        settings: RedisConnectionInfo,
        options: Arc<Options>,
    ) -> RedisResult<Endpoint> {
        let info = ConnectionAddr::Tcp(host.to_owned(), port)
            .into_connection_info()?
            .set_redis_settings(settings);
        Ok(Endpoint { info, options })
    }

    /// Connects (TCP with keepalive, TLS when configured, or a Unix socket) and sets the
    /// connection up (AUTH, SELECT), within the connect timeout. Returns the connection,
    /// its driver, and the count of its socket's writes.
    async fn connect(&self) -> RedisResult<(MultiplexedConnection, Driver, Arc<AtomicU64>)> {
        let timeout = self.options.connect_timeout();
        let connecting = async {
            let writes = Arc::new(AtomicU64::new(0));
            let stream = CountWrites {
                stream: self.stream().await?,
                writes: writes.clone(),
            };
            // Answers are timed by the limiter.
            let config = AsyncConnectionConfig::new().set_response_timeout(None);
            let (connection, driver) =
                MultiplexedConnection::new_with_config(self.info.redis_settings(), stream, config)
                    .await?;
            Ok((connection, Box::pin(driver) as Driver, writes))
        };
        tokio::time::timeout(timeout, connecting)
            .await
            .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()))
    }

    /// Sends one command on a connection of its own, closed after the reply: for the rare
    /// questions to sentinels and seed nodes.
    pub(super) async fn query_once(&self, command: &Cmd) -> RedisResult<Value> {
        let (mut connection, driver, _) = self.connect().await?;
        let driver = tokio::spawn(driver);
        let reply = tokio::time::timeout(
            self.options.connect_timeout(),
            command.query_async(&mut connection),
        )
        .await;
        driver.abort();
        reply.unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()))
    }

    /// A pub/sub connection, driven on the current runtime.
    pub(super) async fn subscriber(&self) -> RedisResult<redis::aio::PubSub> {
        let timeout = self.options.connect_timeout();
        let subscribing = async {
            redis::aio::PubSub::new(self.info.redis_settings(), self.stream().await?).await
        };
        tokio::time::timeout(timeout, subscribing)
            .await
            .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()))
    }

    async fn stream(&self) -> RedisResult<Pin<Box<dyn AsyncStream + Send + Sync>>> {
        Ok(match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let tcp = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                detect_dead_peers(&tcp)?;
                #[cfg(feature = "tls")]
                if let Some(tls) = &self.options.tls {
                    return Ok(Box::pin(tls.handshake(host, tcp).await?));
                }
                Box::pin(tcp)
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Box::pin(tokio::net::UnixStream::connect(path).await?),
            // Not made by `target::parse`.
            _ => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "this kind of Redis address is not supported",
                )))
            }
        })
    }
}

impl Options {
    /// Connections speak TLS when `tls` (the `rediss…://` forms), trusting the system's
    /// roots until [`Tls::trust`] says otherwise.
    pub fn new(tls: bool) -> Options {
        #[cfg(not(feature = "tls"))]
        debug_assert!(
            !tls,
            "`target::parse` refuses TLS URLs without the `tls` feature"
        );
        Options {
            #[cfg(feature = "tls")]
            tls: tls.then(Tls::default),
            ..Options::default()
        }
    }

    /// Connects take at most `limit` (the limiter's check timeout) when it is below
    /// [`CONNECT_TIMEOUT`].
    pub fn limit_connect_timeout(&self, limit: Duration) {
        let timeout = limit.min(CONNECT_TIMEOUT).max(Duration::from_millis(1));
        let us = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
        self.connect_timeout_us.store(us, Ordering::Relaxed);
    }

    fn connect_timeout(&self) -> Duration {
        match self.connect_timeout_us.load(Ordering::Relaxed) {
            0 => CONNECT_TIMEOUT,
            us => Duration::from_micros(us),
        }
    }
}

/// Keepalive probes and a user timeout, so that a peer that vanished without closing (a
/// crashed host, a dropped route) is found out in seconds even while no call is waiting.
fn detect_dead_peers(tcp: &tokio::net::TcpStream) -> std::io::Result<()> {
    let socket = SockRef::from(tcp);
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE)
        .with_interval(KEEPALIVE / 2);
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos"))]
    let keepalive = keepalive.with_retries(3);
    socket.set_tcp_keepalive(&keepalive)?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    socket.set_tcp_user_timeout(Some(USER_TIMEOUT))?;
    Ok(())
}

/// Counts a call's wait for its reply as over, also when the call is dropped (timed out);
/// closes the connection once [`TIMEOUTS_BEFORE_REBUILD`] calls in a row went unanswered.
struct Waited<'a> {
    waiting: &'a AtomicUsize,
    unanswered: &'a AtomicU32,
    open: &'a AtomicBool,
    answered: bool,
}

impl Drop for Waited<'_> {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        if self.answered {
            // Read first: a store on every call would contend for the line between cores.
            if self.unanswered.load(Ordering::Relaxed) != 0 {
                self.unanswered.store(0, Ordering::Relaxed);
            }
        } else if self.unanswered.fetch_add(1, Ordering::Relaxed) + 1 >= TIMEOUTS_BEFORE_REBUILD {
            self.open.store(false, Ordering::Release);
        }
    }
}

/// A connection's socket, counting the writes that succeed: a command queued after a count
/// was read can only have reached Redis if the count has grown since.
struct CountWrites {
    stream: Pin<Box<dyn AsyncStream + Send + Sync>>,
    writes: Arc<AtomicU64>,
}

impl CountWrites {
    fn count(&self, written: &Poll<std::io::Result<usize>>) {
        if matches!(written, Poll::Ready(Ok(n)) if *n > 0) {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl AsyncRead for CountWrites {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.stream.as_mut().poll_read(cx, buf)
    }
}

impl AsyncWrite for CountWrites {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let written = self.stream.as_mut().poll_write(cx, buf);
        self.count(&written);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let written = self.stream.as_mut().poll_write_vectored(cx, bufs);
        self.count(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.stream.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.stream.as_mut().poll_shutdown(cx)
    }
}

/// Marks a link closed when its driver ends or is dropped.
struct CloseOnDrop(Arc<AtomicBool>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Locks `mutex`, which no code panics while holding.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}
