//! A file or folder of files into one [`Loaded`] tree, with every error of every file.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use redis_ratelimit::{Algorithm, Calendar, Rule};

use super::grammar::{self, Descriptor, RateLimit};
use crate::metrics::{DetailedHits, Hits, Requests};

use super::{unit_name, yaml, Answer, ConfigError, ConfigErrors, Domain, Limit, Node, Wildcard};

/// The files of a configuration as read: each path and its text, in path order. Two reads
/// are the same configuration when they are equal.
pub type Sources = Vec<(PathBuf, String)>;

/// A configuration in force: every domain, matched against without a lock.
#[derive(Debug, Default)]
pub struct Loaded {
    pub domains: HashMap<String, Domain>,
    pub files: Vec<PathBuf>,
}

/// Reads and loads the configuration at `path` (a file, or a folder whose `*.yaml` and
/// `*.yml` files, in it and its sub-folders, are read).
pub fn load(path: &Path) -> Result<Loaded, ConfigErrors> {
    build(&read_sources(path)?)
}

/// Reads the files of the configuration at `path`. Names starting with `.` are skipped, so a
/// Kubernetes ConfigMap's `..data` and `..<timestamp>` folders are not read twice beside the
/// links to them.
pub fn read_sources(path: &Path) -> Result<Sources, ConfigErrors> {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    let unreadable = |path: &Path, e: std::io::Error| ConfigError {
        file: path.to_owned(),
        line: 0,
        message: format!("cannot read it: {e}"),
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => collect(path, &mut files, &mut errors),
        Ok(_) => files.push(path.to_owned()),
        Err(e) => return Err(ConfigErrors(vec![unreadable(path, e)])),
    }
    files.sort();
    let mut sources = Vec::with_capacity(files.len());
    for file in files {
        match std::fs::read_to_string(&file) {
            Ok(text) => sources.push((file, text)),
            Err(e) => errors.push(unreadable(&file, e)),
        }
    }
    if errors.is_empty() {
        Ok(sources)
    } else {
        Err(ConfigErrors(errors))
    }
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>, errors: &mut Vec<ConfigError>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            errors.push(ConfigError {
                file: dir.to_owned(),
                line: 0,
                message: format!("cannot read the folder: {e}"),
            });
            return;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        // Followed, so that links (a ConfigMap's files) count as what they point at.
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_dir() => collect(&path, files, errors),
            Ok(_)
                if matches!(
                    path.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml")
                ) =>
            {
                files.push(path)
            }
            _ => {}
        }
    }
}

/// Loads `sources` into one tree, or says everything that is wrong with them.
pub fn build(sources: &Sources) -> Result<Loaded, ConfigErrors> {
    let mut loaded = Loaded::default();
    let mut domain_files: HashMap<String, PathBuf> = HashMap::new();
    let mut errors = Vec::new();
    for (path, text) in sources {
        let mut file_errors: Vec<(usize, String)> = Vec::new();
        match yaml::parse(text) {
            Err(e) => file_errors.push((
                e.line,
                format!("this is not YAML: {} (fix the syntax)", e.message),
            )),
            Ok(root) => {
                let file = grammar::read(root.as_ref(), &mut file_errors);
                if let Some(domain) = domain(file, &domain_files, &mut file_errors) {
                    domain_files.insert(domain.name.clone(), path.clone());
                    loaded.domains.insert(domain.name.clone(), domain);
                }
            }
        }
        file_errors.sort_by_key(|(line, _)| *line);
        errors.extend(file_errors.into_iter().map(|(line, message)| ConfigError {
            file: path.clone(),
            line,
            message,
        }));
        loaded.files.push(path.clone());
    }
    if errors.is_empty() {
        Ok(loaded)
    } else {
        Err(ConfigErrors(errors))
    }
}

