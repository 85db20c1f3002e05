//! Key layout: `{prefix}{type}:{identity}:{path}`, or `{prefix}global:{path}`.
//!
//! The constant parts are built once per call site ([`KeyTemplate`]); a call only escapes
//! its identity into a buffer of the right size. The `path` of a guarded function is the
//! attribute's `name`, or the function's own path, read by [`function_path`].

use std::fmt::{self, Write as _};
use std::net::IpAddr;

use ipnet::IpNet;

use crate::LimitType;

/// The key prefix of a site that names none: the attribute's `key`, a layer guard's, the
/// `ratelimit` command's `--prefix`.
pub const DEFAULT_PREFIX: &str = ratelimit_rule_text::DEFAULT_PREFIX;

/// Escaped identities longer than this are replaced by a hash, so keys stay short.
pub const MAX_IDENTITY_LEN: usize = 128;

/// The constant parts of one call site's keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyTemplate {
    /// `{prefix}{type}:`, or the whole key for [`LimitType::Global`].
    head: String,
    /// `:{path}`; empty for [`LimitType::Global`].
    tail: String,
    /// Whether the identities are IP addresses ([`LimitType::Ip`]), written in their
    /// canonical form.
    ip: bool,
}

impl KeyTemplate {
    /// The template for `prefix`, `limit_type` and the function path `path`.
    pub fn new(prefix: &str, limit_type: LimitType, path: &str) -> Self {
        let segment = limit_type.key_segment();
        match limit_type {
            LimitType::Global => KeyTemplate {
                head: format!("{prefix}{segment}:{path}"),
                tail: String::new(),
                ip: false,
            },
            _ => KeyTemplate {
                head: format!("{prefix}{segment}:"),
                tail: format!(":{path}"),
                ip: limit_type == LimitType::Ip,
            },
        }
    }

    /// The key of a [`LimitType::Global`] call site, which has no identity.
    pub fn global_key(&self) -> &str {
        &self.head
    }

    /// The key for `identity`, escaped as the key layout requires. For an `IP` site, an
    /// identity that is an IP address is written in its canonical form: an IPv4-mapped
    /// IPv6 address (`::ffff:203.0.113.9`, as a dual-stack listener reports IPv4 peers) as
    /// its IPv4 address, an IPv6 address compressed and in lower case.
    ///
    /// ```
    /// use std::net::IpAddr;
    ///
    /// use ratelimit_runtime::{key::KeyTemplate, LimitType};
    ///
    /// let t = KeyTemplate::new("rate_limit:", LimitType::Custom, "app::send");
    /// assert_eq!(t.key_for("+1 555:0100"), "rate_limit:custom:+1%20555%3A0100:app::send");
    ///
    /// let t = KeyTemplate::new("rate_limit:", LimitType::Ip, "app::send");
    /// let mapped: IpAddr = "::ffff:203.0.113.9".parse().unwrap();
    /// assert_eq!(t.key_for(mapped), "rate_limit:ip:203.0.113.9:app::send");
    /// ```
    pub fn key_for(&self, identity: impl fmt::Display) -> String {
        let mut key = String::with_capacity(self.head.len() + 48 + self.tail.len());
        key.push_str(&self.head);
        match self.ip {
            true => push_ip_identity(&mut key, identity),
            false => push_identity(&mut key, identity),
        }
        key.push_str(&self.tail);
        key
    }
}

/// The `path` of a guarded site's key (`{prefix}{type}:{identity}:{path}` or
/// `{prefix}global:{path}`): the site's path or `name`, the field its overrides are stored
/// under in `{prefix}rules`. `None` when `key` is not laid out so under `prefix`.
///
/// An identity holds no `:` (it is percent-encoded), so the path is what follows the
/// identity, even when it holds `::`.
///
/// ```
/// use redis_ratelimit::key::site_path;
///
/// let key = "rate_limit:ip:203.0.113.9:my_app::handlers::send_code";
/// assert_eq!(site_path(key, "rate_limit:"), Some("my_app::handlers::send_code"));
/// assert_eq!(site_path("rate_limit:global:api", "rate_limit:"), Some("api"));
/// assert_eq!(site_path("hist:tom:reply", "rate_limit:"), None);
/// ```
pub fn site_path<'k>(key: &'k str, prefix: &str) -> Option<&'k str> {
    let rest = key.strip_prefix(prefix)?;
    let path = match rest.strip_prefix("global:") {
        Some(path) => path,
        None => {
            let (segment, rest) = rest.split_once(':')?;
            [LimitType::Ip, LimitType::UserId, LimitType::Custom]
                .iter()
                .find(|t| t.key_segment() == segment)?;
            rest.split_once(':')?.1
        }
    };
    (!path.is_empty()).then_some(path)
}

