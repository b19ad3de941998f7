//! Ours: the worker + reviewer loop of a sheet (`review:`, docs/mochi.md): memory files,
//! the reviewer call and its verdict, the pending-review record that spares a worker re-run,
//! and the dispatch of a finished task.
//!
//! The loop rides on the baton's retries: a `RETRY` verdict is reported as a failed attempt
//! whose message carries the feedback, so the next attempt is the next iteration. What the
//! loop needs to survive a crash is checkpointed with the sheet (`SheetState::review`) and
//! kept in the sheet's directory (the memory files).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mozart_backends::{ExecutionRequest, ExecutionResult};
use mozart_config::tasks::{DispatchMode, ReviewConfig, TaskItem};
use mozart_config::PlannedSheet;
use mozart_ipc::workspace_file::{TrustedDir, WriteError};
use mozart_state::review::{ReviewState, ReviewVerdict};

use std::collections::HashMap;

use mozart_baton::{Failure, FailureKind};

use super::{JobRun, Shared};

/// `MEMORY.md` keeps this much of the worker's last output (seed 004).
pub(crate) const MEMORY_CHARS: usize = 4000;

/// What the reviewer said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The task is done.
    Done,
    /// Another iteration, with this feedback.
    Retry(String),
}

/// How a reviewer call ended.
pub(crate) enum Outcome {
    /// A verdict (and what the call cost).
    Verdict(Verdict, f64),
    /// The reviewer's instrument is rate limited: wait, then ask again.
    RateLimited(Option<Duration>, String),
    /// The reviewer ran and failed (retried like a failed attempt), with its E-code.
    Failed(String, &'static str),
    /// The reviewer cannot run at all (unknown instrument, a template that does not
    /// render): retrying cannot help. With its E-code.
    Broken(String, &'static str),
}

/// E-code of a reviewer loop that ran out of iterations without `DONE` (docs/mochi.md).
pub(crate) const E_LOOP_EXHAUSTED: &str = "E701";
/// E-code of a task the reviewer accepted whose dispatch failed (docs/mochi.md).
pub(crate) const E_DISPATCH_FAILED: &str = "E702";
/// E-code of a reviewer that cannot run because of the score (unknown instrument, a
/// `review.template` that does not render).
const E_CONFIG: &str = "E301";

/// The memory files Mozart writes (kept out of the reviewer's list of changed files).
const MEMORY_FILES: [&str; 4] = ["PROGRESS.md", "MEMORY.md", "FEEDBACK.md", "AGENTS.md"];

/// Where a task stands, as the `Status:` line of PROGRESS.md says it (seed 004: `in-progress`,
/// `done`, …).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stage<'a> {
    /// A worker iteration is about to run.
    InProgress,
    /// The reviewer answered `DONE`; the dispatch is next.
    Done,
    /// `DONE`, and the result went here (`none`: `tasks.dispatch: none`, nothing went anywhere).
    Dispatched(&'a str),
    /// `DONE`, but the dispatch failed with this message.
    DispatchFailed(&'a str),
    /// No `DONE` within the iterations.
    Failed,
}

/// The review settings for `sheet`, when it is reviewed.
pub(crate) fn settings<'a>(run: &'a JobRun, sheet: &PlannedSheet) -> Option<&'a ReviewConfig> {
    run.config
        .review
        .as_ref()
        .filter(|r| r.reviews(&run.config, sheet.movement))
}

/// Parse a reviewer's answer: the first line that reads `DONE` or starts with `RETRY:`
/// decides (markdown emphasis around it is ignored); `RETRY:`'s feedback runs to the end of
/// the answer. Anything else is a `RETRY` with the whole answer as feedback.
pub(crate) fn parse_verdict(text: &str) -> Verdict {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let t = line
            .trim()
            .trim_matches(|c: char| matches!(c, '*' | '_' | '`' | '#' | '>') || c.is_whitespace());
        if t.len() >= 6 && t[..6].eq_ignore_ascii_case("RETRY:") {
            let mut feedback = t[6..].trim().to_string();
            for rest in &lines[i + 1..] {
                feedback.push('\n');
                feedback.push_str(rest);
            }
            let feedback = feedback.trim().to_string();
            return Verdict::Retry(if feedback.is_empty() {
                text.trim().to_string()
            } else {
                feedback
            });
        }
        let word = t.trim_end_matches(['.', '!']);
        if word.eq_ignore_ascii_case("DONE") {
            return Verdict::Done;
        }
    }
    let raw = text.trim();
    Verdict::Retry(if raw.is_empty() {
        "the reviewer gave no answer".into()
    } else {
        raw.to_string()
    })
}

/// The last `max` characters of `s`.
pub(crate) fn last_chars(s: &str, max: usize) -> &str {
    let n = s.chars().count();
    if n <= max {
        return s;
    }
    let skip = n - max;
    let at = s.char_indices().nth(skip).map_or(s.len(), |(i, _)| i);
    &s[at..]
}

/// The directory Mozart keeps review records in: `<workspace>/.mozart-review`, never a link
/// nor a directory another user can change (the workspace may be shared).
fn records_dir(workspace: &Path, create: bool) -> Result<TrustedDir, WriteError> {
    TrustedDir::open_in(workspace, ".mozart-review", create)
}

/// Open a memory directory (a sheet's directory under `.mozart-review`, or its own worktree)
/// without following a link at it, or at `.mozart-review`.
fn memory_dir(dir: &Path) -> Result<TrustedDir, String> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(format!("{} is not a memory directory", dir.display()));
    };
    let name = name.to_string_lossy();
    let opened = match (parent.parent(), parent.file_name()) {
        (Some(workspace), Some(records)) if records == ".mozart-review" => {
            records_dir(workspace, false).and_then(|d| d.subdir(&name, false))
        }
        _ => TrustedDir::open_in(parent, &name, false),
    };
    opened.map_err(|e| e.to_string())
}

/// A memory file's text; a file that is missing is empty, and one that is not a regular
/// file of yours (a link, a FIFO, …) is left out, with a warning saying why.
fn read(dir: &Path, name: &str) -> String {
    let got = memory_dir(dir).and_then(|d| d.read(name).map_err(|e| e.to_string()));
    match got {
        Ok(bytes) => String::from_utf8_lossy(&bytes.unwrap_or_default()).into_owned(),
        Err(e) => {
            tracing::warn!(file = %dir.join(name).display(), error = %e, "review.memory_file_not_read");
            String::new()
        }
    }
}

/// Write a memory file: a new file, or the regular file of yours there, never through a link.
fn write(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    memory_dir(dir)
        .and_then(|d| d.write(name, text.as_bytes()).map_err(|e| e.to_string()))
        .map(drop)
        .map_err(|e| format!("cannot write {}: {e}", dir.join(name).display()))
}

