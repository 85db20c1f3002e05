//! Bans: identities and networks an operator shuts out of every site at once
//! ([`Limiter::ban`](crate::Limiter::ban)), whatever their counts.
//!
//! A guarded check looks its key's identity up here before anything else (`site.rs`): one
//! atomic load while nothing is banned; else a lookup in a table read without a lock (an
//! `ArcSwap`), and for an `ip:` identity, when networks are banned, a scan of them. No
//! round trip: bans set in Redis (the hash `{prefix}bans`) reach every instance with its
//! rule overrides' poll (`overrides/stored.rs`).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use arc_swap::ArcSwap;
use ipnet::{IpNet, Ipv6Net};

use crate::clock::{Clock, SystemClock};
use crate::key::{canonical_network, identity_in_keys, ip_in_identity};
use crate::sync::lock;
use crate::LimitType;

/// The widest IPv4 network a ban takes: a shorter prefix is all but certainly a typo
/// (`ip:1.2.3.4/0` would refuse every IPv4 client).
const WIDEST_IPV4: u8 = 8;
/// The widest IPv6 network a ban takes.
const WIDEST_IPV6: u8 = 16;

/// The bans one limiter enforces: its own (set in process) and those read from Redis.
#[derive(Default)]
pub(crate) struct Bans {
    /// Whether anything is banned: all a check reads while nothing is.
    any: AtomicBool,
    table: ArcSwap<Table>,
    sources: Mutex<Sources>,
}

/// Bans by where they come from, each an identity (as [`Banned::text`] writes it) and
/// its end (µs since the epoch).
#[derive(Default)]
struct Sources {
    local: HashMap<String, u64>,
    /// By key prefix, as last read from (or written to) its `{prefix}bans` hash.
    stored: HashMap<String, HashMap<String, u64>>,
    /// How many times this instance wrote to a bans hash ([`Bans::change_stored`]): a read
    /// begun before the latest write is older than what is held, and is not applied.
    #[cfg(feature = "redis")]
    writes: u64,
}

/// What checks read: every ban in force, merged.
#[derive(Default)]
struct Table {
    /// By a key's identity part, as keys hold it (`ip:203.0.113.9`, `user:42`,
    /// `custom:john%20doe`, `global`).
    identities: HashMap<Box<str>, u64>,
    /// Banned networks (`ip:203.0.113.0/24`).
    networks: Vec<(IpNet, u64)>,
    /// Every IPv6 ban, addresses as networks of one: the layers count an IPv6 client by
    /// its network ([`grouping_ipv6_by`]), which a ban of part of it refuses.
    ipv6: Vec<(Ipv6Net, u64)>,
}

/// A banned identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Banned {
    /// A user id, a custom value, or `global`: `text` as the caller wrote it
    /// (`custom:john doe`), `in_keys` as keys hold it (`custom:john%20doe`).
    Identity { text: String, in_keys: String },
    /// One IP address, in canonical form (an IPv4-mapped address is its IPv4 address).
    Address(IpAddr),
    /// Every `ip:` identity in a network.
    Network(IpNet),
}

impl Banned {
    /// Reads an identity as an operator writes it: `ip:<address>`, `ip:<network>/<bits>`
    /// (IPv4 or IPv6), `user:<id>`, `custom:<value>` (the value as the guarded call gives
    /// it, unescaped), or `global`. Reading what [`text`](Self::text) writes gives the
    /// same ban back.
    pub fn parse(identity: &str) -> Result<Banned, String> {
        let no_identity = || {
            format!(
                "`{identity}` is no identity: write ip:<address>, ip:<network>/<bits>, \
                 user:<id>, custom:<value> or global"
            )
        };
        let identity = identity.trim_start();
        if identity.trim_end() == "global" {
            return Ok(Banned::Identity {
                text: "global".to_owned(),
                in_keys: identity_in_keys(LimitType::Global, ""),
            });
        }
        let Some((kind, value)) = identity.split_once(':') else {
            return Err(no_identity());
        };
        let limit_type = match kind {
            "ip" => return Banned::parse_ip(value.trim()),
            "user" => LimitType::UserId,
            "custom" => LimitType::Custom,
            _ => return Err(no_identity()),
        };
        if value.is_empty() {
            return Err(no_identity());
        }
        Ok(Banned::Identity {
            text: identity.to_owned(),
            in_keys: identity_in_keys(limit_type, value),
        })
    }

