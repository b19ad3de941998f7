//! `mozart mcp`: a Model Context Protocol server over stdio (the official Rust SDK, `rmcp`).
//!
//! Tools drive the conductor over its Unix socket exactly as the CLI does (through
//! [`mozart_client::conductor`]): `validate`, `run`, `status`, `list`, `pause`, `resume`,
//! `cancel`, `errors`, `logs`. Each job's status is also a resource (`mozart://jobs/{id}`).
//! A failed operation is an MCP tool error (`isError: true`) whose text carries the CLI's
//! message and hints; protocol errors are left to the SDK.

use std::path::{Path, PathBuf};

use mozart_client::{Conductor, OpError};
use mozart_dashboard::validate::{validate_file, validate_text, ValidationReport};
use mozart_dashboard::view::{self, JobDetail, JobSummary};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{
    schemars, tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt,
};
use serde::Deserialize;
use serde_json::{json, Value};

mod stdin_guard;

/// URI prefix of job resources.
pub const JOB_URI: &str = "mozart://jobs/";
/// Lines `logs` returns by default.
const DEFAULT_LOG_LINES: usize = 50;
/// Most lines `logs` returns of a stream (`lines` above it, or 0, is this).
const MAX_LOG_LINES: usize = 2000;
/// Most bytes `logs` reads and returns of one stream of one sheet: an instrument may print
/// gigabytes, some of it on one line.
const MAX_STREAM_BYTES: usize = 64 * 1024;
/// Past this many bytes, `logs` adds no further sheet (and names the ones left out).
const MAX_LOGS_ANSWER: usize = 256 * 1024;

/// Where the server finds the conductor and keeps inline scores.
#[derive(Debug, Clone)]
pub struct Options {
    /// The conductor's socket.
    pub socket: PathBuf,
    /// Directory inline scores of `run` are written to when the call names none.
    pub scores_dir: PathBuf,
}

/// What an oversized message is told.
fn oversized_text(size: usize) -> String {
    format!(
        "The message is {size} bytes; at most {} are read in one MCP message, so it was not read. \
         Send a score by `path` instead of inline `yaml` (an inline score is at most 2097152 bytes).",
        stdin_guard::MAX_MESSAGE_BYTES
    )
}

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The MCP session could not start or failed.
    #[error("MCP server error: {0}")]
    Serve(String),
    /// The runtime could not start.
    #[error("cannot start the MCP runtime: {0}")]
    Runtime(std::io::Error),
}

/// Serve MCP on stdin/stdout until the client disconnects. A message over
/// [`stdin_guard::MAX_MESSAGE_BYTES`] is answered with an error, never dropped unanswered.
pub async fn serve_stdio(options: Options) -> Result<(), McpError> {
    let server = MozartMcp::new(options);
    let (stdin, mut unanswerable) = stdin_guard::guarded_stdin();
    let running = server
        .serve((stdin, tokio::io::stdout()))
        .await
        .map_err(|e| McpError::Serve(e.to_string()))?;
    // An oversized message whose id could not be read: no error can name its request, so
    // the client is told in a log notification (MCP's only message to a client that
    // answers nothing; deprecated by SEP-2577 with nothing in its place yet), and stderr.
    let peer = running.peer().clone();
    tokio::spawn(async move {
        while let Some(size) = unanswerable.recv().await {
            let text = oversized_text(size);
            eprintln!("mozart mcp: {text} Its id could not be read, so no error names it.");
            #[allow(deprecated)]
            let note = rmcp::model::LoggingMessageNotificationParam::new(
                rmcp::model::LoggingLevel::Error,
                json!(format!(
                    "{text} Its id could not be read, so no error names it."
                )),
            )
            .with_logger("mozart");
            #[allow(deprecated)]
            let _ = peer.notify_logging_message(note).await;
        }
    });
    running
        .waiting()
        .await
        .map_err(|e| McpError::Serve(e.to_string()))?;
    Ok(())
}

/// [`serve_stdio`] on its own runtime (for the synchronous CLI).
pub fn run_blocking(options: Options) -> Result<(), McpError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(McpError::Runtime)?;
    let result = runtime.block_on(serve_stdio(options));
    // stdin's blocking reader thread would keep the runtime's shutdown waiting for input.
    runtime.shutdown_background();
    result
}

/// The MCP server.
#[derive(Debug, Clone)]
pub struct MozartMcp {
    conductor: Conductor,
    scores_dir: PathBuf,
    tool_router: ToolRouter<MozartMcp>,
}

/// A score given by path or inline.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ScoreArgs {
    /// Path of a score YAML file (absolute, or relative to the server's directory).
    #[serde(default)]
    pub path: Option<String>,
    /// The score's YAML text, instead of a path.
    #[serde(default)]
    pub yaml: Option<String>,
}

