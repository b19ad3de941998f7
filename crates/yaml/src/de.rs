//! Typed models straight from a loaded [`Node`]: one `serde::Deserializer` over the tree, read
//! with one of two policies.
//!
//! The loader has already resolved every scalar with YAML 1.1's rules (`yes` is `true`, `012`
//! is 10), so every typed model reads a file the way a score reads it, and going through the
//! tree instead of re-parsing text keeps the user's line numbers. What differs between files
//! is only how a value that does not fit is taken and worded, so that is a [`Policy`]:
//! - the strict one (this module's [`from_node`], [`from_str`]) for conductor.yaml,
//!   instrument profiles and placements: a value is taken as written, and an error names the
//!   field path (`socket.backlog`, `models[2].name`), the line and serde's words;
//! - [`lax`] for scores: pydantic v2's "lax mode" coercions (`'3'` → 3, `yes` → true) and
//!   pydantic's error entries (location, error type, message, input), because upstream's
//!   `validate` output is what users and the conformance corpus compare against.

use std::borrow::Cow;
use std::marker::PhantomData;

use serde::de::{
    self, DeserializeSeed, EnumAccess, Expected, IntoDeserializer, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

use crate::{Node, NodeKind};

pub mod lax;
mod strict;

pub use strict::{from_node, from_str, DeError, Error, Segment};

/// What a policy makes of a node the model asks for as a bool or a number.
pub(crate) enum Read<T> {
    /// This value, coerced by the policy's table.
    Value(T),
    /// The node as written: the model's visitor gets it as it is and decides.
    AsWritten,
}

/// The kinds of value whose misfit the deserializer reports itself (scalars' misfits come
/// from the policy's coercions or, as written, from the model's visitor).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Want {
    /// `null` (`()`, unit structs and variants).
    Unit,
    /// A sequence (lists, tuples).
    Seq,
    /// A mapping for a map type.
    Map,
    /// A mapping for a struct.
    Struct,
    /// One of an enum's variant names.
    Variant(&'static [&'static str]),
}

/// How a kind of file reads its values and words what does not fit: the one thing a score
/// and a conductor.yaml read differently. The deserializer calls these and knows nothing
/// else of either.
pub(crate) trait Policy: Sized {
    /// The error while it travels from the misfit up to the root.
    type Error: de::Error;
    /// A free-form mapping (`deserialize_any`: `serde_json::Value`, …) hands its keys over as
    /// their text (`{1: a}` is `{"1": "a"}`).
    const TEXT_KEYS: bool;
    /// An enum may be written as a one-key mapping (`{slurm: {partition: x}}`).
    const MAP_VARIANTS: bool;

    /// A bool field's value.
    fn bool(node: &Node) -> Result<Read<bool>, Self::Error>;
    /// An integer field's value (range checks stay with the model's visitor).
    fn int(node: &Node) -> Result<Read<i64>, Self::Error>;
    /// A float field's value.
    fn float(node: &Node) -> Result<Read<f64>, Self::Error>;
    /// A text field's value: never a number or a bool.
    fn text<'a>(node: &'a Node, exp: &dyn Expected) -> Result<&'a str, Self::Error>;
    /// A field name (a struct's mapping key).
    fn name<'a>(node: &'a Node, exp: &dyn Expected) -> Result<Cow<'a, str>, Self::Error>;
    /// `node` is not the `want` the model asked for.
    fn misfit(node: &Node, want: Want, exp: &dyn Expected) -> Self::Error;
    /// Give `error` the place of the node it passes on its way up (the innermost place is the
    /// useful one; a policy keeps what it needs of the outer ones).
    fn locate(error: Self::Error, loc: &Loc<'_>, node: &Node) -> Self::Error;
    /// Give a mapping key's error its place: `map` is the mapping's place, `part` the key's
    /// text, `value` the value under it.
    fn locate_key(
        error: Self::Error,
        map: &Loc<'_>,
        part: &str,
        key: &Node,
        value: &Node,
    ) -> Self::Error;
}

