//! A finished Claude Code run made into its result in three steps (issue 26): what the run
//! said, read once ([`Outcome`]: its process and its events); the one verdict on it
//! ([`Outcome::verdict`] → [`ClaudeVerdict`]: answered, failed of a kind with the facts
//! the kind was decided from, not started, or stopped by the conductor on a live
//! [`Verdict`]); and the result, with its message worded last from both ([`result`]).
//! Success and the failure kind are decided in [`Outcome::verdict`] only.

use std::time::Duration;

use serde_json::Value;

use super::{ClaudeOutputFormat, ClaudeStream, AUTH_HINT, ROOT_REFUSAL, ROOT_REFUSAL_HINT};
use crate::cli_backend::{base_result, note_end, spawn_failure, timeout_message};
use crate::live::Verdict;
use crate::process::ProcessOutcome;
use crate::redact::redact;
use crate::types::{ExecutionResult, ExitReason, FailureKind};

/// What a Claude Code run said, read once: its process (exit, signal, timeout, output
/// tails), its json / stream-json events, and the live verdict the conductor reached while
/// it ran.
pub(super) struct Outcome<'a> {
    process: &'a ProcessOutcome,
    stream: ClaudeStream,
    /// What its `result` event reported (all empty when none came).
    reported: Reported,
    format: ClaudeOutputFormat,
    /// The tails of its output, as printed.
    stdout: String,
    stderr: String,
    /// The model the conductor asked for.
    model: Option<String>,
    /// The conductor's verdict on a retry it announced (the run was stopped on it when the
    /// process says it was stopped).
    live: Option<Verdict>,
}

/// What a `result` event reported (claude-code-output.md §8).
#[derive(Debug, Default)]
struct Reported {
    /// The answer (or the event's `errors`, one a line).
    result_text: Option<String>,
    /// The event says the run failed.
    is_error: bool,
    /// The HTTP status of the failed API call.
    api_status: Option<u16>,
    cost_usd: Option<f64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    session_id: Option<String>,
    /// The first model of its `modelUsage`.
    model: Option<String>,
}

impl Reported {
    /// Read a `result` event.
    fn read(ev: &Value) -> Reported {
        Reported {
            result_text: ev
                .get("result")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| {
                    ev.get("errors").and_then(Value::as_array).map(|errs| {
                        errs.iter()
                            .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_string))
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                }),
            is_error: ev.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            api_status: ev
                .get("api_error_status")
                .and_then(Value::as_u64)
                .and_then(|s| u16::try_from(s).ok()),
            cost_usd: ev
                .get("total_cost_usd")
                .or_else(|| ev.get("total_cost"))
                .and_then(Value::as_f64),
            input_tokens: ev.pointer("/usage/input_tokens").and_then(Value::as_u64),
            output_tokens: ev.pointer("/usage/output_tokens").and_then(Value::as_u64),
            session_id: ev
                .get("session_id")
                .and_then(Value::as_str)
                .map(str::to_string),
            model: ev
                .get("modelUsage")
                .and_then(Value::as_object)
                .and_then(|m| m.keys().next().cloned()),
        }
    }
}

/// The verdict on a Claude Code run, decided once from its [`Outcome`].
pub(super) enum ClaudeVerdict<'a> {
    /// It answered in time (json / stream-json: a `result` event without `is_error`; text:
    /// exit 0). `rate_limited`: it said it met a rate limit on the way.
    Answered { rate_limited: bool },
    /// It failed, of this kind, with the facts the kind was decided from.
    Failed {
        failure: Failure,
        /// The HTTP status of the failed API call (the result event's, or the one a
        /// text-mode answer names).
        api_status: Option<u16>,
        /// It said it met a rate limit (also true of a run that then timed out).
        rate_limited: bool,
    },
    /// It could not be started.
    NotStarted(&'a std::io::Error),
    /// The conductor stopped it at a retry it must not make (a refused key, a rate limit).
    Stopped(Verdict),
}

