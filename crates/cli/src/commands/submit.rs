//! The submitting half of `mozart run CONFIG_FILE` (cli.md §3.1 steps 1–3 and 5–9); the
//! dry run lives in `run.rs`, which calls [`submit`].

use std::path::PathBuf;
use std::time::{Duration, Instant};

use mozart_config::Score;
use mozart_ipc::methods;
use mozart_ipc::status::{JobList, JobStatusResult};
use mozart_ipc::types::{JobRequest, JobResponse, JobResponseStatus, RateLimitsResult};
use serde_json::json;

use super::status::{
    absolute, absolute_text, classify, job_params, rate_limit_lines, JobCallError,
};
use crate::conductor_client;
use crate::output::{print_error, print_json};
use crate::{CliError, Globals};

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
    pub json: bool,
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

/// How long and how often to watch a just-accepted job for an early failure (§3.1 step 8).
const EARLY_FAILURE_WINDOW: Duration = Duration::from_millis(1500);
const EARLY_FAILURE_POLL: Duration = Duration::from_millis(200);

/// Submit the score to the conductor and report the outcome; returns the exit code.
pub fn submit(globals: &Globals, args: &SubmitArgs, score: &Score) -> Result<i32, CliError> {
    let file = args.config_file.display().to_string();
    if args.start_sheet == Some(0) {
        return Err(CliError::Usage(
            "Invalid value: --start-sheet must be >= 1, got 0".into(),
        ));
    }

    // 1. The caller parsed the score (once: `mozart run` read and checked it already), so
    // the user saw score errors without a round trip.
    // 2.
    if !args.quiet && !args.json {
        print_panel(&score.config);
    }

    // 3.
    if args.escalation {
        return Ok(fail(ESCALATION_UNSUPPORTED, &[], args.json));
    }

    // 5. Paths go absolute: the conductor resolves relative ones in its own directory (§10).
    // The workspace as this command resolved it — also when the score has no `workspace:`
    // key, whose default `./workspace` would otherwise resolve in the conductor's directory
    // and differ from what `mozart run --dry-run` showed.
    let workspace = match &args.workspace {
        Some(ws) => absolute(ws),
        None => score.config.workspace.clone(),
    };
    let params = JobRequest {
        config_path: absolute_text(&args.config_file),
        workspace: Some(workspace.display().to_string()),
        fresh: args.fresh,
        self_healing: args.self_healing,
        self_healing_auto_confirm: args.yes,
        start_sheet: args.start_sheet,
        ..JobRequest::default()
    };
    // One connection for the submission and the early-failure watch (issue 26), and no
    // health probe first: the submission itself tells whether a conductor answers (a round
    // trip less per score while many jobs run, issue 24).
    let connected = conductor_client::connect_direct(globals, args.json).map_err(JobCallError::Cli);
    let mut client = None;
    let submitted = connected.and_then(|c| {
        let c = client.insert(c);
        c.call(methods::JOB_SUBMIT, params)
            .map_err(|err| classify(err, args.json))
    });
    let response: JobResponse = match submitted {
        Ok(response) => response,
        Err(JobCallError::Cli(err)) if args.json && !err.is_untrusted() => {
            print_json(&json!({ "error": RUN_NOT_RUNNING_JSON }));
            return Ok(1);
        }
        Err(JobCallError::Cli(err)) => return Err(err),
        // 9.
        Err(err) => {
            return Ok(fail(
                &err.message(),
                &["Restart the conductor: mozart restart"],
                args.json,
            ))
        }
    };
    let job_id = response.job_id.clone();
    let message = response.message.clone().filter(|m| !m.is_empty());

    match response.status {
        // 6.
        JobResponseStatus::Pending => {
            if args.json {
                print_json(&json!({"job_id": job_id, "status": "pending", "message": message}));
            } else {
                println!("Score queued as pending: {job_id}");
                println!(
                    "{}",
                    message
                        .as_deref()
                        .unwrap_or("Score queued as pending — starts when rate limits clear.")
                );
                println!("Monitor with: mozart status {job_id} --watch");
                println!("Cancel with:  mozart cancel {job_id}");
            }
            Ok(0)
        }
        // 8.
        // Accepted is exit 0 however soon the job ends: `run`'s exit code says whether the
        // conductor took the job, never how fast the job failed (upstream exits 1 only when
        // the failure came within 1.5 s). A job that already ended is reported with its
        // cause; its outcome as an exit code is `mozart wait`'s.
        JobResponseStatus::Accepted => {
            let ended = client
                .as_mut()
                .and_then(|c| early_failure(globals, c, &job_id));
            if args.json {
                let mut doc = serde_json::to_value(&response).unwrap_or_else(|_| json!({}));
                if let (Some(ended), Some(obj)) = (&ended, doc.as_object_mut()) {
                    obj.insert("job_status".into(), json!(ended.status()));
                    obj.insert("error".into(), json!(ended.error_message()));
                    if let Some(cause) = first_failure(ended) {
                        obj.insert("failure".into(), cause.to_json());
                    }
                }
                print_json(&doc);
            } else {
                println!("Score submitted to conductor: {job_id}");
                if let Some(m) = &message {
                    // Upstream's wire words say "queued" for every accepted job, also one that
                    // starts at once: say what the limit means instead.
                    match m
                        .strip_prefix("Job queued (concurrency limit: ")
                        .and_then(|r| r.strip_suffix(')'))
                    {
                        Some(limit) => println!(
                            "  Job accepted (up to {limit} jobs run at once; more wait for a free slot)"
                        ),
                        None => println!("  {m}"),
                    }
                }
                println!();
                match &ended {
                    Some(ended) => report_early_failure(&job_id, ended),
                    None => println!("Monitor with: mozart status {job_id} --watch"),
                }
            }
            Ok(0)
        }
        // 7.
        JobResponseStatus::Rejected | JobResponseStatus::Error => {
            if args.json {
                print_json(&response);
                return Ok(1);
            }
            let headline = match &message {
                Some(m) => format!("Conductor rejected score: {m}"),
                None => "Conductor rejected score.".to_string(),
            };
            let (hints, show_limits) =
                rejection_hints(message.as_deref().unwrap_or(""), &job_id, &file, args.fresh);
            print_error(&headline, &hints);
            if show_limits {
                print_active_limits(globals);
            }
            Ok(1)
        }
    }
}