fn domain(
    file: grammar::File,
    seen: &HashMap<String, PathBuf>,
    errors: &mut Vec<(usize, String)>,
) -> Option<Domain> {
    let default_algorithm = match &file.algorithm {
        None => Algorithm::FixedWindow,
        Some((text, line)) => algorithm(text, *line, errors).unwrap_or(Algorithm::FixedWindow),
    };
    let name = match file.domain {
        Some((name, _)) if !name.is_empty() => {
            if let Some(other) = seen.get(&name) {
                errors.push((
                    1,
                    format!(
                        "duplicate domain '{name}': {} already defines it (a domain's descriptors live in one file)",
                        other.display()
                    ),
                ));
                None
            } else {
                Some(name)
            }
        }
        Some((_, line)) => {
            errors.push((line, "config file cannot have empty domain: name it".into()));
            None
        }
        None => {
            errors.push((
                1,
                "config file cannot have empty domain: add `domain: <name>`".into(),
            ));
            None
        }
    };
    let mut root = Node::default();
    let prefix = name.clone().unwrap_or_default();
    let context = Context {
        domain: &prefix,
        algorithm: default_algorithm,
    };
    level(&mut root, "", &file.descriptors, &context, errors);
    name.map(|name| Domain {
        requests: Requests::new(&name),
        own_limit_hits: Hits::new(&name, "own_limit"),
        name,
        root,
    })
}

struct Context<'a> {
    domain: &'a str,
    algorithm: Algorithm,
}

fn level(
    node: &mut Node,
    parent: &str,
    descriptors: &[Descriptor],
    context: &Context<'_>,
    errors: &mut Vec<(usize, String)>,
) {
    for d in descriptors {
        let key = match &d.key {
            Some((key, _)) if !key.is_empty() => key,
            Some((_, line)) => {
                errors.push((*line, "descriptor has empty key: give it a `key`".into()));
                continue;
            }
            None => {
                errors.push((d.line, "descriptor has empty key: give it a `key`".into()));
                continue;
            }
        };
        let final_key = match d.value.as_deref() {
            Some(value) if !value.is_empty() => format!("{key}_{value}"),
            _ => key.clone(),
        };
        let path = if parent.is_empty() {
            final_key.clone()
        } else {
            format!("{parent}.{final_key}")
        };
        if node.children.contains_key(&final_key) {
            errors.push((
                d.line,
                format!(
                    "duplicate descriptor composite key '{}.{path}': merge the two descriptors",
                    context.domain
                ),
            ));
            continue;
        }
        let wildcard = final_key.contains('*');
        if d.share_threshold && !wildcard {
            errors.push((
                d.line,
                format!(
                    "share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}'"
                ),
            ));
        }
        let mut child = Node {
            share_threshold: d.share_threshold,
            value_to_metric: d.value_to_metric,
            shared_value: (d.share_threshold && wildcard)
                .then(|| d.value.clone().unwrap_or_default()),
            ..Node::default()
        };
        if let Some(r) = &d.rate_limit {
            child.limit = limit(r, d, &path, context, errors).map(Arc::new);
        }
        level(&mut child, &path, &d.descriptors, context, errors);
        if wildcard {
            node.wildcards.push(Wildcard {
                parts: final_key.split('*').map(str::to_owned).collect(),
                key: final_key.clone(),
            });
        }
        node.children.insert(final_key, child);
    }
}

const UNITS: &str = "second, minute, hour, day, week, month or year";