/// Where a node sits: a chain of borrowed parts back to the root, turned into a policy's
/// path only when an error is reported (building it for every node was most of the
/// allocation in loading a large score).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Loc<'p> {
    /// The location the caller started from.
    Root(&'p [String]),
    /// A list item.
    Index(&'p Loc<'p>, usize),
    /// A mapping value under its key.
    Key(&'p Loc<'p>, &'p str),
    /// A mapping key itself (pydantic's `key.[key]`; no part of a strict path).
    KeyOf(&'p Loc<'p>, &'p str),
}

/// A deserializer positioned on one node, reading it with policy `P`.
pub(crate) struct NodeDe<'a, 'p, P> {
    node: &'a Node,
    path: Loc<'p>,
    policy: PhantomData<P>,
}

impl<'a, 'p, P: Policy> NodeDe<'a, 'p, P> {
    /// Deserialize `node`, found at `path`.
    pub(crate) fn new(node: &'a Node, path: Loc<'p>) -> Self {
        NodeDe {
            node,
            path,
            policy: PhantomData,
        }
    }

    fn locate(&self, error: P::Error) -> P::Error {
        P::locate(error, &self.path, self.node)
    }

    fn misfit(&self, want: Want, exp: &dyn Expected) -> P::Error {
        self.locate(P::misfit(self.node, want, exp))
    }

    fn visit_seq<'de, V: Visitor<'de>>(
        &self,
        items: &'de [Node],
        visitor: V,
    ) -> Result<V::Value, P::Error> {
        let mut access = SeqAcc::<P> {
            items: items.iter(),
            index: 0,
            path: &self.path,
            policy: PhantomData,
        };
        let value = visitor.visit_seq(&mut access).map_err(|e| self.locate(e))?;
        if access.items.len() > 0 {
            // A tuple shorter than the list: the rest would be dropped unread.
            return Err(self.locate(de::Error::invalid_length(items.len(), &"fewer elements")));
        }
        Ok(value)
    }

    fn visit_map<'de, V: Visitor<'de>>(
        &self,
        entries: &'de [(Node, Node)],
        text_keys: bool,
        visitor: V,
    ) -> Result<V::Value, P::Error> {
        visitor
            .visit_map(MapAcc::<P> {
                entries: entries.iter(),
                value: None,
                path: &self.path,
                text_keys,
                policy: PhantomData,
            })
            .map_err(|e| self.locate(e))
    }
}

impl<'de, P: Policy> NodeDe<'de, '_, P> {
    /// A bool or number: the policy's coercion handed to `visit`, or the node as written.
    fn scalar<V: Visitor<'de>, T>(
        self,
        read: fn(&Node) -> Result<Read<T>, P::Error>,
        visitor: V,
        visit: fn(V, T) -> Result<V::Value, P::Error>,
    ) -> Result<V::Value, P::Error> {
        match read(self.node).map_err(|e| self.locate(e))? {
            Read::Value(v) => visit(visitor, v).map_err(|e| self.locate(e)),
            Read::AsWritten => de::Deserializer::deserialize_any(self, visitor),
        }
    }

    /// A mapping for a map or (`want`) a struct.
    fn mapping<V: Visitor<'de>>(self, want: Want, visitor: V) -> Result<V::Value, P::Error> {
        match &self.node.kind {
            NodeKind::Map(entries) => self.visit_map(entries, false, visitor),
            _ => Err(self.misfit(want, &visitor)),
        }
    }
}

/// The integer requests, all read as `i64` (the model's visitor checks the range).
macro_rules! ints {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
                self.scalar(P::int, visitor, V::visit_i64)
            }
        )*
    };
}

