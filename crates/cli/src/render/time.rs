//! Durations, uptimes and timestamps exactly as upstream prints them (cli.md §4.1,
//! upstream `cli/output.py`).

use mozart_ipc::time::{parse_iso8601, Timestamp};

/// `5.2s` under a minute, `3m 12s` under an hour, else `1h 30m`; `N/A` when unknown.
pub fn format_duration(seconds: Option<f64>) -> String {
    let Some(s) = seconds else {
        return "N/A".to_string();
    };
    if s > 0.0 && s < 0.05 {
        // A run of a few milliseconds did take time: "0.0s" reads as "never ran".
        "<0.1s".to_string()
    } else if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!(
            "{}m {}s",
            (s / 60.0).floor() as u64,
            (s % 60.0).floor() as u64
        )
    } else {
        format!(
            "{}h {}m",
            (s / 3600.0).floor() as u64,
            ((s % 3600.0) / 60.0).floor() as u64
        )
    }
}

/// `uptime 6s`, `uptime 3m 4s`, `uptime 2h 5m`, `uptime 1d 3h` (cli.md §4.1); empty when
/// the conductor did not say.
pub fn format_uptime(seconds: Option<f64>) -> String {
    let Some(secs) = seconds else {
        return String::new();
    };
    let s = secs.max(0.0) as u64;
    if s < 60 {
        return format!("uptime {s}s");
    }
    if s < 3600 {
        return format!("uptime {}m {}s", s / 60, s % 60);
    }
    let hours = s / 3600;
    let minutes = (s % 3600) / 60;
    if hours < 24 {
        return format!("uptime {hours}h {minutes}m");
    }
    format!("uptime {}d {}h", hours / 24, hours % 24)
}

/// Whole-second duration without zero parts (`2m 30s`, `45s`, `1h 5m`), used for
/// rate-limit countdowns.
pub fn format_compact_duration(seconds: f64) -> String {
    let total = if seconds.is_finite() && seconds > 0.0 {
        seconds as u64
    } else {
        0
    };
    if total == 0 {
        return "0s".to_string();
    }
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    let mut parts = Vec::new();
    if h > 0 {
        parts.push(format!("{h}h"));
    }
    if m > 0 {
        parts.push(format!("{m}m"));
    }
    if s > 0 && h == 0 {
        parts.push(format!("{s}s"));
    }
    if parts.is_empty() {
        "0s".to_string()
    } else {
        parts.join(" ")
    }
}

/// ISO text of an epoch time: `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
fn iso(epoch: f64) -> String {
    Timestamp::from_epoch(epoch).as_str().to_string()
}

/// Registry epoch seconds as `%Y-%m-%d %H:%M` in UTC, `-` when absent (list / overview).
pub fn format_epoch_minute(epoch: Option<f64>) -> String {
    match epoch {
        Some(e) if e.is_finite() => {
            let text = iso(e);
            format!("{} {}", &text[..10], &text[11..16])
        }
        _ => "-".to_string(),
    }
}

/// A checkpoint timestamp as `%Y-%m-%d %H:%M:%S UTC`; text we cannot parse is shown as is.
pub fn format_timestamp(text: &str) -> String {
    match parse_iso8601(text) {
        Some(e) => {
            let t = iso(e);
            format!("{} {} UTC", &t[..10], &t[11..19])
        }
        None => text.to_string(),
    }
}

/// `HH:MM:SS` (UTC) for the watch-mode footer.
pub fn format_clock(epoch: f64) -> String {
    iso(epoch)[11..19].to_string()
}

/// `1234567` → `1,234,567` (token counts).
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations_follow_upstreams_three_ranges() {
        let cases = [
            (None, "N/A"),
            (Some(0.0), "0.0s"),
            (Some(5.24), "5.2s"),
            (Some(59.9), "59.9s"),
            (Some(60.0), "1m 0s"),
            (Some(192.7), "3m 12s"),
            (Some(3599.0), "59m 59s"),
            (Some(3600.0), "1h 0m"),
            (Some(5400.0), "1h 30m"),
            (Some(90061.0), "25h 1m"),
        ];
        for (input, want) in cases {
            assert_eq!(format_duration(input), want, "{input:?}");
        }
    }

    #[test]
    fn uptime_uses_the_spec_units() {
        let cases = [
            (None, ""),
            (Some(6.9), "uptime 6s"),
            (Some(64.0), "uptime 1m 4s"),
            (Some(3600.0), "uptime 1h 0m"),
            (Some(7500.0), "uptime 2h 5m"),
            (Some(86400.0 + 3.0 * 3600.0 + 59.0), "uptime 1d 3h"),
        ];
        for (input, want) in cases {
            assert_eq!(format_uptime(input), want, "{input:?}");
        }
    }

    #[test]
    fn compact_durations_drop_zero_parts_and_seconds_past_an_hour() {
        let cases = [
            (0.0, "0s"),
            (-3.0, "0s"),
            (45.9, "45s"),
            (150.0, "2m 30s"),
            (120.0, "2m"),
            (3900.0, "1h 5m"),
            (3601.0, "1h"),
        ];
        for (input, want) in cases {
            assert_eq!(format_compact_duration(input), want, "{input}");
        }
    }

    #[test]
    fn timestamps_render_in_utc() {
        // 2026-11-21 20:53:10 UTC
        let epoch = 1_795_294_390.25;
        assert_eq!(format_epoch_minute(Some(epoch)), "2026-11-21 20:53");
        assert_eq!(format_epoch_minute(None), "-");
        assert_eq!(format_clock(epoch), "20:53:10");
        assert_eq!(
            format_timestamp("2026-11-21T20:53:10.250000Z"),
            "2026-11-21 20:53:10 UTC"
        );
        assert_eq!(
            format_timestamp("2026-11-21T22:53:10+02:00"),
            "2026-11-21 20:53:10 UTC"
        );
        assert_eq!(format_timestamp("yesterday"), "yesterday");
    }

    #[test]
    fn thousands_are_grouped() {
        for (n, want) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (1234567, "1,234,567"),
        ] {
            assert_eq!(thousands(n), want);
        }
    }
}
