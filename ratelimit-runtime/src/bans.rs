//! Bans: identities and networks an operator shuts out of every site at once
//! ([`Limiter::ban`](crate::Limiter::ban)), whatever their counts.
//!
//! A guarded check looks its key's identity up here before anything else (`site.rs`): one
//! atomic load while nothing is banned; else a lookup in a table read without a lock (an
//! `ArcSwap`), and for an `ip:` identity, when networks are banned, a scan of them. No
//! round trip: bans set in Redis (the hash `{prefix}bans`) reach every instance with its
//! rule overrides' poll (`overrides/stored.rs`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use arc_swap::ArcSwap;
use ipnet::IpNet;

use crate::clock::{Clock, SystemClock};
use crate::sync::lock;

/// The bans one limiter enforces: its own (set in process) and those read from Redis.
#[derive(Default)]
pub(crate) struct Bans {
    /// Whether anything is banned: all a check reads while nothing is.
    any: AtomicBool,
    table: ArcSwap<Table>,
    sources: Mutex<Sources>,
}

/// Bans by where they come from, each an identity (as [`Banned::parse`] writes it) and
/// its end (µs since the epoch).
#[derive(Default)]
struct Sources {
    local: HashMap<String, u64>,
    /// By key prefix, as last read from (or written to) its `{prefix}bans` hash.
    stored: HashMap<String, HashMap<String, u64>>,
}

/// What checks read: every ban in force, merged.
#[derive(Default)]
struct Table {
    /// By a key's identity part (`ip:203.0.113.9`, `user:42`, `custom:alice`, `global`).
    identities: HashMap<Box<str>, u64>,
    /// Banned networks (`ip:203.0.113.0/24`).
    networks: Vec<(IpNet, u64)>,
}

/// A banned identity, as a key holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Banned {
    /// The identity part of keys: `ip:203.0.113.9`, `user:42` (escaped as keys escape
    /// it), `custom:alice`, `global`.
    Identity(String),
    /// Every `ip:` identity in a network.
    Network(IpNet),
}

impl Banned {
    /// Reads an identity as an operator writes it: `ip:<address>`, `ip:<network>/<bits>`
    /// (IPv4 or IPv6), `user:<id>`, `custom:<value>`, or `global`.
    pub fn parse(identity: &str) -> Result<Banned, String> {
        let identity = identity.trim();
        if identity == "global" {
            return Ok(Banned::Identity(identity.to_owned()));
        }
        let Some((kind, value)) = identity.split_once(':') else {
            return Err(format!(
                "`{identity}` is no identity: write ip:<address>, ip:<network>/<bits>, \
                 user:<id>, custom:<value> or global"
            ));
        };
        match kind {
            "ip" if value.contains('/') => {
                let network: IpNet = value
                    .parse()
                    .map_err(|_| format!("`{value}` is not an IPv4 or IPv6 network"))?;
                Ok(match network.prefix_len() == network.max_prefix_len() {
                    true => Banned::Identity(format!("ip:{}", network.addr())),
                    false => Banned::Network(network.trunc()),
                })
            }
            "ip" => {
                let ip: IpAddr = value
                    .parse()
                    .map_err(|_| format!("`{value}` is not an IPv4 or IPv6 address"))?;
                Ok(Banned::Identity(format!("ip:{ip}")))
            }
            "user" | "custom" if !value.is_empty() => {
                let mut escaped = format!("{kind}:");
                crate::key::push_identity(&mut escaped, value);
                Ok(Banned::Identity(escaped))
            }
            _ => Err(format!(
                "`{identity}` is no identity: write ip:<address>, ip:<network>/<bits>, \
                 user:<id>, custom:<value> or global"
            )),
        }
    }

    /// The identity as keys hold it: an IPv6 address's colons are escaped there.
    fn in_keys(identity: &str) -> String {
        match identity.strip_prefix("ip:") {
            Some(ip) => {
                let mut escaped = String::from("ip:");
                crate::key::push_identity(&mut escaped, ip);
                escaped
            }
            None => identity.to_owned(),
        }
    }

