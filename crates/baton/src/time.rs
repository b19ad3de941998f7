//! Time as the core sees it: a plain number passed in by the driver, never read inside.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, as measured by the driver's monotonic-anchored clock.
///
/// The core never reads a clock (design: deterministic, testable by feeding events); wall-clock
/// anchoring lets persisted deadlines (rate-limit expiry, §2.4) survive a conductor restart.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Millis(pub u64);

impl Millis {
    /// The zero instant, handy in tests.
    pub const ZERO: Millis = Millis(0);

    /// This instant plus `d` (saturating).
    pub fn plus(self, d: Duration) -> Millis {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Millis(self.0.saturating_add(ms))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Millis) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// Whole seconds, for messages.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }
}

/// Convert seconds (as upstream configs express them) into a `Duration`, clamping negatives
/// and non-finite values to zero.
pub fn secs(s: f64) -> Duration {
    if s.is_finite() && s > 0.0 {
        Duration::from_secs_f64(s)
    } else {
        Duration::ZERO
    }
}

/// A duration in words for messages: `2.5s`, `15s`, `2m`, `1h 30m`.
pub fn words(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 10.0 && secs.fract() > 0.05 {
        return format!("{secs:.1}s");
    }
    let s = d.as_secs() + u64::from(d.subsec_millis() >= 500);
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}

/// A clock for drivers: monotonic (`Instant`) but anchored to wall time at creation.
#[derive(Debug, Clone, Copy)]
pub struct AnchoredClock {
    origin: std::time::Instant,
    origin_ms: u64,
}

impl AnchoredClock {
    /// Anchor at the current wall-clock time.
    pub fn new() -> Self {
        let origin_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        AnchoredClock {
            origin: std::time::Instant::now(),
            origin_ms,
        }
    }

    /// Current time.
    pub fn now(&self) -> Millis {
        Millis(self.origin_ms).plus(self.origin.elapsed())
    }

    /// The `Instant` at which `at` falls (used to sleep until a timer deadline).
    pub fn instant_of(&self, at: Millis) -> std::time::Instant {
        self.origin + Duration::from_millis(at.0.saturating_sub(self.origin_ms))
    }
}

impl Default for AnchoredClock {
    fn default() -> Self {
        Self::new()
    }
}
