//! Redis Cluster: every check touches one key, so it runs on the master serving that key's
//! hash slot, through that master's [`Node`].
//!
//! - The slot map is read with `CLUSTER SLOTS` from a known node (the masters known, then
//!   the seeds) on first use, and again after a `MOVED`, a `READONLY` (the master was
//!   demoted), or a master that cannot be reached. Calls that need a refresh at once share
//!   one.
//! - An `ASK` (a slot being migrated) is followed for that one command, with `ASKING`,
//!   without changing the map.
//! - `MOVED`, `ASK` and `READONLY` mean the command did not run, so following them never
//!   counts a check twice; a node that breaks mid-call is handled as on one server.
//! - No redirect loop outlives the limiter's timeout, which bounds every check.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwapOption;
use redis::{ConnectionAddr, Value};

use super::dial::Endpoint;
use super::failure::Failure;
use super::link::Link;
use super::node::Node;
use super::refresh::{Refresh, Refreshing};
use super::Redirect;

/// The number of hash slots.
const SLOTS: usize = 16384;

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
    pub fn new(seeds: Vec<Endpoint>) -> Cluster {
        Cluster {
            seeds,
            nodes: Mutex::default(),
            map: ArcSwapOption::empty(),
            map_refresh: Refresh::new(),
        }
    }

    /// A connection to the master serving `key`. When the map has none, or the master
    /// cannot be reached, the map is read again first, once.
    pub async fn link(&self, key: &str) -> Result<Link, Failure> {
        let slot = slot(key.as_bytes());
        let seen = self.map_refresh.mark();
        if let Some(node) = self.master(slot) {
            match node.next().await {
                Err(Failure::Unreachable(_)) => {}
                link => return link,
            }
        }
        self.refresh(seen).await?;
        match self.master(slot) {
            Some(node) => node.next().await,
            None => Err(Failure::NoServer(
                "no master of the Redis Cluster serves the key's slot",
            )),
        }
    }

    /// A connection for `key` in place of `broken`, after a call on it failed: its master
    /// may have changed, so the map is read again.
    pub async fn replace(&self, key: &str, broken: &Link) -> Result<Link, Failure> {
        let seen = self.map_refresh.mark();
        broken.close();
        self.refresh(seen).await?;
        self.link(key).await
    }

    /// Where to send `key`'s command again after `failure`, if anywhere.
    pub async fn redirect(&self, key: &str, failure: &Failure) -> Option<Redirect> {
        let seen = self.map_refresh.mark();
        let (link, asking) = match failure {
            Failure::Moved(address) => {
                // The slot moved for good (resharding, failover): others did too.
                self.refresh(seen).await.ok()?;
                (self.node(address)?.next().await.ok()?, false)
            }
            Failure::Ask(address) => (self.node(address)?.next().await.ok()?, true),
            // The master was demoted: its slots are served by another now.
            Failure::ReadOnly(_) => {
                self.refresh(seen).await.ok()?;
                (self.link(key).await.ok()?, false)
            }
            _ => return None,
        };
        Some(Redirect { link, asking })
    }

    fn master(&self, slot: u16) -> Option<Arc<Node>> {
        let map = self.map.load();
        let map = map.as_ref()?;
        let index = map.master_of[usize::from(slot)];
        map.masters.get(usize::from(index)).cloned()
    }

    /// The node at `address` (`host:port`), made if new.
    fn node(&self, address: &str) -> Option<Arc<Node>> {
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
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
    fn refresh(&self, seen: u64) -> Refreshing<'_> {
        self.map_refresh.run(seen, self.read_slots())
    }

    async fn read_slots(&self) -> Result<(), Failure> {
        let known = self.map.load_full();
        let masters = known.iter().flat_map(|map| map.masters.iter());
        let candidates = masters
            .map(|node| node.endpoint().clone())
            .chain(self.seeds.iter().cloned());
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
            let node = self.node(&format!("{host}:{port}")).ok_or_else(malformed)?;
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
fn slot(key: &[u8]) -> u16 {
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
