//! `mozart status [SCORE_ID]` (cli.md §4.1), plus the conductor-call plumbing the other job
//! commands share (cli.md §1.5 routing outcomes, §1.6 coded errors, §1.7 score IDs).

use std::path::{Path, PathBuf};
use std::time::Duration;

use mozart_client::ClientError;
use mozart_ipc::checkpoint::JobStatus;
use mozart_ipc::sheet_view::{SheetMode, SheetQuery, StatusParams};
use mozart_ipc::status::{JobList, JobListEntry, JobPage, JobStatusResult, Overview};
use mozart_ipc::types::{
    HealthResult, JobIdParams, ListPageParams, OverviewParams, RateLimitsResult,
};
use mozart_ipc::{methods, IpcError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::conductor_client;
use crate::output::print_json;
use crate::render::status_json::status_json;
use crate::render::status_view::{render_meta_status, render_status};
use crate::render::time::{format_clock, format_compact_duration};
use crate::render::{jobs, validate_score_id, Style};
use crate::{CliError, Globals, OutputMode};
use mozart_ipc::time::epoch_now;

/// Arguments of `mozart status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score ID to check status for. Omit to see all active scores.
    #[arg(value_name = "SCORE_ID")]
    pub score_id: Option<String>,
    /// Output status as JSON for machine parsing.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
    /// Continuously monitor status with live updates. Exits when the job has an outcome,
    /// with the codes of `mozart wait`: 0 completed, 1 failed (or unknown), 3 cancelled,
    /// 4 paused (not the pause of `modify --resume`, which resumes by itself); Ctrl+C exits 0.
    #[arg(short = 'W', long = "watch")]
    pub watch: bool,
    /// Refresh interval in seconds for --watch mode.
    #[arg(short = 'i', long = "interval", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub interval: u64,
    /// Workspace directory to search for score state (debug override).
    #[arg(short = 'w', long = "workspace", hide = true)]
    pub workspace: Option<PathBuf>,
    /// List the score's sheets a page at a time (in sheet order) instead of the summary.
    /// A score of more than 50 sheets (1,000 with --json) shows a summary: counts by state,
    /// movements, and the first running and failed sheets.
    #[arg(long = "sheets")]
    pub sheets: bool,
    /// With --sheets: only sheets in this state (pending, running, completed, failed,
    /// skipped; repeat for several). Implies --sheets.
    #[arg(long = "state", value_name = "STATE",
          value_parser = clap::builder::PossibleValuesParser::new(
              mozart_ipc::sheet_view::STATES.iter().copied()))]
    pub state: Vec<String>,
    /// With --sheets: skip this many matching sheets. Implies --sheets.
    #[arg(long = "offset", value_name = "N")]
    pub offset: Option<u64>,
    /// With --sheets: at most this many sheets (default 100, at most 1000). Implies --sheets.
    #[arg(long = "limit", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub limit: Option<u64>,
}

/// The human view lists every sheet of a score of at most this many sheets.
const HUMAN_FULL_UP_TO: u32 = 50;
/// `--json` holds every sheet of a score of at most this many sheets.
const JSON_FULL_UP_TO: u32 = 1_000;

impl Args {
    /// The sheets to ask the conductor for: a page with --sheets (or a paging flag), else the
    /// summary (every sheet of a small score).
    fn sheet_query(&self) -> SheetQuery {
        if self.sheets || !self.state.is_empty() || self.offset.is_some() || self.limit.is_some() {
            SheetQuery {
                mode: SheetMode::Page,
                states: (!self.state.is_empty()).then(|| self.state.clone()),
                offset: self.offset.unwrap_or(0),
                limit: self.limit,
                ..SheetQuery::default()
            }
        } else if self.output.is_json() {
            SheetQuery::summary(JSON_FULL_UP_TO)
        } else {
            SheetQuery::summary(HUMAN_FULL_UP_TO)
        }
    }
}

/// Run `mozart status`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    let Some(id) = args.score_id.as_deref() else {
        if args.sheets || !args.state.is_empty() || args.offset.is_some() || args.limit.is_some() {
            return Err(CliError::Usage(
                "--sheets, --state, --offset and --limit need a SCORE_ID".to_string(),
            ));
        }
        return overview(globals, args.output);
    };
    check_score_id(id)?;
    if args.watch {
        watch(globals, id, &args)
    } else {
        let job = fetch(
            globals,
            id,
            args.workspace.as_deref(),
            args.sheet_query(),
            args.output,
        )?;
        show(&job, args.output, &active_limit_lines(&job));
        Ok(0)
    }
}

