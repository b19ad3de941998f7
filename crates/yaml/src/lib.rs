//! YAML 1.1 loading with PyYAML's `safe_load` resolution rules (score.md §1.2).
//!
//! serde_yaml followed YAML 1.2 and forgot scalar styles, duplicate keys and positions, so we
//! build our own [`Node`] tree from yaml-rust2's event stream: plain scalars are resolved the
//! way PyYAML resolves them (`yes`/`on` booleans, octal `012`, base-60 `1:30`, dates), quoted
//! scalars stay strings, duplicate keys keep the last value, `<<` merge keys are honoured, and
//! every node remembers its line so schema errors can name it. Typed models deserialize
//! straight from the tree ([`de`]), so every YAML file reads like a score.

use std::collections::HashMap;
use std::fmt;

pub mod de;
mod dupes;
mod fast;

pub use de::{from_node, from_str, DeError};
use dupes::Repeat;
pub use dupes::{duplicate_keys, DuplicateKey};

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Largest score file we accept; real scores are well under 1 MiB.
pub const MAX_DOCUMENT_BYTES: usize = 8 * 1024 * 1024;
/// Cap on nodes produced (alias expansion included) so an alias bomb fails fast.
pub const MAX_NODES: usize = 2_000_000;

/// One resolved YAML value with the position where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The resolved value.
    pub kind: NodeKind,
    /// 1-based line of the value.
    pub line: usize,
    /// 1-based column of the value.
    pub col: usize,
}

/// A resolved YAML value.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// `~`, `null`, empty.
    Null,
    /// YAML 1.1 boolean.
    Bool(bool),
    /// Integer (decimal, octal, hex, binary, base 60).
    Int(i64),
    /// Float (incl. `.inf`, `.nan`).
    Float(f64),
    /// String.
    Str(String),
    /// A YAML 1.1 timestamp (`2024-01-01`), kept as written; `str` fields reject it.
    Date(String),
    /// Sequence.
    Seq(Vec<Node>),
    /// Mapping in document order; keys are unique (last one won).
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// The Python type name of this value (used in messages: `got: list`).
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            NodeKind::Null => "NoneType",
            NodeKind::Bool(_) => "bool",
            NodeKind::Int(_) => "int",
            NodeKind::Float(_) => "float",
            NodeKind::Str(_) => "str",
            NodeKind::Date(_) => "date",
            NodeKind::Seq(_) => "list",
            NodeKind::Map(_) => "dict",
        }
    }

    /// Look up a string key in a mapping node.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            NodeKind::Map(entries) => entries
                .iter()
                .find(|(k, _)| matches!(&k.kind, NodeKind::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string value, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Render as a key the way pydantic prints dict keys in locations (`2`, `name`).
    pub fn key_text(&self) -> String {
        match &self.kind {
            NodeKind::Str(s) | NodeKind::Date(s) => s.clone(),
            NodeKind::Int(i) => i.to_string(),
            NodeKind::Bool(b) => if *b { "True" } else { "False" }.to_string(),
            NodeKind::Float(f) => python_float(*f),
            NodeKind::Null => "None".to_string(),
            _ => self.repr(),
        }
    }

    /// Python `repr()` of the value, as pydantic shows it in `input_value=`.
    pub fn repr(&self) -> String {
        let mut out = String::new();
        self.write_repr(&mut out);
        out
    }

    fn write_repr(&self, out: &mut String) {
        match &self.kind {
            NodeKind::Null => out.push_str("None"),
            NodeKind::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
            NodeKind::Int(i) => out.push_str(&i.to_string()),
            NodeKind::Float(f) => out.push_str(&python_float(*f)),
            NodeKind::Str(s) => out.push_str(&python_str_repr(s)),
            NodeKind::Date(s) => {
                let parts: Vec<&str> = s.split('-').collect();
                out.push_str(&format!("datetime.date({})", parts.join(", ")));
            }
            NodeKind::Seq(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write_repr(out);
                }
                out.push(']');
            }
            NodeKind::Map(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    k.write_repr(out);
                    out.push_str(": ");
                    v.write_repr(out);
                }
                out.push('}');
            }
        }
    }
}

