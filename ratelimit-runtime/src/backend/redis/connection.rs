//! The connections of one Redis backend: a few multiplexed connections for each Tokio
//! runtime that checks.
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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use redis::aio::{AsyncStream, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, RedisError, RedisResult, Value,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::runtime::{self, Handle};
use tokio::sync::watch;

/// How many multiplexed connections each runtime spreads its checks over. Redis answers a
/// connection's pipelined commands in one batch; over a single connection it then idles
/// while the client turns those replies into the next batch. Over two, it serves one
/// connection's batch meanwhile: with `scripts/bench-redis`'s workload, the fixed window and
/// token bucket make 10-20% more checks per second, the sliding log (for which Redis is
/// already busier) a few percent.
const CONNECTIONS: usize = 2;

/// How long one connection attempt (TCP or Unix connect, AUTH, SELECT) may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A backend's connections, by runtime.
pub(super) struct Connections {
    client: redis::Client,
    runtimes: RwLock<HashMap<runtime::Id, Arc<Pool>>>,
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
        let _done = Waited(&self.waiting);
        command.query_async(&mut self.connection).await
    }

    /// Marks this connection broken: the next call to use it makes a new one instead.
    pub(super) fn close(&self) {
        self.open.store(false, Ordering::Release);
    }

    fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}

impl Connections {
    /// Connects on first use; nothing starts before.
    pub(super) fn new(client: redis::Client) -> Self {
        Connections {
            client,
            runtimes: RwLock::default(),
        }
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
        let (client, slot) = (self.client.clone(), slot.clone());
        tokio::spawn(async move {
            let result = tokio::time::timeout(CONNECT_TIMEOUT, open(&client, &slot))
                .await
                .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()));
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

/// Makes a connection to `client`'s server for `slot` and spawns its driver on the current
/// runtime.
async fn open(client: &redis::Client, slot: &Arc<Slot>) -> RedisResult<Link> {
    let info = client.get_connection_info();
    let stream: Pin<Box<dyn AsyncStream + Send + Sync>> = match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            Box::pin(tokio::net::TcpStream::connect((host.as_str(), *port)).await?)
        }
        #[cfg(unix)]
        ConnectionAddr::Unix(path) => Box::pin(tokio::net::UnixStream::connect(path).await?),
        // Refused by `RedisBackend::new`.
        _ => {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "this kind of Redis address is not supported",
            )))
        }
    };
    let writes = Arc::new(AtomicU64::new(0));
    let stream = CountWrites {
        stream,
        writes: writes.clone(),
    };
    // Answers are timed by the limiter.
    let config = AsyncConnectionConfig::new().set_response_timeout(None);
    let (connection, driver) =
        MultiplexedConnection::new_with_config(info.redis_settings(), stream, config).await?;
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
        slot: slot.clone(),
    })
}

/// Counts a call's wait for its reply as over, also when the call is dropped (timed out).
struct Waited<'a>(&'a AtomicUsize);

impl Drop for Waited<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
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