/// Arguments of `run`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RunArgs {
    /// Path of a score YAML file (absolute, or relative to the server's directory).
    #[serde(default)]
    pub path: Option<String>,
    /// The score's YAML text, instead of a path. It is saved as `<directory>/<name>.yaml`;
    /// the file name is the job ID, and a relative `workspace:` resolves against that
    /// directory.
    #[serde(default)]
    pub yaml: Option<String>,
    /// Job ID for an inline score (default: the score's `name`).
    #[serde(default)]
    pub name: Option<String>,
    /// Directory an inline score is saved in (default: `$MOZART_HOME/mcp-scores`). It must
    /// exist (it is not created), and be the directory of the job's score when a job of this
    /// name already exists.
    #[serde(default)]
    pub directory: Option<String>,
    /// Discard previous state of a job with the same ID.
    #[serde(default)]
    pub fresh: bool,
}

/// A job ID.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct JobArgs {
    /// The job (score) ID, as `list` shows it.
    pub job_id: String,
}

/// Arguments of `errors`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ErrorsArgs {
    /// The job (score) ID, as `list` shows it.
    pub job_id: String,
    /// Also list the errors of the job's earlier runs (before its latest fresh start);
    /// by default only the current run's are listed.
    #[serde(default)]
    pub all_runs: bool,
}

/// Arguments of `status`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct StatusArgs {
    /// The job (score) ID, as `list` shows it.
    pub job_id: String,
    /// List the job's sheets a page at a time, only those in this state: pending, running,
    /// completed, failed, skipped. Without `state`, `offset` or `limit`, a job of more than
    /// 50 sheets lists only its running and failed sheets (at most 20 each), with counts.
    #[serde(default)]
    pub state: Option<String>,
    /// Page of sheets: skip this many (the `next_offset` of the previous answer).
    #[serde(default)]
    pub offset: Option<u64>,
    /// Page of sheets: at most this many (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Movements `status` lists in `sheets_view.movements`.
const STATUS_MOVEMENTS: usize = 20;

/// A job of at most this many sheets gets every sheet in `status`.
const STATUS_FULL_UP_TO: u32 = 50;

/// Arguments of `list`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ListArgs {
    /// Only jobs with this status: queued, running, paused, completed, failed, cancelled.
    #[serde(default)]
    pub status: Option<String>,
    /// At most this many jobs, newest first (default 50; 0 for every one).
    #[serde(default)]
    pub limit: Option<u64>,
    /// Skip this many jobs first (the next page: the `next_offset` of the previous answer).
    #[serde(default)]
    pub offset: Option<u64>,
}

/// Job resources in one `resources/list` page.
const RESOURCES_PAGE: u64 = 100;

/// Jobs `list` returns when the call names no limit: a conductor with hundreds of jobs
/// would otherwise answer with a document too big for an agent's context.
const DEFAULT_LIST_LIMIT: u64 = 50;

/// Arguments of `logs`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct LogsArgs {
    /// The job ID.
    pub job_id: String,
    /// Only this sheet (default: the running sheets, else the last sheet that ran).
    #[serde(default)]
    pub sheet: Option<u32>,
    /// How many lines from the end of each stream (default 50; at most 2000, and 0 means
    /// 2000). At most 64 KiB of a stream is shown; a note says what was left out.
    #[serde(default)]
    pub lines: Option<usize>,
}

fn text_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text.into())])
}

fn op_error(err: &OpError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(err.render_text())])
}

/// A page of `list` as the tool answers it: the rows, the total, and — when the page does
/// not show every match — `next_offset` and a sentence saying so.
fn page_json(page: &mozart_ipc::status::JobPage) -> Value {
    let shown = page.jobs.0.len() as u64;
    let end = page.offset + shown;
    // Each job's status as `status` says it: `pausing` while a paused job's sheets still
    // run (the row's `pausing` counts them), not `paused`.
    let jobs: Vec<Value> = page
        .jobs
        .0
        .iter()
        .map(|j| {
            let mut row = serde_json::to_value(j).unwrap_or(Value::Null);
            if let Some(obj) = row.as_object_mut() {
                obj.insert("status".into(), json!(j.shown_status()));
            }
            row
        })
        .collect();
    let mut doc = json!({
        "jobs": jobs,
        "total": page.total,
        "offset": page.offset,
        "limit": page.limit,
    });
    if end < page.total {
        doc["next_offset"] = json!(end);
        doc["note"] = json!(format!(
            "Showing {shown} of {} job(s); call list with offset {end} for the next page, or limit 0 for all.",
            page.total
        ));
    }
    doc
}