/// Appends `identity` to `out`, percent-encoding `%`, `#`, `:`, `{`, `}`, whitespace and
/// control characters, and replacing an escaped identity over [`MAX_IDENTITY_LEN`] bytes by
/// `#` and its SHA-1 (`#` never appears unescaped, so the two forms cannot collide).
pub fn push_identity(out: &mut String, identity: impl fmt::Display) {
    let start = out.len();
    // Written as it is, then escaped only when it needs to be: most identities (numbers,
    // addresses, ids) need nothing, and a byte scan is cheaper than escaping as it goes.
    // Writing into a String cannot fail.
    let _ = write!(out, "{identity}");
    escape_from(out, start);
}

/// [`push_identity`] for the identity of an `IP` site: an IP address in its canonical
/// text form (see [`KeyTemplate::key_for`]), anything else as it is.
fn push_ip_identity(out: &mut String, identity: impl fmt::Display) {
    let start = out.len();
    let _ = write!(out, "{identity}");
    // Only IPv6 text has a colon; IPv4 text is canonical as an `IpAddr` writes it.
    if out[start..].contains(':') {
        if let Ok(ip) = out[start..].parse::<IpAddr>() {
            out.truncate(start);
            let _ = write!(out, "{}", ip.to_canonical());
        }
    }
    escape_from(out, start);
}

/// The prefix and identity part of a guarded site's `key`, `path` being the site's: `key`
/// is `{prefix}{type}:{identity}:{path}` or `{prefix}global:{path}`, and the identity part
/// is `{type}:{identity}` or `global`, as [`identity_in_keys`] writes it and a ban names
/// it. `None` for a key laid out otherwise (a programmatic check's, the outbound
/// client's). The one reading of the layout, for bans and `most_limited`.
pub(crate) fn split_key<'k>(key: &'k str, path: &str) -> Option<(&'k str, &'k str)> {
    let rest = key.strip_suffix(path)?.strip_suffix(':')?;
    if let Some(prefix) = rest.strip_suffix("global") {
        return Some((prefix, &rest[prefix.len()..]));
    }
    let (before, identity) = rest.rsplit_once(':')?;
    let segment = before.rsplit(':').next()?;
    if !matches!(segment, "ip" | "user" | "custom") || identity.is_empty() {
        return None;
    }
    let prefix = &before[..before.len() - segment.len()];
    Some((prefix, &rest[prefix.len()..]))
}

/// The identity part of the keys of a site of `limit_type` for `identity`, as it stands
/// between the prefix and the path (`ip:203.0.113.9`, `custom:john%20doe`, `global`):
/// what a ban on that identity matches keys by.
pub(crate) fn identity_in_keys(limit_type: LimitType, identity: impl fmt::Display) -> String {
    let mut part = String::from(limit_type.key_segment());
    match limit_type {
        LimitType::Global => {}
        LimitType::Ip => {
            part.push(':');
            push_ip_identity(&mut part, identity);
        }
        LimitType::UserId | LimitType::Custom => {
            part.push(':');
            push_identity(&mut part, identity);
        }
    }
    part
}

/// The address an `IP` site's escaped identity (`203.0.113.9`, `2001%3Adb8%3A%3A1`)
/// holds: the inverse of [`push_ip_identity`] for addresses. `None` for any other text.
pub(crate) fn ip_in_identity(escaped: &str) -> Option<IpAddr> {
    // The longest IPv6 text (45 bytes, `ffff:...:255.255.255.255`) with its colons
    // escaped fits; no allocation on a check.
    let mut text = [0u8; 96];
    let mut len = 0;
    let mut rest = escaped.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        let (byte, tail) = match (b, tail) {
            (b'%', [b'3', b'A', tail @ ..]) => (b':', tail),
            (b'%', _) => return None,
            _ => (b, tail),
        };
        *text.get_mut(len)? = byte;
        len += 1;
        rest = tail;
    }
    std::str::from_utf8(&text[..len]).ok()?.parse().ok()
}