/// Why a run that started and ended by itself (or at its timeout) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    /// It refused to run as root with permissions skipped (claude-code-output.md §11).
    RootRefusal,
    /// It ran past its timeout.
    TimedOut,
    /// The API rate-limited it.
    RateLimited,
    /// The API refused its credentials.
    Auth,
    /// A json / stream-json run that ended without its `result` event.
    NoResult,
    /// Anything else.
    Execution,
}

impl Failure {
    /// The stored kind (`error_type`).
    fn kind(self) -> FailureKind {
        match self {
            Failure::RootRefusal => FailureKind::Configuration,
            Failure::TimedOut => FailureKind::Timeout,
            Failure::RateLimited => FailureKind::RateLimit,
            Failure::Auth => FailureKind::Auth,
            Failure::NoResult => FailureKind::NoResult,
            Failure::Execution => FailureKind::Execution,
        }
    }
}

impl<'a> Outcome<'a> {
    /// Read what the run said: its process, its events (`stream`) and the live verdict.
    pub(super) fn read(
        process: &'a ProcessOutcome,
        stream: ClaudeStream,
        live: Option<Verdict>,
        format: ClaudeOutputFormat,
        model: Option<String>,
    ) -> Outcome<'a> {
        Outcome {
            process,
            reported: stream
                .result
                .as_ref()
                .map(Reported::read)
                .unwrap_or_default(),
            stream,
            format,
            stdout: process.stdout.tail_string(),
            stderr: process.stderr.tail_string(),
            model,
            live,
        }
    }

    /// json / stream-json: the `result` event is the answer.
    fn structured(&self) -> bool {
        self.format != ClaudeOutputFormat::Text
    }

    /// The verdict — the one place success and the failure kind are decided.
    pub(super) fn verdict(&self) -> ClaudeVerdict<'a> {
        if let (Some(verdict), true) = (&self.live, self.process.stopped) {
            return ClaudeVerdict::Stopped(verdict.clone());
        }
        if let Some(err) = &self.process.spawn_error {
            return ClaudeVerdict::NotStarted(err);
        }
        let answered = self.answered();
        let api_status = self.api_status(answered);
        let rate_limited = self.rate_limited(answered, api_status);
        if answered {
            return ClaudeVerdict::Answered { rate_limited };
        }
        let failure = if self.root_refusal() {
            Failure::RootRefusal
        } else if self.process.timed_out {
            Failure::TimedOut
        } else if rate_limited {
            Failure::RateLimited
        } else if self.auth_refused(api_status) {
            Failure::Auth
        } else if self.structured() && self.stream.result.is_none() {
            Failure::NoResult
        } else {
            Failure::Execution
        };
        ClaudeVerdict::Failed {
            failure,
            api_status,
            rate_limited,
        }
    }

    /// Whether it answered: a timed-out run fails whatever it printed; in json /
    /// stream-json the result line is authoritative (a lingering CLI stopped after it
    /// keeps it), in text mode exit 0 is.
    fn answered(&self) -> bool {
        let p = self.process;
        let exited_ok = p.exit_code == Some(0) && !p.timed_out;
        !p.timed_out
            && if self.structured() {
                self.stream.result.is_some() && !self.reported.is_error && (exited_ok || p.lingered)
            } else {
                exited_ok
            }
    }

    /// What it answered: the result event's text, else what it printed.
    fn answer(&self) -> &str {
        self.reported.result_text.as_deref().unwrap_or(&self.stdout)
    }

    /// The HTTP status of the failed API call: the result event's, or (text mode, failed)
    /// the one its answer names.
    fn api_status(&self, answered: bool) -> Option<u16> {
        self.reported.api_status.or_else(|| {
            (!self.structured() && !answered)
                .then(|| text_api_status(self.answer()))
                .flatten()
        })
    }

    /// Whether it said it met a rate limit: a rejected `rate_limit_event`, a 429, the
    /// assistant's `rate_limit` error, or (failed runs) the words of one.
    fn rate_limited(&self, answered: bool, api_status: Option<u16>) -> bool {
        self.stream.rejected
            || api_status == Some(429)
            || self.stream.assistant_error.as_deref() == Some("rate_limit")
            || (!answered
                && crate::classify::detect_rate_limit(
                    self.answer(),
                    &self.stderr,
                    self.process.exit_code,
                ))
    }

    /// Whether the API refused its credentials.
    fn auth_refused(&self, api_status: Option<u16>) -> bool {
        let answer = self.answer();
        self.stream.assistant_error.as_deref() == Some("authentication_failed")
            || api_status == Some(401)
            || answer.contains("Please run /login")
            // "Invalid API key · Fix external API key" (2.1.331, text mode).
            || crate::classify::patterns::AUTH.is_match(answer)
    }

    /// Whether it refused to run as root before doing anything (claude-code-output.md §11).
    fn root_refusal(&self) -> bool {
        self.stream.result.is_none() && self.stderr.contains(ROOT_REFUSAL)
    }
}

