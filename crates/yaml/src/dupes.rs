//! Keys given twice in one mapping. PyYAML (and so [`crate::parse`]) keeps the last value
//! silently (score.md §1.2); a score author who wrote `prompt:` twice almost always meant one
//! of them, so `validate` warns, naming both lines (docs/differences.md).
//!
//! The parsers note each repeat as they insert a mapping's keys (the line of the key kept,
//! the line of the repeat); here the repeats get their paths from the finished tree — a
//! walk made only when there are any, so a score without one pays nothing (a second parse
//! cost more than the first on the 345 KB corpus score, issue 24).

use std::collections::{HashMap, HashSet};

use crate::{Node, NodeKind};

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

impl DuplicateKey {
    /// What its file's reader is told, the same for every YAML file Mozart reads (scores,
    /// conductor.yaml, instrument profiles): `duplicate key 'retry.max_retries' on lines 6
    /// and 7: only the last value (line 7) is used`.
    pub fn warning(&self) -> String {
        format!(
            "duplicate key '{}' on lines {} and {}: only the last value (line {}) is used",
            self.path, self.first_line, self.line, self.line
        )
    }
}

/// Every repeated key of `text`'s mappings, in document order (none when `text` does not
/// parse: `parse` reports that). Merge keys (`<<`) and what they merge are not repeats:
/// overriding a merged key is what merging is for.
pub fn duplicate_keys(text: &str) -> Vec<DuplicateKey> {
    crate::parse_noting_duplicates(text)
        .map(|(_, found)| found)
        .unwrap_or_default()
}

/// A key a parser found twice in one mapping: the line of the key kept, the line of the
/// repeat, the key's text.
pub(crate) type Repeat = (usize, usize, String);

fn join(path: &str, part: &str) -> String {
    if path.is_empty() {
        part.to_string()
    } else {
        format!("{path}.{part}")
    }
}

/// The repeats the parser noted, named by the
/// path of the key kept in `root`, in the order of the repeats' lines.
pub(crate) fn named(root: Option<&Node>, mut repeats: Vec<Repeat>) -> Vec<DuplicateKey> {
    let Some(root) = root.filter(|_| !repeats.is_empty()) else {
        return Vec::new();
    };
    let wanted: HashSet<(usize, &str)> = repeats
        .iter()
        .map(|(first, _, text)| (*first, text.as_str()))
        .collect();
    let mut paths: HashMap<(usize, String), String> = HashMap::new();
    walk(root, "", &wanted, &mut paths);
    repeats.sort_by_key(|(_, line, _)| *line);
    repeats
        .into_iter()
        .filter_map(|(first_line, line, text)| {
            let path = paths.get(&(first_line, text))?;
            Some(DuplicateKey {
                path: path.clone(),
                first_line,
                line,
            })
        })
        .collect()
}

/// The path of each mapping key whose line and text are `wanted` (the first found in
/// document order); merge keys are left out.
fn walk(
    node: &Node,
    path: &str,
    wanted: &HashSet<(usize, &str)>,
    paths: &mut HashMap<(usize, String), String>,
) {
    match &node.kind {
        NodeKind::Map(entries) => {
            for (k, v) in entries {
                let text = k.key_text();
                let here = join(path, &text);
                if text != "<<" && wanted.contains(&(k.line, text.as_str())) {
                    paths.entry((k.line, text)).or_insert_with(|| here.clone());
                }
                walk(v, &here, wanted, paths);
            }
        }
        NodeKind::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &format!("{path}[{i}]"), wanted, paths);
            }
        }
        _ => {}
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