// ---------------------------------------------------------------------------------------
// Shared by the job commands.
// ---------------------------------------------------------------------------------------

/// Reject a malformed score ID as a usage error (exit 2) with the spec's message (§1.7).
pub(crate) fn check_score_id(id: &str) -> Result<(), CliError> {
    validate_score_id(id).map_err(|msg| CliError::Usage(format!("Invalid value: {msg}")))
}

/// Why a routed job call failed.
#[derive(Debug)]
pub(crate) enum JobCallError {
    /// `-32000` / `-32004` / `-32005`: the conductor says the job is unknown or has no state
    /// (upstream's "job error", §1.5). Carries the conductor's message.
    Job(String),
    /// Already a user-facing error (e.g. the standard "not running").
    Cli(CliError),
    /// Any other failure (an untrusted socket, a refusal, a transport or protocol failure).
    Other(ClientError),
}

impl JobCallError {
    /// The default translation: job errors show the conductor's text, others go through
    /// the shared client mapping.
    pub(crate) fn into_cli(self, mode: OutputMode) -> CliError {
        match self {
            JobCallError::Job(message) => CliError::Failed {
                kind: crate::ErrorKind::Command,
                message,
                hints: vec![],
                mode,
            },
            JobCallError::Cli(err) => err,
            JobCallError::Other(err) => conductor_client::user_error(err, mode),
        }
    }

    /// The text to show after `Error:` for a routing exception.
    pub(crate) fn message(self) -> String {
        match self {
            JobCallError::Job(m) => m,
            JobCallError::Cli(e) => cli_message(e),
            JobCallError::Other(e) => ipc_text(e),
        }
    }
}

/// The message inside a CLI error, without its `Error:` decoration.
pub(crate) fn cli_message(err: CliError) -> String {
    match err {
        CliError::Failed { message, .. } => message,
        other => other.to_string(),
    }
}

/// The hint for a call that failed with `err` ([`JobCallError::Other`]): an answer over the
/// message limit is the job's size, which a restart does not change, so it names the paged
/// view of the job's failed sheets instead.
pub(crate) fn other_error_hint(err: &ClientError, id: &str) -> String {
    if matches!(
        err,
        ClientError::Transport(IpcError::ResponseTooLarge { .. })
    ) {
        format!(
            "The job is too large for one answer: see its failed sheets page by page with 'mozart status {id} --sheets --state failed'"
        )
    } else {
        "Restart the conductor: mozart restart".to_string()
    }
}

/// What the shared client mapping would say about a failed call (§1.5 texts such as
/// "Conductor does not support '<method>'…" or the busy-conductor timeout).
pub(crate) fn ipc_text(err: ClientError) -> String {
    cli_message(conductor_client::user_error(err, OutputMode::Human))
}

/// Call `method` on the conductor (no health probe first: a conductor that is not there
/// fails the connection, the standard "not running" failure) and decode its result as the
/// `mozart-ipc` type `R` (an answer of another shape is a protocol failure,
/// [`JobCallError::Other`]).
pub(crate) fn job_call<P: Serialize, R: DeserializeOwned>(
    globals: &Globals,
    method: &str,
    params: P,
    mode: OutputMode,
) -> Result<R, JobCallError> {
    let mut client = conductor_client::connect_direct(globals, mode).map_err(JobCallError::Cli)?;
    client
        .call(method, params)
        .map_err(|err| classify(err, mode))
}

/// Sort a failed call into the not-running, unknown-job and other failures of [`job_call`].
pub(crate) fn classify(err: IpcError, mode: OutputMode) -> JobCallError {
    match ClientError::from_call(err) {
        ClientError::NotRunning => JobCallError::Cli(conductor_client::not_running(mode)),
        ClientError::Job { message } => JobCallError::Job(message),
        other => JobCallError::Other(other),
    }
}

