//! Wall-clock helpers: ISO-8601 UTC timestamps for checkpoints and epoch floats for the
//! registry. The one `epoch_now` every crate uses lives here.
//!
//! Checkpoint datetimes are persisted as ISO-8601 UTC strings (execution.md §8.1); upstream's
//! pydantic writes them as `2024-05-01T12:00:00.123456Z`. Registry timestamps are epoch
//! floats (conductor.md §10.2).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Seconds since the Unix epoch, as a float (the registry's timestamp unit).
pub fn epoch_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64()
}

/// `instant` as `YYYY-MM-DDTHH:MM:SS.ffffffZ`, written digit by digit: every sheet's
/// transition stamps a few, and `strftime` parsed its format each time (issue 24). Years
/// outside 0–9999 keep `strftime`'s form.
fn iso_utc(instant: jiff::Timestamp) -> String {
    const FORMAT: &str = "%Y-%m-%dT%H:%M:%S.%6fZ";
    let t = jiff::tz::Offset::UTC.to_datetime(instant);
    let Some(year) = u32::try_from(t.year()).ok().filter(|y| *y <= 9999) else {
        return instant.strftime(FORMAT).to_string();
    };
    let mut out = String::with_capacity(27);
    let mut push = |value: u32, width: u32, then: Option<char>| {
        for place in (0..width).rev() {
            let digit = value / 10u32.pow(place) % 10;
            out.push(char::from(b'0' + digit as u8));
        }
        if let Some(c) = then {
            out.push(c);
        }
    };
    let part = |v: i8| u32::try_from(v).unwrap_or(0);
    push(year, 4, Some('-'));
    push(part(t.month()), 2, Some('-'));
    push(part(t.day()), 2, Some('T'));
    push(part(t.hour()), 2, Some(':'));
    push(part(t.minute()), 2, Some(':'));
    push(part(t.second()), 2, Some('.'));
    push(
        u32::try_from(t.subsec_nanosecond() / 1000).unwrap_or(0),
        6,
        Some('Z'),
    );
    out
}

/// An ISO-8601 timestamp kept as the exact text it was written or read with, so a state
/// file written by upstream round-trips byte for byte.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(String);

impl Timestamp {
    /// The current UTC time with microsecond precision.
    pub fn now() -> Self {
        Self::from_epoch(epoch_now())
    }

    /// Formats epoch seconds as `YYYY-MM-DDTHH:MM:SS.ffffffZ` (pydantic's shape: always six
    /// fraction digits). Seconds beyond jiff's range (years ±9999) are clamped to it.
    pub fn from_epoch(secs: f64) -> Self {
        Self::from_micros((secs * 1_000_000.0).round() as i64)
    }

    /// Formats microseconds since the epoch as [`Timestamp::from_epoch`] does, without the
    /// float (exact for every instant in jiff's range; others are clamped to it).
    pub fn from_micros(micros: i64) -> Self {
        let instant = jiff::Timestamp::from_microsecond(micros).unwrap_or(if micros < 0 {
            jiff::Timestamp::MIN
        } else {
            jiff::Timestamp::MAX
        });
        Timestamp(iso_utc(instant))
    }

    /// Microseconds since the epoch, if the text is an ISO-8601 datetime with an offset.
    /// (Whether [`Timestamp::from_micros`] gives the same text back is the caller's check:
    /// upstream's text may be shaped otherwise.)
    pub fn to_micros(&self) -> Option<i64> {
        let instant = self.0.parse::<jiff::Timestamp>().ok()?;
        Some(instant.as_microsecond())
    }

    /// Wraps text without checking it (used for values read from storage).
    pub fn from_raw(text: impl Into<String>) -> Self {
        Timestamp(text.into())
    }

