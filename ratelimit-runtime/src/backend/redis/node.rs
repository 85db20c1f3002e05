//! One Redis server (a [`Node`]) and its connections: a [`Pool`] for each Tokio runtime that
//! checks. Every topology (one server, a Cluster's masters, the master a Sentinel names)
//! sends through nodes.
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
use std::sync::{Arc, RwLock};

use tokio::runtime::{self, Handle};

use super::breaker::{BreakerState, Pass};
use super::dial::Endpoint;
use super::failure::Failure;
use super::link::Link;
use super::pool::Pool;

/// One Redis server: its breaker, and its connections by runtime.
pub(super) struct Node {
    endpoint: Endpoint,
    breaker: BreakerState,
    runtimes: RwLock<HashMap<runtime::Id, Arc<Pool>>>,
}

impl Node {
    /// Connects on first use; nothing starts before.
    pub(super) fn new(endpoint: Endpoint) -> Self {
        let server = format!("Redis at {}", endpoint.info.addr());
        Node {
            breaker: BreakerState::new(endpoint.options.breaker, server),
            endpoint,
            runtimes: RwLock::default(),
        }
    }

    pub(super) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// A pass of this server's breaker for one call, or, while it is open, the failure
    /// that stops the call from being sent.
    pub(super) fn admit(&self) -> Result<Pass<'_>, Failure> {
        self.breaker.admit().map_err(Failure::BreakerOpen)
    }

    /// Whether this server's breaker is open: it failed lately.
    pub(super) fn is_failing(&self) -> bool {
        self.breaker.is_open()
    }

    /// The next connection in turn of the current runtime. When its slot holds none, or one
    /// known to be broken, a new connection is made first; an error then means nothing was
    /// sent.
    pub(super) async fn next(&self) -> Result<Link, Failure> {
        self.pool()?.next(&self.endpoint).await
    }

    /// A working connection in place of `broken`, on which a call just failed: a new one
    /// unless another call has replaced it already.
    pub(super) async fn replace(&self, broken: &Link) -> Result<Link, Failure> {
        self.pool()?.replace(&self.endpoint, broken).await
    }

    /// The current runtime's connections.
    fn pool(&self) -> Result<Arc<Pool>, Failure> {
        let id = Handle::try_current()
            .map_err(|_| Failure::NoRuntime("a rate-limit check must run inside a Tokio runtime"))?
            .id();
        let runtimes = crate::sync::read(&self.runtimes);
        if let Some(pool) = runtimes.get(&id) {
            return Ok(pool.clone());
        }
        drop(runtimes);
        let mut runtimes = crate::sync::write(&self.runtimes);
        // The connections of runtimes that have shut down have closed: forget them (also a
        // live runtime's whose connects failed; it gets new slots, which change nothing).
        runtimes.retain(|_, pool| pool.is_in_use());
        Ok(runtimes.entry(id).or_default().clone())
    }
}
