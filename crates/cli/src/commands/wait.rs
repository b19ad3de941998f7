//! `mozart wait JOB` (ours, not upstream's): block until a job ends; the exit code is its
//! outcome, so shell scripts and CI can chain on a job.

use std::time::{Duration, Instant};

use mozart_ipc::sheet_view::{SheetQuery, StatusParams};
use mozart_ipc::status::JobStatusResult;
use mozart_ipc::{methods, BlockingClient, IpcError};
use serde_json::json;

use crate::conductor_client;
use crate::{CliError, Globals, OutputMode};

/// Exit code when the job completed.
pub const EXIT_COMPLETED: i32 = 0;
/// Exit code when the job failed (or is unknown, or the conductor is not running).
pub const EXIT_FAILED: i32 = 1;
/// Exit code when the job was cancelled.
pub const EXIT_CANCELLED: i32 = 3;
/// Exit code when the job paused (it waits for an operator, so waiting ends) — once its
/// running sheets have finished: while `pausing` they still work.
pub const EXIT_PAUSED: i32 = 4;
/// Exit code when `--timeout` ran out first (as `timeout(1)`).
pub const EXIT_TIMEOUT: i32 = 124;

/// Arguments of `mozart wait`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score ID of the job to wait for.
    #[arg(value_name = "SCORE_ID")]
    pub job_id: String,
    /// Give up after this many seconds (exit 124).
    #[arg(short = 't', long = "timeout", value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// Print the final status as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// The exit code of a job's status document, or `None` while the job goes on by itself
/// (running, queued for a job slot, or paused by `modify --resume` until its new score takes
/// over).
pub fn outcome(doc: &JobStatusResult) -> Option<i32> {
    let code = doc.outcome_code()?;
    debug_assert!([EXIT_COMPLETED, EXIT_FAILED, EXIT_CANCELLED, EXIT_PAUSED].contains(&code));
    Some(code)
}

/// Run `mozart wait`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    crate::render::validate_score_id(&args.job_id)
        .map_err(|e| CliError::Usage(format!("Invalid value: {e}")))?;
    let deadline = args
        .timeout
        .filter(|t| t.is_finite() && *t >= 0.0)
        .map(|t| Instant::now() + Duration::from_secs_f64(t));
    let mut client: Option<BlockingClient> = None;
    let mut waiter = Waiter::default();
    loop {
        let c = match client.take() {
            Some(c) => c,
            None => conductor_client::connect_in(globals, args.output)?,
        };
        let mut c = c;
        let doc = match look(&mut c, &args.job_id) {
            Ok(d) => d,
            Err(IpcError::Rpc { error, .. })
                if matches!(
                    error.code,
                    mozart_ipc::error::JOB_NOT_FOUND | mozart_ipc::error::WORKSPACE_NOT_FOUND
                ) =>
            {
                return Err(CliError::Failed {
                    kind: crate::ErrorKind::Command,
                    message: format!("Score not found: {}", args.job_id),
                    hints: vec!["Run 'mozart list' to see available scores.".into()],
                    mode: args.output,
                });
            }
            Err(err) => return Err(conductor_client::call_error(err, args.output)),
        };
        let status = doc.shown_status().to_string();
        if let Some(code) = outcome(&doc) {
            report(&args, &status, &doc);
            return Ok(code);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            if args.output.is_json() {
                crate::output::print_json(
                    &json!({"job_id": args.job_id, "status": status, "timed_out": true}),
                );
            } else {
                println!("Timed out waiting for {} (still {status})", args.job_id);
            }
            return Ok(EXIT_TIMEOUT);
        }
        let kept = waiter.until_change(&mut c, &args.job_id, deadline);
        client = kept.then_some(c);
    }
}

/// The job's status document without its sheets: a summary that lists none (all `mozart
/// wait` reads is the job's state and error; a full document carries every sheet, megabytes
/// for a large job).
fn look(client: &mut BlockingClient, job_id: &str) -> Result<JobStatusResult, IpcError> {
    let params = StatusParams {
        job_id: job_id.to_string(),
        workspace: None,
        sheets: Some(SheetQuery::state_only()),
    };
    client.call(methods::JOB_STATUS, params)
}

/// How `mozart wait` waits between two looks at the job's status document.
///
/// A job's status document carries every sheet (a large job's is megabytes to build), so
/// the job's end is waited for with `job.watch` (`until_done`), which the conductor answers
/// when the job ends or pauses, not by fetching that document again and again. A conductor
/// without `job.watch`, or a job whose watch keeps answering without an outcome (paused by
/// `modify --resume` until its new score takes over), gets a growing pause instead.
#[derive(Debug)]
struct Waiter {
    /// `job.watch` is answered by this conductor.
    watch: bool,
    /// The last watch was answered at once without the job having an outcome: the next
    /// look pauses first instead of watching again straight away.
    settled: bool,
    /// The pause before the next look when watching does not help.
    delay: Duration,
}

impl Default for Waiter {
    fn default() -> Self {
        Waiter {
            watch: true,
            settled: false,
            delay: Duration::from_millis(50),
        }
    }
}

impl Waiter {
    /// Longest single `job.watch` (the conductor caps it at 5 s as well).
    const WATCH: Duration = Duration::from_secs(5);
    /// Longest pause between polls.
    const MAX_DELAY: Duration = Duration::from_millis(500);

