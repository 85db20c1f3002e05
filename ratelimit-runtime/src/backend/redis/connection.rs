//! The connections of one Redis backend, usable from any Tokio runtime.
//!
//! redis-rs drives each multiplexed connection with a task (reading replies, writing the
//! queued commands) and spawns it on the runtime that connects. A limiter is shared by
//! runtimes that come and go (a `static` limiter used by many `#[tokio::test]`s, actix-web's
//! runtime per worker): a driver on one of them stops when that runtime shuts down, and waits
//! while its thread is busy with something else. So the backend drives its connections on a
//! runtime of its own, one thread started on first use. Callers on any runtime only queue
//! commands on a connection's handle and await the reply, through channels that work across
//! runtimes; the limiter times every call with the caller's own timer.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{AsyncStream, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, RedisError, RedisResult, Value,
};
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};

/// How many multiplexed connections a backend spreads its checks over. Redis answers a
/// connection's pipelined commands in one batch; over a single connection it then idles
/// while the client turns those replies into the next batch. Over two, it serves one
/// connection's batch meanwhile: with `scripts/bench-redis`'s workload, the fixed window and
/// token bucket make 10-20% more checks per second, the sliding log (for which Redis is
/// already busier) a few percent.
const CONNECTIONS: usize = 2;

/// How long one connection attempt (TCP or Unix connect, AUTH, SELECT) may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The name of the thread that drives a backend's connections.
const IO_THREAD: &str = "redis-ratelimit-io";

/// A backend's connections: [`CONNECTIONS`] slots taking calls in turn, each holding a
/// connection, a connect under way, or nothing yet.
pub(super) struct Connections {
    client: redis::Client,
    slots: [Arc<Slot>; CONNECTIONS],
    /// Which slot the next call takes, modulo [`CONNECTIONS`].
    turn: AtomicUsize,
    /// The runtime the connections are made and driven on, started on the first connect.
    io: Mutex<Option<IoRuntime>>,
}

type Slot = Mutex<State>;

enum State {
    /// Never connected, or the last connect failed: the next call starts one.
    Idle,
    Connected(Link),
    /// A connect under way on the I/O runtime; every call waiting for this slot shares it.
    Connecting(watch::Receiver<Option<RedisResult<Link>>>),
}

/// A handle to one connection, cheap to clone.
#[derive(Clone)]
pub(super) struct Link {
    connection: MultiplexedConnection,
    /// Cleared when the connection's driver stops, or when a call found the connection broken.
    /// A command is never written on a link found closed before it is sent.
    open: Arc<AtomicBool>,
    slot: usize,
}

