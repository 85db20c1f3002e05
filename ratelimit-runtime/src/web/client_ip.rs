//! Who the client is: the peer address, or, behind trusted proxies, the address they
//! forwarded; IPv6 clients grouped by network.
//!
//! Framework-free: every integration passes the peer address and a way to read one
//! header's lines, so the rules a client could abuse are written once.

use std::error::Error;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;

/// The header in which the trusted proxies in front of the app pass on the client address.
///
/// Only one header is read, because a proxy usually passes the headers it does not write
/// through unchanged: reading a second one would let any client choose its own address.
/// Pick the header your proxies write, and only that one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProxyHeader {
    /// `X-Forwarded-For: <client>, <proxy1>, <proxy2>` (nginx
    /// `$proxy_add_x_forwarded_for`, HAProxy `option forwardfor`, most load balancers).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=<client>, for=<proxy1>` (RFC 7239); `for=` nodes may be quoted,
    /// bracketed IPv6 and carry ports.
    Forwarded,
    /// `X-Real-IP: <client>` (nginx `proxy_set_header X-Real-IP $remote_addr`), read as a
    /// one-entry `X-Forwarded-For`.
    XRealIp,
}

impl ProxyHeader {
    /// The header's name, in lower case.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ProxyHeader::XForwardedFor => "x-forwarded-for",
            ProxyHeader::Forwarded => "forwarded",
            ProxyHeader::XRealIp => "x-real-ip",
        }
    }
}

/// A trusted proxy network that does not parse, from `try_trust_proxies` of a framework
/// integration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidProxyNet {
    input: String,
    reason: &'static str,
}

impl fmt::Display for InvalidProxyNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a trusted proxy network: {}; write an address with an optional \
             prefix length, like 10.0.0.0/8, 192.0.2.7 or 2001:db8::/32",
            self.input, self.reason
        )
    }
}

impl Error for InvalidProxyNet {}

/// Parses a trusted proxy network: `10.0.0.0/8`, `2001:db8::/32`, or a bare address (a
/// network of one). Host bits are allowed and cleared (`10.1.2.3/8` is `10.0.0.0/8`).
pub(crate) fn parse_network(input: &str) -> Result<IpNet, InvalidProxyNet> {
    let text = input.trim();
    let net = match text.parse::<IpNet>() {
        Ok(net) => net,
        Err(_) => match text.parse::<IpAddr>() {
            Ok(addr) => IpNet::from(addr),
            Err(_) => {
                return Err(InvalidProxyNet {
                    input: input.to_owned(),
                    reason: why_not_a_network(text),
                })
            }
        },
    };
    // Addresses are matched in canonical form, as keys hold them.
    Ok(crate::key::canonical_network(net))
}

/// What is wrong with a network `ipnet` did not parse, for the message.
fn why_not_a_network(text: &str) -> &'static str {
    let (addr, prefix) = text.split_once('/').unwrap_or((text, ""));
    let Ok(addr) = addr.parse::<IpAddr>() else {
        return "the address does not parse";
    };
    match prefix.parse::<u8>() {
        Ok(bits) if bits > max_prefix(addr) => "the prefix length is longer than the address",
        _ => "the prefix length is not a number",
    }
}

fn max_prefix(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// `ip` with every bit after the first `prefix` cleared.
pub(crate) fn network_of(ip: IpAddr, prefix: u8) -> IpAddr {
    IpNet::new_assert(ip, prefix.min(max_prefix(ip))).network()
}

/// How an integration finds the client address of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClientIpConfig {
    pub trusted: Vec<IpNet>,
    pub header: ProxyHeader,
    pub ipv6_prefix: u8,
}

impl Default for ClientIpConfig {
    fn default() -> Self {
        ClientIpConfig {
            trusted: Vec::new(),
            header: ProxyHeader::default(),
            ipv6_prefix: 64,
        }
    }
}

