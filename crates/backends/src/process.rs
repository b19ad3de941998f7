//! Running one instrument process: its own process group, concurrent bounded capture of
//! stdout/stderr, timeout and cancellation by group signals (architecture invariant 5).
//!
//! Every child is spawned with `process_group(0)`, so it and everything it forks share a
//! process group whose id is the child's pid, and with the attempt's tag in its environment
//! ([`crate::descendants`]), so what leaves the group (`setsid`, a double fork, `nohup … &`)
//! is still found. Timeout, cancellation (dropping the future) and the clean-up after a
//! normal exit all end both: SIGTERM, a grace period, then SIGKILL. We deliberately do not
//! set `PR_SET_PDEATHSIG`: it fires when the *thread* that forked exits, and tokio may spawn
//! from short-lived blocking-pool threads, which would kill healthy instruments; it would
//! also need `unsafe` `pre_exec`. A conductor that is SIGKILLed can therefore leave
//! instrument groups behind (its watchdog ends them); every normal, timeout and cancel path
//! reaps them.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::descendants::{boot_ticks_now, AttemptTag, Cleanup, Registered, Spawned};
/// Signalling a group lives with the attempt's clean-up, below this module.
pub use crate::descendants::{group_alive, signal_group};
use crate::env::{ChildEnv, EnvPlan};
use crate::output_log::{LogFile, RedactingLog};
use crate::spawn::{Child, Spawn};
use crate::types::{epoch_now, Progress, StreamKind};

/// Bytes of each stream kept in memory as the tail (the rest is counted, and teed to the
/// log file when one is configured).
pub const TAIL_BYTES: usize = 64 * 1024;

/// Longest line handed to a [`LineSink`]; longer lines are dropped (bounded memory: a line is
/// held whole until its newline, so 100 MB of JSONL output in one line must not be kept; the
/// same bound as a `format: json` document, `cli_backend::JSON_DOCUMENT_LIMIT`).
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// Default wait, after the instrument exits, for processes it left in its group to close
/// their end of the pipes before the group is terminated.
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Default wait after an instrument's final result before a lingering process is stopped.
pub const DEFAULT_LINGER_GRACE: Duration = Duration::from_secs(15);

/// Receives each complete stdout line as it arrives (stream-json / JSONL parsing without
/// holding the whole output).
pub trait LineSink: Send {
    /// One line, without its trailing newline.
    fn line(&mut self, line: &[u8]);
}

/// Everything needed to run one instrument process.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// Executable name (looked up on PATH) or path.
    pub program: String,
    /// The job the attempt belongs to, when it has one: a new run of the job waits until
    /// none of its attempts is alive ([`crate::descendants::attempts_alive`]).
    pub owner: Option<String>,
    /// Arguments.
    pub args: Vec<String>,
    /// Working directory; `None` inherits the conductor's.
    pub cwd: Option<PathBuf>,
    /// Environment.
    pub env: EnvPlan,
    /// Bytes written to stdin, which is then closed; `None` gives the child `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// SIGTERM → SIGKILL grace.
    pub kill_grace: Duration,
    /// Wait after the leader exits for the rest of the group to finish.
    pub drain_grace: Duration,
    /// Keep stdout in full up to this many bytes (for whole-document JSON parsing); 0 = tail only.
    pub keep_full_stdout: usize,
    /// Tee output to `{base}.stdout.log` / `{base}.stderr.log`.
    pub log_base: Option<crate::output_log::LogBase>,
    /// Without `log_base`: the logs that could not be made (path without suffix) and why,
    /// said in the conductor's log once a stream's output would have needed its file.
    pub log_unavailable: Option<(PathBuf, String)>,
    /// Notified by a line sink when the instrument printed its final result; if the
    /// process is still alive `linger_grace` later, its group is terminated
    /// (claude-code-output.md §2: the CLI can linger after its result).
    pub result_seen: Option<Arc<tokio::sync::Notify>>,
    /// Wait after `result_seen` before terminating a lingering process.
    pub linger_grace: Duration,
    /// The child's environment already resolved (by a backend, once per job); when set,
    /// `env` is not consulted.
    pub child_env: Option<ChildEnv>,
    /// Where `program` was found on the child's `PATH` (a backend's cached lookup); when
    /// set, no lookup is made, unless spawning it finds nothing there any more.
    pub program_path: Option<PathBuf>,
    /// Notified when the conductor has decided the run's outcome from its live output (an
    /// API that refused the key, a rate limit: [`crate::live`]): the process group is then
    /// terminated at once instead of waiting for the CLI's own retries to run out.
    pub stop: Option<Arc<tokio::sync::Notify>>,
    /// Receives each complete stderr line as it arrives (a CLI's retry announcements).
    pub stderr_lines: Option<LineHook>,
}

/// A function called with each complete line of a stream.
pub type LineFn = dyn Fn(&[u8]) + Send + Sync;

/// A callback for each complete line of a stream.
#[derive(Clone)]
pub struct LineHook(pub Arc<LineFn>);