/// Python's `repr(float)`.
pub fn python_float(f: f64) -> String {
    if f.is_nan() {
        "nan".into()
    } else if f.is_infinite() {
        if f > 0.0 { "inf" } else { "-inf" }.into()
    } else if f == f.trunc() && f.abs() < 1e16 {
        format!("{f:.1}")
    } else {
        format!("{f}")
    }
}

/// `s` with every control character but tab written out (`\x1b`, `\u{9b}` for C1), for a
/// name taken from a file (a score's key, an instrument's name) put into a message: shown,
/// not obeyed by the terminal (a window title, a screen clear).
pub fn control_escaped(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() && c != '\t') {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            c if c.is_control() && c != '\t' && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() && c != '\t' => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Python's `repr(str)` (single quotes unless the text contains one and no double quote).
pub fn python_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// A YAML document could not be turned into a [`Node`].
#[derive(Debug, Clone, PartialEq)]
pub struct YamlError {
    /// What went wrong, in PyYAML's words where we can.
    pub message: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub col: Option<usize>,
    /// The source line the error points at.
    pub source_line: Option<String>,
}

impl YamlError {
    /// PyYAML-style report: message, then `in "FILE", line L, column C:`, the source line and
    /// a caret under the column.
    pub fn render(&self, file: &std::path::Path) -> String {
        let mut out = self.message.clone();
        if let Some(line) = self.line {
            out.push_str(&format!("\n  in \"{}\", line {line}", file.display()));
            if let Some(col) = self.col {
                out.push_str(&format!(", column {col}"));
            }
            if let Some(src) = &self.source_line {
                out.push_str(&format!(":\n    {src}"));
                if let Some(col) = self.col {
                    out.push_str(&format!("\n    {}^", " ".repeat(col.saturating_sub(1))));
                }
            }
        }
        out
    }
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.col) {
            (Some(l), Some(c)) => write!(f, "{} (line {l}, column {c})", self.message),
            (Some(l), None) => write!(f, "{} (line {l})", self.message),
            _ => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for YamlError {}

/// The line and column (from 1) of the first tab at or after character `from`.
fn first_tab_from(text: &str, from: usize) -> Option<(usize, usize)> {
    let (mut line, mut col) = (1, 1);
    for (i, c) in text.chars().enumerate() {
        if c == '\t' && i >= from {
            return Some((line, col));
        }
        if c == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
    }
    None
}

impl YamlError {
    fn with_source(mut self, text: &str) -> Self {
        if let Some(line) = self.line {
            self.source_line = text.split('\n').nth(line.saturating_sub(1)).map(|l| {
                let l = l.trim_end_matches('\r');
                l.chars().take(200).collect()
            });
        }
        self
    }
}

/// Parse one YAML document. `Ok(None)` means the stream holds no document (empty file).
///
/// The block-style subset scores are written in is read by `fast`, straight from the bytes;
/// anything else (and every error) by yaml-rust2.
pub fn parse(text: &str) -> Result<Option<Node>, YamlError> {
    parse_noting_duplicates(text).map(|(root, _)| root)
}

/// [`parse`], with the keys given twice in one of the document's mappings (PyYAML keeps the
/// last value silently; a score's author is told: [`duplicate_keys`]). Found while parsing,
/// at no cost to a document without any.
pub fn parse_noting_duplicates(text: &str) -> Result<(Option<Node>, Vec<DuplicateKey>), YamlError> {
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(YamlError {
            message: format!(
                "document is {} bytes; scores are limited to {} bytes",
                text.len(),
                MAX_DOCUMENT_BYTES
            ),
            line: None,
            col: None,
            source_line: None,
        });
    }
    if let Some(pos) = text.find('\0') {
        let line = text[..pos].matches('\n').count() + 1;
        return Err(YamlError {
            message: "unacceptable character #x0000: special characters are not allowed".into(),
            line: Some(line),
            col: None,
            source_line: None,
        });
    }
    let (root, repeats) = match fast::parse(text) {
        Some((root, repeats)) => (Some(root), repeats),
        None => reference(text)?,
    };
    let duplicates = dupes::named(root.as_ref(), repeats);
    Ok((root, duplicates))
}

/// The fast reader's tree of `text`, `None` when it leaves `text` to yaml-rust2: exposed for
/// the differential test against [`parse_reference`].
#[doc(hidden)]
pub fn parse_fast(text: &str) -> Option<Node> {
    fast::parse(text).map(|(root, _)| root)
}

/// [`parse`] through yaml-rust2 alone, without the fast reader for the block-style subset
/// (`fast`): the reference the fast reader is checked against (`tests/fast_reader.rs`).
#[doc(hidden)]
pub fn parse_reference(text: &str) -> Result<Option<Node>, YamlError> {
    reference(text).map(|(root, _)| root)
}

/// [`parse_reference`], with the repeated keys' lines (first, repeat).
fn reference(text: &str) -> Result<(Option<Node>, Vec<Repeat>), YamlError> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    let result = parser.load(&mut builder, true);
    if let Some(err) = builder.error.take() {
        return Err(err.with_source(text));
    }
    if let Err(err) = result {
        let mut at = (err.marker().line(), err.marker().col() + 1);
        // yaml-rust2 marks where the scalar it was scanning began ("while scanning a plain
        // scalar, found a tab" at `name: tab`), not the tab: point at the tab.
        if err.info().contains("found a tab") {
            if let Some(tab) = first_tab_from(text, err.marker().index()) {
                at = tab;
            }
        }
        return Err(YamlError {
            message: err.info().to_string(),
            line: Some(at.0),
            col: Some(at.1),
            source_line: None,
        }
        .with_source(text));
    }
    if builder.documents > 1 {
        return Err(YamlError {
            message: "expected a single document in the stream, but found another document".into(),
            line: builder.second_doc_line,
            col: None,
            source_line: None,
        });
    }
    Ok((builder.root, builder.repeats))
}

