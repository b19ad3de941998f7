//! A serde `Deserializer` over [`Node`] with pydantic v2 "lax mode" coercion (score.md §1.3).
//!
//! The typed score model is plain serde derive with `deny_unknown_fields`; this deserializer
//! supplies upstream's coercion table (`'3'` → 3 for ints, `yes`/`on`/`1` for bools, strings
//! only for `str`, numeric-string keys for int-keyed maps) and records the dotted location
//! and line of the first failure, with pydantic's error type and wording.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use crate::yaml::{python_str_repr, Node, NodeKind};

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
        }
    }

    /// The location as pydantic prints it (`parallel.max_concurrent`).
    pub fn loc_text(&self) -> String {
        self.loc.join(".")
    }
}

/// The serde error type of [`NodeDe`].
#[derive(Debug, Clone)]
pub struct DeError {
    /// The error itself.
    pub error: Box<FieldError>,
    located: bool,
    pending_field: Option<String>,
}

impl DeError {
    fn kind(kind: &str, message: impl Into<String>, node: &Node) -> Self {
        let mut error = FieldError::new(kind, message);
        error.input = Some(node.repr());
        error.input_type = Some(node.type_name().to_string());
        DeError {
            error: Box::new(error),
            located: false,
            pending_field: None,
        }
    }

    fn at(mut self, path: &Loc<'_>, node: &Node) -> Self {
        if self.located {
            return self;
        }
        self.located = true;
        self.error.loc = path.parts();
        if let Some(field) = self.pending_field.take() {
            self.error.loc.push(field);
        }
        if self.error.input.is_none() {
            self.error.input = Some(node.repr());
            self.error.input_type = Some(node.type_name().to_string());
        }
        self.error.line = Some(node.line);
        self
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.error.loc_text(), self.error.message)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError {
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
        DeError {
            error: Box::new(FieldError::new("missing", "Field required")),
            located: false,
            pending_field: Some(field.to_string()),
        }
    }

    fn unknown_field(field: &str, _expected: &'static [&'static str]) -> Self {
        DeError {
            error: Box::new(FieldError::new(
                "extra_forbidden",
                "Extra inputs are not permitted",
            )),
            located: false,
            pending_field: Some(field.to_string()),
        }
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        let mut error = FieldError::new("literal_error", literal_message(expected));
        error.input = Some(python_str_repr(variant));
        error.input_type = Some("str".into());
        DeError {
            error: Box::new(error),
            located: false,
            pending_field: None,
        }
    }
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

/// Deserialize `T` from a node, reporting the first schema violation.
pub fn from_node<'de, T: de::Deserialize<'de>>(
    node: &'de Node,
    path: &[String],
) -> Result<T, Box<FieldError>> {
    let root = Loc::Root(path);
    T::deserialize(NodeDe { node, path: root }).map_err(|e| e.at(&root, node).error)
}

