//! Reading per-attempt `instrument_config` options, `retry-after` values and profile
//! pricing for the HTTP instruments.

use serde_json::{Map, Value};

use crate::error::BackendError;
use crate::profile::ModelCapacity;

/// Cost per million (input, output) tokens when the profile lists no models
/// (instruments.md §4.6: "$3 / $15 per million").
pub const FALLBACK_PRICING_PER_MILLION: (f64, f64) = (3.0, 15.0);

/// The instant (Unix epoch seconds) a `retry-after` header names: delay seconds
/// (fractions allowed) or an HTTP date. `None` when unparseable or negative.
pub fn parse_retry_after(value: &str, now: f64) -> Option<f64> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then_some(now + secs);
    }
    static PARSER: jiff::fmt::rfc2822::DateTimeParser = jiff::fmt::rfc2822::DateTimeParser::new();
    PARSER
        .parse_timestamp(value)
        .ok()
        .map(|ts| ts.as_millisecond() as f64 / 1000.0)
}

/// USD for a call: the model's own pricing when the profile lists it, else the profile's
/// pricing model (`default_model`, else the first; instruments.md §4.6), else the fallback.
pub fn price_usd(
    models: &[ModelCapacity],
    default_model: Option<&str>,
    model: &str,
    input_tokens: u64,
    output_tokens: u64,
) -> f64 {
    let priced = models
        .iter()
        .find(|m| m.name == model)
        .or_else(|| default_model.and_then(|d| models.iter().find(|m| m.name == d)))
        .or_else(|| models.first());
    let (per_1k_in, per_1k_out) = match priced {
        Some(m) => (m.cost_per_1k_input, m.cost_per_1k_output),
        None => (
            FALLBACK_PRICING_PER_MILLION.0 / 1000.0,
            FALLBACK_PRICING_PER_MILLION.1 / 1000.0,
        ),
    };
    input_tokens as f64 * per_1k_in / 1000.0 + output_tokens as f64 * per_1k_out / 1000.0
}

/// Typed access to one attempt's `instrument_config` map. Keys a backend does not read are
/// logged and ignored, as the CLI backends do.
pub(crate) struct OptionReader<'a> {
    instrument: &'a str,
    options: &'a Map<String, Value>,
}

impl<'a> OptionReader<'a> {
    /// Warn about keys outside `known`, then read.
    pub(crate) fn new(
        instrument: &'a str,
        options: &'a Map<String, Value>,
        known: &[&str],
        job: &str,
        sheet: u32,
    ) -> Self {
        for key in options.keys() {
            if !known.contains(&key.as_str()) {
                tracing::warn!(%instrument, option = %key, %job, sheet,
                    "instrument_config option is not used by this HTTP instrument; ignoring it");
            }
        }
        OptionReader {
            instrument,
            options,
        }
    }

    fn invalid(&self, key: &str, message: String) -> String {
        BackendError::InvalidOption {
            instrument: self.instrument.to_string(),
            key: key.to_string(),
            message,
        }
        .to_string()
    }

    /// A string option (`null` = absent).
    pub(crate) fn string(&self, key: &str) -> Result<Option<String>, String> {
        match self.options.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.invalid(key, format!("expected a string, got {other}"))),
        }
    }

    /// A number option within `[min, max]`.
    pub(crate) fn number(&self, key: &str, min: f64, max: f64) -> Result<Option<f64>, String> {
        match self.options.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(n) if n >= min && n <= max => Ok(Some(n)),
                Some(n) => Err(self.invalid(key, format!("{n} is outside {min}..={max}"))),
                None => Err(self.invalid(key, format!("expected a number, got {v}"))),
            },
        }
    }

    /// A whole-number option of at least `min`.
    pub(crate) fn count(&self, key: &str, min: u64) -> Result<Option<u64>, String> {
        match self.options.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n >= min => Ok(Some(n)),
                _ => Err(self.invalid(
                    key,
                    format!("expected a whole number of at least {min}, got {v}"),
                )),
            },
        }
    }
}

/// The first non-empty value of `var`: the attempt's own environment (score `env:`) wins
/// over the conductor's, as it does for CLI instruments.
pub(crate) fn lookup_env(var: &str, request_env: &[(String, String)]) -> Option<String> {
    request_env
        .iter()
        .rev()
        .find(|(k, _)| k == var)
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var(var).ok())
        .filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn model(name: &str, i: f64, o: f64) -> ModelCapacity {
        ModelCapacity {
            name: name.into(),
            context_window: 1000,
            cost_per_1k_input: i,
            cost_per_1k_output: o,
            max_output_tokens: None,
        }
    }

    #[test]
    fn retry_after_seconds_and_http_dates() {
        assert_eq!(parse_retry_after("30", 100.0), Some(130.0));
        assert_eq!(parse_retry_after(" 1.5 ", 100.0), Some(101.5));
        assert_eq!(parse_retry_after("-3", 100.0), None);
        assert_eq!(parse_retry_after("soon", 100.0), None);
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 1970 00:01:40 GMT", 0.0),
            Some(100.0)
        );
    }

    #[test]
    fn pricing_prefers_the_model_then_the_profile_rule_then_the_fallback() {
        let models = vec![model("a", 0.003, 0.015), model("b", 0.015, 0.075)];
        let close = |x: f64, y: f64| (x - y).abs() < 1e-12;
        assert!(close(price_usd(&models, Some("a"), "b", 1000, 1000), 0.09));
        assert!(close(
            price_usd(&models, Some("b"), "zzz", 1000, 1000),
            0.09
        ));
        assert!(close(price_usd(&models, None, "zzz", 1000, 1000), 0.018));
        assert!(close(price_usd(&[], None, "x", 1_000_000, 0), 3.0));
    }

    #[test]
    fn options_are_typed_and_range_checked() {
        let map: Map<String, Value> = serde_json::from_str(
            r#"{"temperature": 0.2, "max_tokens": 0, "model": 5, "system_prompt": null}"#,
        )
        .unwrap();
        let r = OptionReader::new("anthropic_api", &map, &["temperature"], "j", 1);
        assert_eq!(r.number("temperature", 0.0, 1.0).unwrap(), Some(0.2));
        assert!(r.number("temperature", 0.5, 1.0).is_err());
        let err = r.count("max_tokens", 1).unwrap_err();
        assert!(
            err.contains("anthropic_api") && err.contains("max_tokens"),
            "{err}"
        );
        assert!(r.string("model").unwrap_err().contains("expected a string"));
        assert_eq!(r.string("system_prompt").unwrap(), None);
        assert_eq!(r.string("absent").unwrap(), None);
    }

    #[test]
    fn request_env_wins_and_blank_is_missing() {
        let env = vec![("MOZART_HTTP_TEST_KEY_X".to_string(), "k1".to_string())];
        assert_eq!(
            lookup_env("MOZART_HTTP_TEST_KEY_X", &env).as_deref(),
            Some("k1")
        );
        let blank = vec![("MOZART_HTTP_TEST_KEY_X".to_string(), " ".to_string())];
        assert_eq!(lookup_env("MOZART_HTTP_TEST_KEY_X", &blank), None);
        assert_eq!(lookup_env("MOZART_HTTP_TEST_KEY_UNSET_Y", &[]), None);
    }
}