enum Frame {
    Seq {
        anchor: usize,
        node: Node,
    },
    Map {
        anchor: usize,
        node: Node,
        pending_key: Option<Node>,
        index: KeyIndex,
    },
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    anchors: HashMap<usize, Node>,
    root: Option<Node>,
    documents: usize,
    second_doc_line: Option<usize>,
    nodes: usize,
    error: Option<YamlError>,
    /// Keys given twice in one mapping: (line of the first, line of the repeat).
    repeats: Vec<Repeat>,
}

impl Builder {
    fn fail(&mut self, message: impl Into<String>, mark: Marker) {
        if self.error.is_none() {
            self.error = Some(YamlError {
                message: message.into(),
                line: Some(mark.line()),
                col: Some(mark.col() + 1),
                source_line: None,
            });
        }
    }

    fn count(&mut self, n: usize, mark: Marker) -> bool {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES {
            self.fail(
                format!("document expands to more than {MAX_NODES} values (alias expansion limit)"),
                mark,
            );
            return false;
        }
        true
    }

    fn push_value(&mut self, node: Node, mark: Marker) {
        match self.stack.last_mut() {
            None => {
                if self.root.is_none() {
                    self.root = Some(node);
                }
            }
            Some(Frame::Seq { node: seq, .. }) => {
                if let NodeKind::Seq(items) = &mut seq.kind {
                    items.push(node);
                }
            }
            Some(Frame::Map {
                node: map,
                pending_key,
                index,
                ..
            }) => match pending_key.take() {
                None => {
                    if matches!(node.kind, NodeKind::Seq(_) | NodeKind::Map(_)) {
                        self.fail("while constructing a mapping: found unhashable key", mark);
                        return;
                    }
                    *pending_key = Some(node);
                }
                Some(key) => {
                    if let NodeKind::Map(entries) = &mut map.kind {
                        if let Some(repeat) = index.insert(entries, key, node) {
                            self.repeats.push(repeat);
                        }
                    }
                }
            },
        }
    }
}