    /// Wait until the job may have changed (or `deadline`). False when the connection is
    /// no good any more (the next look reconnects).
    fn until_change(
        &mut self,
        client: &mut BlockingClient,
        job_id: &str,
        deadline: Option<Instant>,
    ) -> bool {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if self.watch && !std::mem::take(&mut self.settled) {
            let watch = left.map_or(Self::WATCH, |l| l.min(Self::WATCH));
            let params = mozart_ipc::types::JobWatchParams {
                job_id: job_id.to_string(),
                timeout_ms: u64::try_from(watch.as_millis()).unwrap_or(u64::MAX),
                until_done: true,
            };
            match client.call::<_, mozart_ipc::types::JobWatchResult>(methods::JOB_WATCH, &params) {
                Ok(seen) => {
                    // Ended or paused (or still running when the watch timed out): look at
                    // the status document now.
                    self.settled = !seen.timed_out;
                    return true;
                }
                Err(IpcError::Rpc { error, .. }) if error.is_method_not_found() => {
                    self.watch = false;
                }
                Err(_) => return false,
            }
        }
        std::thread::sleep(left.map_or(self.delay, |l| l.min(self.delay)));
        self.delay = (self.delay * 2).min(Self::MAX_DELAY);
        true
    }
}

fn report(args: &Args, status: &str, doc: &JobStatusResult) {
    if args.output.is_json() {
        crate::output::print_json(&json!({
            "job_id": args.job_id,
            "status": status,
            "error_message": doc.error_message(),
        }));
    } else if !matches!(status, "completed") {
        let why = doc
            .error_message()
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        // The error holds what the instrument printed: shown, not obeyed.
        println!(
            "{}",
            crate::output::terminal_safe(&format!("{} {status}{why}", args.job_id))
        );
    } else {
        println!("{} completed", args.job_id);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;
    use std::sync::{Arc, Mutex};

    /// A conductor on a real socket that answers `job.watch` as `watch` says (None: it does
    /// not know the method, as an older conductor) and records the methods it was asked.
    fn conductor(watch: Option<serde_json::Value>) -> (tempfile::TempDir, Arc<Mutex<Vec<String>>>) {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(dir.path().join("sock")).unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let mut out = stream.try_clone().unwrap();
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    let req: serde_json::Value = serde_json::from_str(&line).unwrap();
                    let method = req["method"].as_str().unwrap_or_default().to_string();
                    seen.lock()
                        .unwrap()
                        .push(format!("{method} {}", req["params"]));
                    let reply = match (&watch, method.as_str()) {
                        (Some(result), "job.watch") => {
                            json!({"jsonrpc": "2.0", "id": req["id"], "result": result})
                        }
                        _ => json!({"jsonrpc": "2.0", "id": req["id"],
                            "error": {"code": -32601, "message": "Method not found"}}),
                    };
                    writeln!(out, "{reply}").unwrap();
                }
            }
        });
        (dir, asked)
    }

    #[test]
    fn a_running_job_is_watched_until_it_ends_not_polled() {
        let ended = json!({"job_id": "j", "status": "completed", "sheet_completed": true, "timed_out": false});
        let (dir, asked) = conductor(Some(ended));
        let mut client = BlockingClient::connect(dir.path().join("sock")).unwrap();
        let mut waiter = Waiter::default();
        let deadline = Some(Instant::now() + Duration::from_secs(2));
        assert!(waiter.until_change(&mut client, "j", deadline));
        let asked = asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert!(asked[0].starts_with("job.watch "), "{asked:?}");
        let params: serde_json::Value =
            serde_json::from_str(asked[0].trim_start_matches("job.watch ")).unwrap();
        assert_eq!(params["until_done"], true, "{params}");
        // The watch is no longer than what is left of --timeout.
        assert!(params["timeout_ms"].as_u64().unwrap() <= 2_000, "{params}");
        // Answered at once without an outcome (paused, not for good): the next look pauses
        // instead of watching again straight away.
        assert!(waiter.settled);
    }

    #[test]
    fn a_look_asks_for_the_jobs_state_without_its_sheets() {
        let (dir, asked) = conductor(None);
        let mut client = BlockingClient::connect(dir.path().join("sock")).unwrap();
        // This conductor answers every call with "method not found".
        assert!(look(&mut client, "big").is_err());
        let asked = asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 1, "{asked:?}");
        let params: serde_json::Value =
            serde_json::from_str(asked[0].trim_start_matches("job.status ")).unwrap();
        assert_eq!(params["job_id"], "big", "{params}");
        // A summary listing no sheet, whatever the job's size.
        assert_eq!(params["sheets"]["mode"], "summary", "{params}");
        assert_eq!(params["sheets"]["full_up_to"], 0, "{params}");
        assert_eq!(params["sheets"]["cap"], 0, "{params}");
    }

    #[test]
    fn a_conductor_without_job_watch_is_polled() {
        let (dir, asked) = conductor(None);
        let mut client = BlockingClient::connect(dir.path().join("sock")).unwrap();
        let mut waiter = Waiter::default();
        assert!(waiter.until_change(&mut client, "j", None));
        assert!(waiter.until_change(&mut client, "j", None));
        let asked = asked.lock().unwrap().clone();
        // Asked once; after "method not found" it waits by pausing between looks.
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert!(!waiter.watch);
        assert!(waiter.delay > Duration::from_millis(50));
    }
}