/// `run`'s error shape: `{"error": ...}` in JSON mode, else `Error:` + hints. Returns 1.
fn fail(message: &str, hints: &[&str], json: bool) -> i32 {
    if json {
        print_json(&json!({ "error": message }));
    } else {
        let hints: Vec<String> = hints.iter().map(|h| h.to_string()).collect();
        print_error(message, &hints);
    }
    1
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
    println!("  Instrument: {instrument}");
    println!("  Sheets: {total} ({} items each)", config.sheet.size);
    println!("  Workspace: {}", config.workspace.display());
    // The tip is about money: a score that only runs the free `shell` instrument has none
    // to lose, so it is not told to guard against charges (issue 23).
    if !config.cost_limits.enabled && !only_free_instruments(config) {
        println!();
        println!(
            "Note: Cost tracking is disabled for this score. API calls will not be monitored or limited."
        );
        println!(
            "  Tip: Set cost_limits.enabled: true in your score to prevent unexpected charges"
        );
    }
    println!();
}

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

/// Hints for a rejected submission, chosen by message content in the spec's order
/// (§3.1 step 7); the flag says whether to list active rate limits after them.
pub(crate) fn rejection_hints(
    message: &str,
    job_id: &str,
    file: &str,
    fresh: bool,
) -> (Vec<String>, bool) {
    let m = message.to_lowercase();
    let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    if m.contains("shutting down") {
        (
            v(&[
                "The conductor is shutting down.",
                "Wait for shutdown to complete, then restart: mozart start",
            ]),
            false,
        )
    } else if m.contains("pressure") {
        (
            v(&[
                "The system is under heavy load.",
                "Check active rate limits: mozart clear-rate-limits (to view/clear)",
                "Wait for running jobs to complete or reduce concurrent work.",
            ]),
            true,
        )
    } else if m.contains("already") && (m.contains("running") || m.contains("queued")) {
        let last = if fresh {
            format!("Clear the stale entry: mozart clear --score {job_id}")
        } else {
            "Or wait for it to finish.".to_string()
        };
        (
            vec![
                "A score with this name is already active.".to_string(),
                format!("Pause or cancel it first: mozart pause {job_id} / mozart cancel {job_id}"),
                last,
            ],
            false,
        )
    } else if m.contains("parse") {
        (
            vec![
                "The score file has errors.".to_string(),
                format!("Validate it with: mozart validate {file}"),
            ],
            false,
        )
    } else if m.contains("workspace") && (m.contains("not exist") || m.contains("not writable")) {
        (
            v(&[
                "The workspace path is invalid.",
                "Create the directory or use --workspace to override.",
            ]),
            false,
        )
    } else if m.contains("not found") && m.contains("config") {
        (
            v(&[
                "The score file could not be found.",
                "Check the file path and try again.",
            ]),
            false,
        )
    } else {
        (
            v(&[
                "The conductor is running but declined this submission.",
                "Check with: mozart conductor-status",
            ]),
            false,
        )
    }
}

