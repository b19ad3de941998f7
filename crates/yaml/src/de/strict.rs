//! The strict policy, for every YAML file but scores (conductor.yaml, instrument profiles,
//! placements): a value is taken as written (`timeout_seconds: '30'` is text, not a number)
//! and a misfit is worded for the user (not in Rust's type names) and placed by field path
//! and line.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeOwned, Expected};

use super::{Loc, NodeDe, Policy, Read, Want};
use crate::{Node, NodeKind, YamlError};

/// One step of a field path: a mapping key or a sequence index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A mapping key, as written.
    Key(String),
    /// A 0-based sequence index.
    Index(usize),
}

/// A value of the document does not fit the typed model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeError {
    /// What is wrong (`must be a whole number from 0 to 4294967295, not the text "x"`; an
    /// unknown or missing field in serde's words).
    pub message: String,
    /// Where, from the document's root; empty for the root itself.
    pub path: Vec<Segment>,
    /// 1-based line of the offending key or value, when the value came from a file.
    pub line: Option<usize>,
}

impl DeError {
    /// The dotted field path (`backend.timeout_seconds`, `instruments[2].name`); empty for
    /// the document's root.
    pub fn path_text(&self) -> String {
        let mut out = String::new();
        for seg in &self.path {
            match seg {
                Segment::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        let path = self.path_text();
        if !path.is_empty() {
            write!(f, "{path}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

/// Loading text into a typed model failed: the YAML itself, or the model's schema.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The text is not valid YAML.
    #[error("{0}")]
    Syntax(YamlError),
    /// The YAML does not fit the model.
    #[error("{0}")]
    Schema(DeError),
}

impl Error {
    /// 1-based line of the problem, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            Error::Syntax(e) => e.line,
            Error::Schema(e) => e.line,
        }
    }
}

/// Deserialize a typed model from a loaded node.
pub fn from_node<T: DeserializeOwned>(node: &Node) -> Result<T, DeError> {
    let root = Loc::Root(&[]);
    T::deserialize(NodeDe::<Strict>::new(node, root))
        .map_err(|e| Strict::locate(e, &root, node).error)
}

/// Load `text` with YAML 1.1's rules (see [`crate::parse`]) and deserialize a typed model; an
/// empty document is `null`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    let node = crate::parse(text).map_err(Error::Syntax)?;
    let null = Node {
        kind: NodeKind::Null,
        line: 1,
        col: 1,
    };
    from_node(node.as_ref().unwrap_or(&null)).map_err(Error::Schema)
}

/// The strict policy: no coercions, a user's words.
pub(crate) struct Strict;

/// A [`DeError`] on its way up: its path is the place where it arose.
#[derive(Debug)]
pub(crate) struct StrictError {
    error: DeError,
    located: bool,
}

impl fmt::Display for StrictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for StrictError {}

impl de::Error for StrictError {
    /// A misfit in the user's words: `must be a whole number from 0 to 4294967295, not the
    /// text "lots"`, where serde says `invalid type: string "lots", expected u32`.
    fn invalid_type(unexp: de::Unexpected<'_>, exp: &dyn Expected) -> Self {
        de::Error::custom(misfit(&unexp, exp))
    }

    /// As [`invalid_type`](Self::invalid_type): an integer out of the field's range is worded
    /// alike (`must be a whole number from 0 to 4294967295, not -3`).
    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn Expected) -> Self {
        de::Error::custom(misfit(&unexp, exp))
    }

    fn custom<T: fmt::Display>(msg: T) -> Self {
        StrictError {
            error: DeError {
                message: msg.to_string(),
                path: Vec::new(),
                line: None,
            },
            located: false,
        }
    }

    /// serde's words, with the field the typo most likely meant first: the list of every
    /// field (21 of them at conductor.yaml's top) left the user to find it.
    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        let message = match (closest(field, expected), expected) {
            (_, []) => format!("unknown field `{field}`, there are no fields"),
            (Some(meant), _) => format!(
                "unknown field `{field}` (did you mean `{meant}`?), expected {}",
                one_of(expected)
            ),
            (None, _) => format!("unknown field `{field}`, expected {}", one_of(expected)),
        };
        de::Error::custom(message)
    }
}

/// What a section (a struct) is asked for; [`Strict::locate`] names the section's key in it.
const SECTION: &str = "a mapping (`key: value` lines)";

