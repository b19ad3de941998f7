//! Typed models straight from a loaded [`Node`]: a `serde::Deserializer` over the tree.
//!
//! The loader has already resolved every scalar with YAML 1.1's rules (`yes` is `true`, `012`
//! is 10), so the typed models (conductor.yaml, instrument profiles, placements) read a file
//! exactly as a score reads it. Going through the tree instead of re-parsing text keeps the
//! user's line numbers: an error names the field path (`socket.backlog`,
//! `models[2].name`) and the line of the offending key or value in the user's file.

use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

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
    /// What is wrong, in serde's words (`invalid type: string "x", expected u32`).
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

    /// Set the line if no deeper value has set it (the innermost position is the useful one);
    /// line 0 means "not from the file" (a merged default) and is never shown.
    fn at(mut self, line: usize) -> Self {
        if self.line.is_none() && line > 0 {
            self.line = Some(line);
        }
        self
    }

    /// Put `seg` in front of the path (errors travel from the leaf up to the root).
    fn under(mut self, seg: Segment) -> Self {
        self.path.insert(0, seg);
        self
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

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError {
            message: msg.to_string(),
            path: Vec::new(),
            line: None,
        }
    }
}

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
    T::deserialize(NodeDeserializer::new(node))
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

/// A `serde::Deserializer` for one node of the tree.
#[derive(Debug, Clone, Copy)]
pub struct NodeDeserializer<'a> {
    node: &'a Node,
}

impl<'a> NodeDeserializer<'a> {
    /// Deserialize from `node`.
    pub fn new(node: &'a Node) -> Self {
        NodeDeserializer { node }
    }

    fn invalid_type(&self, exp: &dyn de::Expected) -> DeError {
        let unexp = match &self.node.kind {
            NodeKind::Null => de::Unexpected::Unit,
            NodeKind::Bool(b) => de::Unexpected::Bool(*b),
            NodeKind::Int(i) => de::Unexpected::Signed(*i),
            NodeKind::Float(f) => de::Unexpected::Float(*f),
            NodeKind::Str(s) | NodeKind::Date(s) => de::Unexpected::Str(s),
            NodeKind::Seq(_) => de::Unexpected::Seq,
            NodeKind::Map(_) => de::Unexpected::Map,
        };
        <DeError as de::Error>::invalid_type(unexp, exp).at(self.node.line)
    }

    /// Run `f`, giving an error without a position this node's line.
    fn here<V>(&self, f: impl FnOnce() -> Result<V, DeError>) -> Result<V, DeError> {
        f().map_err(|e| e.at(self.node.line))
    }

    fn visit_seq<'de, V: Visitor<'de>>(
        &self,
        items: &'a [Node],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let mut access = SeqNodes {
            items: items.iter().enumerate(),
            len: items.len(),
        };
        let value = self.here(|| visitor.visit_seq(&mut access))?;
        if access.items.len() > 0 {
            return Err(
                <DeError as de::Error>::invalid_length(access.len, &"fewer elements")
                    .at(self.node.line),
            );
        }
        Ok(value)
    }

    fn visit_map<'de, V: Visitor<'de>>(
        &self,
        entries: &'a [(Node, Node)],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let mut access = MapNodes {
            entries: entries.iter(),
            value: None,
        };
        self.here(|| visitor.visit_map(&mut access))
    }
}