/// Where a node sits: a chain of borrowed parts back to the root, turned into pydantic's
/// location list only when an error is reported (building it for every node was most of
/// the allocation in loading a large score).
#[derive(Debug, Clone, Copy)]
enum Loc<'p> {
    /// The location the caller started from.
    Root(&'p [String]),
    /// A list item.
    Index(&'p Loc<'p>, usize),
    /// A mapping value under its key.
    Key(&'p Loc<'p>, &'p str),
    /// A mapping key itself (pydantic's `key.[key]`).
    KeyOf(&'p Loc<'p>, &'p str),
}

impl Loc<'_> {
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

/// A deserializer positioned on one node.
pub struct NodeDe<'a, 'p> {
    node: &'a Node,
    path: Loc<'p>,
}

impl<'a> NodeDe<'a, '_> {
    fn err(&self, kind: &str, message: &str) -> DeError {
        DeError::kind(kind, message, self.node).at(&self.path, self.node)
    }

    fn lax_int(&self) -> Result<i64, DeError> {
        match &self.node.kind {
            NodeKind::Int(i) => Ok(*i),
            NodeKind::Bool(b) => Ok(i64::from(*b)),
            NodeKind::Float(f) => float_to_int(*f).ok_or_else(|| {
                if f.is_finite() {
                    self.err(
                        "int_from_float",
                        "Input should be a valid integer, got a number with a fractional part",
                    )
                } else {
                    self.err("finite_number", "Input should be a finite number")
                }
            }),
            NodeKind::Str(s) => {
                let t = s.trim();
                if let Ok(i) = t.parse::<i64>() {
                    return Ok(i);
                }
                if let Some(i) = t
                    .parse::<f64>()
                    .ok()
                    .filter(|_| t.contains('.') && !t.contains(['e', 'E', 'n', 'N', 'i', 'I']))
                    .and_then(float_to_int)
                {
                    return Ok(i);
                }
                Err(self.err(
                    "int_parsing",
                    "Input should be a valid integer, unable to parse string as an integer",
                ))
            }
            _ => Err(self.err("int_type", "Input should be a valid integer")),
        }
    }

    fn lax_float(&self) -> Result<f64, DeError> {
        match &self.node.kind {
            NodeKind::Int(i) => Ok(*i as f64),
            NodeKind::Float(f) => Ok(*f),
            NodeKind::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
            NodeKind::Str(s) => parse_python_float(s).ok_or_else(|| {
                self.err(
                    "float_parsing",
                    "Input should be a valid number, unable to parse string as a number",
                )
            }),
            _ => Err(self.err("float_type", "Input should be a valid number")),
        }
    }

    fn lax_bool(&self) -> Result<bool, DeError> {
        match &self.node.kind {
            NodeKind::Bool(b) => Ok(*b),
            NodeKind::Int(0) => Ok(false),
            NodeKind::Int(1) => Ok(true),
            NodeKind::Float(f) if *f == 0.0 => Ok(false),
            NodeKind::Float(f) if *f == 1.0 => Ok(true),
            NodeKind::Str(s) => match s.to_ascii_lowercase().as_str() {
                "0" | "off" | "f" | "false" | "n" | "no" => Ok(false),
                "1" | "on" | "t" | "true" | "y" | "yes" => Ok(true),
                _ => Err(self.err(
                    "bool_parsing",
                    "Input should be a valid boolean, unable to interpret input",
                )),
            },
            NodeKind::Int(_) | NodeKind::Float(_) => Err(self.err(
                "bool_parsing",
                "Input should be a valid boolean, unable to interpret input",
            )),
            _ => Err(self.err("bool_type", "Input should be a valid boolean")),
        }
    }

    fn strict_str(&self) -> Result<&'a str, DeError> {
        match &self.node.kind {
            NodeKind::Str(s) => Ok(s),
            _ => Err(self.err("string_type", "Input should be a valid string")),
        }
    }
}