impl std::fmt::Debug for LineHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LineHook")
    }
}

impl LineSink for LineHook {
    fn line(&mut self, line: &[u8]) {
        (self.0)(line);
    }
}

impl ProcessSpec {
    /// A spec with default grace periods, no stdin and tail-only capture.
    pub fn new(program: impl Into<String>, args: Vec<String>, timeout: Duration) -> Self {
        ProcessSpec {
            program: program.into(),
            owner: None,
            args,
            cwd: None,
            env: EnvPlan::default(),
            stdin: None,
            timeout,
            kill_grace: crate::types::DEFAULT_KILL_GRACE,
            drain_grace: DEFAULT_DRAIN_GRACE,
            keep_full_stdout: 0,
            log_base: None,
            log_unavailable: None,
            result_seen: None,
            linger_grace: DEFAULT_LINGER_GRACE,
            child_env: None,
            program_path: None,
            stop: None,
            stderr_lines: None,
        }
    }
}

/// Captured bytes of one stream: a bounded tail, the total count, and optionally all of it.
#[derive(Debug, Default)]
pub struct StreamCapture {
    /// Total bytes read.
    pub total: u64,
    tail: Vec<u8>,
    full: Option<Vec<u8>>,
    full_limit: usize,
    full_overflowed: bool,
    lines_dropped: bool,
}

impl StreamCapture {
    fn new(full_limit: usize) -> Self {
        StreamCapture {
            full: (full_limit > 0).then(Vec::new),
            full_limit,
            ..Default::default()
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > 2 * TAIL_BYTES {
            let cut = self.tail.len() - TAIL_BYTES;
            self.tail.drain(..cut);
        }
        if let Some(full) = &mut self.full {
            if full.len() + chunk.len() > self.full_limit {
                self.full = None;
                self.full_overflowed = true;
            } else {
                full.extend_from_slice(chunk);
            }
        }
    }

    /// The last [`TAIL_BYTES`] bytes as text (lossy UTF-8; a split leading character dropped).
    pub fn tail_string(&self) -> String {
        let start = self.tail.len().saturating_sub(TAIL_BYTES);
        let mut slice = &self.tail[start..];
        if start > 0 {
            // Skip UTF-8 continuation bytes left over from the cut.
            while let Some((&b, rest)) = slice.split_first() {
                if b & 0xC0 != 0x80 {
                    break;
                }
                slice = rest;
            }
        }
        String::from_utf8_lossy(slice).into_owned()
    }

    /// The whole stream when full capture was requested and it fit the limit.
    pub fn full(&self) -> Option<&[u8]> {
        self.full.as_deref()
    }

    /// Full capture was requested but the stream was larger than the limit.
    pub fn full_overflowed(&self) -> bool {
        self.full_overflowed
    }

    /// A line longer than the line limit was dropped unparsed (bounded memory): what it
    /// held was never seen by the line sink.
    pub fn lines_dropped(&self) -> bool {
        self.lines_dropped
    }
}

/// What happened to the process.
#[derive(Debug)]
pub struct ProcessOutcome {
    /// Exit code when the process exited normally.
    pub exit_code: Option<i32>,
    /// Signal that ended the process.
    pub exit_signal: Option<i32>,
    /// The timeout fired.
    pub timed_out: bool,
    /// SIGKILL was needed after SIGTERM.
    pub escalated: bool,
    /// The process outlived its final result by the linger grace and was stopped.
    pub lingered: bool,
    /// The conductor stopped the process on a verdict from its live output
    /// ([`ProcessSpec::stop`]).
    pub stopped: bool,
    /// The process could not be spawned.
    pub spawn_error: Option<io::Error>,
    /// stdout capture.
    pub stdout: StreamCapture,
    /// stderr capture.
    pub stderr: StreamCapture,
    /// Wall-clock duration.
    pub duration: Duration,
    /// Start time (Unix epoch seconds).
    pub started_at_epoch: f64,
}

/// Ends the attempt when dropped while armed — its group and its tagged processes:
/// SIGTERM now, SIGKILL after the grace from a detached thread, so a cancelled execution
/// never leaves an orphan. The attempt stays registered for [`crate::descendants::end_all`]
/// until that thread is done.
struct GroupGuard {
    armed: Option<(i32, AttemptTag, Registered)>,
    spawner: Option<i32>,
    grace: Duration,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some((pgid, tag, registered)) = self.armed.take() {
            let mut cleanup = Cleanup::new(Some(pgid), Some(tag.clone())).spawned_by(self.spawner);
            if cleanup.term() {
                let grace = self.grace;
                let spawned = std::thread::Builder::new()
                    .name("mozart-reaper".into())
                    .spawn(move || {
                        cleanup.terminate_blocking(grace);
                        drop(registered);
                    });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "cannot start a thread to end a cancelled instrument; killing it at once");
                    Cleanup::new(Some(pgid), Some(tag)).kill();
                }
            }
        }
    }
}

