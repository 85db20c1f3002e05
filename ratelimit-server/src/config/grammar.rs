//! One file's fields, as envoyproxy/ratelimit documents them, and ours beside them. Every
//! error is kept (with its line) and parsing goes on, so that a file's errors are reported
//! all at once.

use std::time::Duration;

use super::yaml::{Node, Value};

/// A file as written.
#[derive(Debug, Default)]
pub struct File {
    pub domain: Option<(String, usize)>,
    /// Ours: the default algorithm of the file's descriptors.
    pub algorithm: Option<(String, usize)>,
    pub descriptors: Vec<Descriptor>,
}

/// A descriptor as written.
#[derive(Debug, Default)]
pub struct Descriptor {
    pub line: usize,
    pub key: Option<(String, usize)>,
    pub value: Option<String>,
    pub rate_limit: Option<RateLimit>,
    pub descriptors: Vec<Descriptor>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    pub share_threshold: bool,
}

/// A `rate_limit` as written.
#[derive(Debug, Default)]
pub struct RateLimit {
    pub line: usize,
    pub unit: Option<(String, usize)>,
    pub requests_per_unit: Option<(u64, usize)>,
    pub unlimited: bool,
    pub name: Option<(String, usize)>,
    pub replaces: Vec<(String, usize)>,
    // Ours.
    pub algorithm: Option<(String, usize)>,
    pub unit_multiplier: Option<(u64, usize)>,
    pub limits: Vec<(String, usize)>,
    pub allowance: Option<(Duration, usize)>,
}

/// Reads a parsed file; errors are `(line, message)` pairs.
pub fn read(root: Option<&Node>, errors: &mut Vec<(usize, String)>) -> File {
    let mut file = File::default();
    let Some(root) = root else {
        return file;
    };
    let mut fields = Fields::new(root, "the file", errors);
    for (name, value) in fields.take() {
        match name.as_str() {
            "domain" => file.domain = fields.string(value),
            "algorithm" => file.algorithm = fields.string(value),
            "descriptors" => file.descriptors = descriptors(value, fields.errors),
            _ => fields.unknown(&name, value, TOP_FIELDS),
        }
    }
    file
}

const TOP_FIELDS: &str = "domain, descriptors, algorithm";
const DESCRIPTOR_FIELDS: &str = "key, value, rate_limit, descriptors, shadow_mode, quota_mode, \
     detailed_metric, value_to_metric, share_threshold, metadata";
const RATE_LIMIT_FIELDS: &str = "unit, requests_per_unit, unlimited, name, replaces, \
     algorithm, unit_multiplier, limits, allowance";

fn descriptors(node: &Node, errors: &mut Vec<(usize, String)>) -> Vec<Descriptor> {
    let items = items(
        node,
        "`descriptors`",
        "a list of descriptors (`- key: ...`)",
        errors,
    );
    items
        .iter()
        .filter_map(|item| descriptor(item, errors))
        .collect()
}

fn descriptor(node: &Node, errors: &mut Vec<(usize, String)>) -> Option<Descriptor> {
    let d = DESCRIPTOR.read(node, errors, |d: &mut Descriptor, fields, name, value| {
        match name {
            "key" => d.key = fields.string(value),
            "value" => d.value = fields.string(value).map(|(v, _)| v),
            "rate_limit" => d.rate_limit = rate_limit(value, fields.errors),
            "descriptors" => d.descriptors = descriptors(value, fields.errors),
            "shadow_mode" => d.shadow_mode = fields.bool(value),
            "quota_mode" => d.quota_mode = fields.bool(value),
            "detailed_metric" => d.detailed_metric = fields.bool(value),
            "value_to_metric" => d.value_to_metric = fields.bool(value),
            "share_threshold" => d.share_threshold = fields.bool(value),
            // Free-form: answered in Envoy's dynamic metadata, which this service does not
            // send; accepted so that files using it load unchanged.
            "metadata" => {}
            _ => fields.unknown(name, value, DESCRIPTOR_FIELDS),
        }
    })?;
    Some(Descriptor {
        line: node.line,
        ..d
    })
}

