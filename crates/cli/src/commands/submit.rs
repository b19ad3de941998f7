//! The submitting half of `mozart run CONFIG_FILE` (cli.md §3.1 steps 1–3 and 5–9); the
//! dry run lives in `run.rs`, which calls [`submit`].

use std::path::PathBuf;

use mozart_config::Score;
use mozart_ipc::status::JobStatusResult;
use mozart_ipc::types::{JobRequest, JobResponse, JobResponseStatus, RateLimitsResult};
use mozart_ipc::{methods, BlockingClient};
use serde_json::json;

use super::status::{absolute, absolute_text, classify, rate_limit_lines, JobCallError};
use crate::conductor_client;
use crate::error::Detailed;
use crate::output::print_json;
use crate::{CliError, ErrorKind, Globals, OutputMode};
use mozart_client::hints::{rejection_headline, rejection_hints};
use mozart_client::submit::first_failure;

/// What `mozart run` passes on when it is not a dry run.
#[derive(Debug, Clone, Default)]
pub struct SubmitArgs {
    /// The score file (must exist; clap checks that).
    pub config_file: PathBuf,
    /// `--workspace`: overrides the score's workspace.
    pub workspace: Option<PathBuf>,
    /// `--fresh`: discard previous state.
    pub fresh: bool,
    /// `--start-sheet` (≥ 1).
    pub start_sheet: Option<u32>,
    /// `--json`.
    pub output: OutputMode,
    /// `--self-healing`.
    pub self_healing: bool,
    /// `--yes`: auto-confirm self-healing.
    pub yes: bool,
    /// `--escalation`: always refused in daemon mode.
    pub escalation: bool,
    /// Global `--quiet`: skip the configuration panel.
    pub quiet: bool,
}

/// Message for `--escalation` (§3.1 step 3).
pub const ESCALATION_UNSUPPORTED: &str = "--escalation requires interactive console prompts \
     which are not available in daemon mode. Escalation is not currently supported.";
/// `run --json`'s own not-running message (§1.5 exception).
pub const RUN_NOT_RUNNING_JSON: &str = "Mozart conductor is not running. Start with: mozart start";

/// Submit the score to the conductor and report the outcome; returns the exit code.
pub fn submit(globals: &Globals, args: &SubmitArgs, score: &Score) -> Result<i32, CliError> {
    if args.start_sheet == Some(0) {
        return Err(CliError::Usage(
            "Invalid value: --start-sheet must be >= 1, got 0".into(),
        ));
    }

    // 1. The caller parsed the score (once: `mozart run` read and checked it already), so
    // the user saw score errors without a round trip.
    // 2.
    if !args.quiet && !args.output.is_json() {
        print_panel(&score.config);
    }

    // 3.
    if args.escalation {
        return Err(not_submitted(ESCALATION_UNSUPPORTED, vec![], args.output));
    }

    let (mut response, mut client) = send(globals, args, job_request(args, score))?;
    match response.status {
        // 6.
        JobResponseStatus::Pending => {
            report_pending(&response, args.output);
            Ok(0)
        }
        // 8.
        // Accepted is exit 0 however soon the job ends: `run`'s exit code says whether the
        // conductor took the job, never how fast the job failed (upstream exits 1 only when
        // the failure came within 1.5 s). A job that already ended is reported with its
        // cause; its outcome as an exit code is `mozart wait`'s.
        JobResponseStatus::Accepted => {
            // The conductor watched the job before answering (`watch_ms`); an older one
            // answers at once, and the job is watched with a call of its own.
            // (Out of the answer, which `--json` prints in upstream's shape.)
            let watched = response.watched.take();
            let ended = match &watched {
                Some(seen) => mozart_client::submit::ended(&mut client, seen),
                None => mozart_client::submit::early_failure(&mut client, &response.job_id),
            };
            report_accepted(&response, ended.as_ref(), watched.is_some(), args);
            Ok(0)
        }
        // 7.
        JobResponseStatus::Rejected | JobResponseStatus::Error => {
            Err(refusal(globals, args, response))
        }
    }
}