/// One stream's reader state, shared so it survives an aborted reader task.
struct ReaderState {
    capture: StreamCapture,
    sink: Option<Box<dyn LineSink>>,
    pending: Vec<u8>,
    pending_overflow: bool,
}

impl ReaderState {
    fn new(capture: StreamCapture, sink: Option<Box<dyn LineSink>>) -> Self {
        ReaderState {
            capture,
            sink,
            pending: Vec::new(),
            pending_overflow: false,
        }
    }

    fn feed(&mut self, chunk: &[u8]) {
        self.capture.push(chunk);
        if self.sink.is_none() {
            return;
        }
        let mut rest = chunk;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(pos);
            self.take_line(head);
            rest = &tail[1..];
        }
        if !rest.is_empty() {
            if self.pending.len() + rest.len() > MAX_LINE_BYTES {
                // Free it, not just empty it: the rest of this line is not kept either.
                self.pending = Vec::new();
                self.pending_overflow = true;
            } else if !self.pending_overflow {
                self.pending.extend_from_slice(rest);
            }
        }
    }

    fn take_line(&mut self, head: &[u8]) {
        let overflow = self.pending_overflow || self.pending.len() + head.len() > MAX_LINE_BYTES;
        if !overflow {
            self.pending.extend_from_slice(head);
            let line = std::mem::take(&mut self.pending);
            if let Some(sink) = &mut self.sink {
                sink.line(&line);
            }
        } else {
            tracing::warn!("dropping an output line longer than {MAX_LINE_BYTES} bytes");
            self.capture.lines_dropped = true;
        }
        self.pending.clear();
        self.pending_overflow = false;
    }

    fn finish(&mut self) {
        if self.pending_overflow {
            self.capture.lines_dropped = true;
        }
        if !self.pending.is_empty() && !self.pending_overflow {
            let line = std::mem::take(&mut self.pending);
            if let Some(sink) = &mut self.sink {
                sink.line(&line);
            }
        }
        self.pending.clear();
    }
}

/// One stream of a placed attempt, read from the file the remote job appends it to, as it
/// grows: the same capture and line sink as a local pipe, so the conductor sees a placed
/// CLI's live output (its retry announcements, progress) while the job runs, not only at
/// its end.
pub(crate) struct FileFollower {
    state: ReaderState,
    offset: u64,
}

impl FileFollower {
    /// A follower keeping `full_limit` bytes in full (0: the tail only), feeding `sink`.
    pub(crate) fn new(full_limit: usize, sink: Option<Box<dyn LineSink>>) -> Self {
        FileFollower {
            state: ReaderState::new(StreamCapture::new(full_limit), sink),
            offset: 0,
        }
    }

    /// Read what was appended to `path` since the last call (nothing when it does not exist
    /// yet). A file that shrank was started anew (a requeued job's next run): it is read
    /// again from its start.
    pub(crate) fn pump(&mut self, path: &std::path::Path) {
        use std::io::{Read as _, Seek as _};
        // One stat when nothing changed (the common case, every second per running job).
        let Ok(len) = std::fs::metadata(path).map(|m| m.len()) else {
            return;
        };
        if len == self.offset {
            return;
        }
        let Ok(mut file) = std::fs::File::open(path) else {
            return;
        };
        if len < self.offset {
            let sink = self.state.sink.take();
            let full_limit = self.state.capture.full_limit;
            self.state = ReaderState::new(StreamCapture::new(full_limit), sink);
            self.offset = 0;
        }
        if file.seek(io::SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match file.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.offset += n as u64;
                    self.state.feed(&buf[..n]);
                }
            }
        }
    }

    /// Feed bytes that are not in the file (a note of how the job ended).
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.state.feed(bytes);
    }

    /// The stream is over: its last unterminated line goes to the sink; the capture and
    /// the sink are handed back.
    pub(crate) fn finish(mut self) -> (StreamCapture, Option<Box<dyn LineSink>>) {
        self.state.finish();
        (
            std::mem::take(&mut self.state.capture),
            self.state.sink.take(),
        )
    }
}

fn lock(state: &Mutex<ReaderState>) -> MutexGuard<'_, ReaderState> {
    // A panic while holding the lock cannot corrupt byte buffers in a harmful way.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How long from its instrument's start an attempt's output may stay in memory only. A stream
/// that has ended within this window, having printed no more than [`LOG_FREE_BYTES`], leaves no
/// log file: its output is in the registry (the sheet's row keeps `stdout_tail` /
/// `stderr_tail`), and every reader shows it from there. A stream still open when the window
/// ends gets its file then, with everything held so far written first, so a running sheet's
/// live output is on disk a second after it starts (issue 24: creating two files per sheet was
/// a third of the conductor's CPU in a fan-out of short sheets). A constant, not a setting.
pub const LOG_FREE_WINDOW: Duration = Duration::from_secs(1);

/// Most bytes of a stream's output (redacted) that leave no log file when the stream ends within
/// [`LOG_FREE_WINDOW`]: what an attempt's registry row keeps of each stream (the tail the
/// conductor records), so the row holds all of it.
pub const LOG_FREE_BYTES: usize = REGISTRY_TAIL_BYTES;