fn rate_limit(node: &Node, errors: &mut Vec<(usize, String)>) -> Option<RateLimit> {
    let r = RATE_LIMIT.read(
        node,
        errors,
        |r: &mut RateLimit, fields, name, value| match name {
            "unit" => r.unit = fields.string(value),
            "requests_per_unit" => r.requests_per_unit = fields.integer(value),
            "unlimited" => r.unlimited = fields.bool(value),
            "name" => r.name = fields.string(value),
            "replaces" => r.replaces = replaces(value, fields.errors),
            "algorithm" => r.algorithm = fields.string(value),
            "unit_multiplier" => r.unit_multiplier = fields.integer(value),
            "limits" => r.limits = fields.strings(value),
            "allowance" => {
                if let Some((text, line)) = fields.string(value) {
                    match ratelimit_rule_text::parse_duration(&text) {
                        Ok(d) => r.allowance = Some((d, line)),
                        Err(e) => fields
                            .errors
                            .push((line, format!("`allowance: {text}`: {e}"))),
                    }
                }
            }
            _ => fields.unknown(name, value, RATE_LIMIT_FIELDS),
        },
    )?;
    Some(RateLimit {
        line: node.line,
        ..r
    })
}

fn replaces(node: &Node, errors: &mut Vec<(usize, String)>) -> Vec<(String, usize)> {
    let items = items(node, "`replaces`", "a list of `- name: ...`", errors);
    let mut names = Vec::new();
    for item in items {
        let entry = REPLACES_ENTRY.read(item, errors, |name, fields, field, value| match field {
            "name" => *name = fields.string(value),
            _ => fields.unknown(field, value, "name"),
        });
        let Some(name) = entry else {
            continue;
        };
        match name {
            Some((name, line)) if name.is_empty() => errors.push((
                line,
                "a `replaces` entry has an empty name: name the rate limit it replaces".into(),
            )),
            Some(name) => names.push(name),
            None => errors.push((
                item.line,
                "a `replaces` entry has no `name`: name the rate limit it replaces".into(),
            )),
        }
    }
    names
}

/// A mapping of the grammar as its errors speak of it.
struct Mapping {
    /// What it is: "a descriptor".
    what: &'static str,
    /// What to write when something other than a mapping stands in its place.
    write: &'static str,
}

const DESCRIPTOR: Mapping = Mapping {
    what: "a descriptor",
    write: "write a mapping with at least `key`",
};
const RATE_LIMIT: Mapping = Mapping {
    what: "`rate_limit`",
    write: "write a mapping (`unit:` and `requests_per_unit:`, or `limits:`)",
};
const REPLACES_ENTRY: Mapping = Mapping {
    what: "a `replaces` entry",
    write: "write `- name: ...`",
};

impl Mapping {
    /// Reads `node` into a `T` from its default: each field, in file order, by `field`.
    /// The one walk of every mapping in a file (a descriptor, a `rate_limit`, a `replaces`
    /// entry); `None`, and the error of [`Fields::mapping`], when `node` is not a mapping.
    fn read<'n, T: Default>(
        &self,
        node: &'n Node,
        errors: &mut Vec<(usize, String)>,
        mut field: impl FnMut(&mut T, &mut Fields<'n, '_>, &str, &'n Node),
    ) -> Option<T> {
        let mut fields = Fields::mapping(node, self.what, self.write, errors)?;
        let mut read = T::default();
        for (name, value) in fields.take() {
            field(&mut read, &mut fields, &name, value);
        }
        Some(read)
    }
}

/// The items of the list `node` (none when it is null). Anything else is an error,
/// "`what` is (its kind): write `list`", and has no items.
fn items<'n>(
    node: &'n Node,
    what: &str,
    list: &str,
    errors: &mut Vec<(usize, String)>,
) -> &'n [Node] {
    if node.is_null() {
        return &[];
    }
    match &node.value {
        Value::Sequence(items) => items,
        _ => {
            errors.push((
                node.line,
                format!("{what} is {}: write {list}", node.kind()),
            ));
            &[]
        }
    }
}

/// A mapping's fields, read one by one: duplicates and non-string keys are errors.
struct Fields<'n, 'e> {
    node: &'n Node,
    what: &'static str,
    errors: &'e mut Vec<(usize, String)>,
}

impl<'n, 'e> Fields<'n, 'e> {
    fn new(node: &'n Node, what: &'static str, errors: &'e mut Vec<(usize, String)>) -> Self {
        Fields { node, what, errors }
    }