fn json_text(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

#[tool_router]
impl MozartMcp {
    /// A server for these options.
    pub fn new(options: Options) -> MozartMcp {
        MozartMcp {
            conductor: Conductor::new(options.socket),
            scores_dir: options.scores_dir,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Validate a Mozart score (YAML) without running it: schema, extended checks (V-codes) and the sheet plan. Give `path` or inline `yaml`."
    )]
    async fn validate(
        &self,
        Parameters(args): Parameters<ScoreArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let report = match (args.path, args.yaml) {
            (Some(path), None) => {
                let p = PathBuf::from(path);
                tokio::task::spawn_blocking(move || validate_file(&p)).await
            }
            (None, Some(yaml)) => {
                let dir = self.scores_dir.clone();
                tokio::task::spawn_blocking(move || {
                    // Read as if it were in the scores directory (its relative paths are
                    // from there), but named as what it is: no such file exists.
                    let path = dir.join("inline-score.yaml");
                    let mut report = validate_text(&yaml, &path);
                    name_inline(&mut report, &path);
                    report
                })
                .await
            }
            _ => return Ok(op_error(&one_of_path_or_yaml())),
        };
        let Ok(report) = report else {
            return Ok(op_error(&OpError::new(
                "The validator stopped unexpectedly.",
                &[],
            )));
        };
        Ok(report_result(&report))
    }

    #[tool(
        description = "Submit a score to the Mozart conductor as a job (by `path`, or inline `yaml`). Returns the job ID; poll it with `status`."
    )]
    async fn run(
        &self,
        Parameters(args): Parameters<RunArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        // An inline score replaces `<dir>/<id>.yaml` only if its run is accepted: a refused
        // run (invalid score, the job already running, no conductor) puts the file back.
        let mut restore: Option<InlineFile> = None;
        let path = match (args.path, args.yaml) {
            (Some(path), None) => {
                let path = PathBuf::from(path);
                let id = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if let Some(message) = mozart_ipc::job_id::file_refusal(&id) {
                    return Ok(op_error(&OpError::new(message, &[])));
                }
                path
            }
            (None, Some(yaml)) => {
                // Everything that can refuse the call is checked before anything is
                // written: the name, the directory, and the job's own score elsewhere.
                let id = match inline_id(args.name.as_deref(), &yaml) {
                    Ok(id) => id,
                    Err(e) => return Ok(op_error(&e)),
                };
                let dir = match inline_dir(args.directory.as_deref(), &self.scores_dir) {
                    Ok(dir) => dir,
                    Err(e) => return Ok(op_error(&e)),
                };
                if let Some(refusal) = self.score_elsewhere(&id, &dir).await {
                    return Ok(op_error(&refusal));
                }
                match save_inline(&dir, &id, &yaml) {
                    Ok(saved) => {
                        let p = saved.path.clone();
                        restore = Some(saved);
                        p
                    }
                    Err(e) => return Ok(op_error(&e)),
                }
            }
            _ => return Ok(op_error(&one_of_path_or_yaml())),
        };
        // Validate first, as `mozart run` does: a broken score never reaches the conductor.
        let p = path.clone();
        let Ok(report) = tokio::task::spawn_blocking(move || validate_file(&p)).await else {
            return Ok(op_error(&OpError::new(
                "The validator stopped unexpectedly.",
                &[],
            )));
        };
        if !report.valid {
            // The inline score's file is put back (removed): the errors name what the
            // caller gave, not a file that is gone.
            let mut report = report;
            if let Some(saved) = &restore {
                name_inline(&mut report, &saved.path);
            }
            put_back(restore);
            return Ok(report_result(&report));
        }
        let submitted = self.conductor.submit(&path, args.fresh).await;
        if !matches!(
            &submitted,
            Ok(r) if r.status == mozart_ipc::types::JobResponseStatus::Accepted
        ) {
            put_back(restore);
        }
        match submitted {
            Ok(resp) => Ok(text_result(json_text(&json!({
                "job_id": resp.job_id,
                "status": resp.status,
                "message": resp.message,
                "score": path.display().to_string(),
            })))),
            Err(e) => Ok(op_error(&e)),
        }
    }

    #[tool(
        description = "One job's status: job status, sheets done, cost, and each sheet's status, attempts and last error (with its E-code). A job of more than 50 sheets lists only its running and failed sheets (`sheets_view` has the counts of all); page through every sheet with `offset`/`limit`, optionally only one `state`."
    )]
    async fn status(
        &self,
        Parameters(args): Parameters<StatusArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        use mozart_ipc::sheet_view::{SheetMode, SheetQuery, STATES};
        if let Some(s) = &args.state {
            if !STATES.contains(&s.trim().to_lowercase().as_str()) {
                return Ok(op_error(&OpError::new(
                    format!("Unknown sheet state '{s}'."),
                    &["Use one of: pending, running, completed, failed, skipped."],
                )));
            }
        }
        let query = if args.state.is_some() || args.offset.is_some() || args.limit.is_some() {
            SheetQuery {
                mode: SheetMode::Page,
                states: args.state.map(|s| vec![s.trim().to_lowercase()]),
                offset: args.offset.unwrap_or(0),
                limit: args.limit,
                ..SheetQuery::default()
            }
        } else {
            SheetQuery::summary(STATUS_FULL_UP_TO)
        };
        match self.status_doc(&args.job_id, &query).await {
            Ok(doc) => Ok(text_result(json_text(&doc))),
            Err(e) => Ok(op_error(&e)),
        }
    }

    /// The `status` tool's document of job `id` for `query` (also the job's resource): its
    /// `running_sheets` are the job's, whichever sheets the answer lists.
    async fn status_doc(
        &self,
        id: &str,
        query: &mozart_ipc::sheet_view::SheetQuery,
    ) -> Result<Value, OpError> {
        let d = self.conductor.status_view(id, query).await?;
        let running = match d.checkpoint() {
            Some(cp) => view::running_sheets(&self.conductor, id, cp).await,
            None => Vec::new(),
        };
        Ok(status_json(&d, running))
    }

    #[tool(
        description = "List the conductor's jobs, newest first, in pages: `limit` (default 50, 0 = all) and `offset`, optionally only one `status`. The answer has `jobs`, `total` (how many match), and `next_offset` when more are left."
    )]
    async fn list(
        &self,
        Parameters(args): Parameters<ListArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        if let Some(s) = &args.status {
            if !view::STATUSES.contains(&s.to_lowercase().as_str()) {
                return Ok(op_error(&OpError::new(
                    format!("Unknown status '{s}'."),
                    &["Use one of: queued, running, paused, completed, failed, cancelled."],
                )));
            }
        }
        let params = mozart_ipc::types::ListPageParams {
            statuses: args.status.map(|s| vec![s.to_lowercase()]),
            limit: Some(args.limit.unwrap_or(DEFAULT_LIST_LIMIT)).filter(|n| *n > 0),
            offset: args.offset.unwrap_or(0),
            ..Default::default()
        };
        match self.conductor.list_page(&params).await {
            Ok(page) => Ok(text_result(json_text(&page_json(&page)))),
            Err(e) => Ok(op_error(&e)),
        }
    }

    #[tool(
        description = "Pause a running job: no new sheet starts; running sheets finish their attempt (the job is `pausing` until then, `paused` after)."
    )]
    async fn pause(
        &self,
        Parameters(args): Parameters<JobArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.conductor.pause(&args.job_id).await {
            Ok(m) => text_result(m),
            Err(e) => op_error(&e),
        })
    }

    #[tool(description = "Resume a paused, failed or cancelled job.")]
    async fn resume(
        &self,
        Parameters(args): Parameters<JobArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.conductor.resume(&args.job_id).await {
            Ok(m) => text_result(m),
            Err(e) => op_error(&e),
        })
    }

    #[tool(description = "Cancel a job (running sheets are stopped).")]
    async fn cancel(
        &self,
        Parameters(args): Parameters<JobArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.conductor.cancel(&args.job_id).await {
            Ok(m) => text_result(m),
            Err(e) => op_error(&e),
        })
    }

    #[tool(
        description = "Every recorded error of a job's current run (all_runs: of every run, earlier ones before a fresh start included): sheet, attempt, E-code, type, message and what to do about it."
    )]
    async fn errors(
        &self,
        Parameters(args): Parameters<ErrorsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let (detail, runs) = match self.conductor.errors(&args.job_id, args.all_runs).await {
            Ok(d) => d,
            Err(e) => return Ok(op_error(&e)),
        };
        let rows = detail
            .checkpoint()
            .map(view::attempt_rows)
            .unwrap_or_default();
        let mut doc = json!({
            "job_id": args.job_id,
            "error_count": rows.len(),
            "errors": rows,
        });
        if let Some(runs) = runs {
            doc["run"] = runs.run.into();
            doc["all_runs"] = runs.all_runs.into();
            doc["earlier_runs_errors_not_shown"] = runs.earlier_errors_not_shown.into();
        }
        Ok(text_result(json_text(&doc)))
    }

    #[tool(
        description = "The tail of a job's sheet output: the live log of running sheets (workspace/logs/sheet-NN.*.log), else the recorded output tail."
    )]
    async fn logs(
        &self,
        Parameters(args): Parameters<LogsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let detail = match self.conductor.status(&args.job_id).await {
            Ok(d) => d,
            Err(e) => return Ok(op_error(&e)),
        };
        let asked = args.lines.unwrap_or(DEFAULT_LOG_LINES);
        let lines = if asked == 0 {
            MAX_LOG_LINES
        } else {
            asked.min(MAX_LOG_LINES)
        };
        match sheet_logs(&detail, args.sheet, lines) {
            Ok(text) if asked == 0 || asked > MAX_LOG_LINES => Ok(text_result(format!(
                "[`lines` is at most {MAX_LOG_LINES}: showing up to the last {MAX_LOG_LINES} lines of each stream]\n{text}"
            ))),
            Ok(text) => Ok(text_result(text)),
            Err(e) => Ok(op_error(&e)),
        }
    }
}