impl<'de, P: Policy> de::Deserializer<'de> for NodeDe<'de, '_, P> {
    type Error = P::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        let r = match &self.node.kind {
            NodeKind::Null => visitor.visit_unit(),
            NodeKind::Bool(b) => visitor.visit_bool(*b),
            NodeKind::Int(i) => visitor.visit_i64(*i),
            NodeKind::Float(f) => visitor.visit_f64(*f),
            // A date stays the text it was written as (PyYAML would build a `date`; no model
            // of ours has a date field).
            NodeKind::Str(s) | NodeKind::Date(s) => visitor.visit_borrowed_str(s),
            NodeKind::Seq(items) => return self.visit_seq(items, visitor),
            NodeKind::Map(entries) => return self.visit_map(entries, P::TEXT_KEYS, visitor),
        };
        r.map_err(|e| self.locate(e))
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        self.scalar(P::bool, visitor, V::visit_bool)
    }

    ints! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        self.scalar(P::float, visitor, V::visit_f64)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        let s = P::text(self.node, &visitor).map_err(|e| self.locate(e))?;
        visitor.visit_borrowed_str(s).map_err(|e| self.locate(e))
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        if matches!(self.node.kind, NodeKind::Null) {
            visitor.visit_none()
        } else {
            let (path, node) = (self.path, self.node);
            visitor
                .visit_some(self)
                .map_err(|e| P::locate(e, &path, node))
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        match self.node.kind {
            NodeKind::Null => visitor.visit_unit().map_err(|e| self.locate(e)),
            _ => Err(self.misfit(Want::Unit, &visitor)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, P::Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, P::Error> {
        let (path, node) = (self.path, self.node);
        visitor
            .visit_newtype_struct(self)
            .map_err(|e| P::locate(e, &path, node))
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        match &self.node.kind {
            NodeKind::Seq(items) => self.visit_seq(items, visitor),
            _ => Err(self.misfit(Want::Seq, &visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, P::Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, P::Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        self.mapping(Want::Map, visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, P::Error> {
        self.mapping(Want::Struct, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, P::Error> {
        match &self.node.kind {
            // A unit variant by name: `kind: cli`.
            NodeKind::Str(s) => {
                let de: de::value::StrDeserializer<'_, P::Error> = s.as_str().into_deserializer();
                visitor.visit_enum(de).map_err(|e| self.locate(e))
            }
            // Any other variant as a one-key mapping: `{slurm: {partition: x}}`.
            NodeKind::Map(entries) if P::MAP_VARIANTS && entries.len() == 1 => {
                let (key, value) = &entries[0];
                let part = key.key_text();
                visitor
                    .visit_enum(Variant::<P> {
                        key,
                        value,
                        part: &part,
                        path: &self.path,
                        policy: PhantomData,
                    })
                    .map_err(|e| self.locate(e))
            }
            _ => Err(self.misfit(Want::Variant(variants), &visitor)),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        // Not located here: the mapping that holds the key places a field name's error.
        match P::name(self.node, &visitor)? {
            Cow::Borrowed(s) => visitor.visit_borrowed_str(s),
            Cow::Owned(s) => visitor.visit_string(s),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, P::Error> {
        visitor.visit_unit()
    }
}

/// The items of a sequence node; an item's error gets its index in the path.
struct SeqAcc<'a, 'p, P> {
    items: std::slice::Iter<'a, Node>,
    index: usize,
    path: &'p Loc<'p>,
    policy: PhantomData<P>,
}

impl<'de, P: Policy> SeqAccess<'de> for SeqAcc<'de, '_, P> {
    type Error = P::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, P::Error> {
        let Some(node) = self.items.next() else {
            return Ok(None);
        };
        let path = Loc::Index(self.path, self.index);
        self.index += 1;
        seed.deserialize(NodeDe::<P>::new(node, path))
            .map(Some)
            .map_err(|e| P::locate(e, &path, node))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// The entries of a mapping node; a value's error gets its key in the path, a key's error
/// (an unknown field) the key's line.
struct MapAcc<'a, 'p, P> {
    entries: std::slice::Iter<'a, (Node, Node)>,
    /// The entry whose key was just read: its key and the key's text.
    value: Option<(&'a Node, &'a Node, Cow<'a, str>)>,
    path: &'p Loc<'p>,
    /// Keys go to the model as their text (see [`Policy::TEXT_KEYS`]).
    text_keys: bool,
    policy: PhantomData<P>,
}

impl<'de, P: Policy> MapAccess<'de> for MapAcc<'de, '_, P> {
    type Error = P::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, P::Error> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        let part = match &key.kind {
            NodeKind::Str(s) | NodeKind::Date(s) => Cow::Borrowed(s.as_str()),
            _ => Cow::Owned(key.key_text()),
        };
        let result = if self.text_keys {
            let de: de::value::StrDeserializer<'_, P::Error> = part.as_ref().into_deserializer();
            seed.deserialize(de)
        } else {
            seed.deserialize(NodeDe::<P>::new(key, Loc::KeyOf(self.path, &part)))
        };
        let result = result.map_err(|e| P::locate_key(e, self.path, &part, key, value));
        self.value = Some((key, value, part));
        result.map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, P::Error> {
        let Some((key, node, part)) = self.value.take() else {
            return Err(de::Error::custom(
                "a mapping value was asked for before its key",
            ));
        };
        let path = Loc::Key(self.path, &part);
        seed.deserialize(NodeDe::<P>::new(node, path))
            // A value without a line of its own (a merged default) takes its key's.
            .map_err(|e| P::locate(P::locate(e, &path, node), &path, key))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An enum variant written as a one-key mapping.
struct Variant<'a, 'p, P> {
    key: &'a Node,
    value: &'a Node,
    /// The key's text: the variant's part of the path.
    part: &'p str,
    /// The enum's place.
    path: &'p Loc<'p>,
    policy: PhantomData<P>,
}

impl<'de, 'p, P: Policy> EnumAccess<'de> for Variant<'de, 'p, P> {
    type Error = P::Error;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self), P::Error> {
        let at = Loc::KeyOf(self.path, self.part);
        let tag = seed
            .deserialize(NodeDe::<P>::new(self.key, at))
            .map_err(|e| P::locate(e, &at, self.key))?;
        Ok((tag, self))
    }
}

impl<'de, P: Policy> Variant<'de, '_, P> {
    /// Read the variant's content with `read`, its errors placed under the variant's name.
    fn content<T>(
        &self,
        read: impl FnOnce(NodeDe<'de, '_, P>) -> Result<T, P::Error>,
    ) -> Result<T, P::Error> {
        let path = Loc::Key(self.path, self.part);
        read(NodeDe::new(self.value, path)).map_err(|e| P::locate(e, &path, self.value))
    }
}

impl<'de, P: Policy> VariantAccess<'de> for Variant<'de, '_, P> {
    type Error = P::Error;

    fn unit_variant(self) -> Result<(), P::Error> {
        self.content(|de| match de.node.kind {
            NodeKind::Null => Ok(()),
            _ => Err(de.misfit(Want::Unit, &"unit variant")),
        })
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, P::Error> {
        self.content(|de| seed.deserialize(de))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, P::Error> {
        self.content(|de| de::Deserializer::deserialize_seq(de, visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, P::Error> {
        self.content(|de| de::Deserializer::deserialize_map(de, visitor))
    }
}