/// `network` as addresses are keyed: an IPv4-mapped network (within `::ffff:0:0/96`) is
/// the IPv4 network it maps, and host bits are cleared (`10.1.2.3/8` is `10.0.0.0/8`).
pub(crate) fn canonical_network(network: IpNet) -> IpNet {
    let network = network.trunc();
    match network {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.network().to_ipv4_mapped() {
            Some(v4) => IpNet::new_assert(v4.into(), v6.prefix_len() - 96),
            None => network,
        },
        _ => network,
    }
}

/// Escapes what `out` holds from `start` on, as [`push_identity`] describes.
fn escape_from(out: &mut String, start: usize) {
    if !out.as_bytes()[start..].iter().all(|&b| is_plain(b)) {
        let raw = out.split_off(start);
        for c in raw.chars() {
            if needs_escaping(c) {
                for byte in c.encode_utf8(&mut [0; 4]).bytes() {
                    let _ = write!(out, "%{byte:02X}");
                }
            } else {
                out.push(c);
            }
        }
    }
    if out.len() - start > MAX_IDENTITY_LEN {
        let digest = sha1_smol::Sha1::from(&out[start..]).digest();
        out.truncate(start);
        let _ = write!(out, "#{digest}");
    }
}

/// Whether byte `b` is a character that is kept as it is: printable ASCII but for the
/// escaped five. (Any other byte starts a character that [`needs_escaping`] looks at.)
fn is_plain(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b'%' | b'#' | b':' | b'{' | b'}')
}

fn needs_escaping(c: char) -> bool {
    matches!(c, '%' | '#' | ':' | '{' | '}') || c.is_whitespace() || c.is_control()
}

/// Turns the `type_name` of a fn item declared inside a guarded function (the "probe")
/// into that function's path, the `path` part of its keys.
///
/// # The forms
///
/// | function | path |
/// |---|---|
/// | free function | `my_app::handlers::send_code` |
/// | method of `impl Svc`, wherever the impl block stands | `my_app::models::Svc::send` |
/// | method of `impl<T> Gen<T>` | `my_app::models::Gen::get` |
/// | method of `impl A for Svc` | `<my_app::models::Svc as my_app::A>::go` |
/// | method of `impl A for Gen<u8>` | `<my_app::models::Gen<u8> as my_app::A>::go` |
/// | method of `impl Convert<u8> for Svc` | `<my_app::models::Svc as my_app::Convert<u8>>::convert` |
/// | method of the blanket `impl<T: Marked> Audit for T` | `<_ as my_app::Audit>::audit` |
/// | method of `impl dyn A` | `<dyn my_app::A>::describe` |
///
/// A method names its impl's self type by the type's own path, not the module the impl
/// block is written in, and a trait method is written in Rust's qualified form, so
/// `<Svc as A>::go`, `<Svc as B>::go` and an inherent `Svc::go` are three paths. Lifetimes
/// are dropped, and so is a generic argument list of nothing but the impl's parameters (`_`
/// for a type, a const parameter's name): `Gen<_>` becomes `Gen`, and every instantiation
/// of one generic function shares one budget. Arguments the impl header writes out stay
/// (`Gen<u8>`, `Two<_, u8>`): they tell two impls apart. `_` remains where it is the self
/// type of a blanket impl, which every type it covers shares. `{{closure}}` segments (an
/// `async fn`'s body) are removed, so no path holds a brace (a Redis Cluster hash tag).
///
/// # Why the probe's `type_name`
///
/// It is the one source that sees the impl block, which the attribute on a method cannot:
/// rustc names a nested fn item by its full definition path (an impl beside its type or
/// trait as `X` or `<X as T>`, one elsewhere as `module::<impl X>` or
/// `module::<impl T for X>`), and that path does not depend on how the function is
/// instantiated (a nested fn item is not generic).
/// `type_name::<Self>()` would need a receiver, is absent from free functions, and names
/// each instantiation apart.
///
/// `type_name`'s exact text is not guaranteed across compiler versions. The forms above
/// were read from rustc 1.95; processes that share budgets are best built with one
/// toolchain, or give their functions an explicit `name = "..."`.
pub fn function_path(probe_type_name: &str) -> String {
    let plain = without_braced_segments(probe_type_name);
    let mut segments = split_top_level(&plain, "::");
    segments.pop(); // the probe itself
                    // An impl standing in a module that holds neither its self type nor its trait appears
                    // as `module::<impl X>` or `module::<impl T for X>`: the path starts again there, as
                    // `X` or `<X as T>`, the forms rustc prints for an impl beside its type or trait.
    let from = segments
        .iter()
        .rposition(|segment| segment.starts_with("<impl "))
        .unwrap_or(0);
    let mut path = String::with_capacity(probe_type_name.len());
    for (i, segment) in segments[from..].iter().enumerate() {
        if i > 0 {
            path.push_str("::");
        }
        let Some(header) = segment
            .strip_prefix("<impl ")
            .and_then(|s| s.strip_suffix('>'))
        else {
            push_normalized(&mut path, segment);
            continue;
        };
        match split_top_level(header, " for ")[..] {
            [trait_, self_ty] => {
                path.push('<');
                push_normalized(&mut path, self_ty);
                path.push_str(" as ");
                push_normalized(&mut path, trait_);
                path.push('>');
            }
            _ => push_self_type(&mut path, header),
        }
    }
    path
}

