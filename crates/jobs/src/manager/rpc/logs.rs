//! `job.logs.follow` (ours): the conductor streams its own log lines about a job, and the
//! live progress of the job's running sheets, to `mozart logs JOB --follow`. The client
//! needs no access to the log file's path (a remote shell, a clone, a rotated file), and
//! sees what the instrument is doing while it runs, not only what was logged after.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mozart_ipc::types::{LogFollowItem, LogFollowParams};
use mozart_ipc::{methods, parse_params, RpcModule};
use serde_json::{json, Map, Value};

use super::super::table::Query;
use super::super::JobManager;
use mozart_conductor::{ConductorCtx, ConductorError};

type Ctx = Arc<ConductorCtx>;

/// How often the stream looks for new lines and progress.
const POLL: Duration = Duration::from_millis(250);
/// Longest backlog a client may ask for.
const MAX_BACKLOG: usize = 10_000;

/// The log file being followed: reopened when rotated away.
struct LogTail {
    path: PathBuf,
    reader: Option<BufReader<std::fs::File>>,
    inode: u64,
    partial: String,
}

impl LogTail {
    fn open(path: PathBuf, from_end: bool) -> LogTail {
        use std::os::unix::fs::MetadataExt;
        let mut tail = LogTail {
            path,
            reader: None,
            inode: 0,
            partial: String::new(),
        };
        if let Ok(mut file) = std::fs::File::open(&tail.path) {
            tail.inode = file.metadata().map(|m| m.ino()).unwrap_or(0);
            if from_end {
                let _ = file.seek(SeekFrom::End(0));
            }
            tail.reader = Some(BufReader::new(file));
        }
        tail
    }

    /// Complete lines appended since the last call.
    fn read_lines(&mut self) -> Vec<String> {
        use std::os::unix::fs::MetadataExt;
        let mut lines = Vec::new();
        if let Some(reader) = self.reader.as_mut() {
            loop {
                let mut buf = String::new();
                match reader.read_line(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if buf.ends_with('\n') => {
                        let mut line = std::mem::take(&mut self.partial);
                        line.push_str(buf.trim_end_matches('\n'));
                        lines.push(line);
                    }
                    Ok(_) => self.partial.push_str(&buf),
                }
            }
        }
        // Rotated (renamed away and recreated): continue in the new file from its start.
        let current = std::fs::metadata(&self.path).map(|m| m.ino()).ok();
        if current.is_some() && current != Some(self.inode) {
            *self = LogTail::open(self.path.clone(), false);
        }
        lines
    }
}

/// Whether a log line belongs to `job`: a JSON line by its `job_id`, any other line (an
/// older conductor's text) when it mentions the job.
fn about(line: &str, job: Option<&str>) -> bool {
    let Some(job) = job else { return true };
    if !line.contains(job) {
        return false;
    }
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(map)) => map.get("job_id").and_then(Value::as_str) == Some(job),
        _ => true,
    }
}

/// The last `n` lines of the file about `job`.
fn backlog(path: &std::path::Path, job: Option<&str>, n: usize) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| about(l, job))
        .map(str::to_string)
        .collect();
    let skip = lines.len().saturating_sub(n.min(MAX_BACKLOG));
    lines.drain(..skip);
    lines
}

/// Longest output line streamed (the file has it whole).
const MAX_OUTPUT_LINE: usize = 500;

/// One running sheet's live output file (`{workspace}/logs/sheet-NN.<stream>.log`), read
/// from where the last poll stopped. The instrument recreates it for each attempt.
struct OutputTail {
    path: PathBuf,
    inode: u64,
    pos: u64,
    partial: Vec<u8>,
    /// Whether the stream was told its file is not shown (said once).
    refused_said: bool,
}

impl OutputTail {
    fn new(path: PathBuf) -> OutputTail {
        OutputTail {
            path,
            inode: 0,
            pos: 0,
            partial: Vec::new(),
            refused_said: false,
        }
    }