    /// The fields of `node` when it is a mapping; otherwise `None`, and the error
    /// "`what` is (its kind): `write`".
    fn mapping(
        node: &'n Node,
        what: &'static str,
        write: &str,
        errors: &'e mut Vec<(usize, String)>,
    ) -> Option<Self> {
        if !matches!(node.value, Value::Mapping(_)) {
            errors.push((node.line, format!("{what} is {}: {write}", node.kind())));
            return None;
        }
        Some(Fields::new(node, what, errors))
    }

    /// The fields with string names, each once; reports the others.
    fn take(&mut self) -> Vec<(String, &'n Node)> {
        let Value::Mapping(pairs) = &self.node.value else {
            return Vec::new();
        };
        let mut seen: Vec<(String, &'n Node)> = Vec::new();
        for (key, value) in pairs {
            let name = match &key.value {
                Value::Scalar { text, plain } if !*plain || !looks_typed(text) => text.clone(),
                _ => {
                    self.errors.push((
                        key.line,
                        format!(
                            "{} has a key that is not a string ({}): field names are words such as `key`",
                            self.what,
                            describe(key)
                        ),
                    ));
                    continue;
                }
            };
            if seen.iter().any(|(n, _)| *n == name) {
                self.errors.push((
                    key.line,
                    format!("`{name}` is given twice in {}: keep one", self.what),
                ));
                continue;
            }
            seen.push((name, value));
        }
        seen
    }

    fn unknown(&mut self, name: &str, value: &Node, known: &str) {
        let _ = value;
        self.errors.push((
            self.line_of(name),
            format!(
                "unknown field `{name}` in {}: expected one of {known}",
                self.what
            ),
        ));
    }

    fn line_of(&self, name: &str) -> usize {
        match &self.node.value {
            Value::Mapping(pairs) => pairs
                .iter()
                .find(|(k, _)| matches!(&k.value, Value::Scalar { text, .. } if text == name))
                .map_or(self.node.line, |(k, _)| k.line),
            _ => self.node.line,
        }
    }

    fn string(&mut self, node: &Node) -> Option<(String, usize)> {
        match &node.value {
            _ if node.is_null() => None,
            Value::Scalar { text, .. } => Some((text.clone(), node.line)),
            _ => {
                self.errors.push((
                    node.line,
                    format!("expected a string, found {}", node.kind()),
                ));
                None
            }
        }
    }

    fn strings(&mut self, node: &Node) -> Vec<(String, usize)> {
        match &node.value {
            _ if node.is_null() => Vec::new(),
            Value::Sequence(items) => items.iter().filter_map(|i| self.string(i)).collect(),
            _ => {
                self.errors.push((
                    node.line,
                    format!(
                        "expected a list of rules (`[\"10/second\", \"500/hour\"]`), found {}",
                        node.kind()
                    ),
                ));
                Vec::new()
            }
        }
    }

    fn integer(&mut self, node: &Node) -> Option<(u64, usize)> {
        match &node.value {
            Value::Scalar { text, plain: true } => match text.parse::<u64>() {
                Ok(n) => Some((n, node.line)),
                Err(_) => {
                    self.errors.push((
                        node.line,
                        format!("expected a whole number of 0 or more, found `{text}`"),
                    ));
                    None
                }
            },
            _ => {
                self.errors.push((
                    node.line,
                    format!("expected a whole number, found {}", describe(node)),
                ));
                None
            }
        }
    }

    fn bool(&mut self, node: &Node) -> bool {
        match &node.value {
            Value::Scalar { text, plain: true } => match text.as_str() {
                "true" | "True" | "TRUE" => true,
                "false" | "False" | "FALSE" => false,
                _ if node.is_null() => false,
                other => {
                    self.errors.push((
                        node.line,
                        format!("expected `true` or `false`, found `{other}`"),
                    ));
                    false
                }
            },
            _ => {
                self.errors.push((
                    node.line,
                    format!("expected `true` or `false`, found {}", describe(node)),
                ));
                false
            }
        }
    }
}

/// Whether a plain scalar is a number, a boolean or null rather than a string.
fn looks_typed(text: &str) -> bool {
    text.parse::<f64>().is_ok()
        || matches!(
            text,
            "true"
                | "false"
                | "True"
                | "False"
                | "TRUE"
                | "FALSE"
                | ""
                | "~"
                | "null"
                | "Null"
                | "NULL"
        )
}

fn describe(node: &Node) -> String {
    match &node.value {
        Value::Scalar { text, .. } if !node.is_null() => format!("`{text}`"),
        _ => node.kind().to_owned(),
    }
}
