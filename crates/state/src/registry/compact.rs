//! A sheet's state document as the registry stores it, serialized straight to its JSON text:
//! the fields of the struct in order, each written unless it is null, an empty list or one
//! of the fields the row keeps in columns of its own.
//!
//! Before (issue 24), the document was built as a `serde_json::Value` tree first — a map of
//! ~60 keys and values, ~110 allocations per sheet written — then filtered and printed. The
//! text is the same byte for byte: each field's value is printed by serde_json into a
//! scratch buffer, and a value that printed as `null` or `[]` (what the tree's filter
//! dropped: `None`, unit, a non-finite float, an empty sequence) is left out.

use serde::ser::{self, Impossible, Serialize, SerializeStruct, Serializer};

/// `value` (a struct) as a JSON object without its null and empty-list fields and without
/// the fields named in `skip`.
pub(super) fn to_string<T: Serialize>(value: &T, skip: &[&str]) -> serde_json::Result<String> {
    let mut doc = Doc {
        out: Vec::with_capacity(512),
        scratch: Vec::with_capacity(128),
        skip,
        fields: 0,
    };
    value.serialize(&mut doc)?;
    // serde_json wrote the values and the keys are `&'static str` field names escaped by
    // it too: the text is UTF-8.
    String::from_utf8(doc.out).map_err(|e| ser::Error::custom(e.to_string()))
}

/// The document being written.
struct Doc<'s> {
    out: Vec<u8>,
    scratch: Vec<u8>,
    skip: &'s [&'s str],
    fields: usize,
}

impl SerializeStruct for &mut Doc<'_> {
    type Ok = ();
    type Error = serde_json::Error;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Self::Error> {
        if self.skip.contains(&key) {
            return Ok(());
        }
        self.scratch.clear();
        serde_json::to_writer(&mut self.scratch, value)?;
        if self.scratch == b"null" || self.scratch == b"[]" {
            return Ok(());
        }
        self.out.push(if self.fields == 0 { b'{' } else { b',' });
        serde_json::to_writer(&mut self.out, key)?;
        self.out.push(b':');
        self.out.extend_from_slice(&self.scratch);
        self.fields += 1;
        Ok(())
    }

    fn end(self) -> Result<(), Self::Error> {
        if self.fields == 0 {
            self.out.push(b'{');
        }
        self.out.push(b'}');
        Ok(())
    }
}

/// Anything but a struct is refused: the registry writes only sheet documents this way.
fn not_a_struct() -> serde_json::Error {
    ser::Error::custom("a sheet document must be a struct")
}

impl<'a, 's> Serializer for &'a mut Doc<'s> {
    type Ok = ();
    type Error = serde_json::Error;
    type SerializeSeq = Impossible<(), serde_json::Error>;
    type SerializeTuple = Impossible<(), serde_json::Error>;
    type SerializeTupleStruct = Impossible<(), serde_json::Error>;
    type SerializeTupleVariant = Impossible<(), serde_json::Error>;
    type SerializeMap = Impossible<(), serde_json::Error>;
    type SerializeStruct = &'a mut Doc<'s>;
    type SerializeStructVariant = Impossible<(), serde_json::Error>;

    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, Self::Error> {
        Ok(self)
    }

    fn serialize_bool(self, _: bool) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_i8(self, _: i8) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_i16(self, _: i16) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_i32(self, _: i32) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_i64(self, _: i64) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_u8(self, _: u8) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_u16(self, _: u16) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_u32(self, _: u32) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_u64(self, _: u64) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_f32(self, _: f32) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_f64(self, _: f64) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_char(self, _: char) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_str(self, _: &str) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_none(self) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_unit(self) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Self::Error> {
        Err(not_a_struct())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Self::Error> {
        Err(not_a_struct())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::to_string;
    use serde::Serialize;
    use serde_json::Value;

    /// The document as the registry wrote it before: a `Value` tree, filtered.
    fn through_a_tree<T: Serialize>(value: &T, skip: &[&str]) -> String {
        let mut doc = serde_json::to_value(value).unwrap();
        if let Value::Object(fields) = &mut doc {
            fields.retain(|k, v| {
                !(v.is_null()
                    || v.as_array().is_some_and(Vec::is_empty)
                    || skip.contains(&k.as_str()))
            });
        }
        serde_json::to_string(&doc).unwrap()
    }

    #[derive(Serialize, Default)]
    struct Sample {
        num: u32,
        gone: Option<String>,
        text: Option<String>,
        empty: Vec<String>,
        list: Vec<String>,
        nan: f64,
        ratio: f64,
        nested: Option<Inner>,
        column: Option<u32>,
        flag: bool,
        #[serde(skip_serializing_if = "is_zero")]
        skipped: u32,
    }

    #[derive(Serialize, Default)]
    struct Inner {
        a: Option<u8>,
        b: Vec<u8>,
        c: std::collections::BTreeMap<u32, String>,
    }

    fn is_zero(n: &u32) -> bool {
        *n == 0
    }

    #[test]
    fn the_text_is_the_filtered_trees_byte_for_byte() {
        let rich = Sample {
            num: 7,
            gone: None,
            text: Some("quote \" backslash \\ newline \n tab \t é ✓ \u{1}".into()),
            empty: vec![],
            list: vec!["a".into(), String::new()],
            nan: f64::NAN,
            ratio: 0.1 + 0.2,
            nested: Some(Inner {
                a: None,
                b: vec![],
                c: [(3, "x".to_string())].into_iter().collect(),
            }),
            column: Some(4),
            flag: false,
            skipped: 0,
        };
        for skip in [&[][..], &["column", "flag"][..]] {
            assert_eq!(to_string(&rich, skip).unwrap(), through_a_tree(&rich, skip));
            let plain = Sample::default();
            assert_eq!(
                to_string(&plain, skip).unwrap(),
                through_a_tree(&plain, skip)
            );
        }
        #[derive(Serialize)]
        struct Nothing {
            a: Option<u8>,
        }
        assert_eq!(to_string(&Nothing { a: None }, &[]).unwrap(), "{}");
        assert!(to_string(&5u32, &[]).is_err());
    }

    #[test]
    fn a_sheets_row_document_is_what_the_tree_gave() {
        let mut sheet = crate::checkpoint::SheetState::new(12);
        let plain = sheet.clone();
        sheet.status = crate::checkpoint::SheetStatus::Completed;
        sheet.attempt_count = 2;
        sheet.exit_code = Some(0);
        sheet.error_message = Some("first \"try\" failed".into());
        sheet.instrument_name = Some("instant".into());
        sheet.execution_duration_seconds = Some(0.012_5);
        sheet.passed_validations = vec!["out exists".into()];
        sheet.stdout_tail = Some("mozart-instant: ok\n".into());
        sheet.success_without_retry = true;
        for s in [&plain, &sheet] {
            assert_eq!(
                super::super::compact_sheet_json(s).unwrap(),
                through_a_tree(s, &super::super::COLUMN_FIELDS)
            );
        }
    }
}
