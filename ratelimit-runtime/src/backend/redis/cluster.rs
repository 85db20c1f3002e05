//! Redis Cluster: every check touches one key, so it runs on the master serving that key's
//! hash slot, through that master's [`Node`] (and its breaker).
//!
//! - The slot map is read with `CLUSTER SLOTS` from a known node (the masters known whose
//!   breaker is closed, then the seeds, then the others) on first use, and again after a
//!   `MOVED`, a `READONLY` (the master was demoted), or a master that cannot be reached or
//!   broke a connection. Calls that need a refresh at once share one.
//! - An `ASK` (a slot being migrated) is followed for that one command, with `ASKING`,
//!   without changing the map.
//! - `MOVED`, `ASK` and `READONLY` mean the command did not run, so following them never
//!   counts a check twice; a node that breaks mid-call is handled as on one server.
//! - Nodes are kept by address across refreshes: a master keeps its connections and its
//!   breaker, and a replica promoted in its place is a node of its own, breaker closed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use redis::{ConnectionAddr, Value};
use tokio::time::Instant;

use super::dial::Endpoint;
use super::failure::Failure;
use super::node::Node;
use super::refresh::{Refresh, Refreshing};

/// The number of hash slots.
const SLOTS: usize = 16384;

const UNSERVED_SLOT: Failure =
    Failure::NoServer("no master of the Redis Cluster serves the key's slot");

pub(super) struct Cluster {
    seeds: Vec<Endpoint>,
    /// The masters by `host:port`, kept across refreshes so their connections stay.
    nodes: Mutex<HashMap<String, Arc<Node>>>,
    map: ArcSwapOption<SlotMap>,
    map_refresh: Refresh,
}

struct SlotMap {
    masters: Vec<Arc<Node>>,
    /// Each slot's index into `masters`; [`UNSERVED`] when no master serves it.
    master_of: Box<[u16]>,
}

const UNSERVED: u16 = u16::MAX;

impl Cluster {
    /// `shown` is what messages call the cluster.
    pub fn new(seeds: Vec<Endpoint>, shown: &str) -> Cluster {
        let breaker = seeds[0].options.breaker;
        Cluster {
            seeds,
            nodes: Mutex::default(),
            map: ArcSwapOption::empty(),
            map_refresh: Refresh::new(breaker, format!("{shown}, asked for its slot map,")),
        }
    }

    /// What a call notes before it uses the slot map, to pass to the calls that read it
    /// again when what it found failed.
    pub fn mark(&self) -> u64 {
        self.map_refresh.mark()
    }

    /// The master serving `key`. The map is read first when there is none yet (or it left
    /// the key's slot unserved), unless that was done since `seen`.
    pub async fn node_for(
        &self,
        key: &str,
        seen: u64,
        deadline: Instant,
    ) -> Result<Arc<Node>, Failure> {
        let slot = slot(key.as_bytes());
        if let Some(node) = self.master(slot) {
            return Ok(node);
        }
        self.refresh(seen, deadline).await?;
        self.master(slot).ok_or(UNSERVED_SLOT)
    }

    /// The master serving `key` after a call to the one the map named failed (it could not
    /// be reached, broke a connection, or answered `READONLY`): it may have changed, so the
    /// map is read again first, unless that was done since `seen`.
    pub async fn reroute(
        &self,
        key: &str,
        seen: u64,
        deadline: Instant,
    ) -> Result<Arc<Node>, Failure> {
        self.refresh(seen, deadline).await?;
        self.master(slot(key.as_bytes())).ok_or(UNSERVED_SLOT)
    }

    /// The node at `address`, after a `MOVED` there: the slot moved for good (resharding,
    /// failover), and others did too, so the map is read again as well (unless that was
    /// done since `seen`). The command goes to `address` whatever that finds.
    pub async fn moved(
        &self,
        address: &str,
        seen: u64,
        deadline: Instant,
    ) -> Result<Arc<Node>, Failure> {
        let _ = self.refresh(seen, deadline).await;
        self.asked(address)
    }

    /// The node at `address`, after an `ASK` there: for this one command.
    pub fn asked(&self, address: &str) -> Result<Arc<Node>, Failure> {
        self.node_at(address).ok_or_else(|| {
            Failure::Unexpected(format!("redirected to `{address}`, which is not host:port").into())
        })
    }

    fn master(&self, slot: u16) -> Option<Arc<Node>> {
        let map = self.map.load();
        let map = map.as_ref()?;
        let index = map.master_of[usize::from(slot)];
        map.masters.get(usize::from(index)).cloned()
    }