/// What an inline score is called in its validation report: "the yaml you passed", not
/// the file it was read as (which does not exist, or no longer does once a refused run
/// puts it back).
const INLINE_NAME: &str = "the yaml you passed";

/// Name an inline score read as `path` as [`INLINE_NAME`] in its report.
fn name_inline(report: &mut ValidationReport, path: &Path) {
    let file = path.display().to_string();
    let rename = |text: &mut String| {
        if text.contains(&file) {
            *text = text.replace(&file, INLINE_NAME);
        }
    };
    if let Some(e) = report.load_error.as_mut() {
        rename(e);
    }
    report.hints.iter_mut().for_each(rename);
    for issue in &mut report.issues {
        rename(&mut issue.message);
        if let Some(s) = issue.suggestion.as_mut() {
            rename(s);
        }
    }
}

fn one_of_path_or_yaml() -> OpError {
    OpError::new(
        "Give exactly one of `path` (a score file) or `yaml` (the score's text).",
        &[],
    )
}

fn report_result(report: &ValidationReport) -> CallToolResult {
    let text = report.to_text();
    if report.valid {
        text_result(text)
    } else {
        CallToolResult::error(vec![ContentBlock::text(text)])
    }
}

/// An inline score's file and what it held before (`None`: it did not exist).
#[derive(Debug)]
struct InlineFile {
    path: PathBuf,
    /// Its directory, as checked when the score was saved, and its name there.
    dir: mozart_ipc::workspace_file::TrustedDir,
    name: String,
    previous: Option<Vec<u8>>,
}