    /// The stored text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Epoch seconds, if the text is an ISO-8601 datetime we understand.
    pub fn to_epoch(&self) -> Option<f64> {
        parse_iso8601(&self.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses `YYYY-MM-DD[T| ]HH:MM[:SS[.frac]][Z|±HH:MM|±HHMM]` into epoch seconds; a missing
/// offset is taken as UTC (upstream always writes UTC). A date without a time is refused:
/// every timestamp upstream stores has one.
pub fn parse_iso8601(text: &str) -> Option<f64> {
    let t = text.trim();
    if !matches!(t.as_bytes().get(10), Some(b'T' | b't' | b' ')) {
        return None;
    }
    let instant = match t.parse::<jiff::Timestamp>() {
        Ok(instant) => instant,
        // No offset: a civil datetime, read as UTC.
        Err(_) => t
            .parse::<jiff::civil::DateTime>()
            .ok()?
            .to_zoned(jiff::tz::TimeZone::UTC)
            .ok()?
            .timestamp(),
    };
    Some(instant.as_second() as f64 + f64::from(instant.subsec_nanosecond()) / 1e9)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The digit-by-digit form is strftime's, over instants spread across the years
    /// (before 1970, leap days, the ends of the range).
    #[test]
    fn iso_text_is_strftimes() {
        let mut micros: i64 = -62_135_596_800_000_000; // 0001-01-01
        let step = 7_919_123_456_789; // ~92 days and an odd fraction
        let end: i64 = 253_402_300_799_999_999; // 9999-12-31T23:59:59.999999
        let mut seen = 0;
        while micros <= end {
            let instant = jiff::Timestamp::from_microsecond(micros).unwrap();
            assert_eq!(
                iso_utc(instant),
                instant.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string(),
                "{micros}"
            );
            micros += step;
            seen += 1;
        }
        assert!(seen > 30_000);
        for edge in [jiff::Timestamp::MIN, jiff::Timestamp::MAX] {
            assert_eq!(
                iso_utc(edge),
                edge.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
            );
        }
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(
            Timestamp::from_epoch(0.0).as_str(),
            "1970-01-01T00:00:00.000000Z"
        );
        assert_eq!(
            Timestamp::from_epoch(1_709_210_096.5).as_str(),
            "2024-02-29T12:34:56.500000Z"
        );
        assert_eq!(
            Timestamp::from_epoch(1_709_210_096.123_456).as_str(),
            "2024-02-29T12:34:56.123456Z"
        );
        assert_eq!(
            Timestamp::from_epoch(-1.5).as_str(),
            "1969-12-31T23:59:58.500000Z"
        );
        assert_eq!(
            Timestamp::from_epoch(1_735_689_599.999_999_9).as_str(),
            "2025-01-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn parses_upstream_variants() {
        let base = 1_709_210_096.0;
        for text in [
            "2024-02-29T12:34:56Z",
            "2024-02-29T12:34:56+00:00",
            "2024-02-29T14:34:56+02:00",
            "2024-02-29 12:34:56",
            "2024-02-29T07:34:56-0500",
        ] {
            assert_eq!(parse_iso8601(text), Some(base), "{text}");
        }
        assert_eq!(parse_iso8601("2024-02-29T12:34:56.25Z"), Some(base + 0.25));
        assert_eq!(parse_iso8601("2024-02-29t12:34:56,25z"), Some(base + 0.25));
        assert_eq!(parse_iso8601("2024-02-29T12:34"), Some(base - 56.0));
        assert_eq!(parse_iso8601(" 2024-02-29T12:34:56Z\n"), Some(base));
        assert_eq!(parse_iso8601("2024-02-29"), None);
        assert_eq!(parse_iso8601("yesterday"), None);
        assert_eq!(parse_iso8601("2024-13-01T00:00:00Z"), None);
    }

    #[test]
    fn micros_round_trip_our_own_text() {
        let t = Timestamp::from_epoch(1_709_210_096.123_456);
        let micros = t.to_micros().unwrap();
        assert_eq!(micros, 1_709_210_096_123_456);
        assert_eq!(Timestamp::from_micros(micros), t);
        // Upstream shapes parse, but give our shape back: callers compare the text.
        let short = Timestamp::from_raw("2024-02-29T12:34:56Z");
        assert_ne!(Timestamp::from_micros(short.to_micros().unwrap()), short);
    }

    #[test]
    fn round_trips_now() {
        let now = epoch_now();
        let back = Timestamp::from_epoch(now).to_epoch().unwrap();
        assert!((back - now).abs() < 1e-5);
    }
}
