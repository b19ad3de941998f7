//! The conductor's reading of a CLI's live output (issue 22): the AI CLIs retry a failed API
//! call by themselves — Claude Code ten times over minutes, Gemini CLI ten times, Codex five
//! reconnects — and say so as they go (Claude's stream-json `api_retry` events, Gemini's
//! "Attempt N failed: …" lines on stderr, Codex's "Reconnecting... N/5 (…)" events). The
//! conductor, not the CLI's retry loop, decides what such a retry means:
//!
//! * the API refused the credentials (HTTP 401 / 403): retrying cannot help — the CLI is
//!   stopped at once and the attempt fails as an authentication error;
//! * the API rate-limited the call (HTTP 429): the CLI is stopped and the conductor parks the
//!   instrument for as long as the API or CLI said (rate limits are tempo, not failure);
//! * the API is overloaded (HTTP 529 / 503) or anything else: the CLI keeps retrying, and its
//!   retry shows in the sheet's live progress.
//!
//! A backend's line sink reads the announcement ([`retry_notice`], or Claude's event), judges
//! it ([`judge`]) and, for the first two, records a [`Verdict`] in the execution's [`Watch`],
//! which stops the process group (the process runner waits on [`Watch::stop_signal`]).

use std::sync::{Arc, LazyLock, Mutex};

use regex::Regex;

use crate::classify::{patterns, retry_hint_seconds, short};
use crate::types::{ExecutionResult, ExitReason, FailureKind};

/// Why the conductor stopped a CLI while it was still retrying.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The API refused the credentials.
    Auth {
        /// HTTP status, when the CLI named it.
        status: Option<u16>,
        /// What the CLI said about it (its retry line).
        said: String,
    },
    /// The API rate-limited the call.
    RateLimit {
        /// HTTP status, when the CLI named it.
        status: Option<u16>,
        /// Seconds the API (or the CLI on its behalf) asked to wait, when it said.
        retry_after: Option<f64>,
        /// What the CLI said about it (its retry line).
        said: String,
    },
}

impl Verdict {
    /// Mark `r` as the run the conductor stopped on this verdict: killed, failed, and of
    /// which kind (a rate limit with the API's status and wait). The message is the
    /// backend's to word. (A profile instrument's; Claude's result is made whole in
    /// `claude::outcome`, from its own verdict.)
    pub(crate) fn mark(&self, r: &mut ExecutionResult) {
        r.success = false;
        r.exit_reason = ExitReason::Killed;
        match self {
            Verdict::Auth { .. } => r.error_type = Some(FailureKind::Auth),
            Verdict::RateLimit {
                status,
                retry_after,
                ..
            } => {
                r.rate_limited = true;
                r.api_error_status = Some(status.unwrap_or(429));
                r.retry_after_seconds = *retry_after;
                r.error_type = Some(FailureKind::RateLimit);
            }
        }
    }
}

/// One execution's verdict, shared between its line sinks and the backend, and the signal
/// that stops its process.
#[derive(Debug, Default)]
pub struct Watch {
    verdict: Mutex<Option<Verdict>>,
    stop: Arc<tokio::sync::Notify>,
}

impl Watch {
    /// A watch with no verdict yet.
    pub fn new() -> Arc<Watch> {
        Arc::new(Watch::default())
    }

    /// Record `verdict` (the first one wins) and stop the process.
    pub fn decide(&self, verdict: Verdict) {
        let mut slot = self
            .verdict
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(verdict);
            // A permit is stored when nobody waits yet: a verdict reached before the runner
            // waits still stops the process.
            self.stop.notify_one();
        }
    }

    /// The verdict, if one was reached.
    pub fn verdict(&self) -> Option<Verdict> {
        self.verdict
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Notified when a verdict is reached (for [`crate::process::ProcessSpec::stop`]).
    pub fn stop_signal(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.stop)
    }
}

/// A CLI's announcement that it retries a failed API call.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryNotice {
    /// Which retry, and of how many, when the CLI said.
    pub attempt: Option<(u32, Option<u32>)>,
    /// HTTP status of the failed call, when the line names it.
    pub status: Option<u16>,
    /// The cause as the CLI printed it (empty when it printed none).
    pub cause: String,
    /// Seconds the API asked to wait, when the line says ("Please retry in 2s", "Suggested
    /// retry after 3s", `retryDelay`).
    pub retry_after: Option<f64>,
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|err| panic!("retry-notice pattern does not compile: {err}"))
}

