//! The score policy: pydantic v2 "lax mode" coercion (score.md §1.3) and pydantic's errors.
//!
//! The typed score model is plain serde derive with `deny_unknown_fields`; this policy
//! supplies upstream's coercion table (`'3'` → 3 for ints, `yes`/`on`/`1` for bools, strings
//! only for `str`, numeric-string keys for int-keyed maps) and records the dotted location
//! and line of the first failure, with pydantic's error type and wording: upstream's own
//! `validate` output is what users and the conformance corpus compare against.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Expected};

use super::{Loc, NodeDe, Policy, Read, Want};
use crate::{python_str_repr, Node, NodeKind};

/// One schema violation, shaped like a pydantic error entry.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Dotted location parts (`["sheet", "dependencies", "3"]`); empty for model-level errors.
    pub loc: Vec<String>,
    /// pydantic's error type (`extra_forbidden`, `missing`, `value_error`, …).
    pub kind: String,
    /// pydantic's message (`Extra inputs are not permitted`, `Value error, …`).
    pub message: String,
    /// Python repr of the offending input, when known.
    pub input: Option<String>,
    /// Python type name of the offending input, when known.
    pub input_type: Option<String>,
    /// 1-based line in the score file, when known.
    pub line: Option<usize>,
    /// For `extra_forbidden`: the field names the section accepts (empty when unknown).
    pub expected: Vec<&'static str>,
}

impl FieldError {
    /// A new error without location.
    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        FieldError {
            loc: Vec::new(),
            kind: kind.to_string(),
            message: message.into(),
            input: None,
            input_type: None,
            line: None,
            expected: Vec::new(),
        }
    }

    /// The location as pydantic prints it (`parallel.max_concurrent`); a key's control
    /// characters written out (`\x1b`), so that a message naming it cannot drive the
    /// terminal.
    pub fn loc_text(&self) -> String {
        crate::control_escaped(&self.loc.join(".")).into_owned()
    }
}

/// Deserialize `T` from a node found at `path`, reporting the first schema violation.
pub fn from_node<'de, T: de::Deserialize<'de>>(
    node: &'de Node,
    path: &[String],
) -> Result<T, Box<FieldError>> {
    let root = Loc::Root(path);
    T::deserialize(NodeDe::<Lax>::new(node, root)).map_err(|e| Lax::locate(e, &root, node).error)
}

/// `Input should be 'a', 'b' or 'c'`.
pub fn literal_message(expected: &[&str]) -> String {
    let quoted: Vec<String> = expected.iter().map(|v| format!("'{v}'")).collect();
    match quoted.len() {
        0 => "Input should be one of no values".into(),
        1 => format!("Input should be {}", quoted[0]),
        n => format!(
            "Input should be {} or {}",
            quoted[..n - 1].join(", "),
            quoted[n - 1]
        ),
    }
}

/// Python `float(str)`: surrounding whitespace, `_` between digits, `inf`/`nan` words.
pub fn parse_python_float(s: &str) -> Option<f64> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if matches!(body, "inf" | "infinity" | "nan") {
        let neg = lower.starts_with('-');
        return Some(match (body, neg) {
            ("nan", _) => f64::NAN,
            (_, true) => f64::NEG_INFINITY,
            _ => f64::INFINITY,
        });
    }
    if t.is_empty()
        || !t
            .chars()
            .all(|c| c.is_ascii_digit() || "+-._eE".contains(c))
    {
        return None;
    }
    t.replace('_', "").parse::<f64>().ok()
}

/// A misfit of `node`, in pydantic's words.
fn fail<T>(kind: &str, message: &str, node: &Node) -> Result<T, LaxError> {
    Err(LaxError::kind(kind, message, node))
}

fn float_to_int(f: f64) -> Option<i64> {
    (f.is_finite() && f == f.trunc() && f.abs() < 9.2e18).then_some(f as i64)
}

/// The score policy: pydantic's lax coercions and words.
pub(crate) struct Lax;

/// A [`FieldError`] on its way up to the root.
#[derive(Debug, Clone)]
pub(crate) struct LaxError {
    /// The error itself.
    error: Box<FieldError>,
    /// It has its place (the first one wins: the innermost).
    located: bool,
    /// A missing or unknown field's name, added to the location once it is known.
    pending_field: Option<String>,
}

impl LaxError {
    fn kind(kind: &str, message: impl Into<String>, node: &Node) -> Self {
        let mut error = FieldError::new(kind, message);
        error.input = Some(node.repr());
        error.input_type = Some(node.type_name().to_string());
        LaxError {
            error: Box::new(error),
            located: false,
            pending_field: None,
        }
    }
}

impl fmt::Display for LaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.error.loc_text(), self.error.message)
    }
}

impl std::error::Error for LaxError {}

