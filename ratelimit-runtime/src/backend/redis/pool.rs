//! One Tokio runtime's connections to one server: a few slots taking calls in turn, each
//! holding a connection made (and driven) on that runtime, or the connect under way that
//! every call waiting for the slot shares.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::dial::Endpoint;
use super::failure::Failure;
use super::link::Link;
use crate::sync::lock;

/// How many multiplexed connections each runtime spreads its checks over. Redis answers a
/// connection's pipelined commands in one batch; over a single connection it then idles
/// while the client turns those replies into the next batch. Over two, it serves one
/// connection's batch meanwhile: with `scripts/bench-redis`'s workload, the fixed window and
/// token bucket make 10-20% more checks per second, the sliding log (for which Redis is
/// already busier) a few percent.
const CONNECTIONS: usize = 2;

/// One runtime's connections: [`CONNECTIONS`] slots taking calls in turn.
#[derive(Default)]
pub(super) struct Pool {
    slots: [Arc<ConnectionSlot>; CONNECTIONS],
    /// Which slot the next call takes, modulo [`CONNECTIONS`].
    turn: AtomicUsize,
}

type ConnectionSlot = Mutex<State>;

#[derive(Default)]
enum State {
    /// Never connected, or the last connect failed: the next call starts one.
    #[default]
    Idle,
    Connected(Link),
    /// A connect under way; every call waiting for this slot shares it.
    Connecting(watch::Receiver<Option<Result<Link, Failure>>>),
}

impl Pool {
    /// The next connection in turn to `endpoint`. When its slot holds none, or one known
    /// to be broken, a new connection is made first; an error then means nothing was sent.
    pub async fn next(&self, endpoint: &Endpoint) -> Result<Link, Failure> {
        let slot = self.turn.fetch_add(1, Ordering::Relaxed) % CONNECTIONS;
        get(endpoint, &self.slots[slot]).await
    }

    /// A working connection in place of `broken`, on which a call just failed: a new one
    /// in its slot unless another call has replaced it already (then the next in turn).
    pub async fn replace(&self, endpoint: &Endpoint, broken: &Link) -> Result<Link, Failure> {
        broken.close();
        let held = self.slots.iter().find(|slot| match &*lock(slot) {
            State::Connected(link) => link.is(broken),
            _ => false,
        });
        match held {
            Some(slot) => get(endpoint, slot).await,
            None => self.next(endpoint).await,
        }
    }

    /// Whether any slot holds a connection that works, or a connect under way.
    pub fn is_in_use(&self) -> bool {
        self.slots.iter().any(|slot| lock(slot).is_in_use())
    }
}

async fn get(endpoint: &Endpoint, slot: &Arc<ConnectionSlot>) -> Result<Link, Failure> {
    let link = connected(endpoint, slot).await?;
    if link.is_waited_on() {
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
        connected(endpoint, slot).await
    }
}

/// `slot`'s connection, made first if it has none that works.
async fn connected(endpoint: &Endpoint, slot: &Arc<ConnectionSlot>) -> Result<Link, Failure> {
    let mut connecting = {
        let mut state = lock(slot);
        match &*state {
            State::Connected(link) if link.is_open() => return Ok(link.clone()),
            State::Connecting(connecting) if connecting.has_changed().is_ok() => connecting.clone(),
            // Idle, a closed connection, or a connect that stopped with its runtime.
            _ => {
                let connecting = connect(endpoint, slot);
                *state = State::Connecting(connecting.clone());
                connecting
            }
        }
    };
    let outcome = connecting.wait_for(Option::is_some).await;
    match outcome.as_deref() {
        Ok(Some(result)) => result.clone(),
        // Only when the runtime is shutting down, and this call with it.
        _ => Err(Failure::NoRuntime(
            "the runtime shut down while connecting to Redis",
        )),
    }
}

/// Starts a connect for `slot` as a task of the current runtime, so that it goes on for
/// the calls that wait for it when the one that started it gives up; the slot holds the
/// result when it ends.
fn connect(
    endpoint: &Endpoint,
    slot: &Arc<ConnectionSlot>,
) -> watch::Receiver<Option<Result<Link, Failure>>> {
    let (done, connecting) = watch::channel(None);
    let (endpoint, slot) = (endpoint.clone(), slot.clone());
    tokio::spawn(async move {
        let result = endpoint.connect().await.map(Link::new);
        *lock(&slot) = match &result {
            Ok(link) => State::Connected(link.clone()),
            Err(_) => State::Idle,
        };
        done.send_replace(Some(result));
    });
    connecting
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