/// The HTTP status of the failed API call a text-mode run names: Claude Code prints it as
/// `API Error: 529 Overloaded. This is a server-side issue, …` (2.1.331). It is the status
/// stream-json's result carries as `api_error_status`, and is read before any prose, as
/// there: an overload ("Overloaded … try again in a moment") is retried with backoff, not
/// parked as a rate limit, though its words read like one. A 429 reads `API Error: Request
/// rejected (429) · This request would exceed your account's rate limit. Please try again
/// later.`: a rate limit (E101), which its "try again later" made capacity (E103) unread.
pub(super) fn text_api_status(answer: &str) -> Option<u16> {
    static API_ERROR: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"(?m)^\s*API Error: (?:(\d{3})\b|Request rejected \((\d{3})\))")
            .unwrap_or_else(|e| panic!("API error pattern does not compile: {e}"))
    });
    API_ERROR
        .captures(answer)
        .and_then(|c| c.get(1).or_else(|| c.get(2)))
        .and_then(|m| m.as_str().parse().ok())
}

/// The result of a run on its verdict: the facts it keeps, the kind, and the message
/// worded last from both (redacted, as the output is).
pub(super) fn result(
    o: &Outcome<'_>,
    verdict: ClaudeVerdict<'_>,
    timeout: Duration,
) -> ExecutionResult {
    let (answered, failure, api_status, rate_limited) = match verdict {
        ClaudeVerdict::Stopped(verdict) => return stopped(o, verdict),
        ClaudeVerdict::NotStarted(err) => {
            let mut r = spawn_failure(err, "claude CLI not found in PATH".into(), "claude");
            if r.error_type == Some(FailureKind::NotFound) {
                r.stderr = "claude CLI not found".into();
            }
            r.model = o.model.clone();
            return r;
        }
        ClaudeVerdict::Answered { rate_limited } => {
            (true, None, o.reported.api_status, rate_limited)
        }
        ClaudeVerdict::Failed {
            failure,
            api_status,
            rate_limited,
        } => (false, Some(failure), api_status, rate_limited),
    };
    let mut r = reported_result(o);
    r.success = answered;
    r.api_error_status = api_status;
    r.rate_limited = rate_limited;
    r.error_type = match failure {
        Some(failure) => Some(failure.kind()),
        // A successful run that hit a rate limit still says so.
        None => rate_limited.then_some(FailureKind::RateLimit),
    };
    // A process that outlived its answer and was then killed ended normally.
    let signal = o.process.exit_signal.filter(|_| !o.process.lingered);
    note_end(&mut r, o.process.timed_out, signal);
    r.error_message = failure.map(|failure| match failure {
        Failure::RootRefusal => ROOT_REFUSAL_HINT.into(),
        Failure::TimedOut => timeout_message(timeout),
        // Text mode names no HTTP status, so the classifier cannot add its hint: say here
        // which key to check (with a status, the classifier says it).
        Failure::Auth if api_status.is_none() => {
            format!("{}. {AUTH_HINT}", failure_message(o, &r))
        }
        _ => failure_message(o, &r),
    });
    r.stdout = redact(&o.stdout);
    r.stderr = redact(&o.stderr);
    r.result_text = r.result_text.map(|t| redact(&t));
    r.error_message = r.error_message.map(|t| redact(&t));
    r
}

