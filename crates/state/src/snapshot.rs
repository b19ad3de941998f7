//! The validated score kept with a job (upstream's `config_snapshot`), as JSON text.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// The validated score as compact JSON text. Kept as text because only readers look inside
/// (`job.status`): a 1,000-voice score's snapshot (upstream's `fan_out_stage_map` has an entry
/// per voice) is ~55 KB as text but ~600 KB as a `serde_json::Value` tree, and a running job
/// holds it for its whole run.
///
/// The stage map itself is held folded: as runs of a stage's voices (same stage and voice
/// count, voices counting up), written out again when the whole text is asked for — a
/// 100,000-voice job's snapshot is ~0.2 KB of text and a few runs instead of ~5.4 MB
/// (issue 24). Folded only when writing the runs out gives back the very same text.
#[derive(Clone, Debug)]
pub struct ConfigSnapshot {
    /// The JSON text; when folded, with `{}` where the stage map's entries go.
    text: Box<str>,
    folded: Option<Box<Folded>>,
}

/// A stage map taken out of the text: where it goes and its runs.
#[derive(Clone, Debug, PartialEq)]
struct Folded {
    /// Byte offset of the `{}` standing for the map in the text.
    at: usize,
    runs: Vec<Run>,
}

/// Sheets `first..first + len`: sheet `first + k` is `stage`'s voice `instance + k`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Run {
    first: i64,
    len: i64,
    stage: Option<i64>,
    instance: Option<i64>,
    fan_count: Option<i64>,
}

/// One entry of a stage map as the score writes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Meta {
    stage: Option<i64>,
    instance: Option<i64>,
    fan_count: Option<i64>,
}

impl Run {
    fn extends(&self, num: i64, m: &Meta) -> bool {
        Some(num) == self.first.checked_add(self.len)
            && m.stage == self.stage
            && m.fan_count == self.fan_count
            && m.instance == self.instance.and_then(|i| i.checked_add(self.len))
    }
}

/// The runs of a stage map's JSON object, in its order (`None`: not a map of sheet
/// numbers to entries).
fn runs_of(map: &str) -> Option<Vec<Run>> {
    struct Runs;
    impl<'de> serde::de::Visitor<'de> for Runs {
        type Value = Vec<Run>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a stage map")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Vec<Run>, A::Error> {
            let mut runs: Vec<Run> = Vec::new();
            while let Some((key, m)) = a.next_entry::<std::borrow::Cow<'de, str>, Meta>()? {
                let num: i64 = key
                    .parse()
                    .map_err(|_| serde::de::Error::custom("not a sheet number"))?;
                match runs.last_mut() {
                    Some(last) if last.extends(num, &m) => last.len += 1,
                    _ => runs.push(Run {
                        first: num,
                        len: 1,
                        stage: m.stage,
                        instance: m.instance,
                        fan_count: m.fan_count,
                    }),
                }
            }
            Ok(runs)
        }
    }
    let mut de = serde_json::Deserializer::from_str(map);
    let runs = serde::Deserializer::deserialize_map(&mut de, Runs).ok()?;
    de.end().ok()?;
    Some(runs)
}

/// Write the stage map of `runs` as serde_json writes the map of entries.
fn write_runs(runs: &[Run], out: &mut impl std::fmt::Write) -> std::fmt::Result {
    out.write_char('{')?;
    let mut first = true;
    for r in runs {
        for k in 0..r.len {
            if !first {
                out.write_char(',')?;
            }
            first = false;
            write!(out, "\"{}\":{{", r.first + k)?;
            let mut sep = "";
            if let Some(v) = r.stage {
                write!(out, "\"stage\":{v}")?;
                sep = ",";
            }
            if let Some(v) = r.instance {
                write!(out, "{sep}\"instance\":{}", v + k)?;
                sep = ",";
            }
            if let Some(v) = r.fan_count {
                write!(out, "{sep}\"fan_count\":{v}")?;
            }
            out.write_char('}')?;
        }
    }
    out.write_char('}')
}

/// Checks written text against `want`, without building it.
struct SameAs<'a> {
    want: &'a str,
    pos: usize,
}

impl std::fmt::Write for SameAs<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        match self.want.get(self.pos..) {
            Some(rest) if rest.starts_with(s) => {
                self.pos += s.len();
                Ok(())
            }
            _ => Err(std::fmt::Error),
        }
    }
}

/// Where `"sheet"."fan_out_stage_map"`'s value is in `text`, as a byte range.
fn stage_map_range(text: &str) -> Option<std::ops::Range<usize>> {
    #[derive(Deserialize)]
    struct Top<'a> {
        #[serde(borrow)]
        sheet: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Sheet<'a> {
        #[serde(borrow)]
        fan_out_stage_map: Option<&'a RawValue>,
    }
    let top: Top<'_> = serde_json::from_str(text).ok()?;
    let sheet: Sheet<'_> = serde_json::from_str(top.sheet?.get()).ok()?;
    let map = sheet.fan_out_stage_map?.get();
    let start = (map.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start + map.len();
    (text.get(start..end) == Some(map)).then_some(start..end)
}

impl ConfigSnapshot {
    /// `text` (one JSON value), its stage map folded when that is lossless.
    fn fold(text: String) -> ConfigSnapshot {
        let folded = stage_map_range(&text).and_then(|range| {
            let map = &text[range.clone()];
            // Worth it only for a map of more than a few entries.
            if map.len() < 256 {
                return None;
            }
            let runs = runs_of(map)?;
            let mut same = SameAs { want: map, pos: 0 };
            (write_runs(&runs, &mut same).is_ok() && same.pos == map.len()).then_some((range, runs))
        });
        match folded {
            Some((range, runs)) => {
                let mut short = String::with_capacity(text.len() - range.len() + 2);
                short.push_str(&text[..range.start]);
                short.push_str("{}");
                short.push_str(&text[range.end..]);
                ConfigSnapshot {
                    text: short.into_boxed_str(),
                    folded: Some(Box::new(Folded {
                        at: range.start,
                        runs,
                    })),
                }
            }
            None => ConfigSnapshot {
                text: text.into_boxed_str(),
                folded: None,
            },
        }
    }

