//! Timestamps in the two flavours upstream's learning DB uses (learning.md §2.1): naive local
//! time for most columns and UTC with `+00:00` for rate-limit events, both formatted like
//! Python's `datetime.isoformat()` (microseconds omitted when zero). Range checks compare
//! these strings in SQL, so each column must keep its flavour.

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};

/// A point in time with both renderings at hand.
#[derive(Clone, Debug)]
pub(crate) struct Now {
    zoned: Zoned,
}

impl Now {
    /// The current instant in `tz` (the store's copy of the system time zone).
    pub(crate) fn system_in(tz: &TimeZone) -> Self {
        Now {
            zoned: Timestamp::now().to_zoned(tz.clone()),
        }
    }

    /// A fixed instant, in the system time zone.
    #[cfg(test)]
    pub(crate) fn fixed(ts: Timestamp) -> Self {
        Self::fixed_in(ts, &TimeZone::system())
    }

    /// A fixed instant, in `tz`.
    pub(crate) fn fixed_in(ts: Timestamp, tz: &TimeZone) -> Self {
        Now {
            zoned: ts.to_zoned(tz.clone()),
        }
    }

    /// Naive local ISO text, e.g. `2024-05-01T14:03:07.120000`.
    pub(crate) fn local_iso(&self) -> String {
        python_iso(self.zoned.datetime())
    }

    /// Naive local ISO text of this instant shifted by `secs`.
    #[cfg(test)]
    pub(crate) fn local_iso_plus(&self, secs: f64) -> String {
        let shifted = self
            .timestamp_plus(secs)
            .to_zoned(self.zoned.time_zone().clone());
        python_iso(shifted.datetime())
    }

    /// UTC ISO text with `+00:00`.
    pub(crate) fn utc_iso(&self) -> String {
        utc_iso(self.zoned.timestamp())
    }

    /// UTC ISO text of an epoch instant (falls back to now when out of range).
    pub(crate) fn utc_iso_of_epoch(&self, secs: f64) -> String {
        let ts = SignedDuration::try_from_secs_f64(secs)
            .ok()
            .and_then(|d| Timestamp::from_duration(d).ok())
            .unwrap_or(self.zoned.timestamp());
        utc_iso(ts)
    }

    /// UTC ISO text of this instant shifted by `secs`.
    pub(crate) fn utc_iso_plus(&self, secs: f64) -> String {
        utc_iso(self.timestamp_plus(secs))
    }

    /// The local hour 0–23 (error recoveries' `time_of_day`, success-factor buckets).
    pub(crate) fn local_hour(&self) -> i8 {
        self.zoned.hour()
    }

    fn timestamp_plus(&self, secs: f64) -> Timestamp {
        let d = SignedDuration::try_from_secs_f64(secs).unwrap_or(SignedDuration::ZERO);
        self.zoned
            .timestamp()
            .checked_add(d)
            .unwrap_or(self.zoned.timestamp())
    }

    /// Whole days (Python `timedelta.days`: floored, negative for future times) from the
    /// stored timestamp to now; `None` text (or unreadable text) counts as now (§9.1).
    pub(crate) fn whole_days_since(&self, stored: Option<&str>) -> i64 {
        match stored.and_then(parse_stored) {
            Some(then) => self.seconds_since(then).div_euclid(86_400.0) as i64,
            None => 0,
        }
    }

    /// Seconds from `then` to now (negative when `then` is in the future).
    pub(crate) fn seconds_since(&self, then: Timestamp) -> f64 {
        self.zoned.timestamp().duration_since(then).as_secs_f64()
    }
}

/// Formats like Python's `isoformat()` of a naive datetime.
fn python_iso(dt: DateTime) -> String {
    let mut out = String::with_capacity(32);
    push_python_iso(&mut out, dt);
    out
}

/// Appends [`python_iso`] text. Digits are pushed by hand: every sheet outcome formats two
/// timestamps, and `format!` machinery was a visible share of recording one.
fn push_python_iso(out: &mut String, dt: DateTime) {
    fn digits(out: &mut String, value: i32, width: u32) {
        for place in (0..width).rev() {
            let d = (value / 10i32.pow(place)) % 10;
            out.push(char::from(b'0' + d as u8));
        }
    }
    let year = i32::from(dt.year());
    if (0..=9999).contains(&year) {
        digits(out, year, 4);
    } else {
        // Out of Python's range; keep the width-padded rendering of the general case.
        out.push_str(&format!("{year:04}"));
    }
    for (sep, value) in [
        ('-', dt.month()),
        ('-', dt.day()),
        ('T', dt.hour()),
        (':', dt.minute()),
        (':', dt.second()),
    ] {
        out.push(sep);
        digits(out, i32::from(value), 2);
    }
    let micros = dt.subsec_nanosecond() / 1000;
    if micros != 0 {
        out.push('.');
        digits(out, micros, 6);
    }
}

fn utc_iso(ts: Timestamp) -> String {
    let mut out = String::with_capacity(38);
    push_python_iso(&mut out, ts.to_zoned(TimeZone::UTC).datetime());
    out.push_str("+00:00");
    out
}

/// Reads a stored timestamp of either flavour: with an offset (or `Z`) it is absolute,
/// without one it is local wall-clock time. Python also wrote a space separator sometimes.
pub(crate) fn parse_stored(text: &str) -> Option<Timestamp> {
    let text = text.trim();
    if let Ok(ts) = text.parse::<Timestamp>() {
        return Some(ts);
    }
    let dt: DateTime = text.replacen(' ', "T", 1).parse().ok()?;
    dt.to_zoned(TimeZone::system()).ok().map(|z| z.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_python_isoformat() {
        let ts: Timestamp = "2024-05-01T12:00:00Z".parse().unwrap();
        let now = Now::fixed(ts);
        assert_eq!(now.utc_iso(), "2024-05-01T12:00:00+00:00");
        assert_eq!(now.utc_iso_plus(1.5), "2024-05-01T12:00:01.500000+00:00");
        assert!(!now.local_iso().contains('+'));
        assert_eq!(now.local_iso().len(), 19);
    }

    #[test]
    fn hand_formatted_digits_match_format_macro() {
        for text in [
            "2024-05-01T12:00:00",
            "0001-01-01T00:00:00.000001",
            "1999-12-31T23:59:59.999999",
            "2026-11-22T03:04:05.120000",
            "9999-12-31T23:59:59.5",
        ] {
            let dt: DateTime = text.parse().unwrap();
            let micros = dt.subsec_nanosecond() / 1000;
            let mut expected = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                dt.year(),
                dt.month(),
                dt.day(),
                dt.hour(),
                dt.minute(),
                dt.second()
            );
            if micros != 0 {
                expected.push_str(&format!(".{micros:06}"));
            }
            assert_eq!(python_iso(dt), expected, "{text}");
        }
    }

    #[test]
    fn whole_days_floor_like_python() {
        let ts: Timestamp = "2024-05-11T12:00:00Z".parse().unwrap();
        let now = Now::fixed(ts);
        assert_eq!(now.whole_days_since(Some("2024-05-01T12:00:00+00:00")), 10);
        assert_eq!(now.whole_days_since(Some("2024-05-01T12:00:01+00:00")), 9);
        assert_eq!(now.whole_days_since(Some("2024-05-11T12:00:01+00:00")), -1);
        assert_eq!(now.whole_days_since(None), 0);
        assert_eq!(now.whole_days_since(Some("garbage")), 0);
        let local = now.local_iso_plus(-3.0 * 86_400.0);
        assert_eq!(now.whole_days_since(Some(&local)), 3);
    }
}