/// The facts of a run that ended by itself (or at its timeout): its process's, and what its
/// events reported (answer, cost, tokens, session, model, the rate limit's reset and wait).
fn reported_result(o: &Outcome<'_>) -> ExecutionResult {
    let mut r = base_result(o.process);
    let reported = &o.reported;
    r.result_text = reported.result_text.clone();
    r.cost_usd = reported.cost_usd;
    r.input_tokens = reported.input_tokens;
    r.output_tokens = reported.output_tokens;
    r.session_id = reported.session_id.clone().or(o.stream.session_id.clone());
    r.model = o
        .stream
        .model
        .clone()
        .or(reported.model.clone())
        .or(o.model.clone());
    r.rate_limit_reset = o.stream.rejected_reset;
    if reported.api_status == Some(429) {
        r.retry_after_seconds = o.stream.rate_limit_retry_delay;
    }
    r
}

/// Why a failed run failed, in words: its answer, the line of its output that says why, or
/// what it printed instead of its format.
fn failure_message(o: &Outcome<'_>, r: &ExecutionResult) -> String {
    let structured = o.structured();
    let has_result = o.stream.result.is_some();
    let stdout = o.stdout.as_str();
    // In text mode a failed run prints its error as its answer, on stdout
    // (claude-code-output.md §3); stderr holds flag errors and warnings.
    let answer = (!structured)
        .then(|| crate::classify::cause_line(stdout, ""))
        .flatten();
    let said = answer.or_else(|| crate::classify::cause_line("", &o.stderr));
    match (&r.result_text, said, o.process.exit_code) {
        (Some(text), _, _) if !text.trim().is_empty() => text.clone(),
        (_, Some(line), Some(code)) => {
            format!("Claude Code exited with code {code}: {line}")
        }
        (_, Some(line), None) => line,
        // Not one JSON line: whatever answered is not Claude Code speaking its
        // structured output (issue 22, "prints garbage"): show what it printed.
        (_, None, Some(code))
            if structured
                && !has_result
                && !stdout.trim().is_empty()
                && !stdout.lines().any(|l| l.trim_start().starts_with('{')) =>
        {
            let shown: String = stdout.trim().replace('\n', " ").chars().take(200).collect();
            format!(
                "Claude Code exited with code {code} and printed no `{format}` output \
                 (check that `claude --version` is Claude Code, or set \
                 backend.output_format: text): {shown}",
                format = o.format.as_str()
            )
        }
        (_, None, Some(code)) if structured && !has_result => {
            format!("Claude Code exited with code {code} without a result")
        }
        (_, None, Some(code)) => format!("Claude Code exited with code {code}"),
        (_, None, None) => "Claude Code was killed by a signal".into(),
    }
}

/// The result of a run the conductor stopped on `verdict` (an `api_retry` for a refused key
/// or a rate limit): not the CLI's failure but the API's answer, classified as such.
fn stopped(o: &Outcome<'_>, verdict: Verdict) -> ExecutionResult {
    let mut r = ExecutionResult {
        success: false,
        exit_reason: ExitReason::Killed,
        stdout: redact(&o.stdout),
        stderr: redact(&o.stderr),
        stdout_bytes: o.process.stdout.total,
        stderr_bytes: o.process.stderr.total,
        duration_seconds: o.process.duration.as_secs_f64(),
        started_at_epoch: o.process.started_at_epoch,
        session_id: o.stream.session_id.clone(),
        model: o.stream.model.clone().or(o.model.clone()),
        ..Default::default()
    };
    let message = match verdict {
        Verdict::Auth { status, said } => {
            r.error_type = Some(FailureKind::Auth);
            r.api_error_status = Some(status.unwrap_or(401));
            format!("Claude Code was stopped at its first retry: {said}; retrying cannot help")
        }
        Verdict::RateLimit {
            status,
            retry_after,
            said,
        } => {
            r.error_type = Some(FailureKind::RateLimit);
            r.rate_limited = true;
            r.api_error_status = Some(status.unwrap_or(429));
            r.retry_after_seconds = retry_after;
            format!(
                "Claude Code was stopped at its first retry: {said}{}",
                retry_after
                    .map(|s| format!(", retry after {s:.1}s"))
                    .unwrap_or_default()
            )
        }
    };
    r.error_message = Some(redact(&message));
    r
}
