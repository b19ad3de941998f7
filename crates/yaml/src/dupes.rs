//! Keys given twice in one mapping. PyYAML (and so [`crate::parse`]) keeps the last value
//! silently (score.md §1.2); a score author who wrote `prompt:` twice almost always meant one
//! of them, so `validate` warns, naming both lines (docs/differences.md).

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use crate::{key_hash, keys_equal, resolve_plain, NodeKind};

/// A key that appears twice in the same mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateKey {
    /// Dotted path of the key (`retry.max_retries`; list items as `[i]`).
    pub path: String,
    /// 1-based line of its first occurrence.
    pub first_line: usize,
    /// 1-based line of the repeat (whose value wins).
    pub line: usize,
}

/// Every repeated key of `text`'s mappings, in document order. Merge keys (`<<`) and what
/// they merge are not repeats: overriding a merged key is what merging is for.
pub fn duplicate_keys(text: &str) -> Vec<DuplicateKey> {
    let mut finder = Finder::default();
    // A document that does not parse is reported by `parse`; what was seen so far stands.
    let _ = Parser::new_from_str(text).load(&mut finder, true);
    finder.found
}

enum Frame {
    Map {
        path: String,
        keys: std::collections::HashMap<u64, Vec<(NodeKind, usize)>>,
        /// The key just read, waiting for its value (`None` before a key).
        pending: Option<String>,
    },
    Seq {
        path: String,
        index: usize,
    },
}

#[derive(Default)]
struct Finder {
    stack: Vec<Frame>,
    found: Vec<DuplicateKey>,
}

fn join(path: &str, part: &str) -> String {
    if path.is_empty() {
        part.to_string()
    } else {
        format!("{path}.{part}")
    }
}

impl Finder {
    /// A node starts at `line`: a key or a value of the innermost mapping, or a list item.
    /// Returns the path a collection starting here has.
    fn node(&mut self, key: Option<NodeKind>, line: usize) -> String {
        match self.stack.last_mut() {
            None => String::new(),
            Some(Frame::Seq { path, index }) => {
                let child = format!("{path}[{index}]");
                *index += 1;
                child
            }
            Some(Frame::Map {
                path,
                keys,
                pending,
            }) => {
                if let Some(k) = pending.take() {
                    return join(path, &k);
                }
                let Some(kind) = key else {
                    *pending = Some(String::new());
                    return String::new();
                };
                let text = crate::Node {
                    kind: kind.clone(),
                    line,
                    col: 0,
                }
                .key_text();
                *pending = Some(text.clone());
                if text == "<<" {
                    return String::new();
                }
                let Some(h) = key_hash(&kind) else {
                    return String::new();
                };
                let seen = keys.entry(h).or_default();
                match seen.iter().find(|(k, _)| keys_equal(k, &kind)) {
                    Some(&(_, first_line)) => self.found.push(DuplicateKey {
                        path: join(path, &text),
                        first_line,
                        line,
                    }),
                    None => seen.push((kind, line)),
                }
                String::new()
            }
        }
    }
}

impl MarkedEventReceiver for Finder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let line = mark.line();
        match ev {
            Event::Scalar(value, style, _, tag) => {
                let kind = match (style, tag) {
                    (TScalarStyle::Plain, None) => resolve_plain(value),
                    _ => NodeKind::Str(value),
                };
                self.node(Some(kind), line);
            }
            Event::Alias(_) => {
                self.node(None, line);
            }
            Event::MappingStart(..) => {
                let path = self.node(None, line);
                self.stack.push(Frame::Map {
                    path,
                    keys: Default::default(),
                    pending: None,
                });
            }
            Event::SequenceStart(..) => {
                let path = self.node(None, line);
                self.stack.push(Frame::Seq { path, index: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn repeated_keys_are_named_with_both_lines() {
        let text = "name: x\nprompt:\n  template: a\nretry:\n  max_retries: 2\n  max_retries: 5\nprompt:\n  template: b\nvalidations:\n  - type: a\n    type: b\n";
        let found = duplicate_keys(text);
        assert_eq!(
            found,
            vec![
                DuplicateKey {
                    path: "retry.max_retries".into(),
                    first_line: 5,
                    line: 6
                },
                DuplicateKey {
                    path: "prompt".into(),
                    first_line: 2,
                    line: 7
                },
                DuplicateKey {
                    path: "validations[0].type".into(),
                    first_line: 10,
                    line: 11
                },
            ]
        );
    }

    #[test]
    fn distinct_keys_and_merge_overrides_are_not_repeats() {
        let text = "base: &b\n  a: 1\n  b: 2\nuse:\n  <<: *b\n  a: 3\n'1': x\n1: y\nlist: [{a: 1}, {a: 2}]\n";
        assert_eq!(duplicate_keys(text), vec![]);
        // Python's dict: 1 and 1.0 are one key.
        assert_eq!(duplicate_keys("1: a\n1.0: b\n").len(), 1);
    }
}