    /// Complete lines added since the last call.
    fn read_lines(&mut self) -> Vec<String> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        // Not through a link, into another user's file or a FIFO (which would hang this
        // task) that someone who can write the workspace put in its place: said once.
        let mut file = match mozart_backends::shown_log::open_shown_log(&self.path) {
            Ok(file) => file,
            Err(e) if !e.is_missing() && !self.refused_said => {
                self.refused_said = true;
                return vec![format!("[mozart] {e}")];
            }
            Err(_) => return Vec::new(),
        };
        let Ok(meta) = file.metadata() else {
            return Vec::new();
        };
        if meta.ino() != self.inode || meta.len() < self.pos {
            // A new attempt's file: from its start.
            self.inode = meta.ino();
            self.pos = 0;
            self.partial.clear();
        }
        if file.seek(SeekFrom::Start(self.pos)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        // At most 1 MiB a poll: a chatty instrument cannot stall the stream.
        let _ = file.by_ref().take(1 << 20).read_to_end(&mut buf);
        self.pos += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        let mut lines = Vec::new();
        while let Some(nl) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=nl).collect();
            lines.push(String::from_utf8_lossy(&line).trim_end().to_string());
        }
        lines
    }
}

/// The running sheets of `job` and where their output files are.
async fn running_sheets(mgr: &JobManager, job: &str) -> Vec<(u32, PathBuf)> {
    mgr.shared
        .table
        .ask(|reply| Query::RunningOutputs {
            job_id: job.to_string(),
            reply,
        })
        .await
        .unwrap_or_default()
}