    fn parse_ip(value: &str) -> Result<Banned, String> {
        if !value.contains('/') {
            let ip: IpAddr = value
                .parse()
                .map_err(|_| format!("`{value}` is not an IPv4 or IPv6 address"))?;
            return Ok(Banned::Address(ip.to_canonical()));
        }
        let network: IpNet = value
            .parse()
            .map_err(|_| format!("`{value}` is not an IPv4 or IPv6 network"))?;
        let network = canonical_network(network);
        let widest = match network {
            IpNet::V4(_) => WIDEST_IPV4,
            IpNet::V6(_) => WIDEST_IPV6,
        };
        if network.prefix_len() < widest {
            return Err(format!(
                "`{value}` is too wide to ban: a ban takes an IPv4 network of /{WIDEST_IPV4} \
                 or narrower, an IPv6 network of /{WIDEST_IPV6} or narrower"
            ));
        }
        Ok(match network.prefix_len() == network.max_prefix_len() {
            true => Banned::Address(network.addr()),
            false => Banned::Network(network),
        })
    }

    /// The identity part of the keys this ban refuses, as keys hold it; `None` for a
    /// network, which covers many.
    fn in_keys(&self) -> Option<String> {
        match self {
            Banned::Identity { in_keys, .. } => Some(in_keys.clone()),
            Banned::Address(ip) => Some(identity_in_keys(LimitType::Ip, ip)),
            Banned::Network(_) => None,
        }
    }

    /// The identity as it is stored and listed: as the caller wrote it, an address or a
    /// network in canonical form.
    pub fn text(&self) -> String {
        match self {
            Banned::Identity { text, .. } => text.clone(),
            Banned::Address(ip) => format!("ip:{ip}"),
            Banned::Network(network) => format!("ip:{network}"),
        }
    }
}