/// `must be <what the field takes>, not <what was written>`, in a user's words rather than
/// Rust's type names (`u32`, `struct SocketConfig`).
fn misfit(unexp: &de::Unexpected<'_>, exp: &dyn Expected) -> String {
    let rust = exp.to_string();
    let wanted: Cow<'_, str> = match rust.as_str() {
        "u8" => "a whole number from 0 to 255".into(),
        "u16" => "a whole number from 0 to 65535".into(),
        "u32" => "a whole number from 0 to 4294967295".into(),
        "u64" | "u128" | "usize" => "a whole number (0 or more)".into(),
        "i8" => "a whole number from -128 to 127".into(),
        "i16" => "a whole number from -32768 to 32767".into(),
        "i32" => "a whole number from -2147483648 to 2147483647".into(),
        "i64" | "i128" | "isize" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        "a boolean" => "true or false".into(),
        "a string" | "path string" => "text".into(),
        "a character" => "a single character".into(),
        "a sequence" => "a list (`- item` lines, or [a, b])".into(),
        "a map" => "a mapping (`key: value` lines)".into(),
        "unit" => "empty".into(),
        other if other.starts_with("struct ") => SECTION.into(),
        other => other.to_string().into(),
    };
    let numeric = wanted.starts_with("a whole number") || wanted == "a number";
    let found = match unexp {
        de::Unexpected::Str(text) => {
            // `'30'` is text in YAML: the quotes are what is wrong.
            let quoted_number = numeric && text.trim().parse::<f64>().is_ok();
            let hint = if quoted_number {
                " (without the quotes it is a number)"
            } else {
                ""
            };
            format!("the text {text:?}{hint}")
        }
        // `name: 123` is a number in YAML: text is written in quotes.
        de::Unexpected::Signed(i) if wanted == "text" => format!("{i} (quote it for text: '{i}')"),
        de::Unexpected::Float(f) if wanted == "text" => format!("{f} (quote it for text: '{f}')"),
        de::Unexpected::Bool(b) if wanted == "text" => format!("{b} (quote it for text: '{b}')"),
        de::Unexpected::Signed(i) => i.to_string(),
        de::Unexpected::Unsigned(u) => u.to_string(),
        de::Unexpected::Float(f) => f.to_string(),
        de::Unexpected::Bool(b) => b.to_string(),
        de::Unexpected::Unit => "empty".into(),
        de::Unexpected::Seq => "a list".into(),
        de::Unexpected::Map => "a mapping".into(),
        other => other.to_string(),
    };
    format!("must be {wanted}, not {found}")
}

/// serde's `one of `a`, `b``, or `a` alone.
fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.as_slice() {
        [one] => one.clone(),
        _ => format!("one of {}", quoted.join(", ")),
    }
}

/// The name of `names` a misspelt `word` most likely meant: the fewest edits, at most a third
/// of its length (a transposed or missing letter, a dropped `_s`).
fn closest<'a>(word: &str, names: &[&'a str]) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    names
        .iter()
        .map(|name| (edits(word, name), *name))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

/// Levenshtein distance.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

impl Loc<'_> {
    /// The path as a strict error names it: a key's own error is its mapping's.
    fn segments(&self) -> Vec<Segment> {
        let (parent, seg) = match self {
            Loc::Root(path) => return path.iter().cloned().map(Segment::Key).collect(),
            Loc::Index(parent, i) => (parent, Segment::Index(*i)),
            Loc::Key(parent, key) => (parent, Segment::Key(key.to_string())),
            Loc::KeyOf(parent, _) => return parent.segments(),
        };
        let mut path = parent.segments();
        path.push(seg);
        path
    }
}

/// serde's `invalid type: …, expected …` for `node`.
fn invalid_type(node: &Node, exp: &dyn Expected) -> StrictError {
    let unexp = match &node.kind {
        NodeKind::Null => de::Unexpected::Unit,
        NodeKind::Bool(b) => de::Unexpected::Bool(*b),
        NodeKind::Int(i) => de::Unexpected::Signed(*i),
        NodeKind::Float(f) => de::Unexpected::Float(*f),
        NodeKind::Str(s) | NodeKind::Date(s) => de::Unexpected::Str(s),
        NodeKind::Seq(_) => de::Unexpected::Seq,
        NodeKind::Map(_) => de::Unexpected::Map,
    };
    de::Error::invalid_type(unexp, exp)
}

impl Policy for Strict {
    type Error = StrictError;
    const TEXT_KEYS: bool = false;
    const MAP_VARIANTS: bool = true;

    fn bool(_: &Node) -> Result<Read<bool>, StrictError> {
        Ok(Read::AsWritten)
    }

    fn int(_: &Node) -> Result<Read<i64>, StrictError> {
        Ok(Read::AsWritten)
    }

    fn float(_: &Node) -> Result<Read<f64>, StrictError> {
        Ok(Read::AsWritten)
    }