fn float_to_int(f: f64) -> Option<i64> {
    (f.is_finite() && f == f.trunc() && f.abs() < 9.2e18).then_some(f as i64)
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

macro_rules! forward_int {
    ($($method:ident => $visit:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
                let v = self.lax_int()?;
                let r: Result<V::Value, DeError> = visitor.$visit(v);
                r.map_err(|e| e.at(&self.path, self.node))
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for NodeDe<'de, '_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let node = self.node;
        let r: Result<V::Value, DeError> = match &node.kind {
            NodeKind::Null => visitor.visit_unit(),
            NodeKind::Bool(b) => visitor.visit_bool(*b),
            NodeKind::Int(i) => visitor.visit_i64(*i),
            NodeKind::Float(f) => visitor.visit_f64(*f),
            NodeKind::Str(s) | NodeKind::Date(s) => visitor.visit_borrowed_str(s),
            NodeKind::Seq(items) => visitor.visit_seq(SeqAcc {
                items: items.iter(),
                index: 0,
                path: &self.path,
            }),
            NodeKind::Map(entries) => visitor.visit_map(MapAcc {
                entries: entries.iter(),
                value: None,
                path: &self.path,
                stringify_keys: true,
            }),
        };
        r.map_err(|e| e.at(&self.path, node))
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let b = self.lax_bool()?;
        let r: Result<V::Value, DeError> = visitor.visit_bool(b);
        r.map_err(|e| e.at(&self.path, self.node))
    }

    forward_int! {
        deserialize_i8 => visit_i64, deserialize_i16 => visit_i64, deserialize_i32 => visit_i64,
        deserialize_i64 => visit_i64, deserialize_u8 => visit_i64, deserialize_u16 => visit_i64,
        deserialize_u32 => visit_i64, deserialize_u64 => visit_i64,
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let f = self.lax_float()?;
        let r: Result<V::Value, DeError> = visitor.visit_f64(f);
        r.map_err(|e| e.at(&self.path, self.node))
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let s = self.strict_str()?;
        let r: Result<V::Value, DeError> = visitor.visit_borrowed_str(s);
        r.map_err(|e| e.at(&self.path, self.node))
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if matches!(self.node.kind, NodeKind::Null) {
            visitor.visit_none()
        } else {
            let (path, node) = (self.path, self.node);
            visitor.visit_some(self).map_err(|e| e.at(&path, node))
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.kind {
            NodeKind::Null => visitor.visit_unit(),
            _ => Err(self.err("none_required", "Input should be None")),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            NodeKind::Seq(items) => visitor
                .visit_seq(SeqAcc {
                    items: items.iter(),
                    index: 0,
                    path: &self.path,
                })
                .map_err(|e| e.at(&self.path, self.node)),
            _ => Err(self.err("list_type", "Input should be a valid list")),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            NodeKind::Map(entries) => visitor
                .visit_map(MapAcc {
                    entries: entries.iter(),
                    value: None,
                    path: &self.path,
                    stringify_keys: false,
                })
                .map_err(|e| e.at(&self.path, self.node)),
            _ => Err(self.err("dict_type", "Input should be a valid dictionary")),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match &self.node.kind {
            NodeKind::Map(entries) => visitor
                .visit_map(MapAcc {
                    entries: entries.iter(),
                    value: None,
                    path: &self.path,
                    stringify_keys: false,
                })
                .map_err(|e| e.at(&self.path, self.node)),
            _ => Err(self.err(
                "model_type",
                // Not the model's type name (`PromptConfig`): the user wrote YAML.
                "Input should be a mapping (`key: value` lines), not a single value",
            )),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match &self.node.kind {
            NodeKind::Str(s) => {
                let de: de::value::StrDeserializer<'_, DeError> = s.as_str().into_deserializer();
                visitor
                    .visit_enum(de)
                    .map_err(|e| e.at(&self.path, self.node))
            }
            _ => Err(self.err("literal_error", &literal_message(variants))),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            NodeKind::Str(s) => visitor.visit_borrowed_str(s),
            _ => visitor.visit_string(self.node.key_text()),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }
}

struct SeqAcc<'a, 'p> {
    items: std::slice::Iter<'a, Node>,
    index: usize,
    path: &'p Loc<'p>,
}

impl<'de> de::SeqAccess<'de> for SeqAcc<'de, '_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some(node) = self.items.next() else {
            return Ok(None);
        };
        let path = Loc::Index(self.path, self.index);
        self.index += 1;
        let de = NodeDe { node, path };
        seed.deserialize(de)
            .map(Some)
            .map_err(|e| e.at(&path, node))
    }
}

struct MapAcc<'a, 'p> {
    entries: std::slice::Iter<'a, (Node, Node)>,
    value: Option<(&'a Node, Cow<'a, str>)>,
    path: &'p Loc<'p>,
    stringify_keys: bool,
}

impl<'de> de::MapAccess<'de> for MapAcc<'de, '_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        let part = match &key.kind {
            NodeKind::Str(s) | NodeKind::Date(s) => Cow::Borrowed(s.as_str()),
            _ => Cow::Owned(key.key_text()),
        };
        self.value = Some((value, part.clone()));
        let result = if self.stringify_keys {
            let de: de::value::StrDeserializer<'_, DeError> = part.as_ref().into_deserializer();
            seed.deserialize(de)
        } else {
            seed.deserialize(NodeDe {
                node: key,
                path: Loc::KeyOf(self.path, &part),
            })
        };
        match result {
            Ok(v) => Ok(Some(v)),
            Err(mut e) => {
                if e.pending_field.is_some() {
                    // Unknown field: pydantic locates it at the key and shows the value.
                    e.pending_field = None;
                    e.located = true;
                    e.error.loc = self.path.parts();
                    e.error.loc.push(part.into_owned());
                    e.error.input = Some(value.repr());
                    e.error.input_type = Some(value.type_name().to_string());
                    e.error.line = Some(key.line);
                }
                Err(e)
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let Some((node, part)) = self.value.take() else {
            return Err(de::Error::custom("value requested before key"));
        };
        let path = Loc::Key(self.path, &part);
        seed.deserialize(NodeDe { node, path })
            .map_err(|e| e.at(&path, node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::parse;
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