    /// The node at `address` (`host:port`), made if new.
    fn node_at(&self, address: &str) -> Option<Arc<Node>> {
        let mut nodes = crate::sync::lock(&self.nodes);
        if let Some(node) = nodes.get(address) {
            return Some(node.clone());
        }
        let (host, port) = address.rsplit_once(':')?;
        let host = host.trim_matches(['[', ']']);
        // Every node takes the seeds' credentials and TLS.
        let node = Arc::new(Node::new(self.seeds[0].at(host, port.parse().ok()?)));
        nodes.insert(address.to_owned(), node.clone());
        Some(node)
    }

    /// Reads the slot map again, unless that was done since `seen` (see [`Refresh`]).
    fn refresh(&self, seen: u64, deadline: Instant) -> Refreshing<'_> {
        self.map_refresh.run(seen, deadline, self.read_slots())
    }

    async fn read_slots(&self) -> Result<(), Failure> {
        let known = self.map.load_full();
        let masters = known.iter().flat_map(|map| map.masters.iter());
        // A master whose breaker is open would likely make the others wait: asked last.
        let (failing, healthy): (Vec<_>, Vec<_>) = masters.partition(|node| node.is_failing());
        let candidates = healthy
            .into_iter()
            .map(|node| node.endpoint())
            .chain(&self.seeds)
            .chain(failing.into_iter().map(|node| node.endpoint()))
            .cloned();
        let mut failure = None;
        for endpoint in candidates {
            let asked = match endpoint.info.addr() {
                ConnectionAddr::Tcp(host, _) => host.clone(),
                _ => continue,
            };
            let reply = endpoint
                .query_once(redis::cmd("CLUSTER").arg("SLOTS"))
                .await
                .and_then(|reply| self.read_map(reply, &asked));
            match reply {
                Ok(map) => {
                    self.map.store(Some(Arc::new(map)));
                    return Ok(());
                }
                Err(err) => failure = Some(err),
            }
        }
        Err(failure.unwrap_or(Failure::NoServer("no node of the Redis Cluster answered")))
    }

    /// The map in a `CLUSTER SLOTS` reply from the node at `asked`: entries
    /// `[first, last, [host, port, …], replicas…]`, an empty host meaning `asked`.
    fn read_map(&self, reply: Value, asked: &str) -> Result<SlotMap, Failure> {
        let malformed = || {
            Failure::Unexpected(
                "the Redis Cluster answered CLUSTER SLOTS with something unexpected".into(),
            )
        };
        let Value::Array(ranges) = reply else {
            return Err(malformed());
        };
        let mut masters: Vec<Arc<Node>> = Vec::new();
        let mut master_of = vec![UNSERVED; SLOTS].into_boxed_slice();
        for range in ranges {
            let Value::Array(range) = range else {
                return Err(malformed());
            };
            let [Value::Int(first), Value::Int(last), Value::Array(master), ..] = &range[..] else {
                return Err(malformed());
            };
            let [host, Value::Int(port), ..] = &master[..] else {
                return Err(malformed());
            };
            let host = match host {
                Value::BulkString(host) => String::from_utf8_lossy(host).into_owned(),
                Value::SimpleString(host) => host.clone(),
                _ => return Err(malformed()),
            };
            // "?" : the node does not know how to reach it (yet).
            if host == "?" {
                continue;
            }
            let host = if host.is_empty() { asked } else { &host };
            let node = self
                .node_at(&format!("{host}:{port}"))
                .ok_or_else(malformed)?;
            let index = match masters.iter().position(|known| Arc::ptr_eq(known, &node)) {
                Some(index) => index,
                None => {
                    masters.push(node);
                    masters.len() - 1
                }
            };
            let slots = usize::try_from(*first).map_err(|_| malformed())?
                ..=usize::try_from(*last).map_err(|_| malformed())?;
            for slot in master_of.get_mut(slots).ok_or_else(malformed)? {
                *slot = index as u16;
            }
        }
        Ok(SlotMap { masters, master_of })
    }
}

/// The hash slot of `key`: of its hash tag (the text between the first `{` and the next
/// `}`, when not empty) or else of the whole key.
pub(super) fn slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tag) % SLOTS as u16
}

#[cfg(test)]
mod tests {
    use super::slot;

    #[test]
    fn slots_are_redis_clusters() {
        // From `CLUSTER KEYSLOT` on a real server.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"somekey"), 11058);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }
}