impl ClientIpConfig {
    /// Adds trusted proxy networks; none is added when one does not parse.
    pub(crate) fn trust<I>(&mut self, networks: I) -> Result<(), InvalidProxyNet>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let parsed = networks
            .into_iter()
            .map(|net| parse_network(net.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        self.trusted.extend(parsed);
        Ok(())
    }

    /// The address the request is counted under, from the peer that connected and, when
    /// the peer is a trusted proxy, the lines of the proxy header (`lines(name)` gives the
    /// raw values of the header called `name`, in order); `None` when the peer is unknown.
    pub(crate) fn client_ip<'a, L, I>(&self, peer: Option<IpAddr>, lines: L) -> Option<IpAddr>
    where
        L: FnOnce(&'static str) -> I,
        I: IntoIterator<Item = &'a [u8]>,
    {
        let peer = peer?.to_canonical();
        let client = if self.is_trusted(peer) {
            self.forwarded_client(peer, hops(self.header, lines(self.header.name())))
        } else {
            peer
        };
        Some(match client {
            IpAddr::V6(_) => {
                // So that a ban of one address in that network refuses the client as
                // counted here (bans.rs).
                crate::bans::grouping_ipv6_by(self.ipv6_prefix);
                network_of(client, self.ipv6_prefix)
            }
            IpAddr::V4(_) => client,
        })
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// Walks the proxy header from the right (the hop nearest to us) past trusted hops.
    ///
    /// Each hop was written by the trusted proxy after it, so the first untrusted address
    /// is the client. When every hop is trusted the leftmost is the client (an internal
    /// caller). An entry that is not an address (`unknown`, an obfuscated name, garbage)
    /// ends the walk: nothing beyond it can be known, so the last trusted hop stands in.
    fn forwarded_client(&self, peer: IpAddr, hops: Vec<Option<IpAddr>>) -> IpAddr {
        let mut client = peer;
        for hop in hops.into_iter().rev() {
            let Some(ip) = hop else { break };
            client = ip.to_canonical();
            if !self.is_trusted(client) {
                break;
            }
        }
        client
    }
}

/// The hops a proxy header lists, leftmost (furthest from us) first; `None` for an entry
/// that is not an address. Several header lines form one list, in order.
fn hops<'a>(header: ProxyHeader, lines: impl IntoIterator<Item = &'a [u8]>) -> Vec<Option<IpAddr>> {
    let mut hops = Vec::new();
    for line in lines {
        // Visible ASCII only, as `HeaderValue::to_str` accepts: no address has anything else.
        let Some(value) = std::str::from_utf8(line)
            .ok()
            .filter(|v| v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)))
        else {
            hops.push(None);
            continue;
        };
        match header {
            ProxyHeader::Forwarded => forwarded_for(value, &mut hops),
            ProxyHeader::XForwardedFor | ProxyHeader::XRealIp => {
                // Empty list elements are ignored (RFC 9110, section 5.6.1).
                let entries = value.split(',').map(str::trim).filter(|e| !e.is_empty());
                hops.extend(entries.map(parse_node));
            }
        }
    }
    hops
}

/// An address as proxies write it: `192.0.2.7`, `192.0.2.7:4711`, `2001:db8::1`,
/// `[2001:db8::1]` or `[2001:db8::1]:4711`.
fn parse_node(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = node.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    node.strip_prefix('[')?
        .strip_suffix(']')?
        .parse::<Ipv6Addr>()
        .ok()
        .map(IpAddr::V6)
}