/// New lines of the running sheets' output (`sheet.output` entries): tails are opened for
/// sheets that run and read one last time once they stop. Lines that are JSON events of a
/// streaming instrument are left out (their gist arrives as progress entries).
async fn output_entries(
    mgr: &JobManager,
    job: &str,
    tails: &mut std::collections::BTreeMap<(u32, &'static str), OutputTail>,
) -> Vec<Map<String, Value>> {
    let running = running_sheets(mgr, job).await;
    for (sheet, logs) in &running {
        for stream in ["stdout", "stderr"] {
            tails.entry((*sheet, stream)).or_insert_with(|| {
                OutputTail::new(mozart_ipc::paths::sheet_log_file(logs, *sheet, stream))
            });
        }
    }
    let mut out = Vec::new();
    let mut done = Vec::new();
    for ((sheet, stream), tail) in tails.iter_mut() {
        for line in tail.read_lines() {
            let trimmed = line.trim();
            if trimmed.is_empty()
                || (trimmed.starts_with('{') && serde_json::from_str::<Value>(trimmed).is_ok())
            {
                continue;
            }
            let mut text: String = trimmed.chars().take(MAX_OUTPUT_LINE).collect();
            if text.len() < trimmed.len() {
                text.push('…');
            }
            let entry = json!({
                "timestamp": mozart_state::Timestamp::now().to_string(),
                "level": "info",
                "event": "sheet.output",
                "message": mozart_backends::redact(&text),
                "component": "output",
                "job_id": job,
                "sheet_num": sheet,
                "stream": stream,
            });
            if let Value::Object(m) = entry {
                out.push(m);
            }
        }
        if !running.iter().any(|(n, _)| n == sheet) {
            done.push((*sheet, *stream));
        }
    }
    for key in done {
        tails.remove(&key);
    }
    out
}

/// Progress entries for the running sheets of `job` whose activity changed since `seen`.
async fn progress_entries(
    mgr: &JobManager,
    job: Option<&str>,
    seen: &mut std::collections::HashMap<(String, u32), u64>,
) -> Vec<Map<String, Value>> {
    let running: Vec<(String, u32, Arc<mozart_backends::Progress>)> = mgr
        .shared
        .table
        .ask(|reply| Query::LiveProgress {
            job_id: job.map(str::to_string),
            reply,
        })
        .await
        .unwrap_or_default();
    let mut out = Vec::new();
    for (id, sheet, progress) in running {
        let a = progress.activity();
        let key = (id.clone(), sheet);
        if a.events == 0 || seen.get(&key) == Some(&a.events) {
            continue;
        }
        seen.insert(key, a.events);
        let message = format!(
            "sheet {sheet}: {}{}, {} in / {} out tokens so far{}",
            mozart_config::plural(a.tool_calls, "tool call", "tool calls"),
            a.last_tool
                .as_deref()
                .map(|t| format!(" (last: {t})"))
                .unwrap_or_default(),
            a.input_tokens,
            a.output_tokens,
            a.last_event
                .as_deref()
                .map(|e| format!("; {e}"))
                .unwrap_or_default(),
        );
        let entry = json!({
            "timestamp": mozart_state::Timestamp::now().to_string(),
            "level": "INFO",
            "event": message,
            "logger": "mozart.progress",
            "job_id": id,
            "sheet_num": sheet,
            "tool_calls": a.tool_calls,
            "input_tokens": a.input_tokens,
            "output_tokens": a.output_tokens,
            "api_retries": a.api_retries,
        });
        if let Value::Object(m) = entry {
            out.push(m);
        }
    }
    out
}

/// Send one item; false once the client has gone.
fn send(sink: &mut mozart_ipc::jsonrpsee::SubscriptionSink, item: LogFollowItem) -> bool {
    let Ok(message) = serde_json::value::to_raw_value(&item) else {
        return true;
    };
    // A full buffer drops the item for this slow reader, as the monitor stream does; a
    // closed one ends the stream.
    !matches!(
        sink.try_send(message),
        Err(mozart_ipc::jsonrpsee::core::server::TrySendError::Closed(_))
    )
}

pub(in crate::manager) fn register(
    module: &mut RpcModule<Ctx>,
    mgr: JobManager,
) -> Result<(), ConductorError> {
    module
        .register_subscription(
            methods::JOB_LOGS_FOLLOW,
            methods::JOB_LOGS_NOTIFICATION,
            methods::JOB_LOGS_UNFOLLOW,
            move |params, pending, ctx, _| {
                let mgr = mgr.clone();
                async move {
                    let p: LogFollowParams = match parse_params(&params) {
                        Ok(p) => p,
                        Err(e) => {
                            pending.reject(mozart_ipc::ErrorObjectOwned::from(e)).await;
                            return;
                        }
                    };
                    let Ok(mut sink) = pending.accept().await else {
                        return;
                    };
                    let path = ctx
                        .config()
                        .log_file
                        .clone()
                        .unwrap_or_else(|| ctx.paths.log_file.clone());
                    let job = p.job_id.filter(|j| !j.is_empty());
                    // The conductor's framing sends no subscription id: this first item
                    // tells the client the stream is on.
                    if !send(
                        &mut sink,
                        LogFollowItem::Started(path.display().to_string()),
                    ) {
                        return;
                    }
                    for line in backlog(&path, job.as_deref(), p.backlog_lines) {
                        if !send(&mut sink, LogFollowItem::Line(line)) {
                            return;
                        }
                    }
                    let mut tail = LogTail::open(path, true);
                    let mut seen = std::collections::HashMap::new();
                    let mut outputs = std::collections::BTreeMap::new();
                    loop {
                        tokio::select! {
                            _ = sink.closed() => return,
                            _ = tokio::time::sleep(POLL) => {}
                        }
                        for line in tail.read_lines() {
                            if !about(&line, job.as_deref()) {
                                continue;
                            }
                            if !send(&mut sink, LogFollowItem::Line(line)) {
                                return;
                            }
                        }
                        for entry in progress_entries(&mgr, job.as_deref(), &mut seen).await {
                            if !send(&mut sink, LogFollowItem::Entry(entry)) {
                                return;
                            }
                        }
                        // One job's output as it is written (all jobs' would drown the log).
                        if let Some(job) = job.as_deref() {
                            for entry in output_entries(&mgr, job, &mut outputs).await {
                                if !send(&mut sink, LogFollowItem::Entry(entry)) {
                                    return;
                                }
                            }
                        }
                    }
                }
            },
        )
        .map_err(|err| ConductorError::Register(err.to_string()))?;
    Ok(())
}