impl de::Error for LaxError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        LaxError {
            error: Box::new(FieldError::new(
                "value_error",
                // The message alone: pydantic's "Value error, " prefix says nothing to a user.
                msg.to_string(),
            )),
            located: false,
            pending_field: None,
        }
    }

    fn missing_field(field: &'static str) -> Self {
        LaxError {
            error: Box::new(FieldError::new("missing", "Field required")),
            located: false,
            pending_field: Some(field.to_string()),
        }
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        let mut error = FieldError::new("extra_forbidden", "Extra inputs are not permitted");
        error.expected = expected.to_vec();
        LaxError {
            error: Box::new(error),
            located: false,
            pending_field: Some(field.to_string()),
        }
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        let mut error = FieldError::new("literal_error", literal_message(expected));
        error.input = Some(python_str_repr(variant));
        error.input_type = Some("str".into());
        LaxError {
            error: Box::new(error),
            located: false,
            pending_field: None,
        }
    }
}

impl Loc<'_> {
    /// pydantic's location list.
    fn parts(&self) -> Vec<String> {
        let (parent, part) = match self {
            Loc::Root(path) => return path.to_vec(),
            Loc::Index(parent, i) => (parent, i.to_string()),
            Loc::Key(parent, key) => (parent, key.to_string()),
            Loc::KeyOf(parent, key) => (parent, format!("{key}.[key]")),
        };
        let mut path = parent.parts();
        path.push(part);
        path
    }
}

impl Policy for Lax {
    type Error = LaxError;
    const TEXT_KEYS: bool = true;
    const MAP_VARIANTS: bool = false;

    fn bool(node: &Node) -> Result<Read<bool>, LaxError> {
        let parsing = || {
            LaxError::kind(
                "bool_parsing",
                "Input should be a valid boolean, unable to interpret input",
                node,
            )
        };
        match &node.kind {
            NodeKind::Bool(b) => Ok(Read::Value(*b)),
            NodeKind::Int(0) => Ok(Read::Value(false)),
            NodeKind::Int(1) => Ok(Read::Value(true)),
            NodeKind::Float(f) if *f == 0.0 => Ok(Read::Value(false)),
            NodeKind::Float(f) if *f == 1.0 => Ok(Read::Value(true)),
            NodeKind::Str(s) => match s.to_ascii_lowercase().as_str() {
                "0" | "off" | "f" | "false" | "n" | "no" => Ok(Read::Value(false)),
                "1" | "on" | "t" | "true" | "y" | "yes" => Ok(Read::Value(true)),
                _ => Err(parsing()),
            },
            NodeKind::Int(_) | NodeKind::Float(_) => Err(parsing()),
            _ => fail("bool_type", "Input should be a valid boolean", node),
        }
    }

    fn int(node: &Node) -> Result<Read<i64>, LaxError> {
        match &node.kind {
            NodeKind::Int(i) => Ok(Read::Value(*i)),
            NodeKind::Bool(b) => Ok(Read::Value(i64::from(*b))),
            NodeKind::Float(f) => float_to_int(*f).map(Read::Value).ok_or_else(|| {
                if f.is_finite() {
                    LaxError::kind(
                        "int_from_float",
                        "Input should be a valid integer, got a number with a fractional part",
                        node,
                    )
                } else {
                    LaxError::kind("finite_number", "Input should be a finite number", node)
                }
            }),
            NodeKind::Str(s) => {
                let t = s.trim();
                if let Ok(i) = t.parse::<i64>() {
                    return Ok(Read::Value(i));
                }
                if let Some(i) = t
                    .parse::<f64>()
                    .ok()
                    .filter(|_| t.contains('.') && !t.contains(['e', 'E', 'n', 'N', 'i', 'I']))
                    .and_then(float_to_int)
                {
                    return Ok(Read::Value(i));
                }
                fail(
                    "int_parsing",
                    "Input should be a valid integer, unable to parse string as an integer",
                    node,
                )
            }
            _ => fail("int_type", "Input should be a valid integer", node),
        }
    }

    fn float(node: &Node) -> Result<Read<f64>, LaxError> {
        match &node.kind {
            NodeKind::Int(i) => Ok(Read::Value(*i as f64)),
            NodeKind::Float(f) => Ok(Read::Value(*f)),
            NodeKind::Bool(b) => Ok(Read::Value(if *b { 1.0 } else { 0.0 })),
            NodeKind::Str(s) => parse_python_float(s).map(Read::Value).ok_or_else(|| {
                LaxError::kind(
                    "float_parsing",
                    "Input should be a valid number, unable to parse string as a number",
                    node,
                )
            }),
            _ => fail("float_type", "Input should be a valid number", node),
        }
    }