/// Bytes of each stream's end an attempt's record keeps (`stdout_tail` / `stderr_tail` of the
/// sheet's registry row and of its attempt history).
pub const REGISTRY_TAIL_BYTES: usize = 4000;

/// Bytes a stream's first read buffer holds.
const FIRST_READ: usize = 4 * 1024;

/// A stream's read buffer, from a small process-wide pool of the first size: two a sheet
/// were allocated and zeroed, each a large-bin allocation that made glibc consolidate its
/// fast bins (issue 24). A buffer that grew goes back to the allocator, not to the pool.
struct ReadBuffer(Vec<u8>);

/// Buffers waiting for a stream; at most [`POOLED`] (2 × 20 streams in flight and some).
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
const POOLED: usize = 64;

impl ReadBuffer {
    fn take() -> ReadBuffer {
        let pooled = POOL.lock().ok().and_then(|mut pool| pool.pop());
        ReadBuffer(pooled.unwrap_or_else(|| vec![0u8; FIRST_READ]))
    }
}

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        if self.0.len() != FIRST_READ {
            return;
        }
        if let Ok(mut pool) = POOL.lock() {
            if pool.len() < POOLED {
                pool.push(std::mem::take(&mut self.0));
            }
        }
    }
}

impl std::ops::Deref for ReadBuffer {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl std::ops::DerefMut for ReadBuffer {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

/// Read one of the child's streams to its end (nothing when the child has no such pipe).
async fn read_stream<R: AsyncRead + Unpin>(
    reader: Option<R>,
    kind: StreamKind,
    state: &Mutex<ReaderState>,
    progress: &Progress,
    (log_path, unavailable, started): (Option<LogFile>, Option<(PathBuf, String)>, Instant),
) {
    // An earlier attempt's log of the same sheet goes now, so the file holds this attempt's
    // output only (usually there is none, and it is known: no system call).
    remove_stale_log(log_path.as_ref());
    let Some(mut reader) = reader else {
        return;
    };
    let mut log = StreamLog::new(log_path, started + LOG_FREE_WINDOW);
    log.unavailable = unavailable;
    if log.unavailable.is_some() {
        // Held as a log's output is: a short output that ends within the window needs no
        // file, so it is not said to be missing one.
        log.hold_until = Some(started + LOG_FREE_WINDOW);
    }
    // Most instruments print little: start small (20 sheets in flight × 2 streams of 64 KiB
    // each was a measurable share of the conductor's memory) and grow up to a pipe's
    // capacity only for a stream that keeps filling the buffer.
    let mut buf = ReadBuffer::take();
    loop {
        let read = reader.read(&mut buf);
        // While output is held back, the read waits until the window's end at most: a stream
        // still open then gets its file (`read` is cancel safe: nothing is lost).
        let read = match log.hold_until {
            Some(until) => {
                match tokio::time::timeout_at(tokio::time::Instant::from_std(until), read).await {
                    Ok(read) => read,
                    Err(_) => {
                        log.stop_holding();
                        continue;
                    }
                }
            }
            None => read.await,
        };
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if n == buf.len() && buf.len() < 64 * 1024 {
            let grown = buf.len() * 2;
            buf.resize(grown, 0);
        }
        let chunk = &buf[..n];
        progress.record(kind, n);
        lock(state).feed(chunk);
        log.write(chunk);
    }
    lock(state).finish();
    log.finish();
}

/// One stream's output log: held in memory while the stream may yet leave no file
/// ([`LOG_FREE_WINDOW`]), then created (at the first byte once holding stops) and written in
/// place — a chunk (at most 64 KiB) lands in the page cache in microseconds, while tokio::fs
/// sends every write through the blocking pool: a thread hand-off per chunk, per stream.
struct StreamLog {
    path: Option<LogFile>,
    /// Output not written yet, while [`Self::hold_until`] is set.
    held: Vec<u8>,
    /// Until when output is held back; `None` once it goes to the file.
    hold_until: Option<Instant>,
    file: Option<RedactingLog>,
    /// The file was created (or could not be): it is not created again.
    opened: bool,
    /// No log could be made (no `path`): this file and why, said once output needs it.
    unavailable: Option<(PathBuf, String)>,
}

impl StreamLog {
    fn new(path: Option<LogFile>, until: Instant) -> Self {
        StreamLog {
            hold_until: path.as_ref().map(|_| until),
            path,
            held: Vec::new(),
            file: None,
            opened: false,
            unavailable: None,
        }
    }

    /// Take a chunk of output: held while it may stay out of the file, else written.
    fn write(&mut self, chunk: &[u8]) {
        if let Some(until) = self.hold_until {
            if self.held.len() + chunk.len() <= LOG_FREE_BYTES && Instant::now() < until {
                self.held.extend_from_slice(chunk);
                return;
            }
            self.stop_holding();
        }
        self.write_through(chunk);
    }