/// Bring PROGRESS.md, FEEDBACK.md and AGENTS.md up to date: before a worker iteration
/// (`stage` in-progress), and when the task's outcome is known (done, dispatched, failed).
/// MEMORY.md is written after each worker run.
pub(crate) fn write_memory(
    dir: &Path,
    task: &str,
    (iteration, max): (u32, u32),
    state: &ReviewState,
    stage: Stage<'_>,
) -> Result<(), String> {
    use std::fmt::Write as _;
    let plural = |n: u32| if n == 1 { "" } else { "s" };
    let status = match stage {
        Stage::InProgress => "in-progress".to_string(),
        Stage::Done => format!(
            "done (the reviewer answered DONE after iteration {iteration}; the result is being dispatched)"
        ),
        Stage::Dispatched("none") => format!(
            "done (the reviewer answered DONE after iteration {iteration}; dispatch none: the work stays where the worker left it)"
        ),
        Stage::Dispatched(place) => format!(
            "done (the reviewer answered DONE after iteration {iteration}; dispatched: {place})"
        ),
        Stage::DispatchFailed(e) => format!(
            "done, dispatch failed (the reviewer answered DONE after iteration {iteration}; the dispatch failed: {e})"
        ),
        Stage::Failed => format!(
            "failed (no DONE after {iteration} iteration{}; the last feedback is in FEEDBACK.md)",
            plural(iteration)
        ),
    };
    let mut progress =
        format!("# Progress\n\nTask: {task}\nIteration: {iteration} of {max}\nStatus: {status}\n");
    if !state.history.is_empty() {
        progress.push_str("\n## Reviews so far\n");
        for v in &state.history {
            let first = v.feedback.lines().next().unwrap_or("");
            let _ = writeln!(
                progress,
                "- iteration {}: {} {first}",
                v.iteration, v.verdict
            );
        }
    }
    write(dir, "PROGRESS.md", &progress)?;
    let feedback = match state.feedback.as_deref().filter(|f| !f.is_empty()) {
        _ if state.verdict.as_deref() == Some("DONE") => format!(
            "# Reviewer feedback\n\nThe reviewer answered DONE after iteration {}.\n",
            state.iteration
        ),
        Some(f) => format!(
            "# Reviewer feedback (after iteration {})\n\n{f}\n",
            state.iteration
        ),
        None => "# Reviewer feedback\n\nNone yet: this is the first iteration.\n".into(),
    };
    write(dir, "FEEDBACK.md", &feedback)?;
    if std::fs::symlink_metadata(dir.join("AGENTS.md")).is_err() {
        write(
            dir,
            "AGENTS.md",
            "# Notes for agents\n\nWork only inside this directory. Keep PROGRESS.md, MEMORY.md and FEEDBACK.md as they are; add what the next agent should know (learnings, dead ends) below.\n",
        )?;
    }
    Ok(())
}

/// The memory files (in `dir`) under clear headers, for the worker's prompt; the worker
/// works in `workdir`.
pub(crate) fn memory_section(dir: &Path, workdir: &Path, branch: Option<&str>) -> String {
    let mut out = String::from("\n\n---\n# Memory of earlier iterations\n");
    for (title, file) in [
        ("## Progress", "PROGRESS.md"),
        ("## Memory (your previous output)", "MEMORY.md"),
        ("## Reviewer Feedback", "FEEDBACK.md"),
        ("## Agent Notes", "AGENTS.md"),
    ] {
        let text = read(dir, file);
        if text.trim().is_empty() {
            continue;
        }
        out.push_str(&format!("\n{title} ({file})\n\n{}\n", text.trim_end()));
    }
    out.push_str(&format!(
        "\n## How to work\nYou are working in {}{}. Address the reviewer feedback above, if any. When finished, commit all changes with a clear, descriptive commit message. If you cannot complete the task, write MOCHI_NOTES.md explaining why, and commit it.\n",
        workdir.display(),
        branch.map(|b| format!(" on branch {b}")).unwrap_or_default()
    ));
    out
}

/// Record the worker's output in MEMORY.md (its last 4,000 characters).
pub(crate) fn write_output_memory(dir: &Path, output: &str) -> Result<(), String> {
    write(
        dir,
        "MEMORY.md",
        &format!(
            "# Memory: the end of the worker's last output\n\n{}\n",
            last_chars(output.trim_end(), MEMORY_CHARS)
        ),
    )
}

/// A worker output waiting for its review (so a reviewer that was rate limited, crashed or
/// was interrupted does not make the worker run again).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Pending {
    pub iteration: u32,
    /// The worker's answer (`ExecutionResult::output_text`).
    pub output: String,
    /// Its raw stdout and stderr, which the reviewer sees too (absent in a record an older
    /// conductor wrote).
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
}

fn pending_name(sheet: u32) -> String {
    format!("sheet-{sheet}.json")
}

/// A review record's bytes (`None`: there is none, or it is not a regular file of yours in
/// a `.mozart-review` of yours: a warning says why).
fn read_record(run: &JobRun, name: &str) -> Option<Vec<u8>> {
    match records_dir(&run.workspace, false).and_then(|d| d.read(name)) {
        Ok(bytes) => bytes,
        Err(e) if matches!(&e, WriteError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound) => {
            None
        }
        Err(e) => {
            tracing::warn!(job_id = %run.job_id, error = %e, "review.record_not_read");
            None
        }
    }
}

/// The pending output of `iteration`, if the last worker run of it was not reviewed yet.
pub(crate) fn take_pending(run: &JobRun, sheet: u32, iteration: u32) -> Option<Pending> {
    let bytes = read_record(run, &pending_name(sheet))?;
    let p: Pending = serde_json::from_slice(&bytes).ok()?;
    (p.iteration == iteration).then_some(p)
}

/// Remember a worker output until its review is checkpointed.
pub(crate) fn save_pending(run: &JobRun, sheet: u32, p: &Pending) {
    if let Err(e) = write_record(&run.workspace, &pending_name(sheet), p) {
        tracing::warn!(job_id = %run.job_id, sheet, error = %e, "review.pending_not_saved");
    }
}

/// Write `value` as JSON atomically as `name` in the workspace's `.mozart-review`
/// (created), in the directory that was checked, whatever its path points to meanwhile.
fn write_record(workspace: &Path, name: &str, value: &impl serde::Serialize) -> Result<(), String> {
    let dir = records_dir(workspace, true).map_err(|e| e.to_string())?;
    let bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    mozart_state::atomic_write(&dir.handle_path().join(name), &bytes)
        .map_err(|e| format!("cannot write {}: {e}", dir.path().join(name).display()))
}