    /// The identity as it is stored and listed.
    pub fn text(&self) -> String {
        match self {
            Banned::Identity(identity) => identity.clone(),
            Banned::Network(network) => format!("ip:{network}"),
        }
    }
}

/// The wall clock, µs since the epoch: bans stored in Redis end at a wall-clock time.
pub(crate) fn now_us() -> u64 {
    SystemClock.now_us()
}

impl Bans {
    /// How long the ban on `identity` (a key's identity part) lasts still, in µs; `None`
    /// when it is not banned.
    #[inline]
    pub fn left_us(&self, identity: &str) -> Option<u64> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        self.left_in_table(identity)
    }

    #[cold]
    fn left_in_table(&self, identity: &str) -> Option<u64> {
        let table = self.table.load();
        let now = now_us();
        let mut until = table.identities.get(identity).copied().unwrap_or(0);
        if let (false, Some(ip)) = (table.networks.is_empty(), identity.strip_prefix("ip:")) {
            // An IPv6 address's colons are escaped in keys.
            if let Ok(ip) = ip.replace("%3A", ":").parse::<IpAddr>() {
                for (network, end) in &table.networks {
                    if network.contains(&ip) {
                        until = until.max(*end);
                    }
                }
            }
        }
        (until > now).then(|| until - now)
    }

    /// Bans `banned` in this process until `until_us`.
    pub fn set_local(&self, banned: &Banned, until_us: u64) {
        self.change(|sources| {
            sources.local.insert(banned.text(), until_us);
        });
    }

    /// Lifts this process's ban on `banned`; whether there was one in force.
    pub fn remove_local(&self, banned: &Banned) -> bool {
        let mut was = false;
        self.change(|sources| {
            was = sources
                .local
                .remove(&banned.text())
                .is_some_and(|end| end > now_us());
        });
        was
    }

    /// Every ban of this process in force, and how long each lasts still.
    pub fn local(&self) -> Vec<(String, Duration)> {
        let now = now_us();
        let sources = lock(&self.sources);
        let mut bans: Vec<_> = sources
            .local
            .iter()
            .filter(|(_, &end)| end > now)
            .map(|(identity, &end)| (identity.clone(), Duration::from_micros(end - now)))
            .collect();
        bans.sort();
        bans
    }

    /// Replaces what was read from `prefix`'s `{prefix}bans` hash with `bans`.
    #[cfg(feature = "redis")]
    pub fn set_stored(&self, prefix: &str, bans: HashMap<String, u64>) {
        self.change(|sources| {
            sources.stored.insert(prefix.to_owned(), bans);
        });
    }

    /// Changes one ban read from `prefix`'s hash (`None`: lifts it), as a write there
    /// does, until the next read.
    #[cfg(feature = "redis")]
    pub fn change_stored(&self, prefix: &str, banned: &Banned, until_us: Option<u64>) {
        self.change(|sources| {
            let stored = sources.stored.entry(prefix.to_owned()).or_default();
            match until_us {
                Some(until_us) => stored.insert(banned.text(), until_us),
                None => stored.remove(&banned.text()),
            };
        });
    }

    /// Applies `change` to the sources and rebuilds the table checks read.
    fn change(&self, change: impl FnOnce(&mut Sources)) {
        let mut sources = lock(&self.sources);
        change(&mut sources);
        let now = now_us();
        sources.local.retain(|_, end| *end > now);
        let mut table = Table::default();
        let stored = sources.stored.values().flat_map(|bans| bans.iter());
        for (identity, &end) in sources.local.iter().chain(stored) {
            if end <= now {
                continue;
            }
            match Banned::parse(identity) {
                Ok(Banned::Identity(identity)) => {
                    let in_keys = Banned::in_keys(&identity).into_boxed_str();
                    let until = table.identities.entry(in_keys).or_insert(0);
                    *until = (*until).max(end);
                }
                Ok(Banned::Network(network)) => table.networks.push((network, end)),
                Err(_) => {}
            }
        }
        self.any.store(
            !table.identities.is_empty() || !table.networks.is_empty(),
            Ordering::Relaxed,
        );
        self.table.store(table.into());
    }
}

