//! A request descriptor's entries -> the descriptor of the configuration it matches -> its
//! limit, as envoyproxy/ratelimit matches them: at each level the exact `key_value` first,
//! then the first wildcard `key_value` (in file order) that the entry's matches, then the
//! key alone (the key's default); a limit applies only when it is at the depth of the
//! request's last entry. Pure: no I/O, no clock, no state.

use std::borrow::Cow;
use std::sync::Arc;

use crate::config::{Domain, Limit, Node};

/// One entry of a request descriptor.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'r> {
    pub key: &'r str,
    pub value: &'r str,
}

/// How one entry matched its level.
#[derive(Clone, Copy, Debug)]
enum How<'c> {
    /// Its `key_value` exactly.
    Exact,
    /// A wildcard `key_value` (the pattern as written).
    Wildcard(&'c str),
    /// Its key alone: the key's default.
    Default,
}

#[derive(Clone, Copy, Debug)]
struct Step<'c> {
    node: &'c Node,
    how: How<'c>,
}

/// A request descriptor's match: the limit, and how each entry reached it.
#[derive(Debug)]
pub struct Found<'c> {
    pub limit: &'c Arc<Limit>,
    steps: Vec<Step<'c>>,
}

/// The limit of `entries` in `domain`, if any.
pub fn find<'c>(domain: &'c Domain, entries: &[Entry<'_>]) -> Option<Found<'c>> {
    let mut level = &domain.root;
    let mut steps = Vec::with_capacity(entries.len());
    let mut found = None;
    let mut key_value = String::new();
    for (i, entry) in entries.iter().enumerate() {
        key_value.clear();
        key_value.push_str(entry.key);
        key_value.push('_');
        key_value.push_str(entry.value);
        let mut step = level.children.get(key_value.as_str()).map(|node| Step {
            node,
            how: How::Exact,
        });
        if step.is_none() {
            step = level
                .wildcards
                .iter()
                .find(|w| wildcard_match(&w.parts, &key_value))
                .and_then(|w| {
                    level.children.get(&w.key).map(|node| Step {
                        node,
                        how: How::Wildcard(&w.key),
                    })
                });
        }
        if step.is_none() {
            step = level.children.get(entry.key).map(|node| Step {
                node,
                how: How::Default,
            });
        }
        let Some(step) = step else { break };
        steps.push(step);
        if i == entries.len() - 1 {
            found = step.node.limit.as_ref();
        }
        if step.node.children.is_empty() {
            break;
        }
        level = step.node;
    }
    found.map(|limit| Found { limit, steps })
}

impl Found<'_> {
    /// The value entry `i` is counted under when it is not its own: the wildcard's pattern
    /// of a `share_threshold` descriptor, which every matching value shares one counter of.
    pub fn shared_value(&self, i: usize) -> Option<&str> {
        let step = self.steps.get(i)?;
        match step.how {
            How::Wildcard(_) if step.node.share_threshold => step.node.shared_value.as_deref(),
            _ => None,
        }
    }

    /// Whether the metric name depends on the request's values (`detailed_metric`, or
    /// `value_to_metric` on the way).
    pub fn names_values(&self) -> bool {
        self.limit.detailed_metric || self.steps.iter().any(|s| s.node.value_to_metric)
    }

    /// The `descriptor` name of this match's metrics, as envoyproxy/ratelimit names its
    /// stats (without the domain): the configuration's path; with `detailed_metric` every
    /// entry's `key_value` (a shared wildcard's pattern for its entry); with
    /// `value_to_metric` the request's value in place of a wildcard or a key's default.
    pub fn metric_name(&self, entries: &[Entry<'_>]) -> Cow<'_, str> {
        if !self.names_values() {
            return Cow::Borrowed(&self.limit.path);
        }
        let mut name = String::new();
        for (i, entry) in entries.iter().enumerate() {
            if i > 0 {
                name.push('.');
            }
            name.push_str(entry.key);
            let value = if self.limit.detailed_metric {
                Some(self.shared_value(i).unwrap_or(entry.value))
            } else {
                let step = self.steps[i];
                match step.how {
                    How::Wildcard(pattern) => Some(match self.shared_value(i) {
                        Some(shared) => shared,
                        None if step.node.value_to_metric => entry.value,
                        None => pattern
                            .strip_prefix(entry.key)
                            .and_then(|p| p.strip_prefix('_'))
                            .unwrap_or(pattern),
                    }),
                    How::Exact => Some(entry.value),
                    How::Default => step.node.value_to_metric.then_some(entry.value),
                }
            };
            if let Some(value) = value.filter(|v| !v.is_empty()) {
                name.push('_');
                name.push_str(value);
            }
        }
        Cow::Owned(name)
    }
}

/// Whether `text` matches a pattern split at its `*`s: each `*` stands for any run of
/// characters, the empty one included.
pub fn wildcard_match(parts: &[String], text: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|p| p == text);
    };
    if text.len() < parts.iter().map(String::len).sum::<usize>()
        || !text.starts_with(first.as_str())
        || !text.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in middle {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
#[path = "matcher/tests.rs"]
mod tests;