/// Forget the pending output (its verdict is in the checkpoint).
pub(crate) fn clear_pending(run: &JobRun, sheet: u32) {
    if let Ok(dir) = records_dir(&run.workspace, false) {
        let _ = dir.remove(&pending_name(sheet));
    }
}

/// Where a `DONE` verdict (and, once it happened, its dispatch) is recorded the moment it
/// is known, ahead of the checkpoint that gets it when the attempt ends: a conductor killed
/// in between neither asks the reviewer again nor dispatches twice.
fn delivery_name(sheet: u32) -> String {
    format!("sheet-{sheet}.delivery.json")
}

fn save_delivery(run: &JobRun, sheet: u32, state: &ReviewState) {
    if let Err(e) = write_record(&run.workspace, &delivery_name(sheet), state) {
        tracing::warn!(job_id = %run.job_id, sheet, error = %e, "review.delivery_not_saved");
    }
}

/// The recorded `DONE` of a later iteration than the checkpoint knows (or the same one,
/// dispatched since).
fn recorded_delivery(run: &JobRun, sheet: u32, known: &ReviewState) -> Option<ReviewState> {
    let bytes = read_record(run, &delivery_name(sheet))?;
    let saved: ReviewState = serde_json::from_slice(&bytes).ok()?;
    let newer = saved.iteration > known.iteration
        || (saved.iteration == known.iteration
            && known.dispatched.is_none()
            && saved.dispatched.is_some());
    (saved.verdict.as_deref() == Some("DONE") && newer).then_some(saved)
}

/// Forget every output waiting for review and every recorded delivery of the job in
/// `workspace`: the run starts over, or ended with every verdict in the checkpoint.
/// Only in the workspace's own `.mozart-review` (never a link's target or another user's
/// directory).
pub(crate) fn forget_all(workspace: &Path) {
    let dir = match records_dir(workspace, false) {
        Ok(dir) => dir,
        Err(e) => {
            if !matches!(&e, WriteError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
            {
                tracing::warn!(error = %e, "review.records_not_cleared");
            }
            return;
        }
    };
    for name in dir.names().unwrap_or_default() {
        if name.starts_with("sheet-") && name.ends_with(".json") {
            let _ = dir.remove(&name);
        }
    }
}

/// Entries of each list of changed files the reviewer is shown.
const CHANGES_SHOWN: usize = 100;

/// `git -C dir args…`: its stdout when it succeeds.
fn git_in(dir: &Path, args: &[&str]) -> Option<String> {
    let mut cmd = std::process::Command::new("git");
    cmd.arg("-C").arg(dir).args(args);
    // A conductor started from a git hook must not look at that hook's repository.
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_COMMON_DIR",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd.stdin(std::process::Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// At most [`CHANGES_SHOWN`] lines of `lines`, `(none)` when there are none.
fn change_list(lines: &[&str], more: &str) -> String {
    if lines.is_empty() {
        return "(none)\n".into();
    }
    let mut out: String = lines
        .iter()
        .take(CHANGES_SHOWN)
        .map(|l| format!("{l}\n"))
        .collect();
    if lines.len() > CHANGES_SHOWN {
        out.push_str(&format!(
            "… and {} more ({more})\n",
            lines.len() - CHANGES_SHOWN
        ));
    }
    out
}

/// What the worker changed in `dir`, for the reviewer: the files committed since `base` (the
/// commit the task's worktree was created from) and the changes not committed, as git
/// lists them. Mozart's own memory files are left out when `memory_here`. Blocking.
pub(crate) fn changed_files(dir: &Path, base: Option<&str>, memory_here: bool) -> String {
    let Some(prefix) = git_in(dir, &["rev-parse", "--show-prefix"]) else {
        return format!(
            "({} is not in a git repository: no list of changed files)\n",
            dir.display()
        );
    };
    let prefix = prefix.trim();
    let mut out = String::new();
    if let Some(base) = base.filter(|b| !b.is_empty()) {
        let range = format!("{base}..HEAD");
        match git_in(dir, &["diff", "--name-status", &range]) {
            Some(text) => {
                let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
                out.push_str(&format!(
                    "Committed on the branch since {base} (`git diff --name-status {range}`):\n"
                ));
                out.push_str(&change_list(
                    &lines,
                    &format!("git diff --name-status {range}"),
                ));
            }
            None => out.push_str(&format!(
                "(`git diff --name-status {range}` failed: no list of committed changes)\n"
            )),
        }
    }
    let ours: Vec<String> = if memory_here {
        MEMORY_FILES
            .iter()
            .map(|f| format!("{prefix}{f}"))
            .collect()
    } else {
        Vec::new()
    };
    match git_in(
        dir,
        &["status", "--porcelain", "--untracked-files=all", "--", "."],
    ) {
        Some(text) => {
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| l.len() > 3 && !ours.iter().any(|o| &l[3..] == o.as_str()))
                .collect();
            out.push_str("Not committed (`git status --porcelain`):\n");
            out.push_str(&change_list(&lines, "git status --porcelain"));
        }
        None => out.push_str("(`git status --porcelain` failed: no list of uncommitted changes)\n"),
    }
    out
}

/// What the reviewer is shown of the worker's attempt.
pub(crate) struct WorkerRun<'a> {
    /// The worker's answer (the extracted result of structured output, else its stdout).
    pub output: &'a str,
    /// Its raw stdout.
    pub stdout: &'a str,
    /// Its stderr.
    pub stderr: &'a str,
    /// The files it changed ([`changed_files`]).
    pub changes: &'a str,
}