/// Appends the `for=` node of each element of one `Forwarded` line (RFC 7239, section 4):
/// `for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"`.
///
/// An element without a readable `for=` is an unknown hop, and so is an element whose
/// quoted string never ends: no address is taken from broken syntax.
fn forwarded_for(line: &str, hops: &mut Vec<Option<IpAddr>>) {
    let mut element_for: Option<Option<IpAddr>> = None;
    let mut element_empty = true;
    let mut pair = String::new();
    let mut in_quotes = false;
    let mut chars = line.chars();
    loop {
        let c = chars.next();
        match c {
            Some('"') => in_quotes = !in_quotes,
            Some('\\') if in_quotes => {
                if let Some(escaped) = chars.next() {
                    pair.push('\\');
                    pair.push(escaped);
                    continue;
                }
            }
            _ => {}
        }
        match c {
            None if in_quotes => {
                hops.push(None);
                return;
            }
            Some(c) if in_quotes || (c != ';' && c != ',') => {
                element_empty &= c.is_whitespace();
                pair.push(c);
            }
            // `;`, `,` or the end, outside quotes: the pair is complete.
            _ => {
                if let Some((name, value)) = pair.split_once('=') {
                    if name.trim().eq_ignore_ascii_case("for") && element_for.is_none() {
                        element_for = Some(unquote(value.trim()).and_then(|v| parse_node(&v)));
                    }
                }
                pair.clear();
                if c != Some(';') {
                    if !element_empty {
                        hops.push(element_for.flatten());
                    }
                    element_for = None;
                    element_empty = true;
                }
                if c.is_none() {
                    return;
                }
            }
        }
    }
}