/// A failure with an error code: `Error [<code>]: <message>` + hints, or the JSON error
/// object with `error_code` and `extras` (§1.6); exit 1.
pub(crate) fn coded_error(
    code: &str,
    message: &str,
    hints: &[&str],
    mode: OutputMode,
    extras: &[(&str, Value)],
) -> CliError {
    let mut obj = serde_json::Map::new();
    obj.insert("success".into(), json!(false));
    obj.insert("message".into(), json!(message));
    obj.insert("error_code".into(), json!(code));
    if !hints.is_empty() {
        obj.insert("hints".into(), json!(hints));
    }
    for (k, v) in extras {
        obj.insert((*k).to_string(), v.clone());
    }
    CliError::Detailed(Box::new(crate::error::Detailed {
        code: Some(code.to_string()),
        message: message.to_string(),
        hints: hints.iter().map(|h| h.to_string()).collect(),
        after: Vec::new(),
        document: Value::Object(obj),
        mode,
        exit: 1,
    }))
}

/// A failure with hints, printed as text or as the JSON error object.
pub(crate) fn failed(message: impl Into<String>, hints: &[&str], mode: OutputMode) -> CliError {
    CliError::Failed {
        kind: crate::ErrorKind::Command,
        message: message.into(),
        hints: hints.iter().map(|h| h.to_string()).collect(),
        mode,
    }
}

/// Absolute form of a user-given path (cli.md §10: send absolute paths to the conductor).
pub(crate) fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// A user-given path as the absolute text sent to the conductor (§10).
pub(crate) fn absolute_text(path: &Path) -> String {
    absolute(path).display().to_string()
}

// ---------------------------------------------------------------------------------------
// Overview.
// ---------------------------------------------------------------------------------------

fn overview(globals: &Globals, mode: OutputMode) -> Result<i32, CliError> {
    let mut client = conductor_client::connect_direct(globals, mode)?;
    // One round trip for the uptime and both pages (issue 24); each call waits for a free
    // conductor thread while many jobs run, so three calls cost three waits.
    let (uptime, active, active_total, recent) = match one_call_overview(&mut client) {
        Ok(found) => found,
        // A conductor without `job.overview` (an older one): its health call is the probe
        // (the uptime comes from it), then the pages.
        Err(IpcError::Rpc { error, .. }) if error.is_method_not_found() => {
            let health: HealthResult = client
                .call(methods::DAEMON_HEALTH, ())
                .map_err(|_| conductor_client::not_running(mode))?;
            let (active, active_total, recent) = overview_jobs(&mut client);
            (health.uptime_seconds, active, active_total, recent)
        }
        // A conductor that answers with another error is there: its overview shows no
        // jobs rather than failing (§4.1), with the uptime its health call gives.
        Err(IpcError::Rpc { .. }) => {
            let health: HealthResult = client
                .call(methods::DAEMON_HEALTH, ())
                .map_err(|_| conductor_client::not_running(mode))?;
            (health.uptime_seconds, Vec::new(), 0, Vec::new())
        }
        Err(_) => return Err(conductor_client::not_running(mode)),
    };
    if mode.is_json() {
        print_json(&jobs::overview_json(&active, active_total, &recent));
    } else {
        print!(
            "{}",
            crate::output::terminal_safe(&jobs::render_overview(
                Some(uptime),
                &active,
                active_total,
                &recent,
                epoch_now(),
                &Style::for_stdout()
            ))
        );
    }
    Ok(0)
}

/// The overview's pages as [`overview_jobs`] asks for them, with the uptime, in one
/// `job.overview` call.
fn one_call_overview(
    client: &mut mozart_ipc::BlockingClient,
) -> Result<(f64, Vec<JobListEntry>, usize, Vec<JobListEntry>), IpcError> {
    let params = OverviewParams {
        pages: vec![
            overview_page(&jobs::ACTIVE_STATUSES, jobs::ACTIVE_LIMIT),
            overview_page(&jobs::RECENT_STATUSES, jobs::RECENT_LIMIT),
        ],
    };
    let answer: Overview = client.call(methods::JOB_OVERVIEW, params)?;
    let mut pages = answer.pages.into_iter();
    let active = pages.next().unwrap_or_default();
    let recent = pages.next().unwrap_or_default();
    let total = usize::try_from(active.total).unwrap_or(usize::MAX);
    Ok((answer.uptime_seconds, active.jobs.0, total, recent.jobs.0))
}