/// The reviewer's prompt.
/// The worker's stdout as the reviewer needs it. A streaming CLI's stdout is JSON events,
/// the first of which (`"type": "system"`: the session's tools and settings) can fill the
/// whole window by itself: it is left out, and what the agent printed outside the events
/// comes last, where the window keeps it.
fn stdout_for_review(raw: &str) -> String {
    let mut events = String::new();
    let mut printed = String::new();
    for line in raw.lines() {
        let trimmed = line.trim();
        let json = trimmed.starts_with('{') && trimmed.ends_with('}');
        if !json {
            printed.push_str(line);
            printed.push('\n');
        } else if !trimmed.contains(r#""type":"system""#)
            && !trimmed.contains(r#""type": "system""#)
        {
            events.push_str(line);
            events.push('\n');
        }
    }
    events + &printed
}

fn reviewer_prompt(
    cfg: &ReviewConfig,
    task: &str,
    (iteration, max): (u32, u32),
    dir: &Path,
    branch: Option<&str>,
    worker: &WorkerRun<'_>,
) -> Result<String, String> {
    let output = last_chars(worker.output, MEMORY_CHARS);
    let shown_stdout = stdout_for_review(worker.stdout);
    let stdout = last_chars(&shown_stdout, MEMORY_CHARS);
    let stderr = last_chars(worker.stderr, MEMORY_CHARS);
    if let Some(template) = &cfg.template {
        let ctx = serde_json::json!({
            "task": task, "iteration": iteration, "max_iterations": max,
            "working_directory": dir.display().to_string(), "branch": branch.unwrap_or(""),
            "output": output, "stdout": stdout, "stderr": stderr,
            "changed_files": worker.changes,
        });
        return mozart_config::template::environment(true)
            .render_str(template, ctx)
            .map_err(|e| format!("cannot render review.template: {e}"));
    }
    let mut prompt = format!(
        "You review the work of a coding agent (iteration {iteration} of {max}).\n\n## Task\n{task}\n\n## Where the work is\nDirectory: {}{}. Inspect the files and `git log` there.\n\n## Files changed\n{}\n## The agent's output (its last {MEMORY_CHARS} characters)\n{output}\n",
        dir.display(),
        branch.map(|b| format!(", branch {b}")).unwrap_or_default(),
        worker.changes,
    );
    // Raw stdout differs from the answer when the answer was extracted from structured
    // output (JSON events: the tools the agent ran); otherwise it would repeat it.
    if !worker.stdout.trim().is_empty() && worker.stdout.trim() != worker.output.trim() {
        prompt.push_str(&format!(
            "\n## The agent's stdout (its last {MEMORY_CHARS} characters)\n{stdout}\n"
        ));
    }
    if !worker.stderr.trim().is_empty() {
        prompt.push_str(&format!(
            "\n## The agent's stderr (its last {MEMORY_CHARS} characters)\n{stderr}\n"
        ));
    }
    prompt.push_str("\n## Your answer\nIf the task is complete and correct, answer with the single line\nDONE\nOtherwise answer with one line\nRETRY: <what the agent must fix>\n");
    Ok(prompt)
}

/// Run the reviewer on a worker's output.
async fn run_reviewer(
    rv: &Review<'_>,
    cfg: &ReviewConfig,
    task: &str,
    (iteration, max): (u32, u32),
    branch: Option<&str>,
    changes: &str,
) -> Outcome {
    let Review {
        shared,
        run,
        sheet,
        dir,
        output,
        stdout,
        stderr,
        ..
    } = *rv;
    let worker = WorkerRun {
        output,
        stdout,
        stderr,
        changes,
    };
    let prompt = match reviewer_prompt(cfg, task, (iteration, max), dir, branch, &worker) {
        Ok(p) => p,
        Err(e) => return Outcome::Broken(e, E_CONFIG),
    };
    // An `instruments:` alias gives a profile and its settings.
    let named = cfg
        .instrument
        .clone()
        .unwrap_or_else(|| sheet.instrument.clone());
    let mut options = serde_json::Map::new();
    let instrument = match run.config.instruments.get(&named) {
        Some(def) => {
            options.extend(def.config.clone());
            def.profile.clone()
        }
        None => named,
    };
    options.extend(cfg.instrument_config.clone());
    let model = cfg.model.clone().or_else(|| {
        options
            .get("model")
            .and_then(|m| m.as_str())
            .map(str::to_string)
    });
    let backend = match super::instruments::backend(shared, run, rv.backends, &instrument) {
        Ok(b) => b,
        Err(e) => return Outcome::Broken(format!("reviewer: {e}"), E_CONFIG),
    };
    let timeout = Duration::from_secs_f64(
        cfg.timeout_seconds
            .unwrap_or(sheet.timeout_seconds)
            .clamp(1.0, 7.0 * 86_400.0),
    );
    let mut req = ExecutionRequest::new(prompt, dir.to_path_buf(), timeout);
    req.model = model;
    req.job_id = run.job_id.clone();
    req.sheet_num = sheet.num;
    req.attempt = iteration;
    req.options = options;
    let result: ExecutionResult =
        super::attempt::execute_watched(shared, &run.job_id, sheet.num, timeout, &*backend, req)
            .await;
    if !result.success {
        let c = mozart_backends::classify_for(&result, &instrument);
        if c.category == mozart_backends::ErrorCategory::RateLimit {
            let wait = c
                .rate_limit
                .as_ref()
                .map(|r| Duration::from_secs_f64(r.wait_seconds.max(0.0)));
            return Outcome::RateLimited(wait, format!("reviewer ({instrument}): {}", c.message));
        }
        let message = format!(
            "reviewer ({instrument}) failed: {}",
            mozart_backends::redact(&c.message)
        );
        // A missing executable or bad credentials do not heal with a retry.
        return if c.retriable {
            Outcome::Failed(message, c.code.as_str())
        } else {
            Outcome::Broken(message, c.code.as_str())
        };
    }
    Outcome::Verdict(
        parse_verdict(result.output_text()),
        super::musician::reported_cost(&result, "the reviewer").unwrap_or(0.0),
    )
}

/// The loop state after a verdict on `iteration`.
pub(crate) fn after_verdict(
    mut state: ReviewState,
    iteration: u32,
    verdict: &Verdict,
    branch: Option<&str>,
) -> ReviewState {
    let (word, feedback) = match verdict {
        Verdict::Done => ("DONE", String::new()),
        Verdict::Retry(f) => ("RETRY", f.clone()),
    };
    state.iteration = iteration;
    state.verdict = Some(word.into());
    state.feedback = Some(feedback.clone());
    state.history.push(ReviewVerdict {
        iteration,
        verdict: word.into(),
        feedback,
    });
    if let Some(b) = branch {
        state.branch = Some(b.to_string());
    }
    state
}

/// What dispatch needs to know about the finished task.
pub(crate) struct Finished<'a> {
    pub run: &'a JobRun,
    pub sheet: u32,
    pub task: Option<&'a TaskItem>,
    pub task_text: &'a str,
    pub dir: &'a Path,
    pub worktree: Option<&'a crate::isolation::Worktree>,
    pub iterations: u32,
    pub output: &'a str,
    /// An earlier dispatch of this result may have happened (a crash came before it was
    /// recorded): an open pull request of the branch is reused, not opened twice.
    pub again: bool,
}

impl Finished<'_> {
    fn slug(&self) -> String {
        self.task
            .map_or_else(|| format!("sheet-{}", self.sheet), |t| t.slug.clone())
    }

    /// Write the result as `output/<slug>.md` in the workspace: `output` is created, and
    /// neither it nor the file is written through a link or when another user's.
    fn write_output(&self, text: &str) -> Result<PathBuf, String> {
        let name = format!("{}.md", self.slug());
        TrustedDir::open_in(&self.run.workspace, "output", true)
            .and_then(|dir| dir.write(&name, text.as_bytes()))
            .map_err(|e| format!("cannot write output/{name}: {e}"))
    }
}