    fn text<'a>(node: &'a Node, exp: &dyn Expected) -> Result<&'a str, StrictError> {
        // Strict like the score model (and pydantic): `name: 123` is not the text "123".
        match &node.kind {
            NodeKind::Str(s) | NodeKind::Date(s) => Ok(s),
            _ => Err(invalid_type(node, exp)),
        }
    }

    fn name<'a>(node: &'a Node, exp: &dyn Expected) -> Result<Cow<'a, str>, StrictError> {
        Self::text(node, exp).map(Cow::Borrowed)
    }

    fn misfit(node: &Node, _want: Want, exp: &dyn Expected) -> StrictError {
        invalid_type(node, exp)
    }

    fn locate(mut error: StrictError, loc: &Loc<'_>, node: &Node) -> StrictError {
        if !error.located {
            error.located = true;
            error.error.path = loc.segments();
            // A section given a value: say which section, with its fields under it.
            if let Some(Segment::Key(key)) = error.error.path.last() {
                let named =
                    format!("a mapping ({key}: with its fields on the indented lines below)");
                error.error.message = error.error.message.replacen(SECTION, &named, 1);
            }
        }
        // The innermost line is the useful one; line 0 means "not from the file" (a merged
        // default) and is never shown.
        if error.error.line.is_none() && node.line > 0 {
            error.error.line = Some(node.line);
        }
        error
    }

    fn locate_key(
        error: StrictError,
        map: &Loc<'_>,
        part: &str,
        key: &Node,
        _value: &Node,
    ) -> StrictError {
        // An unknown or missing field is the mapping's error, on the key's line.
        Self::locate(error, &Loc::KeyOf(map, part), key)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Backend {
        timeout_seconds: f64,
        #[serde(default)]
        enabled: bool,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Cli,
        Http,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Instrument {
        name: String,
        kind: Kind,
        #[serde(default)]
        port: Option<u16>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Root {
        backend: Option<Backend>,
        instruments: Vec<Instrument>,
        env: BTreeMap<String, String>,
        fan_out: BTreeMap<u32, u32>,
        extra: serde_json::Value,
    }

    impl Default for Root {
        fn default() -> Self {
            Root {
                backend: None,
                instruments: Vec::new(),
                env: BTreeMap::new(),
                fan_out: BTreeMap::new(),
                extra: serde_json::Value::Null,
            }
        }
    }

    fn schema_err(text: &str) -> DeError {
        match from_str::<Root>(text).unwrap_err() {
            Error::Schema(e) => e,
            other => panic!("not a schema error: {other}"),
        }
    }

    #[test]
    fn values_resolve_with_yaml_11_rules() {
        let root: Root = from_str(
            "# comment\nbackend:\n  timeout_seconds: 30\n  enabled: yes\ninstruments:\n  - {name: a, kind: cli, port: 0x50}\nenv: {HOME: /root, WHEN: 2024-01-01}\nfan_out: {2: 3}\nextra: {a: [1, 2.5, on, ~]}\n",
        )
        .unwrap();
        assert_eq!(
            root.backend,
            Some(Backend {
                timeout_seconds: 30.0,
                enabled: true
            })
        );
        assert_eq!(root.instruments[0].port, Some(80));
        assert_eq!(root.instruments[0].kind, Kind::Cli);
        assert_eq!(root.env["WHEN"], "2024-01-01");
        assert_eq!(root.fan_out[&2], 3);
        assert_eq!(root.extra, serde_json::json!({"a": [1, 2.5, true, null]}));
        assert_eq!(from_str::<Root>("").unwrap_err().line(), Some(1));
        assert_eq!(from_str::<Option<Root>>("").unwrap(), None);
    }

    #[test]
    fn a_wrong_type_names_its_path_and_line() {
        let err = schema_err("\n# top\nbackend:\n\n  timeout_seconds: soon\n");
        assert_eq!(err.path_text(), "backend.timeout_seconds");
        assert_eq!(err.line, Some(5));
        assert_eq!(
            err.to_string(),
            "line 5: backend.timeout_seconds: must be a number, not the text \"soon\""
        );
        let err = schema_err("instruments:\n  - {name: a, kind: cli}\n  - {name: b, kind: http}\n  - name: 7\n    kind: cli\n");
        assert_eq!(err.path_text(), "instruments[2].name");
        assert_eq!(err.line, Some(4));
        // Out of range for the field's integer type.
        let err = schema_err("instruments:\n  - name: a\n    kind: cli\n    port: 70000\n");
        assert_eq!(err.path_text(), "instruments[0].port");
        assert_eq!(err.line, Some(4));
        assert_eq!(
            err.message, "must be a whole number from 0 to 65535, not 70000",
            "{err}"
        );
    }

    /// Rust's type names (`u32`, `struct Backend`, `a sequence`) are not the user's words.
    #[test]
    fn a_misfit_says_what_the_field_takes_in_a_users_words() {
        let cases = [
            (
                "backend: fast\n",
                "line 1: backend: must be a mapping (backend: with its fields on the indented lines below), not the text \"fast\"",
            ),
            (
                "backend: {timeout_seconds: '30'}\n",
                "line 1: backend.timeout_seconds: must be a number, not the text \"30\" (without the quotes it is a number)",
            ),
            (
                "backend: {timeout_seconds: 1, enabled: maybe}\n",
                "line 1: backend.enabled: must be true or false, not the text \"maybe\"",
            ),
            (
                "instruments: cli\n",
                "line 1: instruments: must be a list (`- item` lines, or [a, b]), not the text \"cli\"",
            ),
            (
                "env: {A: 1}\n",
                "line 1: env.A: must be text, not 1 (quote it for text: '1')",
            ),
            (
                "fan_out: {2: -1}\n",
                "line 1: fan_out.2: must be a whole number from 0 to 4294967295, not -1",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(schema_err(text).to_string(), want, "{text}");
        }
    }

    #[test]
    fn unknown_and_missing_fields_point_at_their_mapping() {
        let err = schema_err("backend:\n  timeout_seconds: 1\n  timeout: 2\n");
        assert_eq!(err.path_text(), "backend");
        assert_eq!(err.line, Some(3));
        assert!(err.message.contains("unknown field `timeout`"), "{err}");
        let err = schema_err("instruments:\n  - name: a\n");
        assert_eq!(err.path_text(), "instruments[0]");
        assert_eq!(err.line, Some(2));
        assert!(err.message.contains("missing field `kind`"), "{err}");
        let err = schema_err("instruments:\n  - {name: a, kind: grpc}\n");
        assert_eq!(err.path_text(), "instruments[0].kind");
        assert!(err.message.contains("unknown variant `grpc`"), "{err}");
    }

    #[test]
    fn an_unknown_field_names_the_one_its_typo_meant() {
        let err = schema_err("backend:\n  timeout_secnods: 1\n");
        assert!(
            err.message.starts_with(
                "unknown field `timeout_secnods` (did you mean `timeout_seconds`?), expected one of"
            ),
            "{err}"
        );
        let err = schema_err("backend:\n  colour: 1\n");
        assert!(!err.message.contains("did you mean"), "{err}");
    }

    #[test]
    fn strings_are_not_numbers_and_numbers_are_not_strings() {
        // As in a score: a quoted number stays text, an unquoted one is not a name.
        assert!(schema_err("backend: {timeout_seconds: '30'}\n")
            .message
            .contains("not the text \"30\""));
        assert!(schema_err("env: {A: 1}\n")
            .message
            .contains("must be text, not 1"));
        assert_eq!(from_str::<Root>("env: {A: '1'}\n").unwrap().env["A"], "1");
    }

    #[test]
    fn syntax_errors_stay_syntax_errors() {
        let err = from_str::<Root>("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(matches!(err, Error::Syntax(_)), "{err}");
        assert!(err.line().is_some());
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(untagged)]
    enum Either {
        Num(i64),
        Text(String),
        List(Vec<Either>),
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Tagged {
        Local,
        Slurm { partition: String },
    }

    #[derive(Debug, Deserialize, PartialEq)]
    enum External {
        Unit,
        Pair(u8, u8),
        Inner { x: i32 },
    }

    #[test]
    fn untagged_tagged_and_external_enums() {
        assert_eq!(from_str::<Either>("5").unwrap(), Either::Num(5));
        assert_eq!(
            from_str::<Either>("[x, 1]").unwrap(),
            Either::List(vec![Either::Text("x".into()), Either::Num(1)])
        );
        assert_eq!(
            from_str::<Tagged>("type: slurm\npartition: gpu\n").unwrap(),
            Tagged::Slurm {
                partition: "gpu".into()
            }
        );
        assert_eq!(from_str::<Tagged>("type: local\n").unwrap(), Tagged::Local);
        assert_eq!(from_str::<External>("Unit").unwrap(), External::Unit);
        assert_eq!(
            from_str::<External>("Pair: [1, 2]").unwrap(),
            External::Pair(1, 2)
        );
        let Error::Schema(err) = from_str::<External>("Inner:\n  x: big\n").unwrap_err() else {
            panic!("not a schema error")
        };
        assert_eq!(err.path_text(), "Inner.x");
        assert_eq!(err.line, Some(2));
    }
}
