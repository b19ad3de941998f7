//! When does a usage limit reset? (execution.md §7.3, claude-code-output.md §6.3–6.4)
//!
//! Upstream only knew `resets 3pm` / `resets 15:30` / `resets in 2 hours` in the machine's
//! local time. Claude's texts changed several times and name the zone
//! (`You've hit your limit · resets 1am (Europe/Oslo)`), sometimes with a date
//! (`resets Aug 5, 7am (America/New_York)`), and older ones carried the epoch
//! (`Claude AI usage limit reached|1750708800`). All of these are read here.

use std::sync::LazyLock;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::Zoned;
use regex::Regex;

/// Shortest wait a parsed reset time yields (upstream `RESET_TIME_MINIMUM_WAIT_SECONDS`).
pub const MIN_WAIT_SECONDS: f64 = 300.0;
/// Longest wait for a reset time without a date (upstream `RESET_TIME_MAXIMUM_WAIT_SECONDS`).
pub const MAX_WAIT_SECONDS: f64 = 86_400.0;
/// Longest wait when the text names a date (weekly limits last up to seven days).
pub const MAX_DATED_WAIT_SECONDS: f64 = 7.0 * 86_400.0;
/// Wait used when a limit is detected but no reset time can be read.
pub const DEFAULT_RATE_LIMIT_WAIT_SECONDS: f64 = 3600.0;

/// A parsed reset: the instant and the (clamped) wait from now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResetTime {
    /// Unix epoch seconds at which to try again (`now + wait_seconds`).
    pub reset_at_epoch: f64,
    /// Seconds to wait from now.
    pub wait_seconds: f64,
    /// Seconds from now to the reset the text named, before [`MIN_WAIT_SECONDS`] and the
    /// longest wait applied (so a message can say what the API said and what is waited).
    pub said_seconds: f64,
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|err| panic!("reset-time pattern does not compile: {err}"))
}

static LEGACY_EPOCH: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)limit reached\|(\d{9,11})"));
/// `resets at 1795996939`, `reset at epoch 1795996939`: a Unix time in seconds.
static RESET_EPOCH: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)resets?\s+(?:at\s+)?(?:epoch\s+)?(\d{10})\b"));
static RELATIVE: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)resets?\s+in\s+(\d+)\s*(hour|hr|minute|min)s?"));
static CLOCK_12H: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)resets?\s+(?:at\s+)?(?:(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(\d{1,2}),?\s+(?:at\s+)?)?(\d{1,2})(?::(\d{2}))?\s*([ap])\.?\s?m\.?(?:\s*\(([A-Za-z_]+(?:/[A-Za-z0-9_+\-]+)*)\))?",
    )
});
static CLOCK_24H: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)resets?\s+(?:at\s+)?(\d{1,2}):(\d{2})(?:\s*\(([A-Za-z_]+(?:/[A-Za-z0-9_+\-]+)*)\))?")
});
/// `2026-11-29 21:32 UTC`, `2026-11-29 at 21:32 UTC`.
static ISO_UTC: LazyLock<Regex> =
    LazyLock::new(|| re(r"(\d{4})-(\d{2})-(\d{2})(?:\s+at)?\s+(\d{1,2}):(\d{2})\s*UTC"));
/// ISO 8601's `2026-11-29T21:32:00Z` / `…+00:00` (seconds and fractions optional) — only
/// after "reset": CLIs stamp their every event with such a time (Gemini CLI's stream-json),
/// which is not when a limit ends.
static ISO_8601_RESET: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\breset[^\n]{0,40}?(\d{4})-(\d{2})-(\d{2})T(\d{1,2}):(\d{2})(?::\d{2}(?:\.\d+)?)?\s*(?:Z|\+00:?00)",
    )
});
static LOOSE_12H: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)reset.{0,20}?(\d{1,2})\s*([ap])m"));

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

/// Parse a reset time from instrument output, relative to the current time.
pub fn parse_reset_time(text: &str) -> Option<ResetTime> {
    parse_reset_time_at(text, &Zoned::now())
}

/// Parse a reset time from instrument output, relative to `now` (whose zone is "local").
pub fn parse_reset_time_at(text: &str, now: &Zoned) -> Option<ResetTime> {
    let now_epoch = now.timestamp().as_millisecond() as f64 / 1000.0;
    let (target_epoch, dated) = target_instant(text, now, now_epoch)?;
    let max = if dated {
        MAX_DATED_WAIT_SECONDS
    } else {
        MAX_WAIT_SECONDS
    };
    let said_seconds = (target_epoch - now_epoch).max(0.0);
    let wait_seconds = said_seconds.clamp(MIN_WAIT_SECONDS, max);
    Some(ResetTime {
        reset_at_epoch: now_epoch + wait_seconds,
        wait_seconds,
        said_seconds,
    })
}

