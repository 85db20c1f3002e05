//! A handle to one multiplexed connection: sends commands on it, knows whether it still
//! works, and gives it up after calls in a row went unanswered.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::{Cmd, ErrorKind, RedisError, RedisResult, Value};

use super::dial::Dialled;

/// After this many calls in a row on one connection got no answer in time, it is made anew:
/// a half-open socket (a peer that vanished without closing, a black-holed route) otherwise
/// fails every call until the kernel gives up on it.
const TIMEOUTS_BEFORE_REBUILD: u32 = 3;

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
}

impl Link {
    /// A link to the connection just `dialled`; its driver is spawned on the current
    /// runtime.
    pub(super) fn new(dialled: Dialled) -> Link {
        let Dialled {
            connection,
            driver,
            writes,
        } = dialled;
        let open = Arc::new(AtomicBool::new(true));
        let closed = CloseOnDrop(open.clone());
        // The driver ends when the connection breaks (the commands queued then are never
        // written) or when the last handle is dropped; it is dropped when its runtime shuts
        // down.
        tokio::spawn(async move {
            let _closed = closed;
            driver.await;
        });
        Link {
            connection,
            open,
            writes,
            waiting: Arc::default(),
            unanswered: Arc::default(),
        }
    }

    /// A mark to compare with after a failed [`send`](Self::send): while it is unchanged,
    /// nothing was written on this connection, so neither was the command.
    pub(super) fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Sends `command` and waits for its reply, which may be Redis's error answer. An `Err`
    /// is the connection's (it broke, or the reply was unreadable): whether the command ran
    /// is then unknown.
    pub(super) async fn send(&mut self, command: &Cmd) -> RedisResult<Value> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let mut wait = Waited {
            waiting: &self.waiting,
            unanswered: &self.unanswered,
            open: &self.open,
            answered: false,
        };
        let reply = self.connection.send_packed_command(command).await;
        wait.answered = true;
        reply
    }

    /// Sends `ASKING` and then `command`, in one write: a Cluster node runs a command on a
    /// slot being migrated to it only right after `ASKING` on the same connection. Returns
    /// `command`'s reply, as [`send`](Self::send) does.
    pub(super) async fn send_asking(&mut self, command: &Cmd) -> RedisResult<Value> {
        let mut asking = redis::pipe();
        asking.cmd("ASKING").add_command(command.clone());
        // ASKING's own reply is skipped.
        let reply = self.connection.send_packed_commands(&asking, 1, 1).await?;
        reply.into_iter().next().ok_or_else(|| {
            RedisError::from((ErrorKind::UnexpectedReturnType, "no reply after ASKING"))
        })
    }

    /// Marks this connection broken: the next call to use it makes a new one instead.
    pub(super) fn close(&self) {
        self.open.store(false, Ordering::Release);
    }

    pub(super) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Whether `other` is a handle to this same connection.
    pub(super) fn is(&self, other: &Link) -> bool {
        Arc::ptr_eq(&self.open, &other.open)
    }

    /// Whether a call waits for a reply on this connection (whose driver then reads its
    /// socket).
    pub(super) fn is_waited_on(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0
    }
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

/// Marks a link closed when its driver ends or is dropped.
struct CloseOnDrop(Arc<AtomicBool>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