fn keys_equal(a: &NodeKind, b: &NodeKind) -> bool {
    // Python dict semantics: 1 == 1.0 == True.
    fn num(k: &NodeKind) -> Option<f64> {
        match k {
            NodeKind::Int(i) => Some(*i as f64),
            NodeKind::Float(f) => Some(*f),
            NodeKind::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
            _ => None,
        }
    }
    match (num(a), num(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Insert with PyYAML's last-wins rule; the key keeps its first position (Python dict).
/// A key already there: `(line of the first, line of this one)`, the repeat a score's author
/// is told of ([`duplicate_keys`]).
fn insert_entry(entries: &mut Vec<(Node, Node)>, key: Node, value: Node) -> Option<Repeat> {
    if let Some(slot) = entries
        .iter_mut()
        .find(|(k, _)| keys_equal(&k.kind, &key.kind))
    {
        slot.1 = value;
        Some((slot.0.line, key.line, slot.0.key_text()))
    } else {
        entries.push((key, value));
        None
    }
}

/// Where a large mapping's keys are, by hash, so PyYAML's last-wins duplicate rule stays
/// linear: the corpus score's `sheet.dependencies` has 515 keys, and scanning the entries for
/// each new key was a visible share of parsing it. Small mappings are scanned as before.
#[derive(Default)]
struct KeyIndex {
    by_hash: HashMap<u64, Vec<usize>>,
    built: bool,
}

impl KeyIndex {
    const FROM_LEN: usize = 16;

    /// [`insert_entry`], in time independent of the mapping's size.
    fn insert(
        &mut self,
        entries: &mut Vec<(Node, Node)>,
        key: Node,
        value: Node,
    ) -> Option<Repeat> {
        if !self.built {
            if entries.len() < Self::FROM_LEN {
                return insert_entry(entries, key, value);
            }
            for (i, (k, _)) in entries.iter().enumerate() {
                if let Some(h) = key_hash(&k.kind) {
                    self.by_hash.entry(h).or_default().push(i);
                }
            }
            self.built = true;
        }
        let Some(h) = key_hash(&key.kind) else {
            // A NaN key equals nothing, not even another NaN (Python dict semantics).
            entries.push((key, value));
            return None;
        };
        let slot = self.by_hash.entry(h).or_default();
        match slot
            .iter()
            .find(|i| keys_equal(&entries[**i].0.kind, &key.kind))
        {
            Some(&i) => {
                entries[i].1 = value;
                Some((entries[i].0.line, key.line, entries[i].0.key_text()))
            }
            None => {
                slot.push(entries.len());
                entries.push((key, value));
                None
            }
        }
    }
}

/// A hash consistent with [`keys_equal`] (numbers by value, so `1`, `1.0` and `true` collide
/// as Python's dict has them); `None` for keys equal to nothing (NaN) or unhashable.
fn key_hash(k: &NodeKind) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = Fnv::default();
    let number = |f: f64| if f == 0.0 { 0 } else { f.to_bits() };
    match k {
        NodeKind::Int(i) => (0u8, number(*i as f64)).hash(&mut h),
        NodeKind::Float(f) if f.is_nan() => return None,
        NodeKind::Float(f) => (0u8, number(*f)).hash(&mut h),
        NodeKind::Bool(b) => (0u8, number(f64::from(u8::from(*b)))).hash(&mut h),
        NodeKind::Null => 1u8.hash(&mut h),
        NodeKind::Str(s) => (2u8, s).hash(&mut h),
        NodeKind::Date(s) => (3u8, s).hash(&mut h),
        NodeKind::Seq(_) | NodeKind::Map(_) => return None,
    }
    Some(h.finish())
}

/// FNV-1a, for tables keyed by a user's own file (a score's keys, its variables' names):
/// not an attacker's input to a long-lived table, and SipHash was a visible share of loading
/// and rendering a score with a 515-key mapping.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Apply YAML 1.1 `<<` merge keys: merged entries come first, explicit keys override.
fn apply_merge(entries: Vec<(Node, Node)>) -> Result<Vec<(Node, Node)>, String> {
    if !entries
        .iter()
        .any(|(k, _)| matches!(&k.kind, NodeKind::Str(s) if s == "<<"))
    {
        return Ok(entries);
    }
    let mut merged: Vec<(Node, Node)> = Vec::new();
    let mut own: Vec<(Node, Node)> = Vec::new();
    for (k, v) in entries {
        if matches!(&k.kind, NodeKind::Str(s) if s == "<<") {
            let sources = match v.kind {
                NodeKind::Map(m) => vec![m],
                NodeKind::Seq(items) => {
                    let mut out = Vec::new();
                    for item in items {
                        match item.kind {
                            NodeKind::Map(m) => out.push(m),
                            _ => {
                                return Err("while constructing a mapping: expected a mapping for merging".into())
                            }
                        }
                    }
                    out
                }
                _ => {
                    return Err(
                        "while constructing a mapping: expected a mapping or list of mappings for merging"
                            .into(),
                    )
                }
            };
            for source in sources {
                for (mk, mv) in source {
                    if !merged.iter().any(|(k2, _)| keys_equal(&k2.kind, &mk.kind)) {
                        merged.push((mk, mv));
                    }
                }
            }
        } else {
            own.push((k, v));
        }
    }
    for (k, v) in own {
        insert_entry(&mut merged, k, v);
    }
    Ok(merged)
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let line = mark.line();
        let col = mark.col() + 1;
        match ev {
            Event::DocumentStart => {
                self.documents += 1;
                if self.documents == 2 {
                    self.second_doc_line = Some(line);
                }
            }
            Event::Scalar(value, style, anchor, tag) => {
                if !self.count(1, mark) {
                    return;
                }
                let kind = match resolve_scalar(value, style, tag.as_ref()) {
                    Ok(kind) => kind,
                    Err(msg) => {
                        self.fail(msg, mark);
                        return;
                    }
                };
                let node = Node { kind, line, col };
                if anchor > 0 {
                    self.anchors.insert(anchor, node.clone());
                }
                self.push_value(node, mark);
            }
            Event::SequenceStart(anchor, _) => {
                if !self.count(1, mark) {
                    return;
                }
                self.stack.push(Frame::Seq {
                    anchor,
                    node: Node {
                        kind: NodeKind::Seq(Vec::new()),
                        line,
                        col,
                    },
                });
            }
            Event::MappingStart(anchor, _) => {
                if !self.count(1, mark) {
                    return;
                }
                self.stack.push(Frame::Map {
                    anchor,
                    node: Node {
                        kind: NodeKind::Map(Vec::new()),
                        line,
                        col,
                    },
                    pending_key: None,
                    index: KeyIndex::default(),
                });
            }
            Event::SequenceEnd => {
                if let Some(Frame::Seq { anchor, node }) = self.stack.pop() {
                    if anchor > 0 {
                        self.anchors.insert(anchor, node.clone());
                    }
                    self.push_value(node, mark);
                }
            }
            Event::MappingEnd => {
                if let Some(Frame::Map {
                    anchor, mut node, ..
                }) = self.stack.pop()
                {
                    if let NodeKind::Map(entries) =
                        std::mem::replace(&mut node.kind, NodeKind::Null)
                    {
                        match apply_merge(entries) {
                            Ok(entries) => node.kind = NodeKind::Map(entries),
                            Err(msg) => {
                                self.fail(msg, mark);
                                return;
                            }
                        }
                    }
                    if anchor > 0 {
                        self.anchors.insert(anchor, node.clone());
                    }
                    self.push_value(node, mark);
                }
            }
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(node) => {
                    if !self.count(node_size(&node), mark) {
                        return;
                    }
                    self.push_value(node, mark);
                }
                None => self.fail("found undefined alias", mark),
            },
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
}

fn node_size(node: &Node) -> usize {
    match &node.kind {
        NodeKind::Seq(items) => 1 + items.iter().map(node_size).sum::<usize>(),
        NodeKind::Map(entries) => {
            1 + entries
                .iter()
                .map(|(k, v)| node_size(k) + node_size(v))
                .sum::<usize>()
        }
        _ => 1,
    }
}

fn resolve_scalar(
    value: String,
    style: TScalarStyle,
    tag: Option<&Tag>,
) -> Result<NodeKind, String> {
    if let Some(tag) = tag {
        let explicit = if tag.handle == "!!" {
            tag.suffix.clone()
        } else if tag.handle == "!" && tag.suffix.is_empty() {
            return Ok(NodeKind::Str(value));
        } else {
            let full = format!("{}{}", tag.handle, tag.suffix);
            full.strip_prefix("tag:yaml.org,2002:")
                .map(str::to_string)
                .unwrap_or(full)
        };
        return match explicit.as_str() {
            "str" => Ok(NodeKind::Str(value)),
            "null" => Ok(NodeKind::Null),
            "bool" => resolve_bool(&value)
                .map(NodeKind::Bool)
                .ok_or_else(|| format!("invalid boolean value: {value}")),
            "int" => resolve_int(&value)
                .map(NodeKind::Int)
                .ok_or_else(|| format!("invalid literal for int(): '{value}'")),
            "float" => resolve_float(&value)
                .or_else(|| resolve_int(&value).map(|i| i as f64))
                .map(NodeKind::Float)
                .ok_or_else(|| format!("could not convert string to float: '{value}'")),
            other => Err(format!(
                "could not determine a constructor for the tag '!!{other}'"
            )),
        };
    }
    if style != TScalarStyle::Plain {
        return Ok(NodeKind::Str(value));
    }
    Ok(resolve_plain(value))
}

/// PyYAML's implicit resolvers for a plain scalar.
pub fn resolve_plain(value: String) -> NodeKind {
    let v = value.as_str();
    if matches!(v, "" | "~" | "null" | "Null" | "NULL") {
        return NodeKind::Null;
    }
    if let Some(b) = resolve_bool(v) {
        return NodeKind::Bool(b);
    }
    if let Some(i) = resolve_int(v) {
        return NodeKind::Int(i);
    }
    if let Some(f) = resolve_float(v) {
        return NodeKind::Float(f);
    }
    if is_timestamp(v) {
        return NodeKind::Date(value);
    }
    NodeKind::Str(value)
}

fn resolve_bool(v: &str) -> Option<bool> {
    match v {
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Some(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

fn split_sign(v: &str) -> (i64, &str) {
    if let Some(rest) = v.strip_prefix('-') {
        (-1, rest)
    } else if let Some(rest) = v.strip_prefix('+') {
        (1, rest)
    } else {
        (1, v)
    }
}

fn resolve_int(v: &str) -> Option<i64> {
    let (sign, body) = split_sign(v);
    if body.is_empty() {
        return None;
    }
    // Most integers in a score are plain decimals (`2`, `3600`): read them without the
    // underscore-stripping copy below. A leading 0 (octal) or an overflow takes the long way.
    if body.len() < 19 && body.as_bytes()[0] != b'0' && body.bytes().all(|b| b.is_ascii_digit()) {
        return body.parse::<i64>().ok().map(|n| sign * n);
    }
    let digits = |s: &str, radix: u32| -> Option<i64> {
        let cleaned: String = s.chars().filter(|c| *c != '_').collect();
        if cleaned.is_empty() {
            return None;
        }
        i64::from_str_radix(&cleaned, radix).ok()
    };
    let all = |s: &str, f: fn(char) -> bool| !s.is_empty() && s.chars().all(|c| f(c) || c == '_');
    if let Some(bin) = body.strip_prefix("0b") {
        if all(bin, |c| c == '0' || c == '1') {
            return digits(bin, 2).map(|n| sign * n);
        }
        return None;
    }
    if let Some(hex) = body.strip_prefix("0x") {
        if all(hex, |c| c.is_ascii_hexdigit()) {
            return digits(hex, 16).map(|n| sign * n);
        }
        return None;
    }
    if body == "0" {
        return Some(0);
    }
    if let Some(oct) = body.strip_prefix('0') {
        if all(oct, |c| ('0'..='7').contains(&c)) {
            return digits(oct, 8).map(|n| sign * n);
        }
        return None;
    }
    let first = body.chars().next()?;
    if !('1'..='9').contains(&first) {
        return None;
    }
    if body.contains(':') {
        // Base 60: `1:30` is 90.
        let mut parts = body.split(':');
        let head = parts.next()?;
        if !all(head, |c| c.is_ascii_digit()) {
            return None;
        }
        let mut total = digits(head, 10)?;
        for part in parts {
            if part.is_empty() || part.len() > 2 || !part.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let n: i64 = part.parse().ok()?;
            if part.len() == 2 && n > 59 {
                return None;
            }
            total = total.checked_mul(60)?.checked_add(n)?;
        }
        return Some(sign * total);
    }
    if all(body, |c| c.is_ascii_digit()) {
        return digits(body, 10).map(|n| sign * n);
    }
    None
}

/// Whether `v` matches PyYAML's float pattern, [`FLOAT_PATTERN`], checked byte by byte:
/// building that regex cost more than loading a small score.
fn is_float(v: &[u8]) -> bool {
    fn digits(v: &[u8]) -> usize {
        v.iter()
            .take_while(|b| b.is_ascii_digit() || **b == b'_')
            .count()
    }
    // Nothing, or `[eE][-+][0-9]+`.
    fn exponent(v: &[u8]) -> bool {
        match v {
            [] => true,
            [b'e' | b'E', b'-' | b'+', rest @ ..] => {
                !rest.is_empty() && rest.iter().all(u8::is_ascii_digit)
            }
            _ => false,
        }
    }
    let (signed, body) = match v {
        [b'-' | b'+', rest @ ..] => (true, rest),
        _ => (false, v),
    };
    match body {
        [b'.', rest @ ..] => {
            matches!(rest, b"inf" | b"Inf" | b"INF")
                || (!signed && matches!(rest, b"nan" | b"NaN" | b"NAN"))
                || (!signed && {
                    let n = digits(rest);
                    n > 0 && exponent(&rest[n..])
                })
        }
        [b'0'..=b'9', rest @ ..] => {
            let n = digits(rest);
            match &rest[n..] {
                [b'.', after @ ..] => exponent(&after[digits(after)..]),
                _ => false,
            }
        }
        _ => false,
    }
}

/// PyYAML's float resolver as a regex (what [`is_float`] matches; its tests compare them).
#[cfg(test)]
const FLOAT_PATTERN: &str = r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$";

fn resolve_float(v: &str) -> Option<f64> {
    // PyYAML's float resolver (YAML 1.1): a `.` is required and exponents need a sign.
    // Every form it accepts starts with a sign, a digit or a dot and has a dot: most plain
    // scalars are words and never reach the match.
    let starts_right = matches!(v.as_bytes().first(), Some(b'-' | b'+' | b'.' | b'0'..=b'9'));
    if !starts_right || !v.contains('.') || !is_float(v.as_bytes()) {
        return None;
    }
    let lower = v.to_ascii_lowercase();
    if lower.ends_with(".inf") {
        return Some(if v.starts_with('-') {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if lower == ".nan" {
        return Some(f64::NAN);
    }
    let mut cleaned: String = v.chars().filter(|c| *c != '_').collect();
    if let Some(i) = cleaned.find(['e', 'E']) {
        if cleaned[..i].ends_with('.') {
            cleaned.insert(i, '0');
        }
    } else if cleaned.ends_with('.') {
        cleaned.push('0');
    }
    cleaned.parse::<f64>().ok()
}

fn is_timestamp(v: &str) -> bool {
    let b = v.as_bytes();
    if b.len() < 8 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let rest = &v[5..];
    let mut parts = rest.splitn(2, '-');
    let month = parts.next().unwrap_or("");
    let tail = parts.next().unwrap_or("");
    if month.is_empty() || month.len() > 2 || !month.bytes().all(|c| c.is_ascii_digit()) {
        return false;
    }
    let day: String = tail.chars().take_while(char::is_ascii_digit).collect();
    if day.is_empty() || day.len() > 2 {
        return false;
    }
    let after = &tail[day.len()..];
    // Date only, or a datetime with `T`/`t`/space separator.
    after.is_empty() || after.starts_with(['T', 't', ' ', '\t'])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    /// The byte-by-byte float check accepts exactly what PyYAML's pattern accepts.
    #[test]
    fn float_check_matches_the_pattern() {
        let re = regex::Regex::new(super::FLOAT_PATTERN).unwrap();
        let pieces = [
            "-", "+", ".", "0", "7", "_", "e", "E", "inf", "Inf", "INF", "nan", "NaN", "NAN", "x",
            " ", "1_0", "e+", "e-",
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut floats = 0;
        for _ in 0..50_000 {
            let text: String = (0..1 + next(6))
                .map(|_| pieces[next(pieces.len())])
                .collect();
            let want = re.is_match(&text);
            floats += usize::from(want);
            assert_eq!(super::is_float(text.as_bytes()), want, "{text:?}");
        }
        assert!(floats > 200, "only {floats} floats among the samples");
    }

    use super::*;

    fn scalar(text: &str) -> NodeKind {
        let node = parse(&format!("k: {text}\n")).unwrap().unwrap();
        node.get("k").unwrap().kind.clone()
    }

    #[test]
    fn yaml_11_scalars_resolve_like_pyyaml() {
        assert_eq!(scalar("yes"), NodeKind::Bool(true));
        assert_eq!(scalar("Off"), NodeKind::Bool(false));
        assert_eq!(scalar("y"), NodeKind::Str("y".into()));
        assert_eq!(scalar("'yes'"), NodeKind::Str("yes".into()));
        assert_eq!(scalar("012"), NodeKind::Int(10));
        assert_eq!(scalar("0o17"), NodeKind::Str("0o17".into()));
        assert_eq!(scalar("0x1F"), NodeKind::Int(31));
        assert_eq!(scalar("1_000"), NodeKind::Int(1000));
        assert_eq!(scalar("1:30"), NodeKind::Int(90));
        assert_eq!(scalar("1e3"), NodeKind::Str("1e3".into()));
        assert_eq!(scalar("1.0e+3"), NodeKind::Float(1000.0));
        assert_eq!(scalar("1.5"), NodeKind::Float(1.5));
        assert_eq!(scalar(".inf"), NodeKind::Float(f64::INFINITY));
        assert_eq!(scalar("~"), NodeKind::Null);
        assert_eq!(scalar(""), NodeKind::Null);
        assert_eq!(scalar("2024-01-01"), NodeKind::Date("2024-01-01".into()));
        assert_eq!(scalar("!!str 5"), NodeKind::Str("5".into()));
        assert_eq!(scalar("-3"), NodeKind::Int(-3));
        assert_eq!(scalar("hello"), NodeKind::Str("hello".into()));
    }

    #[test]
    fn duplicate_keys_last_wins_and_int_keys_survive() {
        let node = parse("a: 1\na: 2\n2: x\n").unwrap().unwrap();
        let NodeKind::Map(entries) = &node.kind else {
            panic!("not a map")
        };
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].1.kind, NodeKind::Int(2));
        assert_eq!(entries[1].0.kind, NodeKind::Int(2));
        assert_eq!(entries[1].0.line, 3);
    }

    #[test]
    fn large_mappings_keep_python_dict_key_equality() {
        // Past KeyIndex::FROM_LEN keys: `1`, `1.0` and `true` are one key, `'1'` and NaN are
        // not, and a duplicate keeps its first position with the last value.
        let mut text: String = (0..40).map(|i| format!("k{i}: {i}\n")).collect();
        text.push_str("1: a\n'1': b\n.nan: c\n1.0: d\ntrue: e\n.nan: f\nk3: g\n0: h\n-0.0: i\n");
        let node = parse(&text).unwrap().unwrap();
        let NodeKind::Map(entries) = &node.kind else {
            panic!("not a map")
        };
        let mut expected: Vec<(Node, Node)> = Vec::new();
        for line in text.lines() {
            let (k, v) = line.split_once(": ").unwrap();
            let one = parse(&format!("{k}: {v}\n")).unwrap().unwrap();
            let NodeKind::Map(mut kv) = one.kind else {
                panic!("not a map")
            };
            let (key, value) = kv.remove(0);
            insert_entry(&mut expected, key, value);
        }
        let kinds = |e: &[(Node, Node)]| -> Vec<(String, String)> {
            e.iter().map(|(k, v)| (k.repr(), v.repr())).collect()
        };
        assert_eq!(kinds(entries), kinds(&expected));
        assert_eq!(entries.len(), 45);
        assert_eq!(entries[3].1.kind, NodeKind::Str("g".into()));
    }

    #[test]
    fn merge_keys_and_aliases() {
        let node = parse("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\n")
            .unwrap()
            .unwrap();
        let other = node.get("other").unwrap();
        assert_eq!(other.get("x").unwrap().kind, NodeKind::Int(1));
        assert_eq!(other.get("y").unwrap().kind, NodeKind::Int(3));
    }

    #[test]
    fn alias_bomb_is_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let err = parse(&text).unwrap_err();
        assert!(err.message.contains("alias expansion limit"), "{err}");
    }

    #[test]
    fn empty_and_bad_documents() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("# only a comment\n").unwrap(), None);
        assert!(parse("a: [1, 2\nb: 3\n").is_err());
        assert!(parse("a: 1\n---\nb: 2\n").is_err());
        assert!(parse("\0\x01binary").is_err());
        assert!(parse("? [1, 2]\n: x\n").is_err());
    }
}
