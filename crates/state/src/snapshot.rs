//! The validated score kept with a job (upstream's `config_snapshot`), as JSON text.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// The validated score as compact JSON text. Kept as text because only readers look inside
/// (`job.status`): a 1,000-voice score's snapshot (upstream's `fan_out_stage_map` has an entry
/// per voice) is ~55 KB as text but ~600 KB as a `serde_json::Value` tree, and a running job
/// holds it for its whole run.
#[derive(Clone, Debug)]
pub struct ConfigSnapshot(Box<RawValue>);

impl ConfigSnapshot {
    /// The snapshot of anything serialisable (None when it does not serialise).
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Option<ConfigSnapshot> {
        serde_json::value::to_raw_value(value)
            .ok()
            .map(ConfigSnapshot)
    }

    /// A snapshot from stored JSON text.
    ///
    /// # Errors
    /// When the text is not one JSON value.
    pub fn parse(text: String) -> Result<ConfigSnapshot, serde_json::Error> {
        RawValue::from_string(text).map(ConfigSnapshot)
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The snapshot as a JSON value tree (parsed now; `Null` if the text were not JSON,
    /// which [`Self::parse`] and [`Self::of`] do not let happen).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.as_str()).unwrap_or(Value::Null)
    }
}

impl From<&Value> for ConfigSnapshot {
    fn from(value: &Value) -> ConfigSnapshot {
        match ConfigSnapshot::of(value) {
            Some(s) => s,
            // A Value always serialises; keep the type total anyway.
            None => ConfigSnapshot(RawValue::NULL.to_owned()),
        }
    }
}

impl PartialEq for ConfigSnapshot {
    /// Equal when they hold the same JSON (whatever the spacing).
    fn eq(&self, other: &ConfigSnapshot) -> bool {
        self.as_str() == other.as_str() || self.to_value() == other.to_value()
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
        let back: ConfigSnapshot = serde_json::from_str(s.as_str()).unwrap();
        assert_eq!(back, s);
        assert!(ConfigSnapshot::parse("{not json".into()).is_err());
    }
}