/// The newest `limit` jobs with one of `statuses`.
fn overview_page(statuses: &[&str], limit: usize) -> ListPageParams {
    ListPageParams {
        statuses: Some(statuses.iter().map(|s| s.to_string()).collect()),
        limit: Some(limit as u64),
        ..ListPageParams::default()
    }
}

/// The overview's jobs: the newest active ones (at most [`jobs::ACTIVE_LIMIT`]), how many
/// are active in all, and the newest finished ones — two pages the conductor cuts at the
/// source (`job.list_page`), so 1,000 running jobs cost what 20 do (issue 24). From a
/// conductor without pages (upstream's) the same is cut from its `job.list`. A failing
/// call shows an empty overview rather than an error (§4.1).
fn overview_jobs(
    client: &mut mozart_ipc::BlockingClient,
) -> (Vec<JobListEntry>, usize, Vec<JobListEntry>) {
    let page = |client: &mut mozart_ipc::BlockingClient, statuses: &[&str], limit: usize| {
        client.call::<_, JobPage>(methods::JOB_LIST_PAGE, overview_page(statuses, limit))
    };
    match page(client, &jobs::ACTIVE_STATUSES, jobs::ACTIVE_LIMIT) {
        Ok(active) => {
            let recent = page(client, &jobs::RECENT_STATUSES, jobs::RECENT_LIMIT)
                .map(|p| p.jobs.0)
                .unwrap_or_default();
            let total = usize::try_from(active.total).unwrap_or(usize::MAX);
            (active.jobs.0, total, recent)
        }
        Err(IpcError::Rpc { error, .. }) if error.is_method_not_found() => {
            let list: JobList = client.call(methods::JOB_LIST, ()).unwrap_or_default();
            let (mut active, recent) = jobs::split_overview(&list.0);
            let total = active.len();
            active.truncate(jobs::ACTIVE_LIMIT);
            (active, total, recent)
        }
        Err(_) => (Vec::new(), 0, Vec::new()),
    }
}

// ---------------------------------------------------------------------------------------
// One score.
// ---------------------------------------------------------------------------------------

/// `job.status` for one score, with the §4.1 error messages; falls back to the workspace's
/// JSON state file when no conductor answers and `-w` was given.
pub(crate) fn fetch(
    globals: &Globals,
    id: &str,
    workspace: Option<&Path>,
    sheets: SheetQuery,
    mode: OutputMode,
) -> Result<JobStatusResult, CliError> {
    match job_call(
        globals,
        methods::JOB_STATUS,
        status_params(id, workspace, sheets),
        mode,
    ) {
        Ok(None) | Err(JobCallError::Job(_)) => Err(not_found(id, mode)),
        Ok(Some(result)) => Ok(result),
        Err(JobCallError::Cli(err)) => match workspace {
            Some(dir) => from_workspace(globals, id, dir, mode),
            None => Err(err),
        },
        Err(JobCallError::Other(err)) => Err(conductor_error(err, mode)),
    }
}

/// Params naming one job (`job.status`, `job.pause`, …); the workspace goes absolute (§10).
pub(crate) fn job_params(id: &str, workspace: Option<&Path>) -> JobIdParams {
    JobIdParams {
        job_id: id.to_string(),
        workspace: workspace.map(absolute_text),
    }
}

/// `job.status` params with our sheet query (issue 24).
fn status_params(id: &str, workspace: Option<&Path>, sheets: SheetQuery) -> StatusParams {
    StatusParams {
        job_id: id.to_string(),
        workspace: workspace.map(absolute_text),
        sheets: Some(sheets),
    }
}

fn not_found(id: &str, mode: OutputMode) -> CliError {
    failed(
        format!("Score not found: {id}"),
        &["Run 'mozart list' to see available scores."],
        mode,
    )
}

fn conductor_error(err: ClientError, mode: OutputMode) -> CliError {
    // Upstream's exception class names (cli.md §1.5).
    let kind = match &err {
        ClientError::Timeout(_)
        | ClientError::Transport(IpcError::ResponseTooLarge { .. })
        | ClientError::Refused { .. }
        | ClientError::Unsupported { .. }
        | ClientError::Job { .. } => "DaemonError",
        ClientError::Transport(IpcError::Protocol { .. }) => "ProtocolError",
        _ => "IpcError",
    };
    let text = ipc_text(err);
    failed(
        format!("Conductor error: {kind}: {text}"),
        &["Check the conductor's log: mozart logs -n 50"],
        mode,
    )
}