/// Deliver a finished task's result (`tasks.dispatch`). Returns where it went. Blocking.
pub(crate) fn dispatch(f: &Finished<'_>) -> Result<Option<String>, String> {
    let Some(tasks) = f.run.config.tasks.as_ref() else {
        return Ok(None);
    };
    match tasks.dispatch {
        DispatchMode::None => Ok(None),
        DispatchMode::File => {
            let path = f.write_output(f.output)?;
            Ok(Some(path.display().to_string()))
        }
        DispatchMode::ResearchReport => {
            let mut text = format!(
                "# Research report: {}\n\nJob `{}`, sheet {}, {} iteration{}.\n\n## Final output\n\n{}\n",
                f.task_text,
                f.run.job_id,
                f.sheet,
                f.iterations,
                if f.iterations == 1 { "" } else { "s" },
                f.output.trim_end()
            );
            for (title, file) in [
                ("Progress", "PROGRESS.md"),
                ("Memory", "MEMORY.md"),
                ("Agent notes", "AGENTS.md"),
            ] {
                let body = read(f.dir, file);
                if !body.trim().is_empty() {
                    text.push_str(&format!("\n## {title} ({file})\n\n{}\n", body.trim_end()));
                }
            }
            let path = f.write_output(&text)?;
            Ok(Some(path.display().to_string()))
        }
        DispatchMode::Pr => pull_request(f, &tasks.remote, tasks.pr_base.as_deref()).map(Some),
    }
}

