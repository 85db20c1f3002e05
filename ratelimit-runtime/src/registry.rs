//! The guarded sites of the process, by the path part of their keys: what the limiter's
//! `rules_in_force` and `mode_in_force` read back, and where two sites counting one path
//! differently are noticed.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use crate::overrides::SiteRules;
use crate::site_config::SiteConfig;
use crate::sync::lock;
#[cfg(test)]
use crate::Rule;

/// Every site whose keys have been built, by path: the first one seen with each path.
static SITES: Mutex<Option<HashMap<String, Registered>>> = Mutex::new(None);

/// The first site seen with a path.
struct Registered {
    config: SiteConfig,
    /// The guarded function's own path (or the guard's name).
    function: String,
    /// Where the attribute is written (`file:line:column`), or empty.
    location: &'static str,
}

/// What the first site seen counting under a path was compiled with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Compiled {
    pub prefix: &'static str,
    pub rules: SiteRules,
    pub shadow: bool,
}

/// What the first site seen counting under `path` was compiled with.
pub(crate) fn compiled(path: &str) -> Option<Compiled> {
    let sites = lock(&SITES);
    let first = sites.as_ref()?.get(path)?;
    Some(Compiled {
        prefix: first.config.prefix,
        rules: first.config.compiled_rules(),
        shadow: first.config.shadow,
    })
}

/// Records that a site of `config`, guarding `function` and written at `location`,
/// counts under `path`, and warns when another site already counts under it differently:
/// with other rules, algorithm, limit type or prefix they share (or seem to share, in
/// metrics and rule overrides) a budget they count in incompatible ways. With the same
/// configuration the sharing is taken as deliberate (two sites given one `name`).
///
/// Called once per site, when its key template is built: never per call.
pub(crate) fn register(config: SiteConfig, path: &str, function: &str, location: &'static str) {
    let mut sites = lock(&SITES);
    let sites = sites.get_or_insert_with(HashMap::new);
    let Some(first) = sites.get(path) else {
        sites.insert(
            path.to_owned(),
            Registered {
                config,
                function: function.to_owned(),
                location,
            },
        );
        return;
    };
    let differences = differences(&first.config, &config);
    if differences.is_empty() {
        return;
    }
    tracing::warn!(
        path,
        "rate limiter call sites {} and {} share the key path `{path}` with different {}: \
         {} and {}; give one of them its own `name = \"...\"`, or both the same \
         configuration",
        Located(&first.function, first.location),
        Located(function, location),
        differences.join(", "),
        Described(&first.config),
        Described(&config),
    );
}

/// What tells the configurations of two sites sharing a path apart.
fn differences(a: &SiteConfig, b: &SiteConfig) -> Vec<&'static str> {
    let mut differences = Vec::new();
    if a.rules != b.rules
        || a.duplicate_rule != b.duplicate_rule
        || a.dynamic_rules != b.dynamic_rules
    {
        differences.push("rules");
    }
    if a.algorithm != b.algorithm {
        differences.push("algorithms");
    }
    if a.limit_type != b.limit_type {
        differences.push("limit types");
    }
    if a.prefix != b.prefix {
        differences.push("prefixes");
    }
    differences
}

/// A site by its function and where its attribute is written: `app::send (src/lib.rs:3:1)`.
struct Located<'a>(&'a str, &'static str);

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Located(function, "") => write!(f, "`{function}`"),
            Located(function, location) => write!(f, "`{function}` ({location})"),
        }
    }
}

/// A site's counting configuration, in the attribute's terms:
/// `rules [10 per 60s, 1 per 5s], algorithm = SLIDING_LOG, limit_type = IP, key = "rate_limit:"`.
struct Described<'a>(&'a SiteConfig);

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = self.0;
        f.write_str("rules [")?;
        if config.dynamic_rules {
            f.write_str("per call")?;
        }
        for (i, rule) in config.rules.iter().enumerate() {
            if i > 0 || config.dynamic_rules {
                f.write_str(", ")?;
            }
            write!(f, "{rule}")?;
        }
        write!(
            f,
            "], algorithm = {}, limit_type = {}, key = {:?}",
            config.algorithm.name(),
            config.limit_type,
            config.prefix
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Algorithm;

    const RULES: [Rule; 1] = [Rule::per_minute(3)];

    fn config() -> SiteConfig {
        SiteConfig::new(&RULES)
    }

    #[test]
    fn the_first_site_of_a_path_is_read_back() {
        register(config(), "registry::tests::first", "f", "src/a.rs:1:1");
        let shadowed = SiteConfig {
            shadow: true,
            ..config()
        };
        register(shadowed, "registry::tests::first", "g", "src/a.rs:9:1");
        let first = compiled("registry::tests::first").unwrap();
        assert_eq!(first.rules.rules, RULES);
        assert!(!first.shadow);
        assert!(compiled("registry::tests::never").is_none());
    }

    #[test]
    fn only_counting_differences_are_reported() {
        let other = SiteConfig {
            algorithm: Algorithm::TokenBucket,
            prefix: "other:",
            shadow: true,
            ..config()
        };
        assert_eq!(differences(&config(), &other), ["algorithms", "prefixes"]);
        let text = Described(&other).to_string();
        assert_eq!(
            text,
            "rules [3 per 60s], algorithm = TOKEN_BUCKET, limit_type = IP, key = \"other:\""
        );
    }
}