/// Debug escape hatch (cli.md §1.4): read `<workspace>/<id>.json` directly (no conductor
/// runs).
fn from_workspace(
    globals: &Globals,
    id: &str,
    dir: &Path,
    mode: OutputMode,
) -> Result<JobStatusResult, CliError> {
    if !dir.is_dir() {
        return Err(CliError::Failed {
            kind: crate::ErrorKind::Command,
            message: format!("Workspace not found: {}", dir.display()),
            hints: vec![],
            mode,
        });
    }
    match mozart_jobs::wire::load_state_file(dir, id) {
        Ok(Some(state)) => Ok(JobStatusResult::Checkpoint(Box::new(state))),
        Ok(None) => {
            let hints =
                crate::conductor_client::no_workspace_state_hints(globals, "status", id, dir);
            let hints: Vec<&str> = hints.iter().map(String::as_str).collect();
            Err(failed(format!("Score not found: {id}"), &hints, mode))
        }
        Err(e) => Err(failed(e.to_string(), &[], mode)),
    }
}

/// Render a `job.status` result: a checkpoint as the full view, a metadata dict as the
/// short one (conductor.md §6.10).
fn show(result: &JobStatusResult, mode: OutputMode, active_limits: &[String]) {
    match result {
        JobStatusResult::Checkpoint(state) if mode.is_json() => {
            print_json(&status_json(state, epoch_now()))
        }
        JobStatusResult::Checkpoint(state) => print!(
            "{}",
            crate::output::terminal_safe(&render_status(
                state,
                epoch_now(),
                active_limits,
                &Style::for_stdout()
            ))
        ),
        JobStatusResult::Record(meta) if mode.is_json() => print_json(meta),
        JobStatusResult::Record(meta) => {
            print!(
                "{}",
                crate::output::terminal_safe(&render_meta_status(meta, &Style::for_stdout()))
            )
        }
    }
}

/// `Rate limit on <name> — clears in <time>` lines of a running job that has waited on rate
/// limits (§4.1 Execution Stats).
fn active_limit_lines(result: &JobStatusResult) -> Vec<String> {
    match result.checkpoint() {
        Some(cp) if cp.rate_limit_waits > 0 && cp.status == JobStatus::Running => {
            job_rate_limit_lines(cp)
        }
        _ => Vec::new(),
    }
}

/// [`rate_limit_lines`] of the rate limits this job's sheets wait on (its rate-limit
/// holds), not the conductor's: those are every job's, and a Gemini job's status listed
/// "Rate limit on codex-cli" from another job as one of its own; and a `shell` limit holds
/// only the job that hit it, which the conductor's list does not have.
fn job_rate_limit_lines(cp: &mozart_ipc::checkpoint::JobCheckpoint) -> Vec<String> {
    let mut own = RateLimitsResult::default();
    for hold in cp
        .instrument_holds
        .iter()
        .filter(|h| h.kind == "rate_limit")
    {
        let window = own.backends.entry(hold.instrument.clone()).or_insert(
            mozart_ipc::types::RateLimitWindow {
                seconds_remaining: 0.0,
                until: None,
            },
        );
        window.seconds_remaining = window.seconds_remaining.max(hold.seconds_left);
    }
    rate_limit_lines(&own)
}