/// `name` without its `::{{closure}}` segments (and any other `::{{...}}`), wherever they
/// are: an `async fn`'s body, and types declared in one (`<f::{{closure}}::Local as A>`).
fn without_braced_segments(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains("::{{") {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut plain = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(start) = rest.find("::{{") {
        plain.push_str(&rest[..start]);
        rest = match rest[start..].find("}}") {
            Some(end) => &rest[start + end + 2..],
            None => "",
        };
    }
    plain.push_str(rest);
    std::borrow::Cow::Owned(plain)
}

/// `ty`, the self type of an inherent impl: a path as it is (`my_app::Svc`), any other type
/// in angle brackets (`<dyn my_app::A>`), the form rustc prints when the impl stands
/// beside its type.
fn push_self_type(out: &mut String, ty: &str) {
    let mut depth = 0usize;
    let is_path = ty.char_indices().all(|(i, c)| {
        match c {
            '<' => depth += 1,
            '>' if !is_arrow(ty, i) => depth = depth.saturating_sub(1),
            _ => {}
        }
        depth > 0 || c == '>' || c == ':' || c == '_' || c.is_alphanumeric()
    });
    if is_path {
        push_normalized(out, ty);
    } else {
        out.push('<');
        push_normalized(out, ty);
        out.push('>');
    }
}

/// Copies `text` (a path segment or a type) to `out`, dropping what does not identify an
/// impl from every generic argument list: lifetimes, and lists of nothing but the impl's
/// own parameters.
fn push_normalized(out: &mut String, text: &str) {
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        let close = open + matching_close(&rest[open..]);
        let after_name = open > 0
            && rest[..open]
                .chars()
                .next_back()
                .is_some_and(|c| c == '_' || c.is_alphanumeric());
        out.push_str(&rest[..open]);
        let inner = &rest[open + 1..close];
        if after_name {
            let args: Vec<&str> = split_top_level(inner, ", ")
                .into_iter()
                .filter(|arg| !is_lifetime(arg))
                .collect();
            // Only a list of nothing but parameters goes: `Two<_, u8>` keeps its `_`, which
            // says where `u8` stands.
            if !args.iter().all(|arg| is_parameter(arg)) {
                out.push('<');
                for (i, arg) in args.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    push_normalized(out, arg);
                }
                out.push('>');
            }
        } else {
            // A qualified path, `<X as T>` or `<X>`.
            out.push('<');
            for (i, part) in split_top_level(inner, " as ").iter().enumerate() {
                if i > 0 {
                    out.push_str(" as ");
                }
                push_normalized(out, part);
            }
            out.push('>');
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
}

/// The index of the `>` that closes the `<` `text` starts with (or `text`'s last index).
fn matching_close(text: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if !is_arrow(text, i) => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    text.len() - 1
}

/// Whether the `>` at `i` is the arrow of a fn type's `->`.
fn is_arrow(text: &str, i: usize) -> bool {
    text[..i].ends_with('-')
}

/// `text` split at each `separator` outside angle brackets, parentheses and square brackets.
fn split_top_level<'a>(text: &'a str, separator: &str) -> Vec<&'a str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    let mut i = 0;
    while i < text.len() {
        let c = text[i..].chars().next().expect("inside the text");
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' if is_arrow(text, i) => {}
            '>' | ')' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 && text[i..].starts_with(separator) => {
                parts.push(&text[start..i]);
                i += separator.len();
                start = i;
                continue;
            }
            _ => {}
        }
        i += c.len_utf8();
    }
    parts.push(&text[start..]);
    parts
}