    /// The window is over (or the output too long for the registry): what is held goes to the
    /// file, and so does everything after it.
    fn stop_holding(&mut self) {
        self.hold_until = None;
        let held = std::mem::take(&mut self.held);
        if !held.is_empty() {
            self.write_through(&held);
        }
    }

    fn write_through(&mut self, chunk: &[u8]) {
        if !self.opened {
            self.opened = true;
            self.file = self.path.as_ref().and_then(open_log);
            if let Some((path, why)) = self.unavailable.take() {
                log_unwritten(Some(&path), &io::Error::other(why));
            }
        }
        if let Some(file) = &mut self.file {
            if let Err(err) = file.write(chunk) {
                log_unwritten(self.path.as_ref().map(LogFile::path).as_deref(), &err);
                self.file = None;
            }
        }
    }

    /// The stream ended. Output still held ended within the window and is at most
    /// [`LOG_FREE_BYTES`] ([`Self::write`] holds no more): the registry's tail, taken of the
    /// raw output and then redacted, holds all of it, so it leaves no file.
    fn finish(&mut self) {
        if self.hold_until.take().is_some() {
            self.held = Vec::new();
            return;
        }
        if let Some(Err(err)) = self.file.as_mut().map(RedactingLog::finish) {
            log_unwritten(self.path.as_ref().map(LogFile::path).as_deref(), &err);
        }
    }
}

impl Drop for StreamLog {
    /// A stream not read to its end (the attempt was cancelled) keeps nothing in the
    /// registry: what was held goes to the file.
    fn drop(&mut self) {
        if self.hold_until.is_some() && !self.held.is_empty() {
            self.stop_holding();
        }
    }
}

/// A stream that printed nothing leaves no log file, and neither does a short one that ended
/// within [`LOG_FREE_WINDOW`]: an empty `sheet-NN.stderr.log` per sheet says nothing (readers
/// treat a missing log as no output, or show the registry's tail: `logs`, the dashboard, the
/// `stderr_log` field of `sheet.failed`), and a 100,000-sheet job's workspace would otherwise
/// hold 100,000 of them. So an earlier attempt's log is removed when an attempt starts (when
/// one can exist: [`crate::output_log::may_exist`]), and the log is created when output must
/// go to it.
fn remove_stale_log(path: Option<&LogFile>) {
    if let Some(log) = path {
        log.base.remove_stale(log.suffix);
    }
}

/// A stream's log (None without a log base).
fn log_path(base: &Option<crate::output_log::LogBase>, suffix: &'static str) -> Option<LogFile> {
    Some(LogFile {
        base: base.as_ref()?.clone(),
        suffix,
    })
}

/// Create a stream's log in place (one `open` on a local workspace, relative to the logs
/// directory checked when the attempt started), private to the user and redacted as it is
/// written (issue 21); a failure is logged, and the output goes on without it.
fn open_log(log: &LogFile) -> Option<RedactingLog> {
    match log.base.create(log.suffix) {
        Ok(file) => Some(RedactingLog::new(file)),
        Err(err) => {
            log_unwritten(Some(&log.path()), &err);
            None
        }
    }
}

/// A sheet log that could not be written (a full disk): said in the conductor's log with
/// the file and why — the event [`crate::output_log::UNWRITTEN_EVENT`], which `mozart logs
/// JOB --sheet N` looks for to say the log is missing or incomplete, and why.
pub(crate) fn log_unwritten(path: Option<&std::path::Path>, err: &io::Error) {
    let path = path.map(|p| p.display().to_string()).unwrap_or_default();
    tracing::warn!(
        event = crate::output_log::UNWRITTEN_EVENT,
        path = %path,
        error = %err,
        "cannot write the sheet log {path}: {err}; the sheet goes on without it (the registry \
         keeps the last {REGISTRY_TAIL_BYTES} bytes of the output)"
    );
}

fn exit_parts(status: Option<std::process::ExitStatus>) -> (Option<i32>, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => (s.code(), s.signal()),
        None => (None, None),
    }
}

/// How the supervised process ended.
#[derive(Default)]
struct Ended {
    status: Option<std::process::ExitStatus>,
    timed_out: bool,
    lingered: bool,
    stopped: bool,
    escalated: bool,
}

impl Ended {
    /// The outcome of a run that started at `started` (`started_at_epoch`); the streams'
    /// captures are filled in by [`finish`].
    fn outcome(
        self,
        spawn_error: Option<io::Error>,
        started: Instant,
        started_at_epoch: f64,
    ) -> ProcessOutcome {
        let (exit_code, exit_signal) = exit_parts(self.status);
        ProcessOutcome {
            exit_code,
            exit_signal,
            timed_out: self.timed_out,
            escalated: self.escalated,
            lingered: self.lingered,
            stopped: self.stopped,
            spawn_error,
            stdout: StreamCapture::default(),
            stderr: StreamCapture::default(),
            duration: started.elapsed(),
            started_at_epoch,
        }
    }
}

/// Run the process to completion (or timeout), capturing output.
///
/// Returns the outcome and the line sink (with whatever it parsed). Dropping the returned
/// future terminates the process group.
pub async fn run_process(
    mut spec: ProcessSpec,
    progress: Arc<Progress>,
    sink: Option<Box<dyn LineSink>>,
) -> (ProcessOutcome, Option<Box<dyn LineSink>>) {
    let started = Instant::now();
    let started_at_epoch = epoch_now();
    // Both readers run inside this future, so their states are plain locals.
    let out_state = Mutex::new(ReaderState::new(
        StreamCapture::new(spec.keep_full_stdout),
        sink,
    ));
    let stderr_sink = spec
        .stderr_lines
        .clone()
        .map(|hook| Box::new(hook) as Box<dyn LineSink>);
    let err_state = Mutex::new(ReaderState::new(StreamCapture::new(0), stderr_sink));
    let tag = AttemptTag::new();
    let (mut child, ticks, spawner) = match spawn_looked_up(&spec, &tag) {
        Ok(child) => child,
        Err(err) => {
            let outcome = Ended::default().outcome(Some(err), started, started_at_epoch);
            return finish(&out_state, &err_state, outcome);
        }
    };
    let pid = child.id();
    // A spawn that straddled a clock tick (common on a loaded machine: the spawn waits for
    // the child's `exec`) reads the start time here, once, for the journal, the watchdog
    // and the children cache alike. Not reaped yet: even an instrument that already ended
    // still has its entry.
    let ticks = ticks.or_else(|| match pid {
        p if p > 1 => crate::descendants::read_stat(p).map(|s| s.start),
        _ => None,
    });
    // The tag before the pid: whoever sees the pid can journal the tag with it.
    progress.set_attempt_tag(tag.as_str());
    progress.set_started(u32::try_from(pid).ok(), ticks);
    let pgid = (pid > 1).then_some(pid);
    // Known as ours until `supervise` has reaped it (or, when this future is dropped, until
    // then: tokio's reaper takes it).
    let spawned: Option<Spawned> = ticks
        .filter(|_| pid > 1)
        .map(|t| crate::descendants::note_spawned(pid, t, &tag));
    let registered = crate::descendants::register(&tag, pgid, spec.owner.take());
    let mut guard = GroupGuard {
        armed: Some((pid, tag.clone(), registered)),
        spawner,
        grace: spec.kill_grace,
    };

    // The prompt goes to stdin inside this future too (no task of its own): dropping the
    // future — a cancelled attempt — stops the write with everything else.
    let mut stdin_data = match (child.stdin.take(), spec.stdin.take()) {
        (Some(stdin), Some(data)) => Some((stdin, data)),
        _ => None,
    };
    let mut written = stdin_data.is_none();
    let writing = async move {
        if let Some((mut stdin, data)) = stdin_data.take() {
            // A child that exits without reading its stdin gives EPIPE: not our failure.
            let _ = stdin.write_all(&data).await;
            let _ = stdin.shutdown().await;
        }
    };
    let out_log = log_path(&spec.log_base, ".stdout.log");
    let err_log = log_path(&spec.log_base, ".stderr.log");
    let unavailable = |suffix: &str| {
        spec.log_unavailable.as_ref().map(|(stem, why)| {
            let mut path = stem.clone().into_os_string();
            path.push(suffix);
            (PathBuf::from(path), why.clone())
        })
    };
    let (out_unavailable, err_unavailable) =
        (unavailable(".stdout.log"), unavailable(".stderr.log"));
    // Both streams are read inside this future (no task per stream): dropping it — a
    // cancelled attempt — stops them with everything else.
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let reading = async {
        tokio::join!(
            read_stream(
                stdout,
                StreamKind::Stdout,
                &out_state,
                &progress,
                (out_log, out_unavailable, started)
            ),
            read_stream(
                stderr,
                StreamKind::Stderr,
                &err_state,
                &progress,
                (err_log, err_unavailable, started)
            ),
        );
    };
    // The attempt's group and every process carrying its tag, wherever it went.
    let cleanup = Cleanup::new(pgid, Some(tag)).spawned_by(spawner);
    let supervise = supervise(&mut child, &spec, started, cleanup, spawned, &progress);
    tokio::pin!(reading);
    tokio::pin!(supervise);
    tokio::pin!(writing);
    let mut read_all = false;
    let ended = loop {
        tokio::select! {
            done = &mut supervise => break done,
            () = &mut reading, if !read_all => read_all = true,
            () = &mut writing, if !written => written = true,
        }
    };
    // A write still pending now (a process out of our reach holds stdin open without
    // reading it) is no longer polled; the pipe closes when this future ends.
    // Everything is ended: the attempt is over (dropping the registration).
    guard.armed = None;

    // Pipes close when the last writer dies; a process out of our reach (another user's,
    // one that dropped the tag) could hold them open, so the readers get a bounded wait.
    if !read_all {
        let read_deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        let _ = tokio::time::timeout_at(read_deadline, &mut reading).await;
    }
    finish(
        &out_state,
        &err_state,
        ended.outcome(None, started, started_at_epoch),
    )
}

/// Spawn `spec`'s program, looked up on the PATH the child gets.
fn spawn_looked_up(
    spec: &ProcessSpec,
    tag: &AttemptTag,
) -> io::Result<(Child, Option<u64>, Option<i32>)> {
    // A bare name is looked up on the PATH the child gets, here: `posix_spawn` takes a
    // path, and `posix_spawnp` would search the conductor's PATH, not the child's.
    let child_env = spec
        .child_env
        .clone()
        .unwrap_or_else(|| ChildEnv::resolve(&spec.env));
    let cached = spec.program_path.is_some();
    let path = spec
        .program_path
        .clone()
        .or_else(|| resolve_program_on(&spec.program, child_env.path()));
    let spawned = spawn_child(spec, &child_env, path.as_deref(), tag);
    if cached && matches!(&spawned, Err(e) if e.kind() == io::ErrorKind::NotFound) {
        // The cached program is gone: look again, as a fresh spawn would.
        let path = resolve_program_on(&spec.program, child_env.path());
        return spawn_child(spec, &child_env, path.as_deref(), tag);
    }
    spawned
}

/// Wait for the child to exit, its timeout, the end of its linger after the result, or a
/// stop; then end it (TERM → grace → KILL) and whatever it left behind.
async fn supervise(
    child: &mut Child,
    spec: &ProcessSpec,
    started: Instant,
    mut cleanup: Cleanup,
    spawned: Option<Spawned>,
    progress: &Progress,
) -> Ended {
    let deadline = tokio::time::Instant::from_std(started + spec.timeout);
    let result_seen = spec.result_seen.clone();
    let linger_grace = spec.linger_grace;
    let linger = async move {
        match result_seen {
            Some(notify) => {
                notify.notified().await;
                tokio::time::sleep(linger_grace).await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let stop = spec.stop.clone();
    let stopping = async move {
        match stop {
            Some(notify) => notify.notified().await,
            None => std::future::pending::<()>().await,
        }
    };
    let mut ended = Ended::default();
    (ended.status, ended.timed_out, ended.lingered, ended.stopped) = tokio::select! {
        s = child.wait() => (s.ok(), false, false, false),
        _ = tokio::time::sleep_until(deadline) => (None, true, false, false),
        _ = linger => (None, false, true, false),
        _ = stopping => (None, false, false, true),
    };
    if ended.timed_out || ended.lingered || ended.stopped {
        cleanup.term();
        ended.status = match tokio::time::timeout(spec.kill_grace, child.wait()).await {
            Ok(s) => s.ok(),
            Err(_) => {
                ended.escalated = true;
                cleanup.kill();
                let _ = child.start_kill();
                child.wait().await.ok()
            }
        };
    }
    progress.set_pid(None);
    // Reaped (or never to be: `wait` failed): its pid is free for anyone now.
    drop(spawned);

    // The leader is gone; whatever it left — in its group, or outside it (`setsid`, a
    // double fork) — gets a short drain window, then the same TERM → grace → KILL
    // sequence (never leave an orphan).
    if !cleanup.wait_gone(spec.drain_grace).await
        && cleanup.terminate(spec.kill_grace).await
        && ended.timed_out
    {
        // The leader went at SIGTERM, a process it started ignored it: the timeout
        // needed SIGKILL all the same.
        ended.escalated = true;
    }
    ended
}

/// Spawn the child of `spec` with `env`, running `path` (or `spec.program` as given).
/// Returns the child, its start time in clock ticks when the spawn pinned it down, and
/// the thread of ours that spawned it (its parent, [`Cleanup::spawned_by`]).
fn spawn_child(
    spec: &ProcessSpec,
    env: &ChildEnv,
    path: Option<&std::path::Path>,
    tag: &AttemptTag,
) -> io::Result<(Child, Option<u64>, Option<i32>)> {
    // A bare name not found on the child's PATH: what `execvp` would have said.
    let program = match path {
        Some(path) => path,
        None if spec.program.contains('/') => std::path::Path::new(&spec.program),
        None => return Err(io::Error::from_raw_os_error(nix::libc::ENOENT)),
    };
    let spawn = Spawn {
        program,
        arg0: &spec.program,
        args: &spec.args,
        cwd: spec.cwd.as_deref(),
        env,
        // The attempt's tag, inherited by everything the instrument starts
        // (crate::descendants).
        tag: tag.as_str(),
        piped_stdin: spec.stdin.is_some(),
    };
    // The spawn forks from this thread, which becomes the child's parent.
    let spawner = Some(nix::unistd::gettid().as_raw());
    let before = boot_ticks_now();
    let child = crate::spawn::spawn(&spawn)?;
    let after = boot_ticks_now();
    Ok((child, start_ticks_between(before, after), spawner))
}

/// A child's start time in clock ticks — the value `/proc/<pid>/stat` reports — when the
/// spawn began and returned within the same tick: the kernel stamps the child with the
/// boot-time clock while forking it, between the two readings. `None` when they straddle a
/// tick boundary (then `/proc` has to be read).
fn start_ticks_between(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    match (before, after) {
        (Some(b), Some(a)) if a == b => Some(b),
        _ => None,
    }
}

fn finish(
    out_state: &Mutex<ReaderState>,
    err_state: &Mutex<ReaderState>,
    mut outcome: ProcessOutcome,
) -> (ProcessOutcome, Option<Box<dyn LineSink>>) {
    let mut out = lock(out_state);
    out.finish();
    outcome.stdout = std::mem::take(&mut out.capture);
    let sink = out.sink.take();
    outcome.stderr = std::mem::take(&mut lock(err_state).capture);
    (outcome, sink)
}

/// Resolve an executable name on PATH the way the OS would (`which`).
pub fn which(program: &str) -> Option<PathBuf> {
    which_on(program, std::env::var_os("PATH").as_deref())
}

/// Resolve an executable name on the given `PATH` value (another process's, e.g. the
/// conductor's); a name with a `/` is taken as it is.
pub fn which_on(program: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &std::path::Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return is_exec(&p).then_some(p);
    }
    std::env::split_paths(path?)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .find(|candidate| is_exec(candidate))
}

/// Why [`which_on`] found nothing although a file of that name is there: the first file
/// `program` names on `path` (or `program` itself, with a `/`) that is not executable.
pub fn non_executable_on(program: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let plain_file = |p: &std::path::Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 == 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return plain_file(&p).then_some(p);
    }
    std::env::split_paths(path?)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .find(|candidate| plain_file(candidate))
}

/// The executable a bare `program` name stands for on the child's `PATH` (as `execvp` would
/// find it); `None` for a path, or when nothing is found (spawning then reports it).
pub fn resolve_program(program: &str, env: &ChildEnv) -> Option<PathBuf> {
    resolve_program_on(program, env.path())
}

fn resolve_program_on(program: &str, path: Option<std::ffi::OsString>) -> Option<PathBuf> {
    if program.is_empty() || program.contains('/') {
        return None;
    }
    which_on(program, path.as_deref())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    struct Lines(Arc<Mutex<Vec<usize>>>);
    impl LineSink for Lines {
        fn line(&mut self, line: &[u8]) {
            self.0.lock().unwrap().push(line.len());
        }
    }

    #[test]
    fn a_line_longer_than_the_cap_is_dropped_without_being_kept() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut state = ReaderState {
            capture: StreamCapture::new(0),
            sink: Some(Box::new(Lines(seen.clone()))),
            pending: Vec::new(),
            pending_overflow: false,
        };
        let chunk = vec![b'x'; 64 * 1024];
        state.feed(b"short\n");
        for _ in 0..(MAX_LINE_BYTES / chunk.len() + 2) {
            state.feed(&chunk);
            assert!(state.pending.capacity() <= MAX_LINE_BYTES * 2);
        }
        assert_eq!(state.pending.capacity(), 0, "an overlong line is not held");
        state.feed(b"\nafter\n");
        state.finish();
        assert_eq!(
            *seen.lock().unwrap(),
            vec![5, 5],
            "the long line dropped, its neighbours kept"
        );
    }

    /// A start time pinned down by the spawn is exactly the one `/proc/<pid>/stat` reports
    /// (field 22), which the journal and the watchdog compare it with later.
    #[test]
    fn start_ticks_from_the_spawn_match_proc() {
        let (mut known, total) = (0, 200);
        for _ in 0..total {
            let before = boot_ticks_now();
            let mut child = std::process::Command::new("true").spawn().unwrap();
            let after = boot_ticks_now();
            // Not reaped yet: a zombie keeps its /proc entry.
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
            let proc_ticks: u64 = stat
                .rsplit_once(')')
                .unwrap()
                .1
                .split_whitespace()
                .nth(19)
                .unwrap()
                .parse()
                .unwrap();
            if let Some(ticks) = start_ticks_between(before, after) {
                assert_eq!(ticks, proc_ticks);
                known += 1;
            }
            child.wait().unwrap();
        }
        eprintln!("start time known from the spawn for {known} of {total} spawns");
        assert!(known > 0);
    }

    #[test]
    fn bare_names_resolve_on_the_childs_path_and_paths_stay_as_given() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("my-tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let data = dir.path().join("not-executable");
        std::fs::write(&data, "x").unwrap();
        let env = EnvPlan {
            clear: true,
            set: vec![(
                "PATH".into(),
                format!("/nonexistent:{}", dir.path().display()),
            )],
            remove: vec![],
        };
        let env = ChildEnv::resolve(&env);
        assert_eq!(resolve_program("my-tool", &env), Some(tool.clone()));
        assert_eq!(resolve_program("not-executable", &env), None);
        assert_eq!(resolve_program("missing", &env), None);
        assert_eq!(resolve_program("./my-tool", &env), None);
        let no_path = EnvPlan {
            clear: true,
            ..EnvPlan::default()
        };
        assert_eq!(
            resolve_program("my-tool", &ChildEnv::resolve(&no_path)),
            None
        );
    }
}