/// Format `daemon.rate_limits` backends, sorted by name, skipping expired ones.
pub(crate) fn rate_limit_lines(limits: &RateLimitsResult) -> Vec<String> {
    limits
        .backends
        .iter()
        .filter(|(_, window)| window.seconds_remaining > 0.0)
        .map(|(name, window)| {
            format!(
                "Rate limit on {name} — clears in {}",
                format_compact_duration(window.seconds_remaining)
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Watch mode.
// ---------------------------------------------------------------------------------------

/// One compact JSON document on one line: a `--watch --json` frame (NDJSON).
fn print_json_line<T: serde::Serialize + ?Sized>(value: &T) {
    match serde_json::to_string(value) {
        Ok(text) => println!("{text}"),
        Err(err) => println!(
            "{}",
            json!({"success": false, "message": format!("cannot encode output: {err}")})
        ),
    }
}

fn watch(globals: &Globals, id: &str, args: &Args) -> Result<i32, CliError> {
    use std::io::{IsTerminal, Write};
    // One runtime for the whole watch so the SIGINT listener, installed once, sees a Ctrl-C
    // that arrives while a status call is in flight (§4.1: Ctrl-C exits 0).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            failed(
                format!("cannot start the watch timer: {e}"),
                &[],
                args.output,
            )
        })?;
    let mut interrupt = runtime
        .block_on(async {
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        })
        .map_err(|e| failed(format!("cannot listen for Ctrl-C: {e}"), &[], args.output))?;
    // With --json stdout carries only JSON: one compact document per line per refresh
    // (NDJSON), no screen clearing; the banner and footers go to stderr.
    let json = args.output.is_json();
    let tty = !json && std::io::stdout().is_terminal();
    let clear = || {
        if tty {
            print!("\x1b[2J\x1b[H");
        }
    };
    if json {
        eprintln!("Watching score {id} (Ctrl+C to stop)");
    } else {
        println!("Watching score {id} (Ctrl+C to stop)\n");
    }
    // Between refreshes the conductor is asked to answer when the job ends or pauses
    // (`job.watch`), so the last frame comes when that happens, not up to an interval later.
    // Not from a workspace's state file, and not again right after such an answer that was
    // no outcome (a job whose hooks still run): that refresh waits out the interval.
    let socket = (args.workspace.is_none())
        .then(|| conductor_client::paths(globals, None).ok())
        .flatten()
        .map(|p| p.socket);
    let mut woken = false;
    loop {
        let params = status_params(id, args.workspace.as_deref(), args.sheet_query());
        let outcome = job_call(globals, methods::JOB_STATUS, params, args.output);
        let mut finished = None;
        match outcome {
            Ok(None) | Err(JobCallError::Job(_)) => {
                clear();
                if json {
                    print_json_line(&json!({"error": format!("Score not found: {id}")}));
                } else {
                    not_found(id, OutputMode::Human).report();
                }
                // Nothing to watch: waiting would never end (upstream loops forever).
                finished = Some(super::wait::EXIT_FAILED);
            }
            Err(JobCallError::Cli(err)) => match args.workspace.as_deref() {
                Some(dir) => {
                    let result = from_workspace(globals, id, dir, args.output)?;
                    clear();
                    finished = render_watch_frame(&result, args, &[]);
                }
                None => return Err(err),
            },
            Err(JobCallError::Other(err)) => {
                clear();
                if json {
                    print_json_line(
                        &json!({"error": format!("Conductor error: {}", ipc_text(err))}),
                    );
                } else {
                    crate::output::print_error(
                        &format!("Conductor error: {}", ipc_text(err)),
                        &[
                            "Check conductor health: mozart conductor-status".to_string(),
                            "Restart if needed: mozart restart".to_string(),
                        ],
                    );
                }
            }
            Ok(Some(result)) => {
                let limits = active_limit_lines(&result);
                clear();
                finished = render_watch_frame(&result, args, &limits);
            }
        }
        let _ = std::io::stdout().flush();
        if let Some(code) = finished {
            return Ok(code);
        }
        let interval = Duration::from_secs(args.interval);
        let watched = socket.as_deref().filter(|_| !std::mem::take(&mut woken));
        let stopped = runtime.block_on(async {
            tokio::select! {
                _ = tokio::time::sleep(interval) => false,
                () = settles(watched, id, interval) => {
                    woken = true;
                    false
                }
                _ = interrupt.recv() => true,
            }
        });
        if stopped {
            if json {
                eprintln!("Watch mode stopped");
            } else {
                println!("\nWatch mode stopped");
            }
            return Ok(0);
        }
    }
}

/// Returns once the conductor at `socket` says job `id` ended or paused within `within`
/// (`job.watch`, `until_done`); never otherwise (no socket, the watch timed out, the call
/// failed: an older conductor, one that stopped), so the interval's timer decides.
async fn settles(socket: Option<&Path>, id: &str, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    if let Some(Ok(mut client)) = match socket {
        Some(socket) => Some(mozart_ipc::Client::connect(socket).await),
        None => None,
    } {
        // One watch answers within 5 s at most (the conductor's cap): ask again until the
        // interval is over.
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break;
            }
            let params = mozart_ipc::types::JobWatchParams {
                job_id: id.to_string(),
                timeout_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                until_done: true,
            };
            let answer = client
                .call::<_, mozart_ipc::types::JobWatchResult>(methods::JOB_WATCH, &params)
                .await;
            match answer {
                Ok(seen) if !seen.timed_out => return,
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
    std::future::pending::<()>().await;
}

/// Render one frame; the exit code once the job has an outcome — the codes of `mozart
/// wait`: completed 0, failed 1, cancelled 3, paused 4 (upstream exits 0 on completed and
/// failed and never on cancelled or paused). A pause that resumes by itself (`modify
/// --resume`) is no outcome.
fn render_watch_frame(result: &JobStatusResult, args: &Args, limits: &[String]) -> Option<i32> {
    if args.output.is_json() {
        match result {
            JobStatusResult::Checkpoint(state) => print_json_line(&status_json(state, epoch_now())),
            JobStatusResult::Record(meta) => print_json_line(meta),
        }
        let code = super::wait::outcome(result)?;
        eprintln!("Score {} - exiting watch mode", result.status());
        return Some(code);
    }
    show(result, args.output, limits);
    if result.checkpoint().is_some() {
        println!(
            "\nLast updated: {} | Refreshing every {}s | Press Ctrl+C to stop",
            format_clock(epoch_now()),
            args.interval
        );
    }
    let code = super::wait::outcome(result)?;
    println!("\nScore {} - exiting watch mode", result.status());
    Some(code)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mozart_ipc::error as rpc;

    #[test]
    fn rate_limit_lines_are_sorted_and_skip_expired_limits() {
        let limits = serde_json::from_value(json!({"backends": {
            "zeta": {"seconds_remaining": 150.0},
            "alpha": {"seconds_remaining": 45.2},
            "gone": {"seconds_remaining": 0.0}
        }, "active_limits": 2, "recent_events_count": 3}))
        .unwrap();
        assert_eq!(
            rate_limit_lines(&limits),
            vec![
                "Rate limit on alpha — clears in 45s",
                "Rate limit on zeta — clears in 2m 30s"
            ]
        );
        assert!(rate_limit_lines(&RateLimitsResult::default()).is_empty());
    }

    #[test]
    fn a_jobs_active_limits_are_its_own_rate_limit_holds() {
        let cp: mozart_ipc::checkpoint::JobCheckpoint = serde_json::from_value(json!({
            "job_id": "g", "job_name": "g", "total_sheets": 1, "status": "running",
            "instrument_holds": [
                {"instrument": "gemini-cli", "kind": "rate_limit", "reason": "429",
                    "seconds_left": 4.0},
                {"instrument": "shell", "kind": "rate_limit", "reason": "429",
                    "seconds_left": 600.0},
                {"instrument": "crashy", "kind": "circuit_breaker", "reason": "boom",
                    "seconds_left": 9.0}
            ]
        }))
        .unwrap();
        assert_eq!(
            job_rate_limit_lines(&cp),
            vec![
                "Rate limit on gemini-cli — clears in 4s",
                "Rate limit on shell — clears in 10m"
            ]
        );
    }

    #[test]
    fn job_errors_are_told_apart_from_other_rpc_errors() {
        let rpc_err = |code| IpcError::Rpc {
            method: "job.status".into(),
            error: Box::new(mozart_ipc::RpcError::new(code, "Job 'x' not found")),
        };
        assert!(matches!(
            classify(rpc_err(rpc::JOB_NOT_FOUND), OutputMode::Human),
            JobCallError::Job(m) if m == "Job 'x' not found"
        ));
        assert!(matches!(
            classify(rpc_err(rpc::INTERNAL_ERROR), OutputMode::Human),
            JobCallError::Other(_)
        ));
        let absent = IpcError::NotRunning {
            socket: "/nowhere".into(),
            reason: "no socket file".into(),
        };
        assert!(matches!(
            classify(absent, OutputMode::Human),
            JobCallError::Cli(_)
        ));
    }
}