/// The `job.submit` request (§3.1 step 5). Paths go absolute: the conductor resolves
/// relative ones in its own directory (§10). The workspace is the one this command
/// resolved — also when the score has no `workspace:` key, whose default `./workspace`
/// would otherwise resolve in the conductor's directory and differ from what
/// `mozart run --dry-run` showed.
fn job_request(args: &SubmitArgs, score: &Score) -> JobRequest {
    let workspace = match &args.workspace {
        Some(ws) => absolute(ws),
        None => score.config.workspace.clone(),
    };
    JobRequest {
        config_path: absolute_text(&args.config_file),
        workspace: Some(workspace.display().to_string()),
        fresh: args.fresh,
        self_healing: args.self_healing,
        self_healing_auto_confirm: args.yes,
        start_sheet: args.start_sheet,
        // The early-failure look (§3.1 step 8) on the submission itself: one call, and
        // nothing sent while the conductor starts the job's first sheet.
        watch_ms: Some(mozart_client::submit::EARLY_FAILURE_WINDOW.as_millis() as u64),
        // Where a chained score without `workspace:` gets its `./workspace` from.
        cwd: std::env::current_dir()
            .ok()
            .map(|d| d.display().to_string()),
        ..JobRequest::default()
    }
}

/// Submit `params` and hand back the answer with the connection, which the early-failure
/// watch reuses. One connection for both (issue 26), and no health probe first: the
/// submission itself tells whether a conductor answers (a round trip less per score while
/// many jobs run, issue 24).
fn send(
    globals: &Globals,
    args: &SubmitArgs,
    params: JobRequest,
) -> Result<(JobResponse, BlockingClient), CliError> {
    let submitted = conductor_client::connect_direct(globals, args.output)
        .map_err(JobCallError::Cli)
        .and_then(|mut client| {
            client
                .call(methods::JOB_SUBMIT, params)
                .map(|response| (response, client))
                .map_err(|err| classify(err, args.output))
        });
    let job_id = || {
        args.config_file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    match submitted {
        Ok(answer) => Ok(answer),
        // The request went out and no answer came in time (the conductor is busy, or
        // stopped — SIGSTOP, a debugger): it may take the score once it goes on, so
        // neither "not submitted" nor "restart" (which would interrupt it) is the answer.
        Err(JobCallError::Other(mozart_client::ClientError::Timeout(_))) => {
            let job_id = job_id();
            Err(not_submitted(
                "The conductor did not answer in time (it is busy or not responding): the \
                 score may or may not have been submitted",
                vec![
                    format!(
                        "Check: mozart status {job_id} (or mozart list) once the conductor answers"
                    ),
                    "If it is not listed, run the score again".to_string(),
                ],
                args.output,
            ))
        }
        // The request went out and the conductor went away before answering (stopped or
        // killed while taking it): the score may have been registered — it then resumes
        // with the conductor — so "not submitted" would not be true.
        Err(JobCallError::Other(mozart_client::ClientError::Transport(
            mozart_ipc::IpcError::Protocol { .. },
        ))) => {
            let job_id = job_id();
            Err(not_submitted(
                "The conductor stopped before answering: the score may or may not have been submitted",
                vec![
                    format!("Check: mozart status {job_id} (after 'mozart start' if the conductor is down)"),
                    "If it is not listed, run the score again".to_string(),
                ],
                args.output,
            ))
        }
        Err(JobCallError::Cli(err)) if args.output.is_json() && !err.is_untrusted() => {
            Err(not_submitted(RUN_NOT_RUNNING_JSON, vec![], args.output))
        }
        Err(JobCallError::Cli(err)) => Err(err),
        // 9.
        Err(err) => Err(not_submitted(
            err.message(),
            vec!["Restart the conductor: mozart restart".to_string()],
            args.output,
        )),
    }
}

/// The conductor's message, when it gave one.
fn response_message(response: &JobResponse) -> Option<&str> {
    response.message.as_deref().filter(|m| !m.is_empty())
}

/// §3.1 step 6: the score waits for rate limits to clear.
fn report_pending(response: &JobResponse, mode: OutputMode) {
    let job_id = &response.job_id;
    let message = response_message(response);
    if mode.is_json() {
        print_json(&json!({"job_id": job_id, "status": "pending", "message": message}));
        return;
    }
    println!("Score queued as pending: {job_id}");
    println!(
        "{}",
        message.unwrap_or("Score queued as pending — starts when rate limits clear.")
    );
    crate::selector::say(format!("Monitor with: mozart status {job_id} --watch"));
    crate::selector::say(format!("Cancel with:  mozart cancel {job_id}"));
}

/// §3.1 step 8: the conductor took the score; `ended` is the job when it already ended
/// during the short look that follows.
fn report_accepted(
    response: &JobResponse,
    ended: Option<&JobStatusResult>,
    watched: bool,
    args: &SubmitArgs,
) {
    let job_id = &response.job_id;
    if args.output.is_json() {
        let mut doc = serde_json::to_value(response).unwrap_or_else(|_| json!({}));
        if let (Some(ended), Some(obj)) = (ended, doc.as_object_mut()) {
            obj.insert("job_status".into(), json!(ended.status()));
            obj.insert("error".into(), json!(ended.error_message()));
            if let Some(cause) = first_failure(ended) {
                obj.insert("failure".into(), cause.to_json());
            }
        }
        print_json(&doc);
        return;
    }
    // Nothing ran, but not because a completed score was sent again unchanged (a failed
    // job's score cut to its finished sheets, hooks still owed): the conductor's words.
    let other_reason = response
        .message
        .as_deref()
        .filter(|m| !m.starts_with("Job already completed"));
    if let (true, Some(message)) = (response.nothing_to_run, other_reason) {
        println!("Score submitted to conductor: {job_id}");
        println!("  {message}");
        println!();
        crate::selector::say(format!("See it with: mozart status {job_id}"));
        return;
    }
    if response.nothing_to_run {
        println!("Score already completed: {job_id}");
        println!(
            "  Every sheet completed in an earlier run and the score has not changed: nothing was run."
        );
        println!();
        crate::selector::say(format!(
            "Run it again from the start with: mozart run {} --fresh",
            args.config_file.display()
        ));
        return;
    }
    println!("Score submitted to conductor: {job_id}");
    if let Some(m) = response_message(response) {
        let (first, more) = m.split_once('\n').unwrap_or((m, ""));
        println!("  {}", accepted_words(first, watched));
        for line in more.lines() {
            println!("  {line}");
        }
    }
    println!();
    match ended {
        Some(ended) => report_early_failure(job_id, ended),
        None => crate::selector::say(format!("Monitor with: mozart status {job_id} --watch")),
    }
}

/// The conductor's message on an accepted job, as a person reads it. Ours says `Job
/// started` or `Job queued` once its watch saw which; upstream's (and ours without a watch)
/// says "queued" for every accepted job, also one that starts at once: then say what the
/// limit means instead.
fn accepted_words(message: &str, watched: bool) -> String {
    let limit = |prefix: &str| {
        message
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(')'))
            .map(str::to_string)
    };
    // The limit arrives as text; "up to 1 job runs", "up to 3 jobs run".
    let run = |n: String| match n.as_str() {
        "1" => "1 job runs".to_string(),
        _ => format!("{n} jobs run"),
    };
    if let Some(n) = limit("Job started (concurrency limit: ") {
        return format!("Job started (up to {} at once)", run(n));
    }
    match limit("Job queued (concurrency limit: ") {
        Some(n) if watched => {
            format!(
                "Job queued: waiting for a job slot (up to {} at once)",
                run(n)
            )
        }
        Some(n) => format!(
            "Job accepted (up to {} at once; more wait for a free slot)",
            run(n)
        ),
        None => message.to_string(),
    }
}