/// Undo [`save_inline`]: the file's earlier content, or no file.
fn put_back(saved: Option<InlineFile>) {
    let Some(saved) = saved else { return };
    let _ = match saved.previous {
        Some(bytes) => saved.dir.write(&saved.name, &bytes).map(drop),
        None => saved.dir.remove(&saved.name),
    };
}

/// The job ID of an inline score: the call's `name`, else the score's `name:`; refused
/// (naming the rule) unless it is in the conductor's alphabet, since it becomes the file
/// name and so the job ID.
fn inline_id(name: Option<&str>, yaml: &str) -> Result<String, OpError> {
    let id = match name {
        Some(n) => n.to_string(),
        None => inline_score_name(yaml).ok_or_else(|| {
            OpError::new(
                "The inline score has no `name:` and the call gave no `name`.",
                &["Add `name: my-score` to the score, or pass `name`."],
            )
        })?,
    };
    // The name becomes the file name and so the job ID: the conductor's alphabet only
    // (checked before anything is written).
    if let Some(message) = mozart_ipc::job_id::refusal(&id) {
        let hint = format!(
            "Pass a `name` such as {}.",
            mozart_ipc::job_id::suggestion(&id)
        );
        return Err(OpError::new(message, &[&hint]));
    }
    Ok(id)
}

/// The directory an inline score is saved in: the call's `directory`, which must exist (a
/// typo is not made into a new tree), else the server's scores directory, made if missing.
fn inline_dir(given: Option<&str>, scores_dir: &Path) -> Result<PathBuf, OpError> {
    let Some(given) = given else {
        std::fs::create_dir_all(scores_dir).map_err(|e| {
            OpError::new(
                format!("Cannot create {}: {e}", scores_dir.display()),
                &["Pass a `directory` of yours to save the inline score in."],
            )
        })?;
        return Ok(scores_dir.to_path_buf());
    };
    let dir = PathBuf::from(given);
    let omit = format!(
        "Or omit `directory` to save it in {}.",
        scores_dir.display()
    );
    match std::fs::metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(OpError::new(
            format!(
                "The directory {} does not exist, so the inline score was not saved or submitted.",
                dir.display()
            ),
            &[
                "Check the path, or create the directory first (`directory` is not created).",
                &omit,
            ],
        )),
        Ok(meta) if !meta.is_dir() => Err(OpError::new(
            format!(
                "{} is not a directory, so the inline score was not saved or submitted.",
                dir.display()
            ),
            &[
                "Pass the directory to save the score in as `directory`.",
                &omit,
            ],
        )),
        // Anything else (no permission) is said when the score is saved.
        _ => Ok(dir),
    }
}

/// The path `path` names once its directory's links are resolved (as it is when the
/// directory does not exist).
fn resolved(path: &Path) -> PathBuf {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => dir
            .canonicalize()
            .map(|d| d.join(name))
            .unwrap_or_else(|_| path.clone()),
        _ => path,
    }
}