    fn text<'a>(node: &'a Node, _exp: &dyn Expected) -> Result<&'a str, LaxError> {
        // A date is not text to pydantic: PyYAML hands it a `date`.
        match &node.kind {
            NodeKind::Str(s) => Ok(s),
            _ => fail("string_type", "Input should be a valid string", node),
        }
    }

    fn name<'a>(node: &'a Node, _exp: &dyn Expected) -> Result<Cow<'a, str>, LaxError> {
        // `1: x` in a model is the unknown field "1", as pydantic says.
        Ok(match &node.kind {
            NodeKind::Str(s) => Cow::Borrowed(s),
            _ => Cow::Owned(node.key_text()),
        })
    }

    fn misfit(node: &Node, want: Want, _exp: &dyn Expected) -> LaxError {
        match want {
            Want::Unit => LaxError::kind("none_required", "Input should be None", node),
            Want::Seq => LaxError::kind("list_type", "Input should be a valid list", node),
            Want::Map => LaxError::kind("dict_type", "Input should be a valid dictionary", node),
            Want::Struct => LaxError::kind(
                "model_type",
                // Not the model's type name (`PromptConfig`): the user wrote YAML. A list
                // (`- size: 1` lines) is the usual slip, and it is no single value.
                if matches!(node.kind, NodeKind::Seq(_)) {
                    "Input should be a mapping (`key: value` lines), not a list (`- item` lines)"
                } else {
                    "Input should be a mapping (`key: value` lines), not a single value"
                },
                node,
            ),
            Want::Variant(variants) => {
                LaxError::kind("literal_error", literal_message(variants), node)
            }
        }
    }

    fn locate(mut error: LaxError, loc: &Loc<'_>, node: &Node) -> LaxError {
        if error.located {
            return error;
        }
        error.located = true;
        error.error.loc = loc.parts();
        if let Some(field) = error.pending_field.take() {
            error.error.loc.push(field);
        }
        if error.error.input.is_none() {
            error.error.input = Some(node.repr());
            error.error.input_type = Some(node.type_name().to_string());
        }
        error.error.line = Some(node.line);
        error
    }

    fn locate_key(
        mut error: LaxError,
        map: &Loc<'_>,
        part: &str,
        key: &Node,
        value: &Node,
    ) -> LaxError {
        if error.pending_field.is_some() {
            // Unknown field: pydantic locates it at the key and shows the value.
            error.pending_field = None;
            error.located = true;
            error.error.loc = map.parts();
            error.error.loc.push(part.to_string());
            error.error.input = Some(value.repr());
            error.error.input_type = Some(value.type_name().to_string());
            error.error.line = Some(key.line);
        }
        error
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::parse;
    use indexmap::IndexMap;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Probe {
        name: String,
        #[serde(default)]
        count: i64,
        #[serde(default)]
        flag: bool,
        #[serde(default)]
        deps: IndexMap<i64, Vec<i64>>,
        #[serde(default)]
        vars: IndexMap<String, serde_json::Value>,
    }

    fn probe(text: &str) -> Result<Probe, Box<FieldError>> {
        let node = parse(text).unwrap().unwrap();
        from_node(&node, &[])
    }

    #[test]
    fn lax_coercions_match_pydantic() {
        let p = probe("name: x\ncount: ' 3 '\nflag: 'yes'\ndeps: {'2': [1]}\nvars: {a: {1: b}}\n")
            .unwrap();
        assert_eq!(p.count, 3);
        assert!(p.flag);
        assert_eq!(p.deps.get(&2), Some(&vec![1]));
        assert_eq!(p.vars.get("a"), Some(&serde_json::json!({"1": "b"})));
        let e = probe("name: x\nvars: {1: a}\n").unwrap_err();
        assert_eq!(
            (e.loc_text().as_str(), e.kind.as_str()),
            ("vars.1.[key]", "string_type")
        );
        assert_eq!(probe("name: x\ncount: 2.0\n").unwrap().count, 2);
    }

    #[test]
    fn errors_carry_location_line_and_wording() {
        let e = probe("name: 123\n").unwrap_err();
        assert_eq!(
            (e.loc_text().as_str(), e.kind.as_str(), e.line),
            ("name", "string_type", Some(1))
        );
        let e = probe("name: x\nbogus: 1\n").unwrap_err();
        assert_eq!(e.loc_text(), "bogus");
        assert_eq!(e.message, "Extra inputs are not permitted");
        assert_eq!(e.line, Some(2));
        let e = probe("count: 1\n").unwrap_err();
        assert_eq!(
            (e.loc_text().as_str(), e.message.as_str()),
            ("name", "Field required")
        );
        let e = probe("name: x\ncount: 1.5\n").unwrap_err();
        assert_eq!(e.kind, "int_from_float");
        let e = probe("name: x\ndeps:\n  2: [a]\n").unwrap_err();
        assert_eq!(e.loc_text(), "deps.2.0");
        assert_eq!(e.line, Some(3));
        let e = probe("name: x\nflag: 2\n").unwrap_err();
        assert_eq!(e.kind, "bool_parsing");
    }
}
