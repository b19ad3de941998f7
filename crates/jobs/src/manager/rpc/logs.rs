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

/// The last `n` lines of the file that mention `job`.
fn backlog(path: &std::path::Path, job: Option<&str>, n: usize) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| job.is_none_or(|j| l.contains(j)))
        .map(str::to_string)
        .collect();
    let skip = lines.len().saturating_sub(n.min(MAX_BACKLOG));
    lines.drain(..skip);
    lines
}

/// Progress entries for the running sheets of `job` whose activity changed since `seen`.
async fn progress_entries(
    mgr: &JobManager,
    job: Option<&str>,
    seen: &mut std::collections::HashMap<(String, u32), u64>,
) -> Vec<Map<String, Value>> {
    let job = job.map(str::to_string);
    let running: Vec<(String, u32, Arc<mozart_backends::Progress>)> = mgr
        .shared
        .table
        .call(move |h| {
            h.table
                .jobs
                .iter()
                .filter(|(id, _)| job.as_deref().is_none_or(|j| j == id.as_str()))
                .flat_map(|(id, e)| {
                    e.rt.live
                        .iter()
                        .map(|(n, p)| (id.clone(), *n, Arc::clone(p)))
                })
                .collect()
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
            "sheet {sheet}: {} tool call(s){}, {} in / {} out tokens so far{}",
            a.tool_calls,
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
                    loop {
                        tokio::select! {
                            _ = sink.closed() => return,
                            _ = tokio::time::sleep(POLL) => {}
                        }
                        for line in tail.read_lines() {
                            if job.as_deref().is_some_and(|j| !line.contains(j)) {
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
                    }
                }
            },
        )
        .map_err(|err| ConductorError::Register(err.to_string()))?;
    Ok(())
}