impl MozartMcp {
    /// Why an inline score of job `id` may not be saved in `dir`: the conductor has job `id`
    /// with its score in another file. Both files would be job `id` (the file name is the
    /// job ID), and the job goes on with one of them: running nothing ("already
    /// completed") it kept its old score while the call said the new file was run. `None`
    /// when the job is unknown, its score is `<dir>/<id>.yaml`, or the conductor cannot
    /// be asked (the submission then says why).
    async fn score_elsewhere(&self, id: &str, dir: &Path) -> Option<OpError> {
        use mozart_ipc::sheet_view::{SheetMode, SheetQuery};
        // The job's record, not its sheets.
        let query = SheetQuery {
            mode: SheetMode::Page,
            limit: Some(1),
            ..SheetQuery::default()
        };
        let detail = self.conductor.status_view(id, &query).await.ok()?;
        let existing = PathBuf::from(detail.config_path()?);
        let file = dir.join(format!("{id}.yaml"));
        if resolved(&existing) == resolved(&file) {
            return None;
        }
        let job_dir = existing
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        Some(OpError::new(
            format!(
                "Job '{id}' already exists and its score is {}; this inline score would be {}, another file of the same job (a job's ID is its score's file name), so nothing was saved or submitted.",
                existing.display(),
                resolved(&file).display()
            ),
            &[
                &format!("To run it as job '{id}' (its score replaced), pass `directory` {job_dir}."),
                "To run it as a new job, pass another `name`.",
            ],
        ))
    }
}

/// Save an inline score as `<dir>/<id>.yaml` (the file name is the job ID, checked by
/// [`inline_id`]); also keeps what the file held before, so a refused run can put it back.
/// Only in a directory no other user can change (the conductor reads the file after it is
/// validated), and never through a link or into a file that is not a regular one of yours:
/// refused, naming it.
fn save_inline(dir: &Path, id: &str, yaml: &str) -> Result<InlineFile, OpError> {
    use mozart_ipc::workspace_file::TrustedDir;
    let refused = |e: mozart_ipc::workspace_file::WriteError| {
        OpError::new(
            format!("Cannot save the inline score: {e}"),
            &["Pass a `directory` of yours that no other user can write."],
        )
    };
    let trusted = TrustedDir::open(dir).map_err(refused)?;
    let file = format!("{id}.yaml");
    let previous = trusted.read(&file).map_err(refused)?;
    let path = trusted.write(&file, yaml.as_bytes()).map_err(refused)?;
    Ok(InlineFile {
        path,
        dir: trusted,
        name: file,
        previous,
    })
}