/// A `{prefix}bans` hash's fields as read: each identity and its end (ms since the epoch,
/// integer text), the malformed ones and those that have ended left out.
#[cfg(feature = "redis")]
pub(crate) fn read_stored(fields: Vec<(String, String)>) -> HashMap<String, u64> {
    let now = now_us();
    fields
        .into_iter()
        .filter_map(|(identity, end_ms)| {
            let end_us = end_ms.trim().parse::<u64>().ok()?.checked_mul(1000)?;
            let banned = Banned::parse(&identity).ok()?;
            (end_us > now).then(|| (banned.text(), end_us))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn banned(identity: &str) -> Banned {
        Banned::parse(identity).unwrap()
    }

    #[test]
    fn identities_are_read_as_keys_hold_them() {
        assert_eq!(banned("ip:203.0.113.9").text(), "ip:203.0.113.9");
        assert_eq!(banned("ip:2001:DB8::1").text(), "ip:2001:db8::1");
        assert_eq!(banned("ip:203.0.113.77/24").text(), "ip:203.0.113.0/24");
        assert_eq!(banned("ip:2001:db8::/48").text(), "ip:2001:db8::/48");
        assert_eq!(banned("ip:203.0.113.9/32").text(), "ip:203.0.113.9");
        assert_eq!(banned("user:42").text(), "user:42");
        assert_eq!(banned("custom:a b:c").text(), "custom:a%20b%3Ac");
        assert_eq!(banned("global").text(), "global");
        for wrong in ["", "42", "ip:nope", "ip:10.0.0.0/33", "host:x", "user:"] {
            assert!(Banned::parse(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn a_ban_covers_its_identity_or_network_until_it_ends() {
        let bans = Bans::default();
        assert_eq!(bans.left_us("ip:203.0.113.9"), None);
        let hour = now_us() + 3_600_000_000;
        bans.set_local(&banned("ip:203.0.113.0/24"), hour);
        bans.set_local(&banned("ip:2001:db8::/48"), hour);
        bans.set_local(&banned("user:42"), hour);
        for covered in [
            "ip:203.0.113.9",
            "ip:2001%3Adb8%3A0%3Affff%3A%3A1",
            "user:42",
        ] {
            let left = bans.left_us(covered).expect(covered);
            assert!(left > 3_500_000_000, "{covered}");
        }
        for free in [
            "ip:203.0.114.9",
            "ip:2001%3Adb9%3A%3A1",
            "user:43",
            "custom:42",
            "global",
        ] {
            assert_eq!(bans.left_us(free), None, "{free}");
        }
        assert!(bans.remove_local(&banned("user:42")));
        assert_eq!(bans.left_us("user:42"), None);
        bans.set_local(&banned("user:7"), now_us() - 1);
        assert_eq!(bans.left_us("user:7"), None);
        assert_eq!(bans.local().len(), 2);
    }

    #[test]
    #[cfg(feature = "redis")]
    fn stored_bans_are_read_leaving_out_the_malformed_and_the_ended() {
        let hour_ms = (now_us() + 3_600_000_000) / 1000;
        let read = read_stored(vec![
            ("ip:10.0.0.0/8".into(), hour_ms.to_string()),
            ("user:1".into(), "soon".into()),
            ("nobody".into(), hour_ms.to_string()),
            ("user:2".into(), "1".into()),
        ]);
        assert_eq!(read.keys().collect::<Vec<_>>(), ["ip:10.0.0.0/8"]);
        let bans = Bans::default();
        bans.set_stored("rate_limit:", read);
        assert!(bans.left_us("ip:10.1.2.3").is_some());
        bans.set_stored("rate_limit:", HashMap::new());
        assert_eq!(bans.left_us("ip:10.1.2.3"), None);
    }
}