    /// The snapshot of anything serialisable (None when it does not serialise).
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Option<ConfigSnapshot> {
        serde_json::to_string(value).ok().map(ConfigSnapshot::fold)
    }

    /// A snapshot from stored JSON text.
    ///
    /// # Errors
    /// When the text is not one JSON value.
    pub fn parse(text: String) -> Result<ConfigSnapshot, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(&text);
        serde::de::IgnoredAny::deserialize(&mut de)?;
        de.end()?;
        Ok(ConfigSnapshot::fold(text))
    }

    /// The JSON text (written out now when the stage map is folded).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match &self.folded {
            None => std::borrow::Cow::Borrowed(&self.text),
            Some(f) => {
                let mut whole = String::with_capacity(self.text.len() + f.runs.len() * 64);
                whole.push_str(&self.text[..f.at]);
                // Writing to a String does not fail.
                let _ = write_runs(&f.runs, &mut whole);
                whole.push_str(&self.text[f.at + 2..]);
                std::borrow::Cow::Owned(whole)
            }
        }
    }

    /// The JSON text, with `sheet.fan_out_stage_map` possibly empty (`{}`): for the views,
    /// which leave the map out anyway.
    pub fn text_without_stage_map(&self) -> &str {
        &self.text
    }

    /// The snapshot as a JSON value tree (parsed now; `Null` if the text were not JSON,
    /// which [`Self::parse`] and [`Self::of`] do not let happen).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.text()).unwrap_or(Value::Null)
    }
}

impl From<&Value> for ConfigSnapshot {
    fn from(value: &Value) -> ConfigSnapshot {
        match ConfigSnapshot::of(value) {
            Some(s) => s,
            // A Value always serialises; keep the type total anyway.
            None => ConfigSnapshot {
                text: "null".into(),
                folded: None,
            },
        }
    }
}

impl PartialEq for ConfigSnapshot {
    /// Equal when they hold the same JSON (whatever the spacing).
    fn eq(&self, other: &ConfigSnapshot) -> bool {
        (self.text == other.text && self.folded == other.folded)
            || self.text() == other.text()
            || self.to_value() == other.to_value()
    }
}

impl Serialize for ConfigSnapshot {
    /// As the value it holds, so a pretty printer indents it like the rest of the document
    /// (upstream's JSON state file). Only that file serialises it: the registry stores the
    /// text as it is.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ConfigSnapshot {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Through a Value, so any self-describing format works (not only serde_json's own
        // reader); then kept as text.
        let value = Value::deserialize(deserializer)?;
        Ok(ConfigSnapshot::from(&value))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_as_the_same_json() {
        let v = serde_json::json!({"name": "s", "sheet": {"size": 1, "fan_out_stage_map": {"1": {"stage": 1}}}});
        let s = ConfigSnapshot::from(&v);
        assert_eq!(s.to_value(), v);
        let text =
            serde_json::to_string_pretty(&serde_json::json!({"config_snapshot": s})).unwrap();
        let want =
            serde_json::to_string_pretty(&serde_json::json!({"config_snapshot": v})).unwrap();
        assert_eq!(text, want, "indented like the document around it");
        let back: ConfigSnapshot = serde_json::from_str(&s.text()).unwrap();
        assert_eq!(back, s);
        assert!(ConfigSnapshot::parse("{not json".into()).is_err());
    }

    /// Issue 24: a 100,000-voice score's stage map is a few runs in memory, and the text
    /// written out is byte for byte the one serde_json writes.
    #[test]
    fn a_large_stage_map_is_held_folded_and_written_out_the_same() {
        let mut map = serde_json::Map::new();
        map.insert(
            "1".into(),
            serde_json::json!({"stage": 1, "instance": 1, "fan_count": 1}),
        );
        for k in 0..100_000i64 {
            map.insert(
                (k + 2).to_string(),
                serde_json::json!({"stage": 2, "instance": k + 1, "fan_count": 100_000}),
            );
        }
        map.insert("100002".into(), serde_json::json!({"stage": 3}));
        let v = serde_json::json!({"name": "big", "sheet": {"size": 1, "fan_out_stage_map": map, "x": [1]}, "z": "\"fan_out_stage_map\""});
        let want = serde_json::to_string(&v).unwrap();
        let s = ConfigSnapshot::from(&v);
        let folded = s.folded.as_ref().expect("folded");
        assert_eq!(folded.runs.len(), 3);
        assert!(s.text.len() < 200, "{}", s.text);
        assert_eq!(s.text(), want);
        assert!(s
            .text_without_stage_map()
            .contains(r#""fan_out_stage_map":{},"x":[1]"#));
        let back = ConfigSnapshot::parse(want.clone()).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.text(), want);
        assert_eq!(s.to_value(), v);
        // A map that does not read back the same (here: another order of fields) stays
        // text as it is.
        let odd = want.replacen(
            r#"{"stage":2,"instance":1,"fan_count":100000}"#,
            r#"{"instance":1,"stage":2,"fan_count":100000}"#,
            1,
        );
        let odd_snapshot = ConfigSnapshot::parse(odd.clone()).unwrap();
        assert!(odd_snapshot.folded.is_none());
        assert_eq!(odd_snapshot.text(), odd);
    }
}