/// The IPv6 prefix lengths the layers of this process count clients by (bit `n`: /`n`,
/// for `n` < 128), so that a ban of one address refuses the network it is counted under.
static IPV6_GROUPINGS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Records that IPv6 clients are counted by their network of `prefix` bits (a layer's
/// `ipv6_prefix`). Once per request: one atomic load once recorded.
#[cfg(any(feature = "tower", feature = "actix", test))]
pub(crate) fn grouping_ipv6_by(prefix: u8) {
    if prefix >= 128 {
        return;
    }
    let (word, bit) = (
        &IPV6_GROUPINGS[usize::from(prefix / 64)],
        1u64 << (prefix % 64),
    );
    if word.load(Ordering::Relaxed) & bit == 0 {
        word.fetch_or(bit, Ordering::Relaxed);
    }
}

/// The prefix lengths [`grouping_ipv6_by`] recorded, shortest first.
fn ipv6_groupings() -> impl Iterator<Item = u8> {
    IPV6_GROUPINGS.iter().enumerate().flat_map(|(i, word)| {
        let mut bits = word.load(Ordering::Relaxed);
        std::iter::from_fn(move || {
            let bit = bits.trailing_zeros();
            (bit < 64).then(|| {
                bits &= bits - 1;
                (i * 64) as u8 + bit as u8
            })
        })
    })
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
        if self.is_empty() {
            return None;
        }
        self.left_in_table(identity)
    }

    /// Whether no ban is in force, as far as this instance knows: a check then looks up
    /// nothing.
    #[inline]
    pub fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Relaxed)
    }

    /// [`left_us`](Self::left_us) of an identity as an operator writes it
    /// ([`Banned::parse`]); `None` also for one that is no identity, or a network.
    #[inline]
    pub fn left_us_of(&self, identity: &str) -> Option<u64> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        self.left_in_table(&Banned::parse(identity).ok()?.in_keys()?)
    }

    #[cold]
    fn left_in_table(&self, identity: &str) -> Option<u64> {
        let table = self.table.load();
        let now = now_us();
        let mut until = table.identities.get(identity).copied().unwrap_or(0);
        let scan = !table.networks.is_empty() || !table.ipv6.is_empty();
        if let (true, Some(ip)) = (scan, identity.strip_prefix("ip:").and_then(ip_in_identity)) {
            for (network, end) in &table.networks {
                if network.contains(&ip) {
                    until = until.max(*end);
                }
            }
            if let IpAddr::V6(ip) = ip {
                until = until.max(table.group_ban(ip));
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

    /// The count of this instance's writes to the bans hashes, to take before a read of
    /// one and give [`set_stored`](Self::set_stored) with what it read.
    #[cfg(feature = "redis")]
    pub fn writes(&self) -> u64 {
        lock(&self.sources).writes
    }

    /// Replaces what was read from `prefix`'s `{prefix}bans` hash with `bans`, read after
    /// `writes` of this instance's writes; a read older than a later write is left out
    /// (the next one has it).
    #[cfg(feature = "redis")]
    pub fn set_stored(&self, prefix: &str, bans: HashMap<String, u64>, writes: u64) {
        self.change(|sources| {
            if sources.writes == writes {
                sources.stored.insert(prefix.to_owned(), bans);
            }
        });
    }

    /// Changes one ban read from `prefix`'s hash (`None`: lifts it), as a write there
    /// does, until the next read.
    #[cfg(feature = "redis")]
    pub fn change_stored(&self, prefix: &str, banned: &Banned, until_us: Option<u64>) {
        self.change(|sources| {
            sources.writes += 1;
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
                Ok(Banned::Network(network)) => {
                    table.networks.push((network, end));
                    if let IpNet::V6(network) = network {
                        table.ipv6.push((network, end));
                    }
                }
                Ok(banned) => {
                    let in_keys = banned.in_keys().unwrap_or_default();
                    let until = table.identities.entry(in_keys.into()).or_insert(0);
                    *until = (*until).max(end);
                    if let Banned::Address(IpAddr::V6(ip)) = banned {
                        table.ipv6.push((ip.into(), end));
                    }
                }
                Err(_) => {}
            }
        }
        self.any.store(
            !table.identities.is_empty() || !table.networks.is_empty(),
            Ordering::Relaxed,
        );
        // Every IPv6 ban is in `identities` or `networks` too.
        self.table.store(table.into());
    }
}

impl Table {
    /// The latest end of the bans that cover part of the network `ip` is, when a layer
    /// counts IPv6 clients by networks it is the address of: the client as the layer
    /// counts it. (0: none.) A ban as wide as the network, or wider, covers `ip` itself,
    /// which `networks` finds.
    fn group_ban(&self, ip: Ipv6Addr) -> u64 {
        let mut until = 0;
        for prefix in ipv6_groupings() {
            for (banned, end) in &self.ipv6 {
                let within = banned.prefix_len() > prefix
                    && Ipv6Net::new_assert(banned.addr(), prefix).network() == ip;
                if within {
                    until = until.max(*end);
                }
            }
        }
        until
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
            // Saturating: 0.5 stored bans of `Duration::MAX` at their end, which overflows.
            let end_us = end_ms.trim().parse::<u64>().ok()?.saturating_mul(1000);
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
    fn identities_are_listed_as_written_and_matched_as_keys_hold_them() {
        let long = format!("custom:{}", "x".repeat(200));
        for (written, listed, in_keys) in [
            ("ip:203.0.113.9", "ip:203.0.113.9", "ip:203.0.113.9"),
            ("ip:2001:DB8::1", "ip:2001:db8::1", "ip:2001%3Adb8%3A%3A1"),
            ("ip:::ffff:203.0.113.9", "ip:203.0.113.9", "ip:203.0.113.9"),
            ("ip:203.0.113.9/32", "ip:203.0.113.9", "ip:203.0.113.9"),
            ("user:42", "user:42", "user:42"),
            ("custom:a b:c", "custom:a b:c", "custom:a%20b%3Ac"),
            ("custom:100%", "custom:100%", "custom:100%25"),
            ("global", "global", "global"),
        ] {
            let banned = banned(written);
            assert_eq!(banned.text(), listed, "{written}");
            assert_eq!(banned.in_keys().as_deref(), Some(in_keys), "{written}");
        }
        assert!(banned(&long).in_keys().unwrap().starts_with("custom:#"));
        for (written, listed) in [
            ("ip:203.0.113.77/24", "ip:203.0.113.0/24"),
            ("ip:2001:db8::/48", "ip:2001:db8::/48"),
            ("ip:::ffff:203.0.113.0/120", "ip:203.0.113.0/24"),
            ("ip:10.0.0.0/8", "ip:10.0.0.0/8"),
        ] {
            assert_eq!(banned(written).text(), listed, "{written}");
        }
        for wrong in [
            "",
            "42",
            "ip:nope",
            "ip:10.0.0.0/33",
            "host:x",
            "user:",
            "ip:1.2.3.4/0",
        ] {
            assert!(Banned::parse(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn what_is_listed_reads_back_as_the_same_ban() {
        let long = format!("custom:{}", "%".repeat(100));
        for written in [
            "custom:john doe",
            "custom:tenant:42",
            "custom:john%20doe",
            "user:ann smith ",
            long.as_str(),
            "ip:::FFFF:10.1.2.3",
            "ip:2001:db8:0:0::/64",
            "global",
        ] {
            let banned = banned(written);
            assert_eq!(Banned::parse(&banned.text()), Ok(banned), "{written}");
        }
    }

    #[test]
    fn a_ban_of_part_of_a_network_refuses_the_network_where_layers_count_by_it() {
        let bans = Bans::default();
        let hour = now_us() + 3_600_000_000;
        bans.set_local(&banned("ip:2001:db8:5:1::7"), hour);
        bans.set_local(&banned("ip:2001:db8:5:2::/96"), hour);
        let network = |text: &str| crate::key::identity_in_keys(LimitType::Ip, text);
        // As a layer counting IPv6 clients by their /64 records it (other tests' layers
        // may record it too: the record is the process's).
        grouping_ipv6_by(64);
        grouping_ipv6_by(128);
        assert!(ipv6_groupings().any(|p| p == 64));
        assert!(!ipv6_groupings().any(|p| p == 128));
        for refused in ["2001:db8:5:1::", "2001:db8:5:2::", "2001:db8:5:1::7"] {
            assert!(bans.left_us(&network(refused)).is_some(), "{refused}");
        }
        for free in ["2001:db8:5:3::", "2001:db8:5::", "2001:db8:5:1::8"] {
            assert_eq!(bans.left_us(&network(free)), None, "{free}");
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
        bans.set_stored("rate_limit:", read, bans.writes());
        assert!(bans.left_us("ip:10.1.2.3").is_some());
        bans.set_stored("rate_limit:", HashMap::new(), bans.writes());
        assert_eq!(bans.left_us("ip:10.1.2.3"), None);
    }

    /// A read that began before this instance wrote a ban (or lifted one) holds the hash as
    /// it was: applied after the write, it would undo it here until the next read.
    #[test]
    #[cfg(feature = "redis")]
    fn a_read_older_than_a_write_here_does_not_undo_it() {
        let bans = Bans::default();
        let hour_us = now_us() + 3_600_000_000;
        let read_from = bans.writes();
        bans.change_stored("rate_limit:", &banned("user:7"), Some(hour_us));
        bans.set_stored("rate_limit:", HashMap::new(), read_from);
        assert!(
            bans.left_us("user:7").is_some(),
            "a stale read undid the ban"
        );
        // A read begun after the write is the hash as it is.
        bans.set_stored("rate_limit:", HashMap::new(), bans.writes());
        assert_eq!(bans.left_us("user:7"), None);
        // Likewise for a lifted ban.
        let stored: HashMap<String, u64> = [("user:8".to_owned(), hour_us)].into();
        bans.set_stored("rate_limit:", stored.clone(), bans.writes());
        let read_from = bans.writes();
        bans.change_stored("rate_limit:", &banned("user:8"), None);
        bans.set_stored("rate_limit:", stored, read_from);
        assert_eq!(
            bans.left_us("user:8"),
            None,
            "a stale read restored a lifted ban"
        );
    }
}