/// The text of a token or of a quoted-string (`"..."` with `\` escapes).
fn unquote(value: &str) -> Option<String> {
    let Some(inner) = value.strip_prefix('"') else {
        return Some(value.to_owned());
    };
    let inner = inner.strip_suffix('"')?;
    let mut text = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        text.push(if c == '\\' { chars.next()? } else { c });
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn config(trusted: &[&str], header: ProxyHeader) -> ClientIpConfig {
        ClientIpConfig {
            trusted: trusted.iter().map(|n| parse_network(n).unwrap()).collect(),
            header,
            ..ClientIpConfig::default()
        }
    }

    /// Header lines, as a request holds them.
    #[derive(Default)]
    struct HeaderMap(Vec<(&'static str, Vec<u8>)>);

    impl HeaderMap {
        fn new() -> Self {
            Self::default()
        }

        fn append(&mut self, name: &'static str, value: impl Into<Vec<u8>>) {
            self.0.push((name, value.into()));
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name, *value);
        }
        map
    }

    impl ClientIpConfig {
        /// `client_ip` reading `headers`.
        fn client_ip_of(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
            self.client_ip(peer, |name| {
                headers
                    .0
                    .iter()
                    .filter(move |(n, _)| *n == name)
                    .map(|(_, v)| v.as_slice())
            })
        }

        /// `client_ip_of` from the peer written `peer`.
        fn client_of(&self, peer: &str, headers: &HeaderMap) -> Option<IpAddr> {
            self.client_ip_of(Some(ip(peer)), headers)
        }
    }

    fn forwarded(line: &str) -> Vec<Option<IpAddr>> {
        let mut hops = Vec::new();
        forwarded_for(line, &mut hops);
        hops
    }

    #[test]
    fn networks_parse_with_or_without_prefix_and_clear_host_bits() {
        let net = parse_network("10.1.2.3/8").unwrap();
        assert_eq!(net, parse_network("10.0.0.0/8").unwrap());
        assert!(net.contains(&ip("10.255.0.1")));
        assert!(!net.contains(&ip("11.0.0.1")));
        let host = parse_network(" 127.0.0.2 ").unwrap();
        assert!(host.contains(&ip("127.0.0.2")));
        assert!(!host.contains(&ip("127.0.0.1")));
        let v6 = parse_network("2001:db8::/32").unwrap();
        assert!(v6.contains(&ip("2001:db8:ffff::1")));
        assert!(!v6.contains(&ip("2001:db9::1")));
        assert!(parse_network("0.0.0.0/0")
            .unwrap()
            .contains(&ip("203.0.113.9")));
        assert!(!parse_network("0.0.0.0/0").unwrap().contains(&ip("::1")));
        // An IPv4-mapped network is the IPv4 network.
        assert_eq!(
            parse_network("::ffff:10.0.0.0/104"),
            parse_network("10.0.0.0/8")
        );
        assert!(parse_network("::ffff:10.0.0.1")
            .unwrap()
            .contains(&ip("10.0.0.1")));
        assert!(!parse_network("::ffff:0:0/95")
            .unwrap()
            .contains(&ip("10.0.0.1")));
    }

    #[test]
    fn invalid_networks_say_what_is_wrong() {
        let err = parse_network("10.0.0.0/33").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`10.0.0.0/33` is not a trusted proxy network: the prefix length is longer than \
             the address; write an address with an optional prefix length, like 10.0.0.0/8, \
             192.0.2.7 or 2001:db8::/32"
        );
        assert!(parse_network("10.0.0/8").is_err_and(|e| e.reason.contains("address")));
        assert!(parse_network("10.0.0.0/x").is_err_and(|e| e.reason.contains("number")));
        assert!(parse_network("").is_err());
        assert!(parse_network("/8").is_err());
    }

    #[test]
    fn nodes_parse_with_ports_and_brackets() {
        assert_eq!(parse_node("192.0.2.7"), Some(ip("192.0.2.7")));
        assert_eq!(parse_node("192.0.2.7:4711"), Some(ip("192.0.2.7")));
        assert_eq!(parse_node("2001:db8::1"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("[2001:db8::1]"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("[2001:db8::1]:4711"), Some(ip("2001:db8::1")));
        for garbage in [
            "unknown",
            "_hidden",
            "",
            "[",
            "]",
            "[1.2.3.4]",
            "1.2.3.4:x",
            "::g",
        ] {
            assert_eq!(parse_node(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn forwarded_reads_for_of_every_element() {
        assert_eq!(
            forwarded(
                "for=192.0.2.60;proto=http;by=203.0.113.43, For=\"[2001:db8:cafe::17]:4711\""
            ),
            vec![Some(ip("192.0.2.60")), Some(ip("2001:db8:cafe::17"))]
        );
        assert_eq!(
            forwarded("proto=https;for=\"198.51.100.17:80\""),
            vec![Some(ip("198.51.100.17"))]
        );
        assert_eq!(
            forwarded("for=unknown, for=_hidden, by=10.0.0.1, for=10.0.0.2"),
            vec![None, None, None, Some(ip("10.0.0.2"))]
        );
        // A quoted value may hold `,` and `;` and escapes; empty elements are ignored.
        assert_eq!(
            forwarded(" , for=\"x,y;z\\\"\";by=a , ,for=192.0.2.1,"),
            vec![None, Some(ip("192.0.2.1"))]
        );
    }

    #[test]
    fn broken_forwarded_lines_give_no_address() {
        assert_eq!(forwarded("for=\"192.0.2.1"), vec![None]);
        assert_eq!(
            forwarded("for=192.0.2.1, for=\"[::1]"),
            vec![Some(ip("192.0.2.1")), None]
        );
        assert_eq!(forwarded("for=\"\\"), vec![None]);
        assert_eq!(forwarded("for"), vec![None]);
        assert_eq!(forwarded("for=\"1.2.3.4\"junk"), vec![None]);
        assert_eq!(forwarded(""), vec![]);
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_sends() {
        let cfg = config(&["10.0.0.0/8"], ProxyHeader::XForwardedFor);
        let spoofed = headers(&[("x-forwarded-for", "1.2.3.4"), ("x-real-ip", "5.6.7.8")]);
        assert_eq!(
            cfg.client_of("203.0.113.9", &spoofed),
            Some(ip("203.0.113.9"))
        );
        // With no trusted proxies at all, nothing is ever read from headers.
        let none = config(&[], ProxyHeader::XForwardedFor);
        assert_eq!(none.client_of("10.0.0.1", &spoofed), Some(ip("10.0.0.1")));
        assert_eq!(none.client_ip_of(None, &spoofed), None);
    }

    #[test]
    fn behind_trusted_proxies_the_first_untrusted_hop_from_the_right_is_the_client() {
        let cfg = config(&["10.0.0.0/8"], ProxyHeader::XForwardedFor);
        let peer = Some(ip("10.0.0.1"));
        // The client prepended a fake address; our proxies appended the real one.
        let h = headers(&[("x-forwarded-for", "1.2.3.4, 203.0.113.9, 10.0.0.7")]);
        assert_eq!(cfg.client_ip_of(peer, &h), Some(ip("203.0.113.9")));
        // Several lines are one list.
        let h = headers(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-for", "203.0.113.9 ,10.0.0.7,"),
        ]);
        assert_eq!(cfg.client_ip_of(peer, &h), Some(ip("203.0.113.9")));
        // All hops trusted: an internal caller, the leftmost.
        let h = headers(&[("x-forwarded-for", "10.9.9.9, 10.0.0.7")]);
        assert_eq!(cfg.client_ip_of(peer, &h), Some(ip("10.9.9.9")));
        // No header: the proxy itself.
        assert_eq!(cfg.client_ip_of(peer, &HeaderMap::new()), peer);
        // Ports and IPv4-mapped forms are accepted.
        let h = headers(&[("x-forwarded-for", "[::ffff:203.0.113.9]:5000, 10.0.0.7:80")]);
        assert_eq!(cfg.client_ip_of(peer, &h), Some(ip("203.0.113.9")));
    }

    #[test]
    fn garbage_in_the_chain_stops_the_walk_at_the_last_trusted_hop() {
        let cfg = config(&["10.0.0.0/8"], ProxyHeader::XForwardedFor);
        let peer = Some(ip("10.0.0.1"));
        for (chain, client) in [
            (&b"203.0.113.9, unknown, 10.0.0.7"[..], Some(ip("10.0.0.7"))),
            (b"203.0.113.9, 1.2.3.4.5", peer),
            (b"203.0.113.9, \xff", peer),
            (b", ,", peer),
        ] {
            let mut h = HeaderMap::new();
            h.append("x-forwarded-for", chain);
            let chain = chain.escape_ascii();
            assert_eq!(cfg.client_ip_of(peer, &h), client, "{chain}");
        }
    }

    #[test]
    fn only_the_configured_header_is_read() {
        let peer = Some(ip("10.0.0.1"));
        let h = headers(&[
            ("x-forwarded-for", "198.51.100.1"),
            ("forwarded", "for=198.51.100.2"),
            ("x-real-ip", "198.51.100.3"),
        ]);
        let read = |header| config(&["10.0.0.0/8"], header).client_ip_of(peer, &h);
        assert_eq!(read(ProxyHeader::XForwardedFor), Some(ip("198.51.100.1")));
        assert_eq!(read(ProxyHeader::Forwarded), Some(ip("198.51.100.2")));
        assert_eq!(read(ProxyHeader::XRealIp), Some(ip("198.51.100.3")));
    }

    #[test]
    fn forwarded_chains_are_walked_like_x_forwarded_for() {
        let cfg = config(
            &["10.0.0.0/8", "2001:db8:ffff::/48"],
            ProxyHeader::Forwarded,
        );
        let h = headers(&[
            ("forwarded", "for=1.2.3.4"),
            (
                "forwarded",
                "for=\"[2001:db8:cafe::17]:4711\";proto=https, for=\"[2001:db8:ffff::5]\"",
            ),
        ]);
        assert_eq!(cfg.client_of("10.0.0.1", &h), Some(ip("2001:db8:cafe::")));
        let h = headers(&[("forwarded", "for=1.2.3.4, for=unknown;proto=http")]);
        assert_eq!(cfg.client_of("10.0.0.1", &h), Some(ip("10.0.0.1")));
    }

    #[test]
    fn ipv6_clients_are_grouped_by_their_network() {
        let cfg = config(&[], ProxyHeader::XForwardedFor);
        let none = HeaderMap::new();
        let a = cfg.client_of("2001:db8:1:2:aaaa::1", &none);
        let b = cfg.client_of("2001:db8:1:2:ffff:ffff:ffff:ffff", &none);
        assert_eq!(a, Some(ip("2001:db8:1:2::")));
        assert_eq!(a, b);
        assert_ne!(a, cfg.client_of("2001:db8:1:3::1", &none));
        assert_eq!(cfg.client_of("::1", &none), Some(ip("::")));

        let grouped_by = |ipv6_prefix| ClientIpConfig {
            ipv6_prefix,
            ..cfg.clone()
        };
        let per_48 = grouped_by(48);
        assert_eq!(
            per_48.client_of("2001:db8:1:3::1", &none),
            Some(ip("2001:db8:1::"))
        );
        let per_host = grouped_by(128);
        assert_eq!(
            per_host.client_of("2001:db8::1", &none),
            Some(ip("2001:db8::1"))
        );
        // IPv4 clients are never grouped.
        assert_eq!(
            per_48.client_of("203.0.113.9", &none),
            Some(ip("203.0.113.9"))
        );
    }

    #[test]
    fn ipv4_mapped_ipv6_is_ipv4() {
        let cfg = config(&["10.0.0.0/8"], ProxyHeader::XForwardedFor);
        // A dual-stack listener reports IPv4 peers as ::ffff:a.b.c.d.
        assert_eq!(
            cfg.client_of("::ffff:203.0.113.9", &HeaderMap::new()),
            Some(ip("203.0.113.9"))
        );
        let h = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(
            cfg.client_of("::ffff:10.0.0.1", &h),
            Some(ip("203.0.113.9"))
        );
    }

    #[test]
    fn no_header_value_makes_the_walk_panic() {
        // Every string up to 4 characters over the characters the parsers treat specially.
        const ALPHABET: &[u8] = b"\"\\,;=[]:.1f_ ";
        let configs = [
            ProxyHeader::XForwardedFor,
            ProxyHeader::Forwarded,
            ProxyHeader::XRealIp,
        ]
        .map(|header| config(&["0.0.0.0/0", "::/0"], header));
        let peer = Some(ip("10.0.0.1"));
        let mut value = Vec::new();
        let mut odometer = [0usize; 4];
        for len in 0..=4 {
            for _ in 0..ALPHABET.len().pow(len as u32) {
                value.clear();
                value.extend(odometer[..len].iter().map(|&i| ALPHABET[i]));
                let line = std::str::from_utf8(&value).unwrap();
                for cfg in &configs {
                    let mut map = HeaderMap::new();
                    map.append(cfg.header.name(), line);
                    map.append(cfg.header.name(), line);
                    assert!(cfg.client_ip_of(peer, &map).is_some(), "{line:?}");
                }
                for digit in odometer[..len].iter_mut() {
                    *digit += 1;
                    if *digit < ALPHABET.len() {
                        break;
                    }
                    *digit = 0;
                }
            }
        }
    }

    #[test]
    fn network_masks_cover_every_prefix_length() {
        assert_eq!(network_of(ip("255.255.255.255"), 0), ip("0.0.0.0"));
        assert_eq!(network_of(ip("255.255.255.255"), 1), ip("128.0.0.0"));
        assert_eq!(network_of(ip("255.255.255.255"), 32), ip("255.255.255.255"));
        assert_eq!(network_of(ip("ffff::ffff"), 0), ip("::"));
        assert_eq!(network_of(ip("ffff::ffff"), 127), ip("ffff::fffe"));
        assert_eq!(network_of(ip("ffff::ffff"), 128), ip("ffff::ffff"));
    }
}