fn limit(
    r: &RateLimit,
    d: &Descriptor,
    path: &str,
    context: &Context<'_>,
    errors: &mut Vec<(usize, String)>,
) -> Option<Limit> {
    let before = errors.len();
    let name = r
        .name
        .as_ref()
        .map(|(n, _)| n.clone())
        .filter(|n| !n.is_empty());
    for (replaced, line) in &r.replaces {
        if Some(replaced) == name.as_ref() {
            errors.push((
                *line,
                format!("replaces should not contain name of same descriptor ('{replaced}')"),
            ));
        }
    }
    let algorithm = match &r.algorithm {
        Some((text, line)) => algorithm(text, *line, errors).unwrap_or(context.algorithm),
        None => context.algorithm,
    };
    let unit = r
        .unit
        .as_ref()
        .map(|(text, line)| (text.to_ascii_lowercase(), *line));
    let mut limit = Limit {
        path: path.to_owned(),
        rules: Vec::new(),
        answers: Vec::new(),
        algorithm,
        allowance: r.allowance.map(|(d, _)| d),
        name,
        replaces: r.replaces.iter().map(|(n, _)| n.clone()).collect(),
        unlimited: r.unlimited,
        refuse_all: false,
        shadow_mode: d.shadow_mode,
        quota_mode: d.quota_mode,
        detailed_metric: d.detailed_metric,
        hits: Hits::new(context.domain, path),
        detailed: DetailedHits::default(),
    };
    if r.unlimited {
        if let Some((unit, line)) = &unit {
            if parse_unit(unit).is_some() {
                errors.push((
                    *line,
                    "should not specify rate limit unit when unlimited: remove `unit`".into(),
                ));
            }
        }
    } else if !r.limits.is_empty() {
        if r.unit.is_some() || r.requests_per_unit.is_some() || r.unit_multiplier.is_some() {
            errors.push((
                r.line,
                "`limits` and `unit`/`requests_per_unit`/`unit_multiplier` are two ways to say the same: keep one".into(),
            ));
        }
        for (text, line) in &r.limits {
            match text.parse::<Rule>() {
                Ok(rule) => {
                    limit.answers.push(answer_of(&rule));
                    limit.rules.push(rule);
                }
                Err(e) => errors.push((*line, format!("`{text}`: {e}"))),
            }
        }
    } else {
        let Some((unit_text, unit_line)) = &unit else {
            errors.push((
                r.line,
                format!("`rate_limit` has no `unit`: add `unit: {UNITS}` and `requests_per_unit`, or `limits: [\"10/second\"]`"),
            ));
            return None;
        };
        let Some(unit) = parse_unit(unit_text) else {
            errors.push((
                *unit_line,
                format!("invalid rate limit unit '{unit_text}': expected {UNITS}"),
            ));
            return None;
        };
        let Some((count, count_line)) = r.requests_per_unit else {
            errors.push((
                r.line,
                "`rate_limit` has no `requests_per_unit`: say how many requests each unit admits"
                    .into(),
            ));
            return None;
        };
        let Ok(requests_per_unit) = u32::try_from(count) else {
            errors.push((
                count_line,
                format!(
                    "requests_per_unit {count} is above {} (Envoy's field is 32 bits)",
                    u32::MAX
                ),
            ));
            return None;
        };
        let multiplier = match r.unit_multiplier {
            None => 1,
            Some((0, line)) => {
                errors.push((line, "unit_multiplier must be 1 or more".into()));
                return None;
            }
            Some((n, line)) if matches!(unit, Unit::Month | Unit::Year) && n != 1 => {
                let name = unit_name(unit);
                errors.push((
                    line,
                    format!("unit_multiplier {n} with unit `{name}`: calendar {name}s are counted one at a time; use `limits` or another unit"),
                ));
                return None;
            }
            Some((n, _)) => n,
        };
        limit.answers.push(Answer {
            requests_per_unit,
            unit,
        });
        match rule_of(u64::from(requests_per_unit), unit, multiplier) {
            Ok(Some(rule)) => limit.rules.push(rule),
            Ok(None) => limit.refuse_all = true,
            Err(e) => errors.push((r.line, e)),
        }
    }
    (errors.len() == before).then_some(limit)
}

fn algorithm(text: &str, line: usize, errors: &mut Vec<(usize, String)>) -> Option<Algorithm> {
    match text.parse::<Algorithm>() {
        Ok(a) => Some(a),
        Err(e) => {
            errors.push((line, e.to_string()));
            None
        }
    }
}

