//! Wall-clock helpers: ISO-8601 UTC timestamps for checkpoints and epoch floats for the
//! registry, without pulling in a date crate.
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

    /// Formats epoch seconds as `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
    pub fn from_epoch(secs: f64) -> Self {
        let micros_total = (secs * 1_000_000.0).round() as i64;
        let secs_total = micros_total.div_euclid(1_000_000);
        let micros = micros_total.rem_euclid(1_000_000);
        let days = secs_total.div_euclid(86_400);
        let sod = secs_total.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        Timestamp(format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            sod / 3600,
            (sod % 3600) / 60,
            sod % 60
        ))
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
/// offset is taken as UTC (upstream always writes UTC).
pub fn parse_iso8601(text: &str) -> Option<f64> {
    let t = text.trim();
    let b = t.as_bytes();
    if b.len() < 16 {
        return None;
    }
    let num = |s: &str| -> Option<i64> {
        if s.bytes().all(|c| c.is_ascii_digit()) && !s.is_empty() {
            s.parse().ok()
        } else {
            None
        }
    };
    let year = num(t.get(0..4)?)?;
    let month = num(t.get(5..7)?)?;
    let day = num(t.get(8..10)?)?;
    if b[4] != b'-' || b[7] != b'-' || !(b[10] == b'T' || b[10] == b't' || b[10] == b' ') {
        return None;
    }
    let hour = num(t.get(11..13)?)?;
    if b[13] != b':' {
        return None;
    }
    let minute = num(t.get(14..16)?)?;
    let mut rest = t.get(16..)?;
    let mut second = 0i64;
    let mut frac = 0.0f64;
    if let Some(r) = rest.strip_prefix(':') {
        second = num(r.get(0..2)?)?;
        rest = r.get(2..)?;
        if let Some(r) = rest.strip_prefix('.').or_else(|| rest.strip_prefix(',')) {
            let digits: String = r.chars().take_while(|c| c.is_ascii_digit()).collect();
            if digits.is_empty() {
                return None;
            }
            frac = format!("0.{digits}").parse().ok()?;
            rest = &r[digits.len()..];
        }
    }
    let offset_secs = match rest {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let body = rest[1..].replace(':', "");
            if body.len() != 4 {
                return None;
            }
            let hh = num(&body[0..2])?;
            let mm = num(&body[2..4])?;
            sign * (hh * 3600 + mm * 60)
        }
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(secs as f64 + frac)
}

// Howard Hinnant's civil calendar algorithms (public domain), proleptic Gregorian.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
        assert_eq!(parse_iso8601("yesterday"), None);
        assert_eq!(parse_iso8601("2024-13-01T00:00:00Z"), None);
    }

    #[test]
    fn round_trips_now() {
        let now = epoch_now();
        let back = Timestamp::from_epoch(now).to_epoch().unwrap();
        assert!((back - now).abs() < 1e-5);
    }
}