/// The top-level `name:` of a score, read without a YAML parser (validation comes next).
fn inline_score_name(yaml: &str) -> Option<String> {
    yaml.lines().find_map(|line| {
        let rest = line.strip_prefix("name:")?;
        let v = rest.trim().trim_matches(|c| c == '"' || c == '\'').trim();
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// The `status` tool's document.
fn status_json(d: &JobDetail, running: Vec<u32>) -> Value {
    let Some(cp) = d.checkpoint() else {
        return json!({"job_id": d.job_id, "status": d.status(), "sheets": [], "detail": d.result});
    };
    let sum = JobSummary::of(cp);
    json!({
        "job_id": d.job_id,
        // As `mozart status --json` says it: `queued`, or `pausing` while a paused job's
        // sheets still run.
        "status": d.shown_status().0,
        "sheets_done": sum.done,
        "total_sheets": sum.total,
        "running_sheets": running,
        "estimated_cost_usd": sum.cost,
        // 0.0: some sheet reported neither cost nor tokens, so the figure above is only a
        // floor; below 0.9: priced at a default (issue 22). `cost` words it as status does.
        "cost_confidence": sum.cost_confidence,
        "cost": view::format_job_cost(sum.cost, sum.cost_confidence),
        "tokens": sum.tokens,
        "error_message": d.error_message(),
        // What holds the job's sheets back, as `mozart status` says it: a rate limit (an AI
        // CLI's holds every job; a `shell` one, only the job that hit it), an open breaker.
        "waiting_reason": cp.waiting_reason,
        "instrument_holds": cp.instrument_holds,
        "workspace": d.workspace(),
        "sheets": view::sheet_rows(cp),
        // Issue 24: which sheets `sheets` holds of how many, and the next page's offset.
        // At most 20 movements; `movements_total` says how many there are when that cuts.
        "sheets_view": cp.sheets_view.as_ref().map(|v| {
            let mut v = v.clone();
            let movements = v.movements.len();
            v.movements.truncate(STATUS_MOVEMENTS);
            let mut doc = serde_json::to_value(&v).unwrap_or(Value::Null);
            if movements > STATUS_MOVEMENTS {
                doc["movements_total"] = json!(movements);
                doc["movements_note"] = json!(format!(
                    "Showing the first {STATUS_MOVEMENTS} of {movements} movements; `counts` covers every sheet."
                ));
            }
            doc
        }),
    })
}

/// Tail of sheet output: live log files, else the checkpoint's recorded tails.
fn sheet_logs(d: &JobDetail, sheet: Option<u32>, lines: usize) -> Result<String, OpError> {
    let cp = d.checkpoint().ok_or_else(|| {
        OpError::new(
            format!("Job '{}' has not started a sheet yet.", d.job_id),
            &[],
        )
    })?;
    let sheets: Vec<u32> = match sheet {
        Some(n) if cp.sheets.contains_key(&n) => vec![n],
        Some(n) => {
            return Err(OpError::new(
                format!(
                    "Job '{}' has no sheet {n} (it has {}).",
                    d.job_id, cp.total_sheets
                ),
                &[],
            ))
        }
        None => {
            let running = JobSummary::of(cp).running;
            if running.is_empty() {
                cp.sheets
                    .values()
                    .filter(|s| s.started_at.is_some())
                    .max_by(|a, b| {
                        let ta = a
                            .started_at
                            .as_ref()
                            .and_then(|t| t.to_epoch())
                            .unwrap_or(0.0);
                        let tb = b
                            .started_at
                            .as_ref()
                            .and_then(|t| t.to_epoch())
                            .unwrap_or(0.0);
                        ta.total_cmp(&tb)
                    })
                    .map(|s| vec![s.sheet_num])
                    .unwrap_or_default()
            } else {
                running
            }
        }
    };
    if sheets.is_empty() {
        return Ok(format!("Job '{}': no sheet has output yet.", d.job_id));
    }
    let workspace = d.workspace().map(PathBuf::from);
    let mut out = String::new();
    for (i, &n) in sheets.iter().enumerate() {
        if out.len() >= MAX_LOGS_ANSWER {
            let left: Vec<String> = sheets[i..].iter().map(u32::to_string).collect();
            out.push_str(&format!(
                "[{} more running sheet(s) not shown: this answer is at most {} KiB. Ask for one with `sheet`: {}]\n",
                left.len(),
                MAX_LOGS_ANSWER / 1024,
                left.join(", ")
            ));
            break;
        }
        out.push_str(&format!("=== sheet {n} ===\n"));
        let mut found = false;
        for stream in ["stdout", "stderr"] {
            let tail = cp.sheets.get(&n).and_then(|s| {
                if stream == "stdout" {
                    s.stdout_tail.as_deref()
                } else {
                    s.stderr_tail.as_deref()
                }
            });
            // `None` when neither the file nor the registry's tail holds any text.
            if let Some(output) = mozart_backends::output_log::read_sheet_output_tail(
                workspace.as_deref(),
                &d.job_id,
                n,
                stream,
                tail,
                MAX_STREAM_BYTES,
            ) {
                found = true;
                if stream == "stderr" {
                    out.push_str("--- stderr ---\n");
                }
                // A link, a FIFO or another user's file in the log's place: said, not read.
                if let Some(why) = &output.refused {
                    out.push_str(&format!("({why})\n"));
                }
                let shown = mozart_backends::output_log::last_lines(&output.text, lines);
                let skipped =
                    output.skipped_bytes + output.text.len().saturating_sub(shown.len()) as u64;
                if skipped > 0 {
                    out.push_str(&cut_note(skipped, output.file.as_deref()));
                }
                out.push_str(&shown);
                if !out.ends_with('\n') {
                    out.push('\n');
                }
            }
        }
        if !found {
            out.push_str("(no output recorded)\n");
        }
    }
    Ok(out)
}

/// The line before a stream's tail that says how much of it came before.
fn cut_note(skipped: u64, file: Option<&Path>) -> String {
    let noun = if skipped == 1 { "byte" } else { "bytes" };
    match file {
        Some(f) => format!(
            "[{skipped} earlier {noun} not shown; the whole output: {}]\n",
            f.display()
        ),
        None => format!("[{skipped} earlier {noun} not shown]\n"),
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MozartMcp {
    /// The stand-in of an oversized request ([`stdin_guard`]): an error naming its size.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        if request.method == stdin_guard::OVERSIZED_METHOD {
            let size = request
                .params
                .as_ref()
                .and_then(|p| p["bytes"].as_u64())
                .unwrap_or(0);
            return Err(ErrorData::invalid_request(
                oversized_text(usize::try_from(size).unwrap_or(usize::MAX)),
                None,
            ));
        }
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            request.method,
            None,
        ))
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("mozart", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Mozart orchestrates AI pipelines: a score (YAML) becomes a job of sheets run by the \
             conductor. Validate a score, run it, then poll status/logs/errors; pause, resume or \
             cancel jobs. Each job's status is also the resource mozart://jobs/{job_id}.",
        )
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        // A page of jobs at a time (newest first): a conductor with thousands of jobs would
        // otherwise answer one unbounded list. `nextCursor` is the next page's offset.
        let offset = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(cursor) => cursor.parse::<u64>().map_err(|_| {
                ErrorData::invalid_params(
                    format!(
                        "Unknown cursor '{cursor}': pass the nextCursor of the previous resources/list answer, or none for the first page."
                    ),
                    None,
                )
            })?,
        };
        let page = self
            .conductor
            .list_page(&mozart_ipc::types::ListPageParams {
                limit: Some(RESOURCES_PAGE),
                offset,
                ..Default::default()
            })
            .await
            .map_err(|e| ErrorData::internal_error(e.render_text(), None))?;
        let end = offset + page.jobs.0.len() as u64;
        let resources = page
            .jobs
            .0
            .iter()
            .map(|j| {
                let (id, status) = (j.job_id(), j.shown_status());
                Resource::new(format!("{JOB_URI}{id}"), id.to_string())
                    .with_description(format!("Mozart job {id} ({status})"))
                    .with_mime_type("application/json")
            })
            .collect();
        let mut result = ListResourcesResult::with_all_items(resources);
        if end < page.total {
            result.next_cursor = Some(end.to_string());
        }
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(format!("{JOB_URI}{{job_id}}"), "job-status")
                .with_description("A Mozart job's status (as the status tool returns it)")
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let Some(id) = request.uri.strip_prefix(JOB_URI) else {
            return Err(ErrorData::resource_not_found(
                format!(
                    "Unknown resource {}: job resources are {JOB_URI}<job_id>",
                    request.uri
                ),
                None,
            ));
        };
        // The `status` tool's document (mcp.md): the same capped summary of a large job.
        let query = mozart_ipc::sheet_view::SheetQuery::summary(STATUS_FULL_UP_TO);
        let doc = self.status_doc(id, &query).await.map_err(|e| {
            if e.conductor_down {
                ErrorData::internal_error(e.render_text(), None)
            } else {
                ErrorData::resource_not_found(e.render_text(), None)
            }
        })?;
        let mut contents = ResourceContents::text(json_text(&doc), request.uri.clone());
        if let ResourceContents::TextResourceContents { mime_type, .. } = &mut contents {
            *mime_type = Some("application/json".into());
        }
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn inline_scores_take_their_name_as_job_id() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = "name: \"demo\"\nsheet: {}\n";
        let id = inline_id(None, yaml).unwrap();
        assert_eq!(id, "demo");
        let p = save_inline(dir.path(), &id, yaml).unwrap().path;
        assert_eq!(p, dir.path().join("demo.yaml"));
        assert!(inline_id(None, "sheet: {}\n").is_err());
        assert!(inline_id(Some("../x"), "name: a\n").is_err());
        let refused = inline_id(Some("q'<>\""), "name: a\n").unwrap_err();
        assert!(refused
            .message
            .contains("must start with a letter or digit"));
    }

    #[test]
    fn an_inline_scores_directory_is_never_made_unless_it_is_the_servers() {
        let root = tempfile::tempdir().unwrap();
        let scores = root.path().join("mcp-scores");
        assert_eq!(inline_dir(None, &scores).unwrap(), scores);
        assert!(scores.is_dir(), "the server's own directory is made");
        let typo = root.path().join("projcet/x");
        let refused = inline_dir(Some(typo.to_str().unwrap()), &scores).unwrap_err();
        assert!(
            refused.message.contains("does not exist"),
            "{}",
            refused.message
        );
        assert!(!root.path().join("projcet").exists());
        let file = root.path().join("f");
        std::fs::write(&file, "").unwrap();
        let refused = inline_dir(Some(file.to_str().unwrap()), &scores).unwrap_err();
        assert!(
            refused.message.contains("is not a directory"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn a_cut_page_says_where_the_next_one_starts() {
        let row = |i: u64| {
            serde_json::from_value::<mozart_ipc::status::JobListEntry>(json!({
                "job_id": format!("j{i}"), "status": "completed", "config_path": "/s.yaml",
                "workspace": "/w", "submitted_at": 1.0, "started_at": null}))
            .unwrap()
        };
        let page = |shown: u64, total: u64, offset: u64| mozart_ipc::status::JobPage {
            jobs: mozart_ipc::status::JobList((0..shown).map(row).collect()),
            total,
            offset,
            limit: Some(50),
            ..Default::default()
        };
        let doc = page_json(&page(50, 315, 0));
        assert_eq!(doc["total"], 315);
        assert_eq!(doc["jobs"].as_array().unwrap().len(), 50);
        assert_eq!(doc["next_offset"], 50);
        assert!(doc["note"]
            .as_str()
            .unwrap()
            .starts_with("Showing 50 of 315 job(s)"));
        let last = page_json(&page(15, 315, 300));
        assert!(last.get("next_offset").is_none() && last.get("note").is_none());
    }
}