/// Codex: `Reconnecting... 2/5 (unexpected status 503 Service Unavailable: …)` (JSONL `error`
/// events; its text mode prints `ERROR: Reconnecting... 2/5` without the cause).
static CODEX_RECONNECT: LazyLock<Regex> =
    LazyLock::new(|| re(r"Reconnecting\.\.\. (\d+)/(\d+)(?: \((.*)\))?\s*$"));
/// Gemini CLI (stderr): `Attempt 1 failed: <message>` and
/// `Attempt 1 failed with status 503. Retrying with backoff... <error>`.
static GEMINI_ATTEMPT: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*Attempt (\d+) failed(?: with status (\d{3}))?[.:]?\s*(.*)$"));
/// HTTP statuses as the CLIs print them.
static STATUS: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r#"(?i)\bstatus:?\s+(\d{3})\b|"code"\s*:\s*(\d{3})\b|\b(\d{3}) (?:Too Many Requests|Unauthorized|Forbidden|Service Unavailable)\b"#,
    )
});
static SUGGESTED: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)suggested retry after (\d+(?:\.\d+)?)\s*(ms|s)\b"));

/// The HTTP status a CLI's message names, if any.
pub fn status_in(text: &str) -> Option<u16> {
    STATUS.captures_iter(text).find_map(|c| {
        (1..=3)
            .find_map(|i| c.get(i))
            .and_then(|m| m.as_str().parse().ok())
    })
}

/// Seconds a CLI's line says the API asked to wait.
pub fn retry_after_in(text: &str) -> Option<f64> {
    if let Some(c) = SUGGESTED.captures(text) {
        let n: f64 = c.get(1)?.as_str().parse().ok()?;
        return Some(if c.get(2).is_some_and(|u| u.as_str() == "ms") {
            n / 1000.0
        } else {
            n
        });
    }
    retry_hint_seconds(text)
}

/// Read one output line as a retry announcement of a known CLI (Codex's reconnects, Gemini
/// CLI's failed attempts); `None` for any other line.
pub fn retry_notice(line: &str) -> Option<RetryNotice> {
    if let Some(c) = CODEX_RECONNECT.captures(line) {
        let n = c.get(1)?.as_str().parse().ok()?;
        let max = c.get(2).and_then(|m| m.as_str().parse().ok());
        let cause = c.get(3).map_or("", |m| m.as_str()).trim().to_string();
        return Some(RetryNotice {
            attempt: Some((n, max)),
            status: status_in(&cause),
            retry_after: retry_after_in(&cause),
            cause,
        });
    }
    if let Some(c) = GEMINI_ATTEMPT.captures(line) {
        let n = c.get(1)?.as_str().parse().ok()?;
        let cause = c.get(3).map_or("", |m| m.as_str()).trim().to_string();
        let status = c
            .get(2)
            .and_then(|m| m.as_str().parse().ok())
            .or_else(|| status_in(&cause));
        return Some(RetryNotice {
            attempt: Some((n, None)),
            status,
            retry_after: retry_after_in(&cause),
            cause,
        });
    }
    None
}

/// What a failed, retried API call means for the conductor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    /// Credentials refused: stop the CLI, fail the attempt.
    Auth,
    /// Rate limited: stop the CLI, park the instrument.
    RateLimit,
    /// Overloaded: the CLI's own retries are the right remedy.
    Overload,
    /// Anything else (a dropped connection, a 500): let the CLI retry.
    Other,
}

/// Judge a failed call from its HTTP status, else from its text: Mozart's built-in patterns
/// and the instrument profile's own (`auth_error_patterns`, `rate_limit_patterns`,
/// `capacity_patterns`).
pub fn judge(
    status: Option<u16>,
    cause: &str,
    profile: Option<&crate::profile::ErrorPatterns>,
) -> Judgement {
    match status {
        Some(401 | 403) => return Judgement::Auth,
        Some(429) => return Judgement::RateLimit,
        Some(500..=599) => return Judgement::Overload,
        Some(_) => return Judgement::Other,
        None => {}
    }
    if cause.is_empty() {
        return Judgement::Other;
    }
    let profile_match = |pick: fn(&crate::profile::ErrorPatterns) -> &Option<Regex>| {
        profile
            .and_then(|p| pick(p).as_ref())
            .is_some_and(|re| re.is_match(cause))
    };
    if patterns::AUTH.is_match(cause) || profile_match(|p| &p.auth) {
        Judgement::Auth
    } else if patterns::CAPACITY.is_match(cause) || profile_match(|p| &p.capacity) {
        Judgement::Overload
    } else if patterns::mentions_rate_limit(cause) || profile_match(|p| &p.rate_limit) {
        Judgement::RateLimit
    } else {
        Judgement::Other
    }
}