fn print_active_limits(globals: &Globals) {
    let Ok(mut client) = conductor_client::connect(globals) else {
        return;
    };
    let Ok(limits) = client.call::<_, RateLimitsResult>(methods::DAEMON_RATE_LIMITS, ()) else {
        return;
    };
    let lines = rate_limit_lines(&limits);
    if !lines.is_empty() {
        println!();
        println!("Active rate limits:");
        for l in lines {
            println!("  {l}");
        }
    }
}

/// Watch a just-accepted job briefly; the status result if it already failed or was
/// cancelled. Errors are ignored: the submission itself succeeded.
fn early_failure(
    globals: &Globals,
    client: &mut mozart_ipc::BlockingClient,
    job_id: &str,
) -> Option<JobStatusResult> {
    // One call the conductor answers as soon as the job shows how it goes: its first
    // sheet completed (the instrument works: nothing to report), it ended, paused or
    // waits for a job slot. A shell loop of `mozart run` then costs each score about one
    // sheet's time instead of 1.5 s (issue 24). It goes on the submission's connection.
    // An older conductor without `job.watch` gets the poll below.
    let params = mozart_ipc::types::JobWatchParams {
        job_id: job_id.to_string(),
        timeout_ms: EARLY_FAILURE_WINDOW.as_millis() as u64,
    };
    match client.call::<_, mozart_ipc::types::JobWatchResult>(methods::JOB_WATCH, &params) {
        Ok(seen) => {
            return matches!(seen.status.as_str(), "failed" | "cancelled")
                .then(|| {
                    client
                        .call(methods::JOB_STATUS, job_params(job_id, None))
                        .ok()
                })
                .flatten();
        }
        Err(mozart_ipc::IpcError::Rpc { error, .. }) if error.is_method_not_found() => {}
        Err(_) => return None,
    }
    let socket = conductor_client::paths(globals, None).ok()?.socket;
    let deadline = Instant::now() + EARLY_FAILURE_WINDOW;
    // A short job is often done before the first 0.2 s poll of upstream's schedule: look
    // almost at once, then less and less often up to upstream's pace (20, 40, 80, 160,
    // 200 ms …), so `mozart run` returns soon after a quick job ends.
    let mut wait = Duration::from_millis(20);
    while Instant::now() < deadline {
        std::thread::sleep(wait);
        wait = (wait * 2).min(EARLY_FAILURE_POLL);
        let Ok(mut client) = mozart_ipc::BlockingClient::connect(&socket) else {
            continue;
        };
        // `job.list` names every job's status without its checkpoint: a poll of a
        // 1,000-sheet job costs the conductor nothing (`job.status` serialises every sheet).
        let Ok(list) = client.call::<_, JobList>(methods::JOB_LIST, ()) else {
            continue;
        };
        let status = list
            .0
            .iter()
            .find(|j| j.job_id() == job_id)
            .map(|j| j.status().to_string());
        match status.as_deref() {
            Some("failed" | "cancelled") => {
                return client
                    .call(methods::JOB_STATUS, job_params(job_id, None))
                    .ok();
            }
            Some("completed") => return None,
            _ => {}
        }
    }
    None
}