/// A unit as the files write it (any case), as Envoy's enum names it.
pub fn parse_unit(text: &str) -> Option<Unit> {
    Unit::from_str_name(&text.to_ascii_uppercase()).filter(|u| *u != Unit::Unknown)
}

/// The rule of `count` per `multiplier` `unit`s; `None` for a count of 0 (every request
/// over, as envoyproxy/ratelimit answers it).
pub fn rule_of(count: u64, unit: Unit, multiplier: u64) -> Result<Option<Rule>, String> {
    if count == 0 {
        return Ok(None);
    }
    let seconds: u64 = match unit {
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3_600,
        Unit::Day => 86_400,
        Unit::Week => 604_800,
        Unit::Month => return Ok(Some(Rule::per_calendar(count, Calendar::Month))),
        Unit::Year => return Ok(Some(Rule::per_calendar(count, Calendar::Year))),
        Unit::Unknown => return Err(format!("unit `{}` is not supported", unit_name(unit))),
    };
    let window = seconds
        .checked_mul(multiplier)
        .filter(|s| *s * 1_000_000 <= ratelimit_rule_text::MAX_WINDOW_US)
        .ok_or_else(|| format!("a window of {multiplier} {}s is too long", unit_name(unit)))?;
    if count > Rule::MAX_COUNT {
        return Err(format!("a count of {count} is above {}", Rule::MAX_COUNT));
    }
    Ok(Some(Rule::new(count, Duration::from_secs(window))))
}

/// How a rule written in rule text is stated in Envoy's `RateLimit`: its count, and the
/// longest unit its window is a whole number of (a calendar month as `MONTH`, a calendar
/// year as `YEAR`).
fn answer_of(rule: &Rule) -> Answer {
    let unit = match rule.calendar() {
        Some(Calendar::Year) => Unit::Year,
        Some(Calendar::Month) => Unit::Month,
        Some(Calendar::Day) => Unit::Day,
        None => {
            let us = rule.window().as_micros();
            [
                (Unit::Week, 604_800),
                (Unit::Day, 86_400),
                (Unit::Hour, 3_600),
                (Unit::Minute, 60),
            ]
            .into_iter()
            .find(|(_, s)| us.is_multiple_of(s * 1_000_000))
            .map_or(Unit::Second, |(u, _)| u)
        }
    };
    Answer {
        requests_per_unit: u32::try_from(rule.count()).unwrap_or(u32::MAX),
        unit,
    }
}

impl Loaded {
    /// What was loaded, for a person: each domain, and each descriptor with its limits.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let mut names: Vec<_> = self.domains.keys().collect();
        names.sort();
        let _ = writeln!(
            out,
            "loaded {} file(s), {} domain(s)",
            self.files.len(),
            names.len()
        );
        for name in names {
            let _ = writeln!(out, "domain {name}");
            describe(&self.domains[name].root, &mut out);
        }
        out
    }
}

fn describe(node: &Node, out: &mut String) {
    let mut keys: Vec<_> = node.children.keys().collect();
    keys.sort();
    for key in keys {
        let child = &node.children[key];
        if let Some(limit) = &child.limit {
            let _ = write!(out, "  {}: ", limit.path);
            if limit.unlimited {
                out.push_str("unlimited");
            } else if limit.refuse_all {
                out.push_str("0 (every request over)");
            } else {
                let rules: Vec<String> = limit.rules.iter().map(Rule::to_string).collect();
                let _ = write!(out, "{} ({})", rules.join(", "), limit.algorithm.label());
            }
            for (flag, on) in [
                ("shadow_mode", limit.shadow_mode),
                ("quota_mode", limit.quota_mode),
            ] {
                if on {
                    let _ = write!(out, " {flag}");
                }
            }
            if let Some(name) = &limit.name {
                let _ = write!(out, " name={name}");
            }
            if !limit.replaces.is_empty() {
                let _ = write!(out, " replaces={}", limit.replaces.join(","));
            }
            out.push('\n');
        }
        describe(child, out);
    }
}