fn command_output(cmd: &mut std::process::Command, shown: &str) -> Result<String, String> {
    let out = cmd.output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("`{shown}` cannot run: the program is not on PATH")
        } else {
            format!("cannot run `{shown}`: {e}")
        }
    })?;
    if !out.status.success() {
        return Err(format!(
            "`{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Push the task's branch and open a pull request through `gh`.
fn pull_request(f: &Finished<'_>, remote: &str, base: Option<&str>) -> Result<String, String> {
    let Some(wt) = f.worktree else {
        return Err("dispatch `pr` needs the task's own branch: set `isolation: {enabled: true, scope: sheet}`".into());
    };
    let branch = wt.branch.as_str();
    let base = match base.or(f.run.config.isolation.source_branch.as_deref()) {
        Some(b) => b.to_string(),
        None => command_output(
            std::process::Command::new("git")
                .args(["rev-parse", "--abbrev-ref", "HEAD"])
                .current_dir(&wt.repo_root),
            "git rev-parse --abbrev-ref HEAD",
        )?,
    };
    command_output(
        std::process::Command::new("git")
            .args(["push", "--set-upstream", remote, branch])
            .current_dir(&wt.path),
        &format!("git push --set-upstream {remote} {branch}"),
    )?;
    if f.again {
        let open = std::process::Command::new("gh")
            .args([
                "pr",
                "list",
                "--head",
                branch,
                "--state",
                "open",
                "--json",
                "url",
                "--jq",
                ".[0].url // empty",
            ])
            .current_dir(&wt.path)
            .output();
        if let Some(out) = open.ok().filter(|o| o.status.success()) {
            let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !url.is_empty() {
                tracing::info!(job_id = %f.run.job_id, sheet = f.sheet, url, "review.pull_request_reused");
                return Ok(url);
            }
        }
    }
    let title = f.task_text.lines().next().unwrap_or(f.task_text);
    let body = format!(
        "## Task\n\n{}\n\n## Review\n\nAccepted by the reviewer after {} iteration{}.\n\n## Logs\n\nMozart job `{}`, sheet {}: `mozart status {} --json`, `mozart logs {}`; workspace `{}`.\n",
        f.task_text,
        f.iterations,
        if f.iterations == 1 { "" } else { "s" },
        f.run.job_id,
        f.sheet,
        f.run.job_id,
        f.run.job_id,
        f.run.workspace.display()
    );
    command_output(
        std::process::Command::new("gh")
            .args([
                "pr", "create", "--head", branch, "--base", &base, "--title", title, "--body",
                &body,
            ])
            .current_dir(&wt.path),
        &format!("gh pr create --head {branch} --base {base}"),
    )
}

/// A reviewed sheet's attempt: where the loop stands when it starts.
pub(crate) struct SheetLoop {
    pub cfg: ReviewConfig,
    pub task_text: String,
    /// The worker iteration this attempt plays (1-based).
    pub iteration: u32,
    pub max: u32,
    pub state: ReviewState,
    /// A worker output of this iteration still waiting for its verdict (or, after `DONE`,
    /// for its dispatch): the worker does not run again.
    pub pending: Option<Pending>,
    /// The reviewer already said `DONE`; only the dispatch is left.
    pub dispatch_only: bool,
    /// `DONE` and dispatched before a crash kept it from the checkpoint: nothing is left but
    /// to record it (and release the worktree).
    pub delivered: bool,
    /// Where the memory files are: the sheet's own worktree, else a directory of its own
    /// in the workspace (sheets sharing a working directory must not share memory).
    pub memory_dir: PathBuf,
}

/// The working directory of a sheet: its own worktree with `isolation.scope: sheet`
/// (created, or reused from the manifest, on its first attempt), else the job's.
pub(crate) async fn sheet_dir(
    shared: &Shared,
    run: &Arc<JobRun>,
    sheet: &PlannedSheet,
    known: Option<crate::isolation::Worktree>,
) -> Result<(PathBuf, Option<crate::isolation::Worktree>), String> {
    if !crate::sheet_worktrees::per_sheet(&run.config) {
        return Ok((run.working_dir.clone(), None));
    }
    if let Some(wt) = known {
        return Ok((wt.working_directory().to_path_buf(), Some(wt)));
    }
    let task = mozart_config::tasks::task_of(&run.config, sheet.movement, sheet.voice);
    let branch = task.map(|t| t.branch.clone());
    let slug = task.map(|t| t.slug.clone());
    let (run2, num) = (run.clone(), sheet.num);
    let wt = tokio::task::spawn_blocking(move || {
        crate::sheet_worktrees::prepare(&run2.config, &run2.job_id, num, branch, slug)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("cannot create the worktree of sheet {}: {e}", sheet.num))?;
    shared.table.tell(super::table::Fact::Run {
        job_id: run.job_id.clone(),
        change: super::table::RunChange::WorktreeMade {
            sheet_num: sheet.num,
            worktree: wt.clone(),
        },
    });
    Ok((wt.working_directory().to_path_buf(), Some(wt)))
}

/// Start a reviewed sheet's attempt: read the loop state, pick up a pending output, bring
/// the memory files up to date. `None` when the sheet is not reviewed.
pub(crate) fn begin(
    run: &JobRun,
    sheet: &PlannedSheet,
    workdir: &Path,
    own_tree: bool,
    state: ReviewState,
) -> Result<Option<SheetLoop>, String> {
    let Some(cfg) = settings(run, sheet) else {
        return Ok(None);
    };
    let task_text = mozart_config::tasks::task_of(&run.config, sheet.movement, sheet.voice)
        .map_or_else(
            || {
                sheet
                    .description
                    .clone()
                    .unwrap_or_else(|| format!("sheet {} of {}", sheet.num, run.config.name))
            },
            |t| t.text.clone(),
        );
    let state = recorded_delivery(run, sheet.num, &state).unwrap_or(state);
    let done = state.verdict.as_deref() == Some("DONE");
    let dispatch_only = done && state.dispatched.is_none();
    let delivered = done && state.dispatched.is_some();
    let iteration = if dispatch_only || delivered {
        state.iteration
    } else {
        state.iteration + 1
    };
    // The last iteration of this run's budget (a resumed failed sheet gets a fresh one).
    let max = u32::try_from(cfg.max_iterations.max(1))
        .unwrap_or(u32::MAX)
        .saturating_add(state.budget_from);
    let pending = take_pending(run, sheet.num, iteration);
    let memory_dir = if own_tree {
        workdir.to_path_buf()
    } else {
        run.workspace
            .join(".mozart-review")
            .join(format!("sheet-{}", sheet.num))
    };
    // Only a worker about to run needs fresh memory; a task waiting for its dispatch keeps
    // its `done` status.
    if cfg.memory && pending.is_none() && !dispatch_only && !delivered {
        if !own_tree {
            records_dir(&run.workspace, true)
                .and_then(|d| d.subdir(&format!("sheet-{}", sheet.num), true))
                .map_err(|e| format!("cannot create {}: {e}", memory_dir.display()))?;
        }
        write_memory(
            &memory_dir,
            &task_text,
            (iteration, max),
            &state,
            Stage::InProgress,
        )?;
    }
    Ok(Some(SheetLoop {
        cfg: cfg.clone(),
        task_text,
        iteration,
        max,
        state,
        pending,
        dispatch_only,
        delivered,
        memory_dir,
    }))
}

/// The result of a worker run that already happened (its output was saved for review).
pub(crate) fn replayed(p: Pending) -> ExecutionResult {
    // A record without stdout (an older conductor's) had only the answer.
    let stdout = if p.stdout.is_empty() {
        p.output.clone()
    } else {
        p.stdout
    };
    ExecutionResult {
        success: true,
        exit_code: Some(0),
        result_text: Some(p.output),
        stdout,
        stderr: p.stderr,
        ..ExecutionResult::default()
    }
}

/// A worker's attempt that passed its validations, on its way to the reviewer.
#[derive(Clone, Copy)]
pub(crate) struct Review<'a> {
    pub shared: &'a Arc<Shared>,
    pub run: &'a Arc<JobRun>,
    pub sheet: &'a PlannedSheet,
    /// The job's backends built so far (the reviewer's instrument may be among them).
    pub backends: &'a HashMap<String, Arc<dyn mozart_backends::Backend>>,
    /// Where the worker worked.
    pub dir: &'a Path,
    /// The worker's answer (`ExecutionResult::output_text`).
    pub output: &'a str,
    /// The worker's raw stdout.
    pub stdout: &'a str,
    /// The worker's stderr.
    pub stderr: &'a str,
}

/// Fail the attempt with `kind`: what the baton does next (wait, retry, give up) follows
/// from it.
fn fail(
    r: &mut mozart_baton::AttemptResult,
    details: &mut super::attempt::AttemptDetails,
    (kind, code): (FailureKind, Option<&str>),
    message: String,
) {
    details.error_message = Some(message.clone());
    details.error_code = code.map(str::to_string);
    details.error_category = Some(
        match kind {
            FailureKind::RateLimited { .. } => "rate_limit",
            FailureKind::Fatal | FailureKind::Rejected => "fatal",
            FailureKind::Validation => "validation",
            _ => "transient",
        }
        .into(),
    );
    if !matches!(kind, FailureKind::Validation) {
        r.execution_success = false;
    }
    r.validations_total = r.validations_total.max(1);
    r.validations_passed = 0;
    r.validation_pass_rate = 0.0;
    r.failure = Some(Failure {
        kind,
        code: code.map(str::to_string),
        message,
    });
}

impl Review<'_> {
    /// Ask the reviewer (unless only the dispatch is left), record the verdict, dispatch on
    /// `DONE`, and turn the attempt result into what the baton must do next.
    pub(crate) async fn conclude(
        self,
        lp: SheetLoop,
        worktree: Option<crate::isolation::Worktree>,
        r: &mut mozart_baton::AttemptResult,
        details: &mut super::attempt::AttemptDetails,
    ) {
        let branch = worktree.as_ref().map(|w| w.branch.clone());
        let state = if lp.dispatch_only || lp.delivered {
            lp.state.clone()
        } else {
            let base = worktree.as_ref().map(|w| w.base_commit.clone());
            let (dir, memory_here) = (self.dir.to_path_buf(), lp.memory_dir == self.dir);
            let changes = tokio::task::spawn_blocking(move || {
                changed_files(&dir, base.as_deref(), memory_here)
            })
            .await
            .unwrap_or_else(|e| format!("(the list of changed files failed: {e})\n"));
            match self
                .verdict(&lp, branch.as_deref(), &changes, r, details)
                .await
            {
                Some(state) => state,
                None => return,
            }
        };
        self.deliver(&lp, state, worktree, r, details).await;
    }

    /// Where the work stays when the task fails: its branch, else its directory.
    fn kept(&self, branch: Option<&str>) -> String {
        match branch {
            Some(b) => format!("the work stays on branch {b}"),
            None => format!("the work stays in {}", self.dir.display()),
        }
    }

    /// Write the memory files for the task's outcome (a failure to write is logged: the
    /// verdict is in the checkpoint either way).
    fn record_outcome(&self, lp: &SheetLoop, state: &ReviewState, stage: Stage<'_>) {
        if !lp.cfg.memory {
            return;
        }
        let iterations = (state.iteration, lp.max);
        if let Err(e) = write_memory(&lp.memory_dir, &lp.task_text, iterations, state, stage) {
            tracing::warn!(job_id = %self.run.job_id, sheet = self.sheet.num, error = %e, "review.memory_not_written");
        }
    }

    /// The reviewer's verdict on this iteration: the loop state on `DONE`; None when the
    /// attempt ends here (a `RETRY`, or the reviewer could not answer).
    async fn verdict(
        &self,
        lp: &SheetLoop,
        branch: Option<&str>,
        changes: &str,
        r: &mut mozart_baton::AttemptResult,
        details: &mut super::attempt::AttemptDetails,
    ) -> Option<ReviewState> {
        let (run, sheet) = (self.run, self.sheet);
        let pending = Pending {
            iteration: lp.iteration,
            output: self.output.to_string(),
            stdout: self.stdout.to_string(),
            stderr: self.stderr.to_string(),
        };
        save_pending(run, sheet.num, &pending);
        let iterations = (lp.iteration, lp.max);
        let outcome = run_reviewer(self, &lp.cfg, &lp.task_text, iterations, branch, changes).await;
        let verdict = match outcome {
            Outcome::Verdict(v, cost) => {
                r.cost_usd += cost;
                details.cost_usd += cost;
                v
            }
            Outcome::RateLimited(wait, message) => {
                // Tempo, not failure: the sheet waits, then the reviewer is asked again
                // (the saved output spares the worker).
                let kind = FailureKind::RateLimited {
                    reset_after: wait,
                    said_after: None,
                };
                fail(r, details, (kind, None), message);
                return None;
            }
            Outcome::Failed(message, code) => {
                fail(r, details, (FailureKind::Transient, Some(code)), message);
                return None;
            }
            Outcome::Broken(message, code) => {
                fail(r, details, (FailureKind::Rejected, Some(code)), message);
                return None;
            }
        };
        let state = after_verdict(lp.state.clone(), lp.iteration, &verdict, branch);
        tracing::info!(job_id = %run.job_id, sheet = sheet.num, iteration = lp.iteration, verdict = ?state.verdict, "review.verdict");
        details.review = Some(state.clone());
        let Verdict::Retry(feedback) = &verdict else {
            return Some(state);
        };
        clear_pending(run, sheet.num);
        if lp.iteration >= lp.max {
            self.record_outcome(lp, &state, Stage::Failed);
            let budget = u32::try_from(lp.cfg.max_iterations.max(1)).unwrap_or(u32::MAX);
            let message = format!(
                "reviewer loop: no DONE after {} iteration{}; {}; `mozart resume {}` gives it {budget} more iteration{} (review.max_iterations); last feedback: {feedback}",
                lp.iteration,
                if lp.iteration == 1 { "" } else { "s" },
                self.kept(branch),
                run.job_id,
                if budget == 1 { "" } else { "s" },
            );
            let kind = (FailureKind::Rejected, Some(E_LOOP_EXHAUSTED));
            fail(r, details, kind, message);
        } else {
            let message = format!("reviewer: RETRY (iteration {}): {feedback}", lp.iteration);
            fail(r, details, (FailureKind::Validation, None), message);
        }
        None
    }

    /// `DONE`: dispatch the result, then release the task's worktree (its branch stays).
    async fn deliver(
        &self,
        lp: &SheetLoop,
        mut state: ReviewState,
        worktree: Option<crate::isolation::Worktree>,
        r: &mut mozart_baton::AttemptResult,
        details: &mut super::attempt::AttemptDetails,
    ) {
        let (run, sheet) = (self.run, self.sheet);
        let branch = worktree.as_ref().map(|w| w.branch.clone());
        // Before the dispatch: a research report carries PROGRESS.md.
        self.record_outcome(lp, &state, Stage::Done);
        let task = mozart_config::tasks::task_of(&run.config, sheet.movement, sheet.voice).cloned();
        let (run2, dir2, text, out) = (
            run.clone(),
            lp.memory_dir.clone(),
            lp.task_text.clone(),
            self.output.to_string(),
        );
        let (num, iterations) = (sheet.num, state.iteration);
        let (memory, max, state2) = (lp.cfg.memory, lp.max, state.clone());
        let again = lp.dispatch_only;
        let dispatched = tokio::task::spawn_blocking(move || {
            let f = Finished {
                run: &run2,
                sheet: num,
                task: task.as_ref(),
                task_text: &text,
                dir: &dir2,
                worktree: worktree.as_ref(),
                iterations,
                output: &out,
                again,
            };
            let result = match &state2.dispatched {
                Some(place) => Ok(Some(place.clone()).filter(|p| p != "none")),
                None => {
                    save_delivery(&run2, num, &state2);
                    let result = dispatch(&f);
                    if let Ok(place) = &result {
                        let mut sent = state2.clone();
                        sent.dispatched = Some(place.clone().unwrap_or_else(|| "none".into()));
                        save_delivery(&run2, num, &sent);
                    }
                    result
                }
            };
            // Before the worktree goes: a kept one (or a memory directory of the
            // workspace) shows where the result went.
            if memory {
                let stage = match &result {
                    Ok(place) => Stage::Dispatched(place.as_deref().unwrap_or("none")),
                    Err(e) => Stage::DispatchFailed(e),
                };
                let _ = write_memory(&dir2, &text, (iterations, max), &state2, stage);
            }
            if let (Ok(_), Some(wt)) = (&result, &worktree) {
                if let Err(e) = crate::sheet_worktrees::finish(
                    &run2.config,
                    &run2.job_id,
                    num,
                    wt,
                    crate::isolation::RunOutcome::Completed,
                ) {
                    tracing::warn!(job_id = %run2.job_id, sheet = num, error = %e, "isolation.sheet_worktree_cleanup_failed");
                }
            }
            result
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        match dispatched {
            Ok(place) => {
                // The worker's output stays until the job ends: a crash before the checkpoint
                // replays it instead of running the worker again.
                self.shared.table.tell(super::table::Fact::Run {
                    job_id: run.job_id.clone(),
                    change: super::table::RunChange::WorktreeReleased { sheet_num: num },
                });
                state.dispatched = Some(place.unwrap_or_else(|| "none".into()));
                details.review = Some(state);
            }
            Err(e) => {
                details.review = Some(state);
                let mode = run
                    .config
                    .tasks
                    .as_ref()
                    .map_or("none", |t| t.dispatch.as_str());
                let message = format!(
                    "dispatch {mode} failed (hook): {e}; {}; fix the cause, then `mozart resume {}` retries only the dispatch (the reviewer's DONE is kept)",
                    self.kept(branch.as_deref()),
                    run.job_id
                );
                let kind = (FailureKind::Rejected, Some(E_DISPATCH_FAILED));
                fail(r, details, kind, message);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        assert_eq!(parse_verdict("DONE"), Verdict::Done);
        assert_eq!(parse_verdict("Looks good.\n**DONE**\n"), Verdict::Done);
        assert_eq!(
            parse_verdict("RETRY: add a test\nand docs"),
            Verdict::Retry("add a test\nand docs".into())
        );
        assert_eq!(parse_verdict("retry: x"), Verdict::Retry("x".into()));
        assert_eq!(
            parse_verdict("I am not sure what to say"),
            Verdict::Retry("I am not sure what to say".into())
        );
        assert_eq!(
            parse_verdict("Not DONE yet"),
            Verdict::Retry("Not DONE yet".into())
        );
    }

    #[test]
    fn memory_files_go_into_the_prompt_under_headers() {
        let dir = std::env::temp_dir().join(format!("mozart-review-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let state = after_verdict(
            ReviewState::default(),
            1,
            &Verdict::Retry("add a test".into()),
            Some("mochi/x"),
        );
        write_memory(&dir, "Fix x", (2, 3), &state, Stage::InProgress).unwrap();
        write_output_memory(&dir, &format!("{}END", "a".repeat(5000))).unwrap();
        let section = memory_section(&dir, Path::new("/wt"), Some("mochi/x"));
        for needle in [
            "## Progress (PROGRESS.md)",
            "Iteration: 2 of 3",
            "- iteration 1: RETRY add a test",
            "## Memory (your previous output) (MEMORY.md)",
            "aEND",
            "## Reviewer Feedback (FEEDBACK.md)",
            "# Reviewer feedback (after iteration 1)\n\nadd a test",
            "## Agent Notes (AGENTS.md)",
            "You are working in /wt on branch mochi/x",
            "commit all changes",
        ] {
            assert!(section.contains(needle), "{needle:?} in {section}");
        }
        let memory = std::fs::read_to_string(dir.join("MEMORY.md")).unwrap();
        assert!(memory.chars().count() < MEMORY_CHARS + 100);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn progress_records_the_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let retry = Verdict::Retry("add a test".into());
        let state = after_verdict(ReviewState::default(), 1, &retry, None);
        let failed = after_verdict(state.clone(), 2, &retry, None);
        write_memory(dir.path(), "Fix x", (2, 2), &failed, Stage::Failed).unwrap();
        let progress = read(dir.path(), "PROGRESS.md");
        assert!(
            progress.contains("Status: failed (no DONE after 2 iterations"),
            "{progress}"
        );
        assert!(
            progress.contains("- iteration 2: RETRY add a test"),
            "{progress}"
        );
        let done = after_verdict(state, 2, &Verdict::Done, None);
        for (stage, want) in [
            (
                Stage::Done,
                "Status: done (the reviewer answered DONE after iteration 2;",
            ),
            (
                Stage::Dispatched("https://x/pull/1"),
                "dispatched: https://x/pull/1)",
            ),
            (
                Stage::DispatchFailed("gh: no"),
                "Status: done, dispatch failed",
            ),
        ] {
            write_memory(dir.path(), "Fix x", (2, 3), &done, stage).unwrap();
            let progress = read(dir.path(), "PROGRESS.md");
            assert!(progress.contains(want), "{want:?} in {progress}");
            assert!(progress.contains("- iteration 2: DONE"), "{progress}");
            let feedback = read(dir.path(), "FEEDBACK.md");
            assert!(
                feedback.contains("answered DONE after iteration 2"),
                "{feedback}"
            );
        }
    }

    #[test]
    fn the_reviewer_sees_stderr_stdout_and_the_changed_files() {
        let cfg: ReviewConfig = serde_json::from_str("{}").unwrap();
        let worker = WorkerRun {
            output: "the answer",
            stdout: "{\"result\": \"the answer\"}",
            stderr: "warning: slow disk",
            changes: "Not committed (`git status --porcelain`):\n?? new.rs\n",
        };
        let prompt = reviewer_prompt(
            &cfg,
            "Fix x",
            (1, 3),
            Path::new("/wt"),
            Some("b-2"),
            &worker,
        )
        .unwrap();
        for needle in [
            "## Files changed\nNot committed",
            "?? new.rs",
            "## The agent's output",
            "## The agent's stdout",
            "{\"result\"",
            "## The agent's stderr (its last 4000 characters)\nwarning: slow disk",
            "Directory: /wt, branch b-2.",
        ] {
            assert!(prompt.contains(needle), "{needle:?} in {prompt}");
        }
        // Plain-text stdout is the answer itself: not repeated.
        let plain = WorkerRun {
            stdout: "the answer",
            stderr: "",
            ..worker
        };
        let prompt =
            reviewer_prompt(&cfg, "Fix x", (1, 3), Path::new("/wt"), None, &plain).unwrap();
        assert!(!prompt.contains("## The agent's stdout"), "{prompt}");
        assert!(!prompt.contains("## The agent's stderr"), "{prompt}");
    }

    #[test]
    fn changed_files_lists_committed_and_uncommitted_work_without_memory_files() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(repo)
                .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        git(&["init", "-q", "-b", "main", "."]);
        std::fs::write(repo.join("README.md"), "x\n").unwrap();
        git(&["add", "README.md"]);
        git(&["commit", "-qm", "init"]);
        let base = git(&["rev-parse", "--short", "HEAD"]);
        std::fs::write(repo.join("auth.go"), "package auth\n").unwrap();
        git(&["add", "auth.go"]);
        git(&["commit", "-qm", "auth"]);
        std::fs::write(repo.join("notes.txt"), "later\n").unwrap();
        std::fs::write(repo.join("PROGRESS.md"), "ours\n").unwrap();
        let listed = changed_files(repo, Some(&base), true);
        assert!(listed.contains("A\tauth.go"), "{listed}");
        assert!(listed.contains("?? notes.txt"), "{listed}");
        assert!(!listed.contains("PROGRESS.md"), "{listed}");
        let listed = changed_files(repo, None, false);
        assert!(
            !listed.contains("auth.go") && listed.contains("?? PROGRESS.md"),
            "{listed}"
        );
        let elsewhere = tempfile::tempdir().unwrap();
        let listed = changed_files(elsewhere.path(), None, false);
        assert!(listed.contains("is not in a git repository"), "{listed}");
    }

    #[test]
    fn memory_keeps_the_last_chars() {
        let s = "é".repeat(5000);
        assert_eq!(last_chars(&s, MEMORY_CHARS).chars().count(), MEMORY_CHARS);
        assert_eq!(last_chars("abc", 2), "bc");
    }
}
