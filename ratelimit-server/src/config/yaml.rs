//! A YAML document as a tree whose every node knows its line, so that an error in the
//! configuration names the line it is on. Built from yaml-rust2's events (which carry their
//! positions) rather than its `Yaml` values (which do not).

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// One node of a document and the line (1-based) it starts on.
#[derive(Clone, Debug)]
pub struct Node {
    pub value: Value,
    pub line: usize,
}

#[derive(Clone, Debug)]
pub enum Value {
    /// A scalar and whether it was written plain (unquoted): only a plain scalar is a
    /// number, a boolean or null.
    Scalar {
        text: String,
        plain: bool,
    },
    Sequence(Vec<Node>),
    /// The pairs in the order written (duplicates kept, so they can be reported).
    Mapping(Vec<(Node, Node)>),
}

impl Node {
    /// Whether this is null (`~`, `null`, or nothing at all).
    pub fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar { text, plain: true }
            if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    /// A word naming what this node is, for messages.
    pub fn kind(&self) -> &'static str {
        match &self.value {
            Value::Scalar { .. } if self.is_null() => "nothing",
            Value::Scalar { .. } => "a scalar",
            Value::Sequence(_) => "a list",
            Value::Mapping(_) => "a mapping",
        }
    }
}

/// A document that is not YAML: where, and what the parser said.
#[derive(Debug)]
pub struct SyntaxError {
    pub line: usize,
    pub message: String,
}

/// Parses `text`'s first document; `None` for an empty file.
pub fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    parser.load(&mut builder, false).map_err(|e| SyntaxError {
        line: e.marker().line(),
        message: e.info().to_owned(),
    })?;
    if let Some(message) = builder.error {
        return Err(message);
    }
    Ok(builder.done)
}

/// Folds events into nodes: open collections on a stack, anchored nodes kept for aliases.
#[derive(Default)]
struct Builder {
    stack: Vec<(Node, usize)>,
    /// A mapping's key waiting for its value, per open mapping (by stack depth).
    pending_keys: Vec<Option<Node>>,
    anchors: HashMap<usize, Node>,
    done: Option<Node>,
    error: Option<SyntaxError>,
}

impl Builder {
    fn push_value(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        let Some((parent, _)) = self.stack.last_mut() else {
            if self.done.is_none() {
                self.done = Some(node);
            }
            return;
        };
        match &mut parent.value {
            Value::Sequence(items) => items.push(node),
            Value::Mapping(pairs) => {
                let pending = self
                    .pending_keys
                    .last_mut()
                    .expect("a mapping has its slot");
                match pending.take() {
                    Some(key) => pairs.push((key, node)),
                    None => *pending = Some(node),
                }
            }
            Value::Scalar { .. } => unreachable!("scalars are never opened"),
        }
    }

    fn open(&mut self, value: Value, anchor: usize, mark: Marker) {
        let is_mapping = matches!(value, Value::Mapping(_));
        self.stack.push((
            Node {
                value,
                line: mark.line(),
            },
            anchor,
        ));
        if is_mapping {
            self.pending_keys.push(None);
        }
    }

    fn close(&mut self) {
        if let Some((node, anchor)) = self.stack.pop() {
            if matches!(node.value, Value::Mapping(_)) {
                self.pending_keys.pop();
            }
            self.push_value(node, anchor);
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        match event {
            Event::Scalar(text, style, anchor, _tag) => {
                let plain = style == TScalarStyle::Plain;
                let node = Node {
                    value: Value::Scalar { text, plain },
                    line: mark.line(),
                };
                self.push_value(node, anchor);
            }
            Event::SequenceStart(anchor, _) => self.open(Value::Sequence(Vec::new()), anchor, mark),
            Event::MappingStart(anchor, _) => self.open(Value::Mapping(Vec::new()), anchor, mark),
            Event::SequenceEnd | Event::MappingEnd => self.close(),
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(mut node) => {
                    node.line = mark.line();
                    self.push_value(node, 0);
                }
                None => {
                    self.error.get_or_insert(SyntaxError {
                        line: mark.line(),
                        message: "an alias to an unknown anchor".into(),
                    });
                }
            },
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_know_their_lines() {
        let doc = parse("domain: a\ndescriptors:\n  - key: k\n    value: \"v\"\n")
            .unwrap()
            .unwrap();
        let Value::Mapping(pairs) = &doc.value else {
            panic!("a mapping")
        };
        assert_eq!(pairs[1].0.line, 2);
        let Value::Sequence(items) = &pairs[1].1.value else {
            panic!("a list")
        };
        let Value::Mapping(entry) = &items[0].value else {
            panic!("a mapping")
        };
        assert_eq!(entry[1].1.line, 4);
        assert!(matches!(
            &entry[1].1.value,
            Value::Scalar { plain: false, .. }
        ));
    }

    #[test]
    fn an_empty_file_is_no_document_and_bad_yaml_names_its_line() {
        assert!(parse("").unwrap().is_none());
        let err = parse("domain: a\n  - key: [\n").unwrap_err();
        assert!(err.line >= 2, "{err:?}");
    }
}