/// The reset instant as epoch seconds, and whether the text named a date.
fn target_instant(text: &str, now: &Zoned, now_epoch: f64) -> Option<(f64, bool)> {
    if let Some(c) = LEGACY_EPOCH
        .captures(text)
        .or_else(|| RESET_EPOCH.captures(text))
    {
        let epoch: f64 = c[1].parse().ok()?;
        return Some((epoch, true));
    }
    if let Some(c) = RELATIVE.captures(text) {
        let n: f64 = c[1].parse().ok()?;
        let unit = c[2].to_ascii_lowercase();
        let secs = if unit.starts_with('h') {
            n * 3600.0
        } else {
            n * 60.0
        };
        return Some((now_epoch + secs, false));
    }
    if let Some(c) = CLOCK_12H.captures(text) {
        let hour12: i8 = c[3].parse().ok()?;
        let minute: i8 = c.get(4).map_or(Some(0), |m| m.as_str().parse().ok())?;
        let pm = c[5].eq_ignore_ascii_case("p");
        let hour = to_24h(hour12, pm)?;
        let tz = zone(c.get(6).map(|m| m.as_str()), now);
        let date = match (c.get(1), c.get(2)) {
            (Some(mon), Some(day)) => {
                let mon = mon.as_str().to_ascii_lowercase();
                let month = MONTHS.iter().position(|m| *m == mon)? as i8 + 1;
                Some((month, day.as_str().parse::<i8>().ok()?))
            }
            _ => None,
        };
        return next_occurrence(now, &tz, date, hour, minute).map(|e| (e, date.is_some()));
    }
    if let Some(c) = CLOCK_24H.captures(text) {
        let hour: i8 = c[1].parse().ok()?;
        let minute: i8 = c[2].parse().ok()?;
        let tz = zone(c.get(3).map(|m| m.as_str()), now);
        return next_occurrence(now, &tz, None, hour, minute).map(|e| (e, false));
    }
    if let Some(c) = ISO_UTC
        .captures(text)
        .or_else(|| ISO_8601_RESET.captures(text))
    {
        let date = Date::new(c[1].parse().ok()?, c[2].parse().ok()?, c[3].parse().ok()?).ok()?;
        let dt = date.at(c[4].parse().ok()?, c[5].parse().ok()?, 0, 0);
        let zoned = dt.to_zoned(TimeZone::UTC).ok()?;
        return Some((zoned.timestamp().as_second() as f64, true));
    }
    if let Some(c) = LOOSE_12H.captures(text) {
        let hour = to_24h(c[1].parse().ok()?, c[2].eq_ignore_ascii_case("p"))?;
        let tz = now.time_zone().clone();
        return next_occurrence(now, &tz, None, hour, 0).map(|e| (e, false));
    }
    None
}

fn to_24h(hour12: i8, pm: bool) -> Option<i8> {
    if !(1..=12).contains(&hour12) {
        return None;
    }
    Some(match (hour12, pm) {
        (12, false) => 0,
        (12, true) => 12,
        (h, true) => h + 12,
        (h, false) => h,
    })
}

/// The named IANA zone, or `now`'s zone when absent or unknown.
fn zone(name: Option<&str>, now: &Zoned) -> TimeZone {
    match name {
        Some("UTC") => TimeZone::UTC,
        Some(name) => TimeZone::get(name).unwrap_or_else(|_| now.time_zone().clone()),
        None => now.time_zone().clone(),
    }
}