/// §3.1 step 7: the conductor refused the score. In JSON mode its answer as upstream's
/// `run --json` shows it (without our typed reason); as text the headline, the hints for
/// the typed reason, and the active rate limits when the reason is load.
fn refusal(globals: &Globals, args: &SubmitArgs, response: JobResponse) -> CliError {
    let file = args.config_file.display().to_string();
    let reason = response.rejection_reason();
    let message = rejection_headline(response_message(&response));
    let (hints, show_limits) = rejection_hints(reason, &response.job_id, &file, args.fresh);
    let after = if show_limits && !args.output.is_json() {
        active_limits(globals)
    } else {
        Vec::new()
    };
    let document = serde_json::to_value(JobResponse {
        reason: None,
        ..response
    })
    .unwrap_or_else(|_| json!({}));
    CliError::Detailed(Box::new(Detailed {
        code: None,
        message,
        hints,
        after,
        document,
        mode: args.output,
        exit: 1,
    }))
}

/// A failure of `mozart run` that submitted nothing: `{"error": ...}` in JSON mode, else
/// `Error:` + hints; exit 1.
pub(crate) fn not_submitted(
    message: impl Into<String>,
    hints: Vec<String>,
    mode: OutputMode,
) -> CliError {
    CliError::of(ErrorKind::NotSubmitted, message, hints, mode)
}