/// The sheet failure that explains a failed job: the first failed sheet that was not just
/// blocked by another one (the root cause), else the first failed sheet.
struct Cause {
    sheet_num: u32,
    error_code: Option<String>,
    message: String,
    /// The last line the instrument wrote to stderr, when the message does not carry it.
    stderr: Option<String>,
    /// Failed sheets besides this one (most were blocked by it).
    others: usize,
}

impl Cause {
    fn to_json(&self) -> serde_json::Value {
        json!({
            "sheet_num": self.sheet_num,
            "error_code": self.error_code,
            "error_message": self.message,
            "stderr": self.stderr,
        })
    }
}

/// Why a job failed, from its checkpoint (None when it has none or no sheet failed).
fn first_failure(status: &JobStatusResult) -> Option<Cause> {
    use mozart_ipc::checkpoint::SheetStatus;
    let cp = status.checkpoint()?;
    let failed: Vec<_> = cp
        .sheets
        .values()
        .filter(|s| s.status == SheetStatus::Failed)
        .collect();
    let blocked = |m: &str| m.starts_with("Blocked by failed dependency");
    let root = failed
        .iter()
        .find(|s| s.error_message.as_deref().is_some_and(|m| !blocked(m)))
        .or_else(|| failed.first())?;
    let message = root
        .error_message
        .clone()
        .unwrap_or_else(|| "no error message was recorded".to_string());
    // What the instrument said is often the real reason ("exit 3" is not).
    let stderr = root
        .stderr_tail
        .as_deref()
        .and_then(|t| t.lines().rev().map(str::trim).find(|l| !l.is_empty()))
        .filter(|line| !message.contains(line))
        .map(|line| line.chars().take(300).collect());
    Some(Cause {
        sheet_num: root.sheet_num,
        error_code: root.error_code.clone(),
        message,
        stderr,
        others: failed.len() - 1,
    })
}

/// A job that ended during `run`'s short look: what happened and why, then where to look.
fn report_early_failure(job_id: &str, status: &JobStatusResult) {
    println!("The score has already {}: {job_id}", status.status());
    match first_failure(status) {
        Some(cause) => {
            let code = cause
                .error_code
                .as_deref()
                .map(|c| format!(" [{c}]"))
                .unwrap_or_default();
            println!(
                "  Sheet {} failed{code}: {}",
                cause.sheet_num, cause.message
            );
            if let Some(line) = &cause.stderr {
                println!("  Its instrument said: {line}");
            }
            if cause.others > 0 {
                println!("  {} more sheet(s) failed or did not run.", cause.others);
            }
        }
        None => {
            if let Some(e) = status.error_message().filter(|e| !e.is_empty()) {
                println!("  {e}");
            }
        }
    }
    println!();
    println!("Errors: mozart errors {job_id}   Full report: mozart diagnose {job_id}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejection_hints_follow_the_spec_order() {
        let first = |m: &str, fresh: bool| rejection_hints(m, "demo", "d.yaml", fresh).0[0].clone();
        assert_eq!(
            first("Conductor is shutting down", false),
            "The conductor is shutting down."
        );
        assert_eq!(
            first("System under memory PRESSURE", false),
            "The system is under heavy load."
        );
        assert!(rejection_hints("under pressure", "d", "f", false).1);
        let (dup, _) = rejection_hints(
            "Job 'demo' is already running. Use 'mozart pause' or 'mozart cancel' first",
            "demo",
            "d.yaml",
            true,
        );
        assert_eq!(
            dup,
            vec![
                "A score with this name is already active.",
                "Pause or cancel it first: mozart pause demo / mozart cancel demo",
                "Clear the stale entry: mozart clear --score demo",
            ]
        );
        assert_eq!(
            first("Failed to parse config file: bad", false),
            "The score file has errors."
        );
        assert_eq!(
            first("Something else entirely", false),
            "The conductor is running but declined this submission."
        );
        assert_eq!(
            first("Workspace parent does not exist or is not writable", false),
            "The workspace path is invalid."
        );
        assert_eq!(
            first("Config file not found: /tmp/x.yaml", false),
            "The score file could not be found."
        );
    }
}