/// The next instant at `hour:minute` in `tz` (on `date` when given: this year, or next year
/// if that day is already over).
fn next_occurrence(
    now: &Zoned,
    tz: &TimeZone,
    date: Option<(i8, i8)>,
    hour: i8,
    minute: i8,
) -> Option<f64> {
    if !(0..24).contains(&hour) || !(0..60).contains(&minute) {
        return None;
    }
    let local_now = now.with_time_zone(tz.clone());
    let now_ts = now.timestamp();
    let candidate =
        |day: Date| -> Option<Zoned> { day.at(hour, minute, 0, 0).to_zoned(tz.clone()).ok() };
    let target = match date {
        Some((month, day)) => {
            let this_year = candidate(Date::new(local_now.year(), month, day).ok()?)?;
            if this_year.timestamp() >= now_ts {
                this_year
            } else {
                candidate(Date::new(local_now.year() + 1, month, day).ok()?)?
            }
        }
        None => {
            let today = candidate(local_now.date())?;
            if today.timestamp() > now_ts {
                today
            } else {
                candidate(local_now.date().tomorrow().ok()?)?
            }
        }
    };
    Some(target.timestamp().as_second() as f64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// 2026-06-10 10:00:00 UTC.
    fn now() -> Zoned {
        Date::new(2026, 6, 10)
            .unwrap()
            .at(10, 0, 0, 0)
            .to_zoned(TimeZone::UTC)
            .unwrap()
    }

    fn wait(text: &str) -> Option<f64> {
        parse_reset_time_at(text, &now()).map(|r| r.wait_seconds)
    }

    /// The reset forms instruments.md names: an ISO time in UTC (with `T` and `Z` or
    /// `+00:00` too) and a Unix time.
    #[test]
    fn iso_8601_and_epoch_reset_times() {
        // 2026-06-10 10:00 UTC now: 10:30 UTC is 30 minutes away.
        for text in [
            "quota exceeded; resets at 2026-06-10 10:30 UTC",
            "quota exceeded; resets at 2026-06-10T10:30:00Z",
            "quota exceeded; resets at 2026-06-10T10:30Z",
            "quota exceeded; resets at 2026-06-10T10:30:00.000+00:00",
        ] {
            assert_eq!(wait(text), Some(1800.0), "{text}");
        }
        let at = Date::new(2026, 6, 10)
            .unwrap()
            .at(11, 0, 0, 0)
            .to_zoned(TimeZone::UTC)
            .unwrap()
            .timestamp()
            .as_second();
        for text in [
            format!("usage limit reached, resets at epoch {at}"),
            format!("rate limited: reset at {at}"),
        ] {
            assert_eq!(wait(&text), Some(3600.0), "{text}");
        }
        // An event's own time stamp is not a reset time.
        assert_eq!(
            wait(
                r#"{"type":"error","timestamp":"2026-06-10T10:30:00.000Z","message":"Please retry in 3s."}"#
            ),
            None
        );
    }

    #[test]
    fn claude_texts_across_versions() {
        // 1pm UTC is three hours after 10:00 UTC.
        assert_eq!(
            wait("You've hit your limit · resets 1pm (UTC)"),
            Some(3.0 * 3600.0)
        );
        // New York is UTC-4 in June: 8pm EDT = 00:00 UTC next day = 14 h.
        assert_eq!(
            wait("You've hit your session limit · resets 8pm (America/New_York)"),
            Some(14.0 * 3600.0)
        );
        assert_eq!(
            wait("Session limit reached ∙ resets 3:30pm"),
            Some(5.5 * 3600.0)
        );
        assert_eq!(
            wait("5-hour limit reached ∙ resets 2am"),
            Some(16.0 * 3600.0)
        );
        // Legacy epoch form: 1 hour after now.
        let epoch = now().timestamp().as_second() + 3600;
        assert_eq!(
            wait(&format!("Claude AI usage limit reached|{epoch}")),
            Some(3600.0)
        );
    }

    #[test]
    fn weekly_dated_limit_may_exceed_a_day() {
        // Jun 12, 7am New York = 11:00 UTC on the 12th = 49 h.
        assert_eq!(
            wait("You've hit your weekly limit · resets Jun 12, 7am (America/New_York)"),
            Some(49.0 * 3600.0)
        );
        assert_eq!(
            wait("You've hit your limit - resets Feb 7, 11am (Asia/Seoul)"),
            Some(MAX_DATED_WAIT_SECONDS)
        );
    }

    #[test]
    fn upstream_forms_and_clamping() {
        assert_eq!(wait("usage resets in 2 hours"), Some(7200.0));
        assert_eq!(wait("resets in 1 min"), Some(MIN_WAIT_SECONDS));
        assert_eq!(wait("limit resets at 15:30"), Some(5.5 * 3600.0));
        // 9am already passed today → tomorrow 9am = 23 h.
        assert_eq!(wait("resets at 9am"), Some(23.0 * 3600.0));
        assert_eq!(wait("resets at 12am"), Some(14.0 * 3600.0));
        assert_eq!(wait("resets at 4 a.m. (UTC)"), Some(18.0 * 3600.0));
        assert_eq!(
            wait("You will regain access on 2026-06-11 at 00:00 UTC."),
            Some(14.0 * 3600.0)
        );
        assert_eq!(wait("nothing about time here"), None);
    }
}