/// The "Score Configuration" panel (§3.1 step 2), as plain lines.
fn print_panel(config: &mozart_config::JobConfig) {
    let total = mozart_config::plan::total_sheets(&config.sheet);
    let instrument = config
        .instrument
        .clone()
        .unwrap_or_else(|| config.backend.kind.as_str().to_string());
    println!("Score Configuration");
    println!("  {}", config.name);
    println!(
        "  {}",
        config.description.as_deref().unwrap_or("No description")
    );
    println!();
    println!("  Instrument: {}", crate::output::plain(&instrument));
    println!(
        "  Sheets: {total} ({} each)",
        mozart_config::plural(config.sheet.size, "item", "items")
    );
    println!("  Workspace: {}", config.workspace.display());
    // The tip is about money: a score that only runs the free `shell` instrument has none
    // to lose, so it is not told to guard against charges (issue 23).
    if !config.cost_limits.enabled && !only_free_instruments(config) {
        println!();
        // Ours: upstream said "Cost tracking is disabled … API calls will not be monitored",
        // but every attempt's cost is recorded and shown; only the limit is off.
        println!("{NO_COST_LIMIT_NOTE}");
        println!(
            "  Tip: Set cost_limits.enabled: true in your score to prevent unexpected charges"
        );
    }
    println!();
}

/// What `run` says of a score without cost limits (docs/differences.md).
pub(crate) const NO_COST_LIMIT_NOTE: &str = "Note: No cost limit is set for this score: its API costs are recorded (mozart status), but nothing stops the job when they grow.";

/// Whether every instrument the score can run is the free built-in `shell` (no API
/// charges): the score-level one, movements, per-sheet choices, aliases and fallbacks.
pub(crate) fn only_free_instruments(config: &mozart_config::JobConfig) -> bool {
    let top = config
        .instrument
        .clone()
        .unwrap_or_else(|| config.backend.kind.as_str().to_string());
    std::iter::once(top.as_str())
        .chain(config.instrument_fallbacks.iter().map(String::as_str))
        .chain(
            config
                .movements
                .values()
                .flat_map(|m| m.instrument.iter().chain(m.instrument_fallbacks.iter()))
                .map(String::as_str),
        )
        .chain(
            config
                .sheet
                .per_sheet_instruments
                .values()
                .map(String::as_str),
        )
        .chain(config.sheet.instrument_map.keys().map(String::as_str))
        .all(|name| name == "shell")
        && config.instruments.is_empty()
}

/// The "Active rate limits" section shown after a refusal under load: empty when there are
/// none or the conductor does not say.
fn active_limits(globals: &Globals) -> Vec<String> {
    let Ok(mut client) = conductor_client::connect(globals) else {
        return Vec::new();
    };
    let Ok(limits) = client.call::<_, RateLimitsResult>(methods::DAEMON_RATE_LIMITS, ()) else {
        return Vec::new();
    };
    let lines = rate_limit_lines(&limits);
    if lines.is_empty() {
        return lines;
    }
    let mut section = vec![String::new(), "Active rate limits:".to_string()];
    section.extend(lines.into_iter().map(|l| format!("  {l}")));
    section
}

/// A job that ended during `run`'s short look: what happened and why, then where to look.
fn report_early_failure(job_id: &str, status: &JobStatusResult) {
    // What the instrument printed is in the cause: shown, not obeyed.
    let println = |line: String| println!("{}", crate::output::terminal_safe(&line));
    println(format!(
        "The score has already {}: {job_id}",
        status.status()
    ));
    match first_failure(status) {
        Some(cause) => {
            let code = cause
                .error_code
                .as_deref()
                .map(|c| format!(" [{c}]"))
                .unwrap_or_default();
            println(format!(
                "  Sheet {} failed{code}: {}",
                cause.sheet_num, cause.message
            ));
            if let Some(line) = &cause.stderr {
                println(format!("  Its instrument said: {line}"));
            }
            if cause.others > 0 {
                println(format!(
                    "  {} failed or did not run.",
                    mozart_config::plural(cause.others, "more sheet", "more sheets")
                ));
            }
        }
        None => {
            if let Some(e) = status.error_message().filter(|e| !e.is_empty()) {
                println(format!("  {e}"));
            }
        }
    }
    println!();
    crate::selector::say(format!(
        "Errors: mozart errors {job_id}   Full report: mozart diagnose {job_id}"
    ));
}
