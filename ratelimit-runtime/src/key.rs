//! Key layout: `{prefix}{type}:{identity}:{path}`, or `{prefix}global:{path}`.
//!
//! The constant parts are built once per call site ([`KeyTemplate`]); a call only escapes
//! its identity into a buffer of the right size.

use std::fmt::{self, Write as _};

use crate::LimitType;

/// Escaped identities longer than this are replaced by a hash, so keys stay short.
pub const MAX_IDENTITY_LEN: usize = 128;

/// The constant parts of one call site's keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyTemplate {
    /// `{prefix}{type}:`, or the whole key for [`LimitType::Global`].
    head: String,
    /// `:{path}`; empty for [`LimitType::Global`].
    tail: String,
}

impl KeyTemplate {
    /// The template for `prefix`, `limit_type` and the function path `path`.
    pub fn new(prefix: &str, limit_type: LimitType, path: &str) -> Self {
        let segment = limit_type.key_segment();
        match limit_type {
            LimitType::Global => KeyTemplate {
                head: format!("{prefix}{segment}:{path}"),
                tail: String::new(),
            },
            _ => KeyTemplate {
                head: format!("{prefix}{segment}:"),
                tail: format!(":{path}"),
            },
        }
    }

    /// The key of a [`LimitType::Global`] call site, which has no identity.
    pub fn global_key(&self) -> &str {
        &self.head
    }

    /// The key for `identity`, escaped as the key layout requires.
    ///
    /// ```
    /// use ratelimit_runtime::{key::KeyTemplate, LimitType};
    ///
    /// let t = KeyTemplate::new("rate_limit:", LimitType::Custom, "app::send");
    /// assert_eq!(t.key_for("+1 555:0100"), "rate_limit:custom:+1%20555%3A0100:app::send");
    /// ```
    pub fn key_for(&self, identity: impl fmt::Display) -> String {
        let mut key = String::with_capacity(self.head.len() + 48 + self.tail.len());
        key.push_str(&self.head);
        push_identity(&mut key, identity);
        key.push_str(&self.tail);
        key
    }
}

/// Appends `identity` to `out`, percent-encoding `%`, `#`, `:`, `{`, `}`, whitespace and
/// control characters, and replacing an escaped identity over [`MAX_IDENTITY_LEN`] bytes by
/// `#` and its SHA-1 (`#` never appears unescaped, so the two forms cannot collide).
pub fn push_identity(out: &mut String, identity: impl fmt::Display) {
    let start = out.len();
    // Writing into a String cannot fail.
    let _ = write!(Escaper(out), "{identity}");
    if out.len() - start > MAX_IDENTITY_LEN {
        let digest = sha1_smol::Sha1::from(&out[start..]).digest();
        out.truncate(start);
        let _ = write!(out, "#{digest}");
    }
}

struct Escaper<'a>(&'a mut String);

impl fmt::Write for Escaper<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            if matches!(c, '%' | '#' | ':' | '{' | '}') || c.is_whitespace() || c.is_control() {
                let mut utf8 = [0u8; 4];
                for byte in c.encode_utf8(&mut utf8).bytes() {
                    write!(self.0, "%{byte:02X}")?;
                }
            } else {
                self.0.push(c);
            }
        }
        Ok(())
    }
}

/// Turns the `type_name` of a fn item declared inside a guarded function into that
/// function's path: `app::Svc<_>::send::{{closure}}::probe` becomes `app::Svc::send`, and
/// `<app::Svc as app::Api>::send::{{closure}}::probe` becomes `app::Svc::send`.
///
/// Generic arguments are dropped so that every instantiation shares one budget.
///
/// `type_name`'s exact text is not guaranteed across compiler versions; it has been this
/// shape for years, but processes that share budgets are best built with one toolchain.
pub fn function_path(probe_type_name: &str) -> String {
    let unqualified = strip_qualified_self(probe_type_name);
    let mut plain = String::with_capacity(unqualified.len());
    let mut depth = 0usize;
    for c in unqualified.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let mut segments: Vec<&str> = plain.split("::").filter(|s| *s != "{{closure}}").collect();
    segments.pop(); // the probe itself
    segments.join("::")
}

/// `<A as B>::rest` -> `A::rest`; anything else unchanged.
fn strip_qualified_self(name: &str) -> String {
    let Some(inner) = name.strip_prefix('<') else {
        return name.to_owned();
    };
    let mut depth = 0usize;
    let mut self_end = None;
    for (i, c) in inner.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if depth == 0 => {
                let self_ty = &inner[..self_end.unwrap_or(i)];
                return format!("{self_ty}{}", &inner[i + 1..]);
            }
            '>' => depth -= 1,
            ' ' if depth == 0 && self_end.is_none() && inner[i..].starts_with(" as ") => {
                self_end = Some(i)
            }
            _ => {}
        }
    }
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn function_path_of_free_functions_methods_and_trait_impls() {
        assert_eq!(
            function_path("app::handlers::free::{{closure}}::probe"),
            "app::handlers::free"
        );
        assert_eq!(
            function_path("app::h::Svc::m::{{closure}}::probe"),
            "app::h::Svc::m"
        );
        assert_eq!(
            function_path("app::h::G<_>::m::{{closure}}::probe"),
            "app::h::G::m"
        );
        assert_eq!(
            function_path("<app::h::Svc as app::h::Tr>::t::{{closure}}::probe"),
            "app::h::Svc::t"
        );
        assert_eq!(
            function_path("<app::h::G<_, Vec<u8>> as app::h::Tr<u8>>::t::{{closure}}::probe"),
            "app::h::G::t"
        );
        assert_eq!(function_path("app::sync_fn::probe"), "app::sync_fn");
    }
}