/// A lifetime argument: rustc prints erased ones as `'_`. (A `char` constant such as
/// `'a'` ends with a quote.)
fn is_lifetime(arg: &str) -> bool {
    arg.starts_with('\'') && !(arg.len() > 1 && arg.ends_with('\''))
}

/// An argument standing for a parameter of the impl: `_` for a type, the bare name for a
/// const parameter. Every other type is printed with its path, and a bare word that is not
/// a parameter is a primitive type or a `bool` constant.
fn is_parameter(arg: &str) -> bool {
    const PRIMITIVES: &[&str] = &[
        "bool", "char", "str", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32",
        "i64", "i128", "isize", "f16", "f32", "f64", "f128", "true", "false",
    ];
    arg == "_"
        || (arg.starts_with(|c: char| c == '_' || c.is_alphabetic())
            && arg.chars().all(|c| c == '_' || c.is_alphanumeric())
            && !PRIMITIVES.contains(&arg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_is_the_part_between_the_prefix_and_the_site() {
        // (key, site, its prefix and identity)
        let cases = [
            (
                "rate_limit:ip:203.0.113.9:my_app::send",
                "my_app::send",
                Some(("rate_limit:", "ip:203.0.113.9")),
            ),
            ("app:user:42:export", "export", Some(("app:", "user:42"))),
            ("custom:alice:search", "search", Some(("", "custom:alice"))),
            (
                "rate_limit:global:api",
                "api",
                Some(("rate_limit:", "global")),
            ),
            (
                "rate_limit:ip:2001%3Adb8%3A%3A1:api",
                "api",
                Some(("rate_limit:", "ip:2001%3Adb8%3A%3A1")),
            ),
            ("hist:tom:reply", "programmatic", None),
            ("rate_limit:out:payments", "out:payments", None),
        ];
        for (key, site, found) in cases {
            assert_eq!(split_key(key, site), found, "{key} for {site}");
        }
    }

    #[test]
    fn ip_key_has_the_documented_layout() {
        let t = KeyTemplate::new("rate_limit:", LimitType::Ip, "my_app::handlers::send_code");
        let ip: std::net::IpAddr = "203.0.113.9".parse().unwrap();
        assert_eq!(
            t.key_for(ip),
            "rate_limit:ip:203.0.113.9:my_app::handlers::send_code"
        );
    }

    #[test]
    fn ipv6_colons_are_escaped() {
        let t = KeyTemplate::new("p:", LimitType::Ip, "f");
        let ip: std::net::IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(t.key_for(ip), "p:ip:2001%3Adb8%3A%3A1:f");
    }

    #[test]
    fn ip_identities_are_written_in_their_canonical_form() {
        let t = KeyTemplate::new("p:", LimitType::Ip, "f");
        let mapped: std::net::IpAddr = "::ffff:203.0.113.9".parse().unwrap();
        assert_eq!(t.key_for(mapped), "p:ip:203.0.113.9:f");
        // Given as text (`by = ...`), too.
        assert_eq!(t.key_for("::FFFF:203.0.113.9"), "p:ip:203.0.113.9:f");
        assert_eq!(t.key_for("2001:DB8:0::1"), "p:ip:2001%3Adb8%3A%3A1:f");
        assert_eq!(t.key_for("not an address"), "p:ip:not%20an%20address:f");
        // Other sites' identities are never read as addresses.
        let t = KeyTemplate::new("p:", LimitType::Custom, "f");
        assert_eq!(t.key_for(mapped), "p:custom:%3A%3Affff%3A203.0.113.9:f");
    }

    #[test]
    fn identity_parts_are_what_keys_hold_between_prefix_and_path() {
        let long = "y".repeat(MAX_IDENTITY_LEN + 1);
        for (limit_type, identity) in [
            (LimitType::Ip, "::ffff:10.0.0.1"),
            (LimitType::Ip, "2001:db8::1"),
            (LimitType::UserId, "ann smith"),
            (LimitType::Custom, "tenant:42"),
            (LimitType::Custom, "100%"),
            (LimitType::Custom, long.as_str()),
        ] {
            let key = KeyTemplate::new("p:", limit_type, "f").key_for(identity);
            let part = identity_in_keys(limit_type, identity);
            assert_eq!(key, format!("p:{part}:f"), "{identity}");
        }
        assert_eq!(identity_in_keys(LimitType::Global, "x"), "global");
    }

    #[test]
    fn addresses_are_read_back_from_escaped_identities() {
        for ip in [
            "203.0.113.9",
            "2001:db8::1",
            "::",
            "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255",
        ] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            let part = identity_in_keys(LimitType::Ip, ip);
            let escaped = part.strip_prefix("ip:").unwrap();
            assert_eq!(
                ip_in_identity(escaped),
                Some(ip.to_canonical()),
                "{escaped}"
            );
        }
        for not in [
            "",
            "x",
            "1.2.3",
            "2001%3Adb8%3A%3A1%3",
            "%3a%3a1",
            &"1".repeat(200),
        ] {
            assert_eq!(ip_in_identity(not), None, "{not}");
        }
    }

    #[test]
    fn global_key_has_no_identity() {
        let t = KeyTemplate::new("rl:", LimitType::Global, "app::f");
        assert_eq!(t.global_key(), "rl:global:app::f");
    }

    #[test]
    fn separators_braces_whitespace_controls_and_escapes_are_encoded() {
        let t = KeyTemplate::new("", LimitType::UserId, "f");
        assert_eq!(
            t.key_for("a:b{c}d e\tf\u{7}%#é"),
            "user:a%3Ab%7Bc%7Dd%20e%09f%07%25%23é:f"
        );
    }

    #[test]
    fn unicode_whitespace_is_encoded_and_other_text_kept() {
        let t = KeyTemplate::new("", LimitType::Custom, "f");
        assert_eq!(
            t.key_for("ü\u{a0}名\u{2028}x"),
            "custom:ü%C2%A0名%E2%80%A8x:f"
        );
        assert_eq!(t.key_for(12_345_u64), "custom:12345:f");
    }

    #[test]
    fn long_identities_are_hashed_to_a_fixed_length() {
        let t = KeyTemplate::new("", LimitType::Custom, "f");
        let at_limit = "x".repeat(MAX_IDENTITY_LEN);
        assert_eq!(t.key_for(&at_limit), format!("custom:{at_limit}:f"));
        let long = t.key_for("y".repeat(MAX_IDENTITY_LEN + 1));
        let other = t.key_for("z".repeat(MAX_IDENTITY_LEN + 1));
        assert_eq!(long.len(), "custom:#:f".len() + 40);
        assert!(long.starts_with("custom:#"));
        assert_ne!(long, other);
        // Escaping counts towards the limit: 43 colons escape to 129 bytes.
        assert!(t.key_for(":".repeat(43)).starts_with("custom:#"));
    }

    /// What rustc 1.95 prints for a probe nested in each shape, and the path it gives.
    const SHAPES: &[(&str, &str)] = &[
        ("app::handlers::free::__probe", "app::handlers::free"),
        (
            "app::handlers::free_async::{{closure}}::__probe",
            "app::handlers::free_async",
        ),
        ("app::inner::deeper::f::__probe", "app::inner::deeper::f"),
        ("app::models::Svc::own::__probe", "app::models::Svc::own"),
        (
            "app::handlers::<impl app::models::Svc>::send::{{closure}}::__probe",
            "app::models::Svc::send",
        ),
        (
            "app::handlers::<impl app::models::Other>::send::{{closure}}::__probe",
            "app::models::Other::send",
        ),
        (
            "app::handlers::<impl app::models::Svc>::assoc::__probe",
            "app::models::Svc::assoc",
        ),
        (
            "app::handlers::<impl app::models::Gen<_>>::g::__probe",
            "app::models::Gen::g",
        ),
        ("app::models::Gen<_>::g::__probe", "app::models::Gen::g"),
        (
            "app::handlers::<impl app::models::Gen<u8>>::g8::__probe",
            "app::models::Gen<u8>::g8",
        ),
        ("app::Lt<'_>::lt::__probe", "app::Lt::lt"),
        ("app::Arr<N>::inh::__probe", "app::Arr::inh"),
        (
            "app::_::<impl app::Svc>::in_const::__probe",
            "app::Svc::in_const",
        ),
        (
            "<app::models::Svc as app::A>::go::{{closure}}::__probe",
            "<app::models::Svc as app::A>::go",
        ),
        (
            "<app::models::Svc as app::B>::go::__probe",
            "<app::models::Svc as app::B>::go",
        ),
        (
            "<app::models::Svc as app::GenT<u8>>::gt::__probe",
            "<app::models::Svc as app::GenT<u8>>::gt",
        ),
        (
            "<app::Svc as app::G<_>>::g::__probe",
            "<app::Svc as app::G>::g",
        ),
        ("<_ as app::Blank>::bl::__probe", "<_ as app::Blank>::bl"),
        (
            "app::h::<impl app::models::A for app::models::Svc>::go::{{closure}}::__probe",
            "<app::models::Svc as app::models::A>::go",
        ),
        (
            "app::h::<impl app::models::A for app::models::Gen<_>>::go::__probe",
            "<app::models::Gen as app::models::A>::go",
        ),
        (
            "app::h::<impl app::models::Au for _>::au::__probe",
            "<_ as app::models::Au>::au",
        ),
        (
            "app::h::<impl app::models::G<_> for app::models::Svc>::g::__probe",
            "<app::models::Svc as app::models::G>::g",
        ),
        (
            "app::h::<impl app::models::A for fn(&'_ u8)>::go::__probe",
            "<fn(&'_ u8) as app::models::A>::go",
        ),
        (
            "app::h::<impl app::models::A for (app::models::Svc, u8)>::go::__probe",
            "<(app::models::Svc, u8) as app::models::A>::go",
        ),
        (
            "<app::models::Gen<_> as app::A>::go::__probe",
            "<app::models::Gen as app::A>::go",
        ),
        (
            "<app::Gen<alloc::vec::Vec<_>> as app::A>::go::__probe",
            "<app::Gen<alloc::vec::Vec> as app::A>::go",
        ),
        (
            "<app::Two<_, u8> as app::A>::go::__probe",
            "<app::Two<_, u8> as app::A>::go",
        ),
        (
            "<app::Arr2<3> as app::A>::go::__probe",
            "<app::Arr2<3> as app::A>::go",
        ),
        (
            "<alloc::borrow::Cow<'_, str> as app::A>::go::__probe",
            "<alloc::borrow::Cow<str> as app::A>::go",
        ),
        (
            "<(u8, u16) as app::A>::go::__probe",
            "<(u8, u16) as app::A>::go",
        ),
        ("<[u8] as app::A>::go::__probe", "<[u8] as app::A>::go"),
        ("<[_; 3] as app::A>::go::__probe", "<[_; 3] as app::A>::go"),
        (
            "<&app::Other as app::A>::go::__probe",
            "<&app::Other as app::A>::go",
        ),
        (
            "<fn(u8) -> u8 as app::A>::go::__probe",
            "<fn(u8) -> u8 as app::A>::go",
        ),
        (
            "<dyn core::ops::function::Fn(u8) -> app::Gen<u8> as app::A>::go::__probe",
            "<dyn core::ops::function::Fn(u8) -> app::Gen<u8> as app::A>::go",
        ),
        ("<dyn app::A>::dy::__probe", "<dyn app::A>::dy"),
        ("app::m::<impl dyn app::A>::dy::__probe", "<dyn app::A>::dy"),
        (
            "app::Svc::with_local::L::l::__probe",
            "app::Svc::with_local::L::l",
        ),
        (
            "<app::Svc::with_local_trait::L as app::A>::go::__probe",
            "<app::Svc::with_local_trait::L as app::A>::go",
        ),
        (
            "app::Svc::asyncfn::{{closure}}::{{closure}}::__probe",
            "app::Svc::asyncfn",
        ),
        (
            "app::outer::inner::{{closure}}::__probe",
            "app::outer::inner",
        ),
        ("app::f::{{closure}}::Local::m::__probe", "app::f::Local::m"),
        (
            "<app::f::{{closure}}::Local as app::A>::go::{{closure}}::__probe",
            "<app::f::Local as app::A>::go",
        ),
    ];

    #[test]
    fn function_path_of_every_shape() {
        for (type_name, path) in SHAPES {
            assert_eq!(function_path(type_name), *path, "{type_name}");
        }
    }

    #[test]
    fn function_paths_of_different_functions_differ() {
        let paths: std::collections::HashSet<String> = SHAPES
            .iter()
            .map(|(type_name, _)| function_path(type_name))
            .collect();
        // Two functions are spelt twice: `Gen<_>::g` and `dyn A`'s `dy`, each beside and
        // away from its type.
        assert_eq!(paths.len(), SHAPES.len() - 2);
    }
}