impl Link {
    /// Sends `command` and waits for its reply. An error that is not Redis's answer (see
    /// [`RedisError::is_io_error`]) leaves unknown whether the command ran.
    pub(super) async fn send(&mut self, command: &Cmd) -> RedisResult<Value> {
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
            slots: std::array::from_fn(|_| Arc::new(Mutex::new(State::Idle))),
            turn: AtomicUsize::new(0),
            io: Mutex::new(None),
        }
    }

    /// The next connection in turn. When its slot holds none, or one known to be broken, a
    /// new connection is made first; an error then means nothing was sent.
    pub(super) async fn next(&self) -> RedisResult<Link> {
        let slot = self.turn.fetch_add(1, Ordering::Relaxed) % CONNECTIONS;
        self.get(slot).await
    }

    /// A working connection in place of `broken`, on which a call just failed: a new one
    /// unless another call has replaced it already.
    pub(super) async fn replace(&self, broken: &Link) -> RedisResult<Link> {
        broken.close();
        self.get(broken.slot).await
    }

    async fn get(&self, slot: usize) -> RedisResult<Link> {
        let mut connecting = {
            let mut state = lock(&self.slots[slot]);
            match &*state {
                State::Connected(link) if link.is_open() => return Ok(link.clone()),
                State::Connecting(connecting) => connecting.clone(),
                State::Idle | State::Connected(_) => {
                    let connecting = self.connect(slot)?;
                    *state = State::Connecting(connecting.clone());
                    connecting
                }
            }
        };
        let outcome = connecting.wait_for(Option::is_some).await;
        match outcome.as_deref() {
            Ok(Some(result)) => result.clone(),
            // The I/O runtime stopped before the connect ended: only when it panicked.
            _ => Err(io_runtime_error("stopped")),
        }
    }

    /// Starts a connect for `slot` on the I/O runtime; the slot's state holds the result
    /// when it ends, whether or not anyone still waits for it.
    fn connect(&self, slot: usize) -> RedisResult<watch::Receiver<Option<RedisResult<Link>>>> {
        let (done, connecting) = watch::channel(None);
        let (client, state) = (self.client.clone(), self.slots[slot].clone());
        self.io_runtime()?.spawn(async move {
            let result = tokio::time::timeout(CONNECT_TIMEOUT, open(&client, slot))
                .await
                .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()));
            *lock(&state) = match &result {
                Ok(link) => State::Connected(link.clone()),
                Err(_) => State::Idle,
            };
            done.send_replace(Some(result));
        });
        Ok(connecting)
    }

    /// A handle to the I/O runtime, started on first use.
    fn io_runtime(&self) -> RedisResult<Handle> {
        let mut io = lock(&self.io);
        if let Some(io) = &*io {
            return Ok(io.handle.clone());
        }
        let started = IoRuntime::start()
            .map_err(|err| io_runtime_error(&format!("could not be started: {err}")))?;
        let handle = started.handle.clone();
        *io = Some(started);
        Ok(handle)
    }
}

/// Makes a connection to `client`'s server, on the I/O runtime, and spawns its driver there.
async fn open(client: &redis::Client, slot: usize) -> RedisResult<Link> {
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
    // Answers are timed by each caller, with its own runtime's timer.
    let config = AsyncConnectionConfig::new().set_response_timeout(None);
    let (connection, driver) =
        MultiplexedConnection::new_with_config(info.redis_settings(), stream, config).await?;
    let open = Arc::new(AtomicBool::new(true));
    let closed = open.clone();
    // The driver ends when the connection breaks (its queued commands are then never
    // written) or when the last handle is dropped.
    tokio::spawn(async move {
        driver.await;
        closed.store(false, Ordering::Release);
    });
    Ok(Link {
        connection,
        open,
        slot,
    })
}

/// A current-thread runtime on a thread of its own, which stops when this is dropped (with
/// the backend), closing the connections it drives.
struct IoRuntime {
    handle: Handle,
    _stop: oneshot::Sender<()>,
}

impl IoRuntime {
    fn start() -> std::io::Result<IoRuntime> {
        let (stop, stopped) = oneshot::channel::<()>();
        let (started, handle) = std::sync::mpsc::sync_channel(1);
        // Built on its own thread, so that it is also dropped there, never inside a caller's
        // runtime (where dropping a runtime panics).
        std::thread::Builder::new()
            .name(IO_THREAD.into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match runtime {
                    Ok(runtime) => {
                        let _ = started.send(Ok(runtime.handle().clone()));
                        // Either a stop, or the backend is gone.
                        let _ = runtime.block_on(stopped);
                    }
                    Err(err) => {
                        let _ = started.send(Err(err));
                    }
                }
            })?;
        let handle = handle.recv().map_err(|_| {
            std::io::Error::other("the thread ended before its runtime was built")
        })??;
        Ok(IoRuntime {
            handle,
            _stop: stop,
        })
    }
}

fn io_runtime_error(what: &str) -> RedisError {
    RedisError::from((
        ErrorKind::Client,
        "the rate limiter's Redis I/O thread",
        what.to_string(),
    ))
}

/// Locks `mutex`, which no code panics while holding.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