impl<'de, 'a> de::Deserializer<'de> for NodeDeserializer<'a> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            NodeKind::Null => self.here(|| visitor.visit_unit()),
            NodeKind::Bool(b) => self.here(|| visitor.visit_bool(*b)),
            NodeKind::Int(i) => self.here(|| visitor.visit_i64(*i)),
            NodeKind::Float(f) => self.here(|| visitor.visit_f64(*f)),
            // A date stays the text it was written as (PyYAML would build a `date`; no
            // model of ours has a date field).
            NodeKind::Str(s) | NodeKind::Date(s) => self.here(|| visitor.visit_str(s)),
            NodeKind::Seq(items) => self.visit_seq(items, visitor),
            NodeKind::Map(entries) => self.visit_map(entries, visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.kind {
            NodeKind::Null => self.here(|| visitor.visit_none()),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.kind {
            NodeKind::Null => self.here(|| visitor.visit_unit()),
            _ => Err(self.invalid_type(&visitor)),
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
        self.here(|| visitor.visit_newtype_struct(self))
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        // Strict like the score model (and pydantic): `name: 123` is not the text "123".
        match &self.node.kind {
            NodeKind::Str(s) | NodeKind::Date(s) => self.here(|| visitor.visit_str(s)),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        Err(self.invalid_type(&visitor))
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        Err(self.invalid_type(&visitor))
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            NodeKind::Seq(items) => self.visit_seq(items, visitor),
            _ => Err(self.invalid_type(&visitor)),
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
            NodeKind::Map(entries) => self.visit_map(entries, visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match &self.node.kind {
            // A unit variant by name: `kind: cli`.
            NodeKind::Str(s) => self.here(|| visitor.visit_enum(s.as_str().into_deserializer())),
            // Any other variant as a one-key mapping: `{slurm: {partition: x}}`.
            NodeKind::Map(entries) if entries.len() == 1 => {
                let (key, value) = &entries[0];
                self.here(|| visitor.visit_enum(Variant { key, value }))
            }
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.here(|| visitor.visit_unit())
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64
    }
}

/// The items of a sequence node; an item's error gets its index in the path.
struct SeqNodes<'a> {
    items: std::iter::Enumerate<std::slice::Iter<'a, Node>>,
    len: usize,
}

impl<'de, 'a> SeqAccess<'de> for SeqNodes<'a> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        match self.items.next() {
            None => Ok(None),
            Some((i, node)) => seed
                .deserialize(NodeDeserializer::new(node))
                .map(Some)
                .map_err(|e| e.at(node.line).under(Segment::Index(i))),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// The entries of a mapping node; a value's error gets its key in the path, a key's error
/// (an unknown field) the key's line.
struct MapNodes<'a> {
    entries: std::slice::Iter<'a, (Node, Node)>,
    value: Option<(&'a Node, &'a Node)>,
}

impl<'de, 'a> MapAccess<'de> for MapNodes<'a> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        match self.entries.next() {
            None => Ok(None),
            Some((key, value)) => {
                self.value = Some((key, value));
                seed.deserialize(KeyDeserializer { node: key })
                    .map(Some)
                    .map_err(|e| e.at(key.line))
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let Some((key, value)) = self.value.take() else {
            return Err(<DeError as de::Error>::custom(
                "a mapping value was asked for before its key",
            ));
        };
        // An empty value (`socket:`) has the key's line in a block mapping; either way the
        // value's own line is where the user looks.
        let line = if value.line > 0 { value.line } else { key.line };
        seed.deserialize(NodeDeserializer::new(value))
            .map_err(|e| e.at(line).under(Segment::Key(key.key_text())))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// A mapping key: text for field names and `String` keys; numbers and booleans as themselves
/// for maps keyed by them.
struct KeyDeserializer<'a> {
    node: &'a Node,
}

impl<'de, 'a> de::Deserializer<'de> for KeyDeserializer<'a> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        NodeDeserializer::new(self.node).deserialize_any(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        NodeDeserializer::new(self.node).deserialize_option(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        NodeDeserializer::new(self.node).deserialize_newtype_struct(name, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        NodeDeserializer::new(self.node).deserialize_enum(name, variants, visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        NodeDeserializer::new(self.node).deserialize_str(visitor)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        NodeDeserializer::new(self.node).deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        NodeDeserializer::new(self.node).deserialize_str(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf unit
        unit_struct seq tuple tuple_struct map struct ignored_any
    }
}

/// An enum variant written as a one-key mapping.
struct Variant<'a> {
    key: &'a Node,
    value: &'a Node,
}

impl<'de, 'a> EnumAccess<'de> for Variant<'a> {
    type Error = DeError;
    type Variant = VariantValue<'a>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), DeError> {
        let tag = seed
            .deserialize(KeyDeserializer { node: self.key })
            .map_err(|e| e.at(self.key.line))?;
        Ok((
            tag,
            VariantValue {
                key: self.key,
                value: self.value,
            },
        ))
    }
}

/// The content of an enum variant written as a one-key mapping.
struct VariantValue<'a> {
    key: &'a Node,
    value: &'a Node,
}

impl VariantValue<'_> {
    fn under(&self, e: DeError) -> DeError {
        e.at(self.value.line)
            .under(Segment::Key(self.key.key_text()))
    }
}

impl<'de, 'a> VariantAccess<'de> for VariantValue<'a> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        match self.value.kind {
            NodeKind::Null => Ok(()),
            _ => Err(self.under(NodeDeserializer::new(self.value).invalid_type(&"unit variant"))),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        seed.deserialize(NodeDeserializer::new(self.value))
            .map_err(|e| self.under(e))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_seq(NodeDeserializer::new(self.value), visitor)
            .map_err(|e| self.under(e))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_map(NodeDeserializer::new(self.value), visitor)
            .map_err(|e| self.under(e))
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
            "line 5: backend.timeout_seconds: invalid type: string \"soon\", expected f64"
        );
        let err = schema_err("instruments:\n  - {name: a, kind: cli}\n  - {name: b, kind: http}\n  - name: 7\n    kind: cli\n");
        assert_eq!(err.path_text(), "instruments[2].name");
        assert_eq!(err.line, Some(4));
        // Out of range for the field's integer type.
        let err = schema_err("instruments:\n  - name: a\n    kind: cli\n    port: 70000\n");
        assert_eq!(err.path_text(), "instruments[0].port");
        assert_eq!(err.line, Some(4));
        assert!(err.message.contains("70000"), "{err}");
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
    fn strings_are_not_numbers_and_numbers_are_not_strings() {
        // As in a score: a quoted number stays text, an unquoted one is not a name.
        assert!(schema_err("backend: {timeout_seconds: '30'}\n")
            .message
            .contains("invalid type: string"));
        assert!(schema_err("env: {A: 1}\n")
            .message
            .contains("invalid type: integer `1`"));
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