/// The wall-clock time `secs` from now, `HH:MM:SS UTC`: a retry's next try as the live
/// progress says it. "next in 8.7s" was shown unchanged for as long as the event stayed the
/// latest (`mozart status` showed it 6 s later as if it were live).
pub fn clock_after(secs: f64) -> String {
    let at = mozart_ipc::time::Timestamp::from_epoch(mozart_ipc::time::epoch_now() + secs);
    match at.as_str().get(11..19) {
        Some(clock) => format!("{clock} UTC"),
        None => at.as_str().to_string(),
    }
}

/// The live-progress words for a retry the CLI makes (or that the conductor stops).
pub fn retry_progress(judgement: Judgement, notice: &RetryNotice, delay: Option<f64>) -> String {
    let what = match notice.status {
        Some(s) => format!("HTTP {s}"),
        None if notice.cause.is_empty() => "an error".to_string(),
        None => short(&notice.cause, 120),
    };
    let counts = match notice.attempt {
        Some((n, Some(max))) => format!(" {n}/{max}"),
        Some((n, None)) => format!(" {n}"),
        None => String::new(),
    };
    let next = delay
        .map(|d| format!(", next at {}", clock_after(d)))
        .unwrap_or_default();
    match judgement {
        Judgement::Auth => {
            format!("API refused the credentials ({what}): stopping the CLI instead of retrying")
        }
        Judgement::RateLimit => format!(
            "API rate limit ({what}): stopping the CLI; the conductor waits{}",
            notice
                .retry_after
                .map(|s| format!(" {s:.0}s, as the API asked"))
                .unwrap_or_default()
        ),
        Judgement::Overload => {
            format!("API overloaded ({what}): the CLI retries by itself (retry{counts}{next})")
        }
        Judgement::Other => format!("API retry{counts} after {what}{next}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn codex_reconnects_are_notices_with_their_status() {
        let n = retry_notice(
            "Reconnecting... 1/5 (unexpected status 401 Unauthorized: Incorrect API key provided: k., url: http://127.0.0.1:1/v1/responses)",
        )
        .unwrap();
        assert_eq!(n.attempt, Some((1, Some(5))));
        assert_eq!(n.status, Some(401));
        assert_eq!(judge(n.status, &n.cause, None), Judgement::Auth);
        let n = retry_notice(
            "Reconnecting... 2/5 (exceeded retry limit, last status: 429 Too Many Requests)",
        )
        .unwrap();
        assert_eq!(n.status, Some(429));
        assert_eq!(judge(n.status, &n.cause, None), Judgement::RateLimit);
        // Text mode names no cause: nothing to judge.
        let n = retry_notice("ERROR: Reconnecting... 1/5").unwrap();
        assert_eq!((n.status, n.cause.as_str()), (None, ""));
        assert_eq!(judge(n.status, &n.cause, None), Judgement::Other);
        assert!(retry_notice("thread 01a21274-4290 started").is_none());
    }

    #[test]
    fn gemini_attempts_are_notices_with_the_apis_retry_hint() {
        let n = retry_notice(
            "Attempt 1 failed: Resource has been exhausted (e.g. check quota). Please retry in 3s.",
        )
        .unwrap();
        assert_eq!(n.status, None);
        assert_eq!(n.retry_after, Some(3.0));
        assert_eq!(judge(n.status, &n.cause, None), Judgement::RateLimit);
        let n = retry_notice(
            r#"Attempt 2 failed with status 503. Retrying with backoff... _ApiError: {"error":{"code":503,"message":"The model is overloaded."}}"#,
        )
        .unwrap();
        assert_eq!(n.status, Some(503));
        assert_eq!(judge(n.status, &n.cause, None), Judgement::Overload);
        assert_eq!(
            retry_after_in("Suggested retry after 3s.. Retrying after 5342ms..."),
            Some(3.0)
        );
        assert_eq!(
            status_in(r#"_ApiError: {"error":{"code":401,"message":"API key not valid."}}"#),
            Some(401)
        );
    }

    #[test]
    fn the_first_verdict_wins_and_stops() {
        let w = Watch::new();
        let stop = w.stop_signal();
        w.decide(Verdict::Auth {
            status: Some(401),
            said: "no".into(),
        });
        w.decide(Verdict::RateLimit {
            status: Some(429),
            retry_after: None,
            said: "later".into(),
        });
        assert!(matches!(w.verdict(), Some(Verdict::Auth { .. })));
        // The permit was stored before anyone waited.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(1), stop.notified())
                .await
                .unwrap();
        });
    }
}
