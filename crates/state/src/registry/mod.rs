//! The conductor's SQLite registry: jobs, per-sheet checkpoint rows, attempt history, hook
//! results and rate limits (conductor.md §9–§11, execution.md §8.5).
//!
//! Synchronous by design: the conductor owns one `Registry` on a dedicated thread (or calls
//! it through `spawn_blocking`). Every multi-row write is one `BEGIN IMMEDIATE` transaction,
//! so a crash mid-write leaves the previous state.

mod compact;
mod records;
mod runs;
mod views;

pub use runs::RunRecord;
pub use views::StoredSheetFacts;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Row};
use serde_json::{Map, Value};

pub use records::{
    AttemptRecord, DaemonJobStatus, DeleteFilter, HookResultRecord, JobRecord, JobScore,
    RateLimitRecord, SheetAttemptErrors, ERROR_OUTPUT_TAIL_CHARS,
};

use crate::checkpoint::{CheckpointState, SheetState, SheetStatus, ZOMBIE_ON_LOAD_TRIGGER};
use crate::error::{Result, StateError};
use crate::migrate;
use crate::time::{epoch_now, Timestamp};

/// Error message of an orphan that could not be kept (conductor.md §11.1; the daemon
/// guide's "Conductor restarted ..." wording is wrong).
pub const ORPHAN_FAILED_MESSAGE: &str = "Daemon restarted while job was active";
/// Zombie trigger recorded in the checkpoint of an orphan kept as paused.
pub const ORPHAN_RECOVERY_TRIGGER: &str = "Conductor restarted while job was active";

/// Which orphans [`Registry::recover_orphans`] paused and which it failed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrphanRecovery {
    /// Jobs now `failed`.
    pub failed: Vec<String>,
    /// Jobs now `paused` (resumable).
    pub paused: Vec<String>,
}

/// How long a writer waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A registry made without incremental vacuum is converted (one full `VACUUM`, holding it
/// for the copy) only when what it keeps is at most this large: 64 MiB.
pub const VACUUM_LIVE_MAX_BYTES: i64 = 64 * 1024 * 1024;

/// How long the background checkpointer waits for a lock before trying again next period.
const CHECKPOINT_BUSY_TIMEOUT: Duration = Duration::from_millis(100);

/// WAL size past which the background checkpointer truncates it (see
/// [`Registry::checkpoint_in_background`]).
const WAL_TRUNCATE_AT: u64 = 16 * 1024 * 1024;

/// `PRAGMA wal_checkpoint(mode)` on `conn`: (frames in the WAL, frames copied into the
/// database). A checkpoint that could not finish because the writer held the lock is
/// not an error (`busy`): the next one carries on.
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<(i64, i64)> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
        Ok((r.get(1)?, r.get(2)?))
    })
}

/// Start the WAL over from this connection (see [`Registry::checkpoint_in_background`]):
/// rewriting the schema cookie with its own value changes nothing but writes one page, and
/// a write that finds every frame copied restarts the WAL, syncing its new header. Best
/// effort: when the writer holds the lock past the busy timeout, its own next commit
/// restarts the WAL as before.
fn restart_wal(conn: &Connection) {
    let result = conn
        .query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
        .and_then(|v| conn.pragma_update(None, "user_version", v));
    if let Err(e) = result {
        tracing::debug!(error = %e, "registry WAL not restarted by the checkpointer");
    }
}

/// Whether the WAL at `wal` holds a frame after its first one since it was last started
/// over: SQLite's file format puts the WAL's salts at bytes 16..24 of its header and a copy
/// in bytes 8..16 of each frame's header, and a restart draws new salts — so the second
/// frame's copy matches only when it was written after the restart. Unreadable counts as
/// no (the checkpoint is left for the next period).
fn wal_has_frames_after_first(wal: &Path, page_size: u64) -> bool {
    use std::os::unix::fs::FileExt as _;
    let Ok(file) = std::fs::File::open(wal) else {
        return false;
    };
    let (mut header, mut second) = ([0u8; 8], [0u8; 8]);
    file.read_exact_at(&mut header, 16).is_ok()
        && file
            .read_exact_at(&mut second, 32 + (24 + page_size) + 8)
            .is_ok()
        && header == second
}

/// The WAL file beside the database at `db`.
fn wal_path(db: &Path) -> PathBuf {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

const JOB_COLUMNS: &str = "job_id, config_path, workspace, status, pid, submitted_at, \
    started_at, completed_at, updated_at, error_message, error_traceback, current_sheet, \
    total_sheets, last_event_at, log_path, snapshot_path, concert_id, chain_depth, \
    parent_job_id, concert_config_json, hook_config_json, completed_new_work, options_json";

/// Handle on the registry database.
pub struct Registry {
    conn: Connection,
    path: PathBuf,
}

/// The thread that checkpoints a registry's WAL (see [`Registry::checkpoint_in_background`]);
/// dropping it runs a last checkpoint and joins the thread.
#[derive(Debug)]
pub struct Checkpointer {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("path", &self.path)
            .finish()
    }
}

impl Registry {
    /// Opens (creating if needed) the registry at `path` and applies pending migrations.
    pub fn open(path: &Path) -> Result<Registry> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StateError::Io {
                action: "creating registry directory",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let err = |operation: &str| StateError::sqlite(path, operation.to_owned());
        refuse_empty(path)?;
        let mut conn = Connection::open(path).map_err(err("opening"))?;
        // Room for every statement of the hot path (sheet, header, attempt, transaction).
        conn.set_prepared_statement_cache_capacity(64);
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(err("setting busy_timeout"))?;
        // Before anything is written to it: a database that is not ours stays as it is.
        refuse_foreign(&conn, path)?;
        // A new registry frees the pages of cleared jobs bit by bit
        // ([`Registry::reclaim_free_pages`]); the setting takes effect only before the first
        // table is made, so on an older registry it is a no-op until its first reclaim.
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
            .map_err(err("setting auto_vacuum"))?;
        // WAL lets external readers (`mozart list` against a live conductor, monitoring
        // tools) read while the conductor writes. synchronous=NORMAL in WAL mode is durable
        // against a process crash — the threat model is `kill -9` of the conductor — and
        // can lose only the last transactions on an OS crash / power loss, never corrupt.
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(err("enabling WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(path = %path.display(), mode, "registry.wal_unavailable");
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err("setting synchronous"))?;
        // A 512 KiB page cache (SQLite's default is 2 MiB): the hot path writes recent pages
        // of a few tables, and the conductor's memory should not grow with the registry.
        conn.pragma_update(None, "cache_size", -512)
            .map_err(err("setting cache_size"))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(err("enabling foreign keys"))?;
        migrate::migrate(&mut conn, path)?;
        Ok(Registry {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// A second, read-only handle on the registry at `path` (already opened and migrated by
    /// [`Registry::open`]), for answers that only read: in WAL mode a reader sees the last
    /// commit and never waits for the writer, so a page of `list` is not held up behind the
    /// baton's burst of sheet writes on the writer's connection (issue 24). Every write
    /// through it fails.
    pub fn open_reader(path: &Path) -> Result<Registry> {
        let err = |operation: &str| StateError::sqlite(path, operation.to_owned());
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
                | rusqlite::OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(err("opening read-only"))?;
        conn.set_prepared_statement_cache_capacity(16);
        // A reader waits only while a truncating checkpoint or a recovery holds the file.
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(err("setting busy_timeout"))?;
        conn.pragma_update(None, "cache_size", -512)
            .map_err(err("setting cache_size"))?;
        Ok(Registry {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Move WAL checkpoints off this connection onto a thread of their own, run every
    /// `period` while the returned handle lives (and once more when it is dropped).
    ///
    /// A checkpoint copies the WAL back into the database and fsyncs both, several
    /// milliseconds on an ordinary disk. SQLite runs it inside whichever commit crosses the
    /// 1,000-page mark — for the conductor, the baton's own transaction, which then holds
    /// every dispatch of every job for the length of two fsyncs, a few times per 1,000
    /// sheets. A passive checkpoint on another connection never blocks the writer.
    pub fn checkpoint_in_background(&self, period: Duration) -> Result<Checkpointer> {
        let path = self.path.clone();
        let reader =
            Connection::open(&path).map_err(self.err("opening the checkpoint connection"))?;
        // Short: a truncating checkpoint holds the write lock while it waits for the writer
        // and readers to finish; giving up after 100 ms (and trying again next period)
        // bounds how long the baton's commits can wait behind it, far below their own
        // BUSY_TIMEOUT.
        reader
            .busy_timeout(CHECKPOINT_BUSY_TIMEOUT)
            .map_err(self.err("setting busy_timeout on the checkpoint connection"))?;
        let wal = wal_path(&path);
        // The WAL's size holding one page: its header, a frame header and the page.
        let page_size: u64 = reader
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .map_err(self.err("reading the page size"))?;
        let one_frame = 32 + 24 + page_size;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("registry-ckpt".into())
            .spawn(move || {
                // Said once per failing stretch (a full disk fails every run), not twice a second.
                let mut failing = false;
                let mut report = |result: rusqlite::Result<(i64, i64)>| match result {
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(path = %path.display(), error = %e, "registry checkpoint failed");
                        None
                    }
                    Err(_) => None,
                    Ok(frames) => {
                        failing = false;
                        Some(frames)
                    }
                };
                let mut tick = |reader: &Connection| {
                    let size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
                    if size < one_frame {
                        // Empty (truncated, or never written): start it over now.
                        restart_wal(reader);
                        return;
                    }
                    if !wal_has_frames_after_first(&wal, page_size) {
                        // One frame at most since the WAL was started over (this thread's
                        // restart page, usually): copying it now would let the next commit
                        // find every frame copied and start the WAL over itself. Nothing
                        // else written for a whole period: quiet, so cut the file back
                        // (it grew to 104 MB over a 10,000-sheet job and stayed) and
                        // start it over again here.
                        if size > one_frame {
                            report(checkpoint(reader, "TRUNCATE"));
                            restart_wal(reader);
                        }
                        return;
                    }
                    let mut frames = report(checkpoint(reader, "PASSIVE"));
                    // A passive checkpoint never makes the file smaller: past
                    // WAL_TRUNCATE_AT, one that truncates it (the writer waits for that
                    // one, a few milliseconds per tens of megabytes written).
                    if size > WAL_TRUNCATE_AT {
                        frames = report(checkpoint(reader, "TRUNCATE"));
                    }
                    // Every frame copied: the next write starts the WAL from the top, and
                    // a WAL started afresh has its header synced to disk first (an fsync,
                    // 0.3 to several ms). Made here, that restart is not paid by the
                    // conductor's next commit — a sheet's completion and its successor's
                    // start, or a job's submission after a quiet spell (issue 24).
                    if frames.is_some_and(|(log, done)| log == done) {
                        restart_wal(reader);
                    }
                };
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    tick(&reader);
                }
                // The last one, at shutdown: leave no WAL behind.
                if report(checkpoint(&reader, "TRUNCATE")).is_none() {
                    report(checkpoint(&reader, "PASSIVE"));
                }
            })
            .map_err(|source| StateError::Io {
                action: "starting the registry checkpoint thread for",
                path: self.path.clone(),
                source,
            })?;
        let checkpointer = Checkpointer {
            stop: Some(stop),
            thread: Some(thread),
        };
        // Only once the thread runs: a WAL nobody checkpoints would grow without end.
        self.conn
            .pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(self.err("turning off automatic checkpoints"))?;
        Ok(checkpointer)
    }

    /// Current schema version recorded in the database.
    pub fn schema_version(&self) -> Result<u32> {
        self.conn
            .query_row(
                "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                [],
                |r| r.get(0),
            )
            .map_err(self.err("reading schema version"))
    }

    fn err(&self, operation: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> StateError {
        StateError::sqlite(&self.path, operation)
    }

    /// [`Registry::err`] whose context is built only when there is an error (the hot paths
    /// run thousands of times per job; formatting each context up front showed in profiles).
    fn err_lazy<'a>(
        &'a self,
        operation: impl FnOnce() -> String + 'a,
    ) -> impl FnOnce(rusqlite::Error) -> StateError + 'a {
        move |source| StateError::Sqlite {
            path: self.path.clone(),
            operation: operation(),
            source,
        }
    }

    fn begin(&self, operation: &str) -> Result<Tx<'_>> {
        Tx::begin(&self.conn)
            .map_err(self.err_lazy(|| format!("beginning transaction for {operation}")))
    }

    /// A transaction for writes that are all-or-nothing on their own: one statement, or
    /// statements of which only the last can write (an update that found no row, then its
    /// insert). Inside [`Registry::batch`] that needs no savepoint — SQLite undoes a failed
    /// statement and leaves the transaction — so none is taken (two statements a sheet
    /// fewer in a burst, issue 24); at the top level it is [`Registry::begin`]'s.
    fn begin_single(&self, operation: &str) -> Result<Tx<'_>> {
        if self.conn.is_autocommit() {
            self.begin(operation)
        } else {
            Ok(Tx::inside(&self.conn))
        }
    }

    /// Runs `f` inside one transaction: every write `f` makes through this registry becomes
    /// durable together at the end (each stays all-or-nothing on its own — a savepoint, or
    /// a single statement that SQLite undoes when it fails — so one that fails leaves the
    /// others). The conductor saves all the transitions of one baton
    /// event burst this way — one commit instead of one per transition. Nothing written in
    /// `f` is durable before this returns `Ok`.
    pub fn batch<T>(&self, f: impl FnOnce(&Registry) -> T) -> Result<T> {
        let outer = self.begin("a batch of writes")?;
        let value = f(self);
        outer
            .commit()
            .map_err(self.err("committing a batch of writes"))?;
        Ok(value)
    }

    /// Runs `f` inside one transaction that is committed only when `f` returns `Ok`: its
    /// writes become durable together, or — when `f` fails — none of them does (a job's row
    /// is never left without its checkpoint).
    pub fn all_or_nothing<T, E>(
        &self,
        f: impl FnOnce(&Registry) -> std::result::Result<T, E>,
    ) -> Result<std::result::Result<T, E>> {
        let outer = self.begin("an all-or-nothing batch of writes")?;
        match f(self) {
            Ok(value) => {
                outer
                    .commit()
                    .map_err(self.err("committing an all-or-nothing batch of writes"))?;
                Ok(Ok(value))
            }
            // Dropping `outer` uncommitted rolls every write of `f` back.
            Err(e) => Ok(Err(e)),
        }
    }

    // ---------------------------------------------------------------- jobs

    /// Registers a job. Re-submitting an existing id overwrites its metadata (conductor.md
    /// §6.3) but keeps its checkpoint; call [`Registry::clear_checkpoint`] for `--fresh`.
    pub fn create_job(&self, job: &JobRecord) -> Result<()> {
        let tx = self.begin("create_job")?;
        upsert_job(&tx, job).map_err(self.err(format!("creating job '{}'", job.job_id)))?;
        tx.commit()
            .map_err(self.err(format!("committing job '{}'", job.job_id)))
    }

    /// Registers a job together with its score in one transaction.
    pub fn create_job_with_score(&self, job: &JobRecord, score: &JobScore) -> Result<()> {
        let tx = self.begin("create_job_with_score")?;
        let ctx = format!("creating job '{}'", job.job_id);
        upsert_job(&tx, job).map_err(self.err(&ctx))?;
        write_score(&tx, &job.job_id, score).map_err(|e| self.map_json_or_sql(e, &ctx))?;
        tx.commit().map_err(self.err(ctx))
    }

    /// Sets one key of a job's `options` (the other keys and columns stay as they are);
    /// `JobNotFound` if absent.
    pub fn set_job_option(&self, job_id: &str, key: &str, value: Value) -> Result<()> {
        let Some(mut job) = self.get_job(job_id)? else {
            return self.expect_row(0, job_id);
        };
        job.options.insert(key.to_owned(), value);
        let n = self
            .conn
            .execute(
                "UPDATE jobs SET options_json=?2 WHERE job_id=?1",
                params![job_id, Value::Object(job.options).to_string()],
            )
            .map_err(self.err(format!("updating job '{job_id}'")))?;
        self.expect_row(n, job_id)
    }

    /// Overwrites a job's metadata columns; `JobNotFound` if absent.
    pub fn update_job(&self, job: &JobRecord) -> Result<()> {
        let n = self
            .conn
            .execute(
                "UPDATE jobs SET config_path=?2, workspace=?3, status=?4, pid=?5, \
                 submitted_at=?6, started_at=?7, completed_at=?8, updated_at=?9, \
                 error_message=?10, error_traceback=?11, current_sheet=?12, total_sheets=?13, \
                 last_event_at=?14, log_path=?15, snapshot_path=?16, concert_id=?17, \
                 chain_depth=?18, parent_job_id=?19, concert_config_json=?20, \
                 hook_config_json=?21, completed_new_work=?22, options_json=?23 \
                 WHERE job_id=?1",
                as_refs(&job_params(job)).as_slice(),
            )
            .map_err(self.err(format!("updating job '{}'", job.job_id)))?;
        self.expect_row(n, &job.job_id)
    }

    fn expect_row(&self, changed: usize, job_id: &str) -> Result<()> {
        if changed == 0 {
            Err(StateError::JobNotFound {
                job_id: job_id.to_owned(),
            })
        } else {
            Ok(())
        }
    }

    /// Sets a job's status. `running` stamps `started_at`; a terminal status stamps
    /// [`Registry::set_job_status`]'s clearing of the error message alone: for a job whose
    /// pause (a save that failed) is over by another way than a resume to `running`.
    pub fn clear_job_error(&self, job_id: &str) -> Result<()> {
        let n = self
            .conn
            .execute(
                "UPDATE jobs SET error_message=NULL WHERE job_id=?1",
                params![job_id],
            )
            .map_err(self.err(format!("clearing the error of job '{job_id}'")))?;
        self.expect_row(n, job_id)
    }

    /// `completed_at`; `queued`/`running` clear `completed_at` and the previous error (a
    /// resumed job should not show its old failure — upstream kept it); `error` is stored
    /// when given.
    pub fn set_job_status(
        &self,
        job_id: &str,
        status: DaemonJobStatus,
        error: Option<&str>,
    ) -> Result<()> {
        let now = epoch_now();
        let n = self
            .conn
            .execute(
                "UPDATE jobs SET status=?2, updated_at=?3, \
                 started_at = CASE WHEN ?2='running' THEN ?3 ELSE started_at END, \
                 completed_at = CASE WHEN ?4 THEN ?3 WHEN ?5 THEN NULL ELSE completed_at END, \
                 error_message = CASE WHEN ?6 IS NOT NULL THEN ?6 \
                                      WHEN ?5 THEN NULL ELSE error_message END \
                 WHERE job_id=?1",
                params![
                    job_id,
                    status.as_str(),
                    now,
                    status.is_terminal(),
                    status.is_active(),
                    error
                ],
            )
            .map_err(self.err(format!("setting status of job '{job_id}'")))?;
        self.expect_row(n, job_id)
    }

    /// Records (or clears) the pid running a job.
    pub fn set_job_pid(&self, job_id: &str, pid: Option<u32>) -> Result<()> {
        let n = self
            .conn
            .execute(
                "UPDATE jobs SET pid=?2, updated_at=?3 WHERE job_id=?1",
                params![job_id, pid, epoch_now()],
            )
            .map_err(self.err(format!("setting pid of job '{job_id}'")))?;
        self.expect_row(n, job_id)
    }

    /// Progress for listings; stamps `last_event_at`.
    pub fn update_progress(
        &self,
        job_id: &str,
        current_sheet: Option<u32>,
        total_sheets: Option<u32>,
    ) -> Result<()> {
        let now = epoch_now();
        let n = self
            .conn
            .execute(
                "UPDATE jobs SET current_sheet=?2, total_sheets=COALESCE(?3, total_sheets), \
                 last_event_at=?4, updated_at=?4 WHERE job_id=?1",
                params![job_id, current_sheet, total_sheets, now],
            )
            .map_err(self.err(format!("updating progress of job '{job_id}'")))?;
        self.expect_row(n, job_id)
    }

    /// Sets the zero-work guard flag (conductor.md §19.1).
    pub fn set_completed_new_work(&self, job_id: &str, value: bool) -> Result<()> {
        let n = self
            .conn
            .execute(
                "UPDATE jobs SET completed_new_work=?2, updated_at=?3 WHERE job_id=?1",
                params![job_id, value, epoch_now()],
            )
            .map_err(self.err(format!("setting completed_new_work of job '{job_id}'")))?;
        self.expect_row(n, job_id)
    }

    /// One job's metadata.
    pub fn get_job(&self, job_id: &str) -> Result<Option<JobRecord>> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE job_id=?1");
        let raw = self
            .conn
            .query_row(&sql, [job_id], RawJob::from_row)
            .optional()
            .map_err(self.err(format!("reading job '{job_id}'")))?;
        raw.map(RawJob::into_record).transpose()
    }

    /// Jobs newest first; without `include_terminal`, only non-terminal ones.
    pub fn list_jobs(&self, include_terminal: bool) -> Result<Vec<JobRecord>> {
        let filter = if include_terminal {
            ""
        } else {
            "WHERE status NOT IN ('completed','failed','cancelled')"
        };
        self.query_jobs(
            &format!("SELECT {JOB_COLUMNS} FROM jobs {filter} ORDER BY submitted_at DESC"),
            &[],
        )
    }

    /// Jobs newest first, optionally restricted to statuses and capped (`job.list` shows
    /// at most 50 registry rows, conductor.md §6.12).
    pub fn list_jobs_filtered(
        &self,
        statuses: Option<&[DaemonJobStatus]>,
        limit: Option<usize>,
    ) -> Result<Vec<JobRecord>> {
        let mut sql = format!("SELECT {JOB_COLUMNS} FROM jobs");
        let mut args: Vec<String> = Vec::new();
        if let Some(st) = statuses {
            if st.is_empty() {
                return Ok(Vec::new());
            }
            sql.push_str(&format!(" WHERE status IN ({})", placeholders(st.len())));
            args.extend(st.iter().map(|s| s.as_str().to_owned()));
        }
        sql.push_str(" ORDER BY submitted_at DESC");
        if let Some(n) = limit {
            sql.push_str(&format!(" LIMIT {n}"));
        }
        self.query_jobs(&sql, &args)
    }

    /// One page of jobs, newest first: rows whose status is one of `statuses` (lower-case
    /// strings; `None` for all), `offset` rows skipped, at most `limit` (`None` for all),
    /// and how many rows match in all.
    pub fn page_jobs(
        &self,
        statuses: Option<&[String]>,
        limit: Option<u64>,
        offset: u64,
    ) -> Result<(Vec<JobRecord>, u64)> {
        let mut filter = String::new();
        let mut args: Vec<String> = Vec::new();
        if let Some(st) = statuses {
            if st.is_empty() {
                return Ok((Vec::new(), 0));
            }
            filter = format!(" WHERE status IN ({})", placeholders(st.len()));
            args.extend(st.iter().cloned());
        }
        let total: i64 = self
            .conn
            .prepare_cached(&format!("SELECT COUNT(*) FROM jobs{filter}"))
            .and_then(|mut stmt| stmt.query_row(params_from_iter(args.iter()), |r| r.get(0)))
            .map_err(self.err("counting jobs"))?;
        // SQLite: LIMIT -1 is no limit. Both numbers are ours, not user text. The job id
        // breaks ties, so pages neither repeat nor skip a row.
        let limit = limit
            .filter(|n| *n > 0)
            .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        let rows = self.query_jobs(
            &format!(
                "SELECT {JOB_COLUMNS} FROM jobs{filter} ORDER BY submitted_at DESC, job_id LIMIT {limit} OFFSET {offset}"
            ),
            &args,
        )?;
        Ok((rows, u64::try_from(total).unwrap_or(0)))
    }

    /// How many jobs the registry holds in each status (lower case; statuses with none are
    /// left out): one pass over the `jobs` table, for a filter bar's counts.
    pub fn count_jobs_by_status(&self) -> Result<std::collections::BTreeMap<String, u64>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT status, COUNT(*) FROM jobs GROUP BY status")
            .map_err(self.err("counting jobs"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(self.err("counting jobs"))?;
        let mut out = std::collections::BTreeMap::new();
        for row in rows {
            let (status, n) = row.map_err(self.err("counting jobs"))?;
            *out.entry(status.to_lowercase()).or_insert(0) += u64::try_from(n).unwrap_or(0);
        }
        Ok(out)
    }

    /// `queued`/`running` rows: orphans when the conductor starts (conductor.md §11.1).
    pub fn orphaned_jobs(&self) -> Result<Vec<JobRecord>> {
        self.list_jobs_filtered(
            Some(&[DaemonJobStatus::Queued, DaemonJobStatus::Running]),
            None,
        )
    }

    fn query_jobs(&self, sql: &str, args: &[String]) -> Result<Vec<JobRecord>> {
        let mut stmt = self
            .conn
            .prepare_cached(sql)
            .map_err(self.err("listing jobs"))?;
        let rows = stmt
            .query_map(params_from_iter(args.iter()), RawJob::from_row)
            .map_err(self.err("listing jobs"))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(self.err("listing jobs"))?.into_record()?);
        }
        Ok(out)
    }

    /// Deletes matching non-active jobs with their sheets, attempts and hook results;
    /// returns how many jobs were removed (conductor.md §6.12).
    pub fn delete_jobs(&self, filter: &DeleteFilter) -> Result<usize> {
        let statuses: Vec<DaemonJobStatus> = match &filter.statuses {
            Some(s) if !s.is_empty() => s.iter().copied().filter(|s| !s.is_active()).collect(),
            _ => vec![
                DaemonJobStatus::Completed,
                DaemonJobStatus::Failed,
                DaemonJobStatus::Cancelled,
            ],
        };
        if statuses.is_empty() || filter.job_ids.as_ref().is_some_and(Vec::is_empty) {
            return Ok(0);
        }
        let mut sql = format!(
            "DELETE FROM jobs WHERE status IN ({})",
            placeholders(statuses.len())
        );
        let mut args: Vec<Value> = statuses
            .iter()
            .map(|s| Value::String(s.as_str().to_owned()))
            .collect();
        if let Some(ids) = &filter.job_ids {
            sql.push_str(&format!(" AND job_id IN ({})", placeholders(ids.len())));
            args.extend(ids.iter().map(|i| Value::String(i.clone())));
        }
        if let Some(age) = filter.older_than_seconds {
            sql.push_str(" AND submitted_at < ?");
            args.push(serde_json::json!(epoch_now() - age));
        }
        let tx = self.begin("delete_jobs")?;
        let n = tx
            .execute(&sql, params_from_iter(args.iter().map(JsonParam)))
            .map_err(self.err("deleting jobs"))?;
        tx.commit().map_err(self.err("committing job deletion"))?;
        Ok(n)
    }

    /// Give up to `pages` of the registry's free pages (left by deleted jobs) back to the
    /// file system, and return how many free pages are left. A registry made before
    /// incremental vacuum was switched on is converted once by a full `VACUUM` when at
    /// least half of it is free and what is left is at most [`VACUUM_LIVE_MAX_BYTES`] (so
    /// the copy is short); a larger one keeps its free pages for later writes (0 left is
    /// returned, nothing more to do). The caller holds the registry for one step only.
    pub fn reclaim_free_pages(&self, pages: u32) -> Result<u64> {
        let pragma = |name: &str| -> Result<i64> {
            self.conn
                .query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
                .map_err(self.err(format!("reading {name}")))
        };
        let free = pragma("freelist_count")?;
        if free <= 0 {
            return Ok(0);
        }
        let left = if pragma("auto_vacuum")? == 2 {
            // One step of at most `pages`: short, whatever the registry's size.
            // Stepped to its end: each step of the statement frees a page.
            let mut stmt = self
                .conn
                .prepare(&format!("PRAGMA incremental_vacuum({pages})"))
                .map_err(self.err("reclaiming free pages"))?;
            let mut rows = stmt.query([]).map_err(self.err("reclaiming free pages"))?;
            while rows
                .next()
                .map_err(self.err("reclaiming free pages"))?
                .is_some()
            {}
            drop(rows);
            drop(stmt);
            pragma("freelist_count")?
        } else {
            let total = pragma("page_count")?;
            let live_bytes = (total - free).max(0) * pragma("page_size")?;
            if free * 2 < total || live_bytes > VACUUM_LIVE_MAX_BYTES {
                return Ok(0);
            }
            self.conn
                .execute_batch("PRAGMA auto_vacuum=INCREMENTAL; VACUUM;")
                .map_err(self.err("vacuuming"))?;
            pragma("freelist_count")?
        };
        if left <= 0 {
            // The file shrinks when the WAL holding the shorter database is checkpointed.
            let _ = checkpoint(&self.conn, "TRUNCATE");
        }
        Ok(u64::try_from(left).unwrap_or(0))
    }

    /// The submitted score of a job.
    pub fn job_score(&self, job_id: &str) -> Result<Option<JobScore>> {
        let row: Option<(Option<String>, Option<String>)> = self
            .conn
            .query_row(
                "SELECT s.score_yaml, s.config_snapshot_json FROM jobs j \
                 LEFT JOIN job_scores s ON s.job_id = j.job_id WHERE j.job_id=?1",
                [job_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(self.err(format!("reading score of job '{job_id}'")))?;
        let Some((yaml, snap)) = row else {
            return Ok(None);
        };
        let snapshot = parse_snapshot(job_id, snap)?;
        Ok(Some(JobScore { yaml, snapshot }))
    }

    /// Restart recovery (conductor.md §11.1), in one transaction. Every `queued`/`running`
    /// row is an orphan of the previous conductor. It becomes `paused` — resumable — when
    /// its workspace JSON state file says `paused` (upstream's rule) or when the registry
    /// holds its checkpoint (our port persists one for every started job, so the work done
    /// so far is kept; upstream fails these); its checkpoint is then marked paused too.
    /// Otherwise it becomes `failed` with upstream's message.
    pub fn recover_orphans(&self) -> Result<OrphanRecovery> {
        let orphans = self.orphaned_jobs()?;
        let mut report = OrphanRecovery::default();
        if orphans.is_empty() {
            return Ok(report);
        }
        let checkpoints: Vec<Option<CheckpointState>> = orphans
            .iter()
            .map(|j| match self.load_checkpoint(&j.job_id) {
                Ok(cp) => cp,
                Err(e) => {
                    // A corrupt checkpoint cannot be resumed; fail the job rather than
                    // refusing to start the conductor.
                    tracing::warn!(job_id = %j.job_id, error = %e, "registry.orphan_checkpoint_unreadable");
                    None
                }
            })
            .collect();
        let tx = self.begin("recover_orphans")?;
        let now = epoch_now();
        for (job, checkpoint) in orphans.iter().zip(checkpoints) {
            let state_file =
                crate::json_state::state_file_path(Path::new(&job.workspace), &job.job_id);
            let file_paused =
                crate::json_state::peek_status(&state_file).as_deref() == Some("paused");
            let ctx = format!("recovering orphan job '{}'", job.job_id);
            if file_paused || checkpoint.is_some() {
                if let Some(mut cp) = checkpoint {
                    if cp.status == crate::checkpoint::JobStatus::Running {
                        cp.mark_zombie_detected(Some(ORPHAN_RECOVERY_TRIGGER));
                    }
                    write_header(&tx, &cp, now).map_err(|e| self.map_json_or_sql(e, &ctx))?;
                }
                tx.execute(
                    "UPDATE jobs SET status='paused', pid=NULL, updated_at=?2 WHERE job_id=?1",
                    params![job.job_id, now],
                )
                .map_err(self.err(&ctx))?;
                report.paused.push(job.job_id.clone());
            } else {
                tx.execute(
                    "UPDATE jobs SET status='failed', pid=NULL, completed_at=?2, updated_at=?2, \
                     error_message=?3 WHERE job_id=?1",
                    params![job.job_id, now, ORPHAN_FAILED_MESSAGE],
                )
                .map_err(self.err(&ctx))?;
                report.failed.push(job.job_id.clone());
            }
        }
        tx.commit()
            .map_err(self.err("committing orphan recovery"))?;
        tracing::info!(
            count = orphans.len(),
            failed = report.failed.len(),
            paused = report.paused.len(),
            "manager.orphans_recovered"
        );
        Ok(report)
    }

    // ---------------------------------------------------------------- checkpoints

    /// Upserts one sheet row.
    pub fn save_sheet(&self, job_id: &str, sheet: &SheetState) -> Result<()> {
        self.save_sheets(job_id, std::slice::from_ref(sheet))
    }

    /// A sheet's move to in-progress (the hot path, once per attempt): only the columns it
    /// changes are updated, not the sheet's state document — [`Registry::load_checkpoint`]
    /// lays these columns over the document. Falls back to a full save when the row does
    /// not exist yet.
    pub fn save_sheet_started(&self, job_id: &str, sheet: &SheetState) -> Result<()> {
        let ctx = || format!("saving sheet {} of job '{job_id}'", sheet.sheet_num);
        let tx = self.begin_single("saving a started sheet")?;
        let updated = tx
            .prepare_cached(
                "UPDATE sheets SET status=?3, started_at=?4, attempt_count=?5, \
                 completion_attempts=?6, healing_attempts=?7, instrument_name=?8, updated_at=?9 \
                 WHERE job_id=?1 AND sheet_num=?2",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    job_id,
                    sheet.sheet_num,
                    sheet.status.as_str(),
                    sheet.started_at.as_ref().map(|t| t.as_str()),
                    sheet.attempt_count,
                    sheet.completion_attempts,
                    sheet.healing_attempts,
                    sheet.instrument_name,
                    epoch_now()
                ])
            })
            .map_err(self.err_lazy(ctx))?;
        if updated == 0 {
            self.require_job(&tx, job_id)?;
            insert_sheet(&tx, job_id, sheet, epoch_now())
                .map_err(|e| self.map_json_or_sql(e, &ctx()))?;
        }
        tx.commit().map_err(self.err_lazy(ctx))
    }

    /// Upserts sheet rows in one transaction: all or none.
    pub fn save_sheets(&self, job_id: &str, sheets: &[SheetState]) -> Result<()> {
        let ctx = || format!("saving {} sheet(s) of job '{job_id}'", sheets.len());
        let tx = self.begin("saving sheets")?;
        self.require_job(&tx, job_id)?;
        let now = epoch_now();
        for sheet in sheets {
            write_sheet(&tx, job_id, sheet, now).map_err(|e| self.map_json_or_sql(e, &ctx()))?;
        }
        tx.commit().map_err(self.err_lazy(ctx))
    }

    /// Writes the whole checkpoint (job-level document, score snapshot if present, every
    /// sheet) in one transaction. The job must be registered.
    pub fn save_checkpoint(&self, state: &CheckpointState) -> Result<()> {
        let ctx = format!("saving checkpoint of job '{}'", state.job_id);
        let tx = self.begin(&ctx)?;
        self.require_job(&tx, &state.job_id)?;
        let now = epoch_now();
        write_header(&tx, state, now).map_err(|e| self.map_json_or_sql(e, &ctx))?;
        if let Some(snapshot) = &state.config_snapshot {
            tx.execute(
                "INSERT INTO job_scores (job_id, config_snapshot_json) VALUES (?1, ?2) \
                 ON CONFLICT(job_id) DO UPDATE SET config_snapshot_json=excluded.config_snapshot_json",
                params![state.job_id, snapshot.text()],
            )
            .map_err(self.err(&ctx))?;
        }
        // The checkpoint is the whole truth: rows of sheets it no longer has (a score edited
        // to fewer sheets) must not come back on the next load.
        tx.execute("DELETE FROM sheets WHERE job_id=?1", [&state.job_id])
            .map_err(self.err(&ctx))?;
        // `scan`: compact sheets are made whole one at a time, and not kept.
        for (_, sheet) in state.sheets.scan() {
            insert_sheet(&tx, &state.job_id, &sheet, now)
                .map_err(|e| self.map_json_or_sql(e, &ctx))?;
        }
        tx.commit().map_err(self.err(ctx))
    }

    /// Writes only the job-level document (status, totals, timestamps) of a checkpoint
    /// whose sheet rows are already saved — a job's own transitions, whatever its size.
    pub fn save_header(&self, state: &CheckpointState) -> Result<()> {
        let ctx = format!("saving the state of job '{}'", state.job_id);
        let tx = self.begin(&ctx)?;
        self.write_registered_header(&tx, state, epoch_now(), &ctx)?;
        tx.commit().map_err(self.err(ctx))
    }

    /// The hot path: one sheet transition plus the job-level document, in one transaction.
    /// Cost is independent of how many sheets the job has.
    pub fn save_sheet_transition(&self, state: &CheckpointState, sheet_num: u32) -> Result<()> {
        let ctx = || format!("saving sheet {sheet_num} of job '{}'", state.job_id);
        let sheet = state
            .sheets
            .get(&sheet_num)
            .ok_or_else(|| StateError::InvalidCheckpoint {
                job_id: state.job_id.clone(),
                reason: format!("sheet {sheet_num} is not in the checkpoint"),
            })?;
        let tx = self.begin("saving a sheet transition")?;
        let now = epoch_now();
        // The header's update tells whether the job is registered: no lookup of its own
        // (one statement less per sheet on the hot path, issue 24).
        self.write_registered_header(&tx, state, now, &ctx())?;
        write_sheet(&tx, &state.job_id, sheet, now).map_err(|e| self.map_json_or_sql(e, &ctx()))?;
        tx.commit().map_err(self.err_lazy(ctx))
    }

    /// A sheet's whole row as an attempt's end left it, without the job-level document: a
    /// burst of transitions of one job writes that once, after its sheets
    /// ([`Registry::save_header`]), instead of once a sheet ([`Registry::save_sheet_transition`]).
    /// A job that is not registered fails on the row's reference to it.
    pub fn save_sheet_row(&self, job_id: &str, sheet: &SheetState) -> Result<()> {
        let ctx = || format!("saving sheet {} of job '{job_id}'", sheet.sheet_num);
        let tx = self.begin_single("saving a sheet")?;
        write_sheet(&tx, job_id, sheet, epoch_now()).map_err(|e| match e {
            WriteError::Sql(rusqlite::Error::SqliteFailure(f, _))
                if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY =>
            {
                StateError::JobNotFound {
                    job_id: job_id.to_owned(),
                }
            }
            e => self.map_json_or_sql(e, &ctx()),
        })?;
        tx.commit().map_err(self.err_lazy(ctx))
    }

    /// Reassembles the checkpoint from the job-level document, the score snapshot and the
    /// sheet rows; `None` when the job has no checkpoint yet.
    pub fn load_checkpoint(&self, job_id: &str) -> Result<Option<CheckpointState>> {
        let Some(mut state) = self.load_checkpoint_header(job_id)? else {
            return Ok(None);
        };
        let ctx = format!("loading checkpoint of job '{job_id}'");
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {SHEET_ROW_COLUMNS} FROM sheets WHERE job_id=?1 ORDER BY sheet_num"
            ))
            .map_err(self.err(&ctx))?;
        let mut rows = stmt.query([job_id]).map_err(self.err(&ctx))?;
        while let Some(r) = rows.next().map_err(self.err(&ctx))? {
            let sheet = sheet_from_row(r, job_id).map_err(|e| match e {
                SheetRowError::Sql(e) => self.err(&ctx)(e),
                SheetRowError::Corrupt(e) => e,
            })?;
            state.sheets.insert(sheet.sheet_num, sheet);
        }
        state
            .normalize_and_validate()
            .map_err(|reason| StateError::CorruptCheckpoint {
                job_id: job_id.to_owned(),
                reason,
            })?;
        Ok(Some(state))
    }

    /// [`Registry::load_checkpoint`], converting a stale running state (dead pid) to
    /// paused and saving that (execution.md §8.4, conductor.md §12 item 4).
    pub fn load_checkpoint_recovering_zombie(
        &self,
        job_id: &str,
    ) -> Result<Option<CheckpointState>> {
        let mut state = self.load_checkpoint(job_id)?;
        if let Some(s) = state.as_mut() {
            if s.recover_if_zombie(ZOMBIE_ON_LOAD_TRIGGER) {
                let tx = self.begin("zombie recovery")?;
                write_header(&tx, s, epoch_now())
                    .map_err(|e| self.map_json_or_sql(e, "saving zombie recovery"))?;
                tx.commit()
                    .map_err(self.err("committing zombie recovery"))?;
            }
        }
        Ok(state)
    }

    /// Marks the sheets of `job_id` that were in progress as pending again — for a job the
    /// conductor will not run until it is resumed (paused), whose attempts a restart ended:
    /// nothing runs them now. Returns how many it changed.
    pub fn requeue_interrupted_sheets(&self, job_id: &str) -> Result<usize> {
        let ctx = format!("requeueing the interrupted sheets of job '{job_id}'");
        let tx = self.begin(&ctx)?;
        let interrupted = {
            let mut stmt = tx
                .prepare_cached(&format!(
                    "SELECT {SHEET_ROW_COLUMNS} FROM sheets WHERE job_id=?1 AND status=?2"
                ))
                .map_err(self.err(&ctx))?;
            let mut rows = stmt
                .query(params![job_id, SheetStatus::InProgress.as_str()])
                .map_err(self.err(&ctx))?;
            let mut found = Vec::new();
            while let Some(r) = rows.next().map_err(self.err(&ctx))? {
                found.push(sheet_from_row(r, job_id).map_err(|e| match e {
                    SheetRowError::Sql(e) => self.err(&ctx)(e),
                    SheetRowError::Corrupt(e) => e,
                })?);
            }
            found
        };
        let now = epoch_now();
        for mut sheet in interrupted.iter().cloned() {
            sheet.status = SheetStatus::Pending;
            write_sheet(&tx, job_id, &sheet, now).map_err(|e| self.map_json_or_sql(e, &ctx))?;
        }
        tx.commit().map_err(self.err(&ctx))?;
        Ok(interrupted.len())
    }

    /// Forgets a job's checkpoint and sheet rows (`--fresh`); history and hook results stay.
    pub fn clear_checkpoint(&self, job_id: &str) -> Result<()> {
        let ctx = format!("clearing checkpoint of job '{job_id}'");
        let tx = self.begin(&ctx)?;
        tx.execute("DELETE FROM sheets WHERE job_id=?1", [job_id])
            .map_err(self.err(&ctx))?;
        tx.execute(
            "UPDATE jobs SET checkpoint_json=NULL, current_sheet=NULL, updated_at=?2 WHERE job_id=?1",
            params![job_id, epoch_now()],
        )
        .map_err(self.err(&ctx))?;
        tx.commit().map_err(self.err(ctx))
    }

    /// [`write_header`] of a job that must be registered: [`StateError::JobNotFound`] when
    /// no row was updated (the caller's transaction is then dropped, so nothing is written).
    fn write_registered_header(
        &self,
        tx: &Connection,
        state: &CheckpointState,
        now: f64,
        ctx: &str,
    ) -> Result<()> {
        match write_header(tx, state, now).map_err(|e| self.map_json_or_sql(e, ctx))? {
            0 => Err(StateError::JobNotFound {
                job_id: state.job_id.clone(),
            }),
            _ => Ok(()),
        }
    }

    fn require_job(&self, tx: &Connection, job_id: &str) -> Result<()> {
        let exists: bool = tx
            .prepare_cached("SELECT EXISTS(SELECT 1 FROM jobs WHERE job_id=?1)")
            .and_then(|mut stmt| stmt.query_row([job_id], |r| r.get(0)))
            .map_err(self.err_lazy(|| format!("looking up job '{job_id}'")))?;
        if exists {
            Ok(())
        } else {
            Err(StateError::JobNotFound {
                job_id: job_id.to_owned(),
            })
        }
    }

    fn map_json_or_sql(&self, e: WriteError, ctx: &str) -> StateError {
        match e {
            WriteError::Sql(source) => StateError::Sqlite {
                path: self.path.clone(),
                operation: ctx.to_owned(),
                source,
            },
            WriteError::Json(job_id, what, source) => StateError::Encode {
                job_id,
                what,
                source,
            },
        }
    }

    // ---------------------------------------------------------------- attempts

    /// Appends one attempt to the history; returns its row id.
    pub fn record_attempt(&self, a: &AttemptRecord) -> Result<i64> {
        self.conn
            .prepare_cached(
                "INSERT INTO attempts (job_id, sheet_num, attempt_num, mode, outcome, instrument, \
                 error_code, error_category, error_message, exit_code, duration_seconds, cost_usd, \
                 input_tokens, output_tokens, prompt, output, executed_at) \
                 VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    a.job_id,
                    a.sheet_num,
                    a.attempt_num,
                    a.mode,
                    a.outcome,
                    a.instrument,
                    a.error_code,
                    a.error_category,
                    a.error_message,
                    a.exit_code,
                    a.duration_seconds,
                    a.cost_usd,
                    a.input_tokens,
                    a.output_tokens,
                    a.prompt,
                    a.output,
                    a.executed_at
                ])
            })
            .map_err(self.err_lazy(|| {
                format!(
                    "recording attempt {} of sheet {} of job '{}'",
                    a.attempt_num, a.sheet_num, a.job_id
                )
            }))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Records the attempt each sheet of the job was running — its row still says in
    /// progress — with the outcome `interrupted`: the conductor stopped or died before the
    /// attempt's result was recorded, so `history` would otherwise not show it (no error:
    /// `errors` does not list it). Once per attempt (a second call finds it recorded);
    /// returns how many were recorded.
    pub fn record_interrupted_attempts(&self, job_id: &str) -> Result<usize> {
        let ctx = format!("recording the interrupted attempts of job '{job_id}'");
        let running: Vec<(u32, u32, Option<String>, Option<String>)> = {
            let mut stmt = self
                .conn
                .prepare_cached(
                    // A remote attempt (a Slurm job) runs on: the restart re-attaches to it.
                    "SELECT sheet_num, attempt_count, instrument_name, started_at FROM sheets \
                     WHERE job_id=?1 AND status=?2 \
                     AND json_extract(state_json, '$.remote_attempt') IS NULL",
                )
                .map_err(self.err(&ctx))?;
            let rows = stmt
                .query_map(params![job_id, SheetStatus::InProgress.as_str()], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .map_err(self.err(&ctx))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(self.err(&ctx))?
        };
        let mut recorded = 0;
        for (sheet_num, ended, instrument, started_at) in running {
            // The row counts the attempts that ended; the one running is the next.
            let attempt_num = ended.saturating_add(1);
            let executed_at = started_at
                .as_deref()
                .and_then(crate::time::parse_iso8601)
                .unwrap_or_else(epoch_now);
            // An attempt that started at or after the sheet went in progress already has its
            // row: the sheet is not running one but parked (a rate limit's wait, a fermata)
            // after it — or this interrupted one was recorded by an earlier start.
            let known: bool = self
                .conn
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM attempts WHERE job_id=?1 AND sheet_num=?2 \
                     AND executed_at>=?3)",
                )
                .and_then(|mut stmt| {
                    stmt.query_row(params![job_id, sheet_num, executed_at], |r| r.get(0))
                })
                .map_err(self.err(&ctx))?;
            if known {
                continue;
            }
            self.record_attempt(&AttemptRecord {
                job_id: job_id.to_string(),
                sheet_num,
                attempt_num,
                outcome: "interrupted".into(),
                instrument,
                executed_at,
                ..AttemptRecord::default()
            })?;
            recorded += 1;
        }
        Ok(recorded)
    }

    /// Attempt history of a job (optionally one sheet), newest first, at most `limit`.
    pub fn attempts(
        &self,
        job_id: &str,
        sheet: Option<u32>,
        limit: usize,
    ) -> Result<Vec<AttemptRecord>> {
        let ctx = format!("reading attempts of job '{job_id}'");
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, job_id, sheet_num, attempt_num, mode, outcome, instrument, error_code, \
                 error_category, error_message, exit_code, duration_seconds, cost_usd, \
                 input_tokens, output_tokens, prompt, output, executed_at FROM attempts \
                 WHERE job_id=?1 AND (?2 IS NULL OR sheet_num=?2) ORDER BY id DESC LIMIT ?3",
            )
            .map_err(self.err(&ctx))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![job_id, sheet, limit], |r| {
                Ok(AttemptRecord {
                    id: r.get(0)?,
                    job_id: r.get(1)?,
                    sheet_num: r.get(2)?,
                    attempt_num: r.get(3)?,
                    mode: r.get(4)?,
                    outcome: r.get(5)?,
                    instrument: r.get(6)?,
                    error_code: r.get(7)?,
                    error_category: r.get(8)?,
                    error_message: r.get(9)?,
                    exit_code: r.get(10)?,
                    duration_seconds: r.get(11)?,
                    cost_usd: r.get(12)?,
                    input_tokens: r.get(13)?,
                    output_tokens: r.get(14)?,
                    prompt: r.get(15)?,
                    output: r.get(16)?,
                    executed_at: r.get(17)?,
                })
            })
            .map_err(self.err(&ctx))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err(ctx))
    }

    /// How many attempts of job `job_id` (of sheet `sheet` only, when given) are recorded:
    /// the total `history` reports beside the newest ones it lists.
    pub fn count_attempts(&self, job_id: &str, sheet: Option<u32>) -> Result<u64> {
        let ctx = format!("counting attempts of job '{job_id}'");
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT COUNT(*) FROM attempts WHERE job_id=?1 AND (?2 IS NULL OR sheet_num=?2)",
            )
            .map_err(self.err(&ctx))?;
        let n: i64 = stmt
            .query_row(params![job_id, sheet], |r| r.get(0))
            .map_err(self.err(ctx))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Every sheet's failed attempts (those that recorded an error code or message), by
    /// sheet: at most the newest `per_sheet` of each, oldest first, with the count of older
    /// ones left out. What `job.errors` lists (the checkpoint keeps only each sheet's last
    /// error). Sheets without a failed attempt are absent. Only the attempts with an id
    /// above `after_attempt` count (a run's [`RunRecord::after_attempt`]; 0 for all).
    pub fn attempt_errors(
        &self,
        job_id: &str,
        per_sheet: usize,
        after_attempt: i64,
    ) -> Result<Vec<SheetAttemptErrors>> {
        let ctx = format!("reading the failed attempts of job '{job_id}'");
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT id, sheet_num, attempt_num, mode, outcome, instrument, error_code, \
                 error_category, error_message, exit_code, duration_seconds, cost_usd, \
                 input_tokens, output_tokens, output_tail, executed_at, total FROM ( \
                   SELECT id, sheet_num, attempt_num, mode, outcome, instrument, error_code, \
                   error_category, error_message, exit_code, duration_seconds, cost_usd, \
                   input_tokens, output_tokens, substr(output, -?3) AS output_tail, executed_at, \
                   ROW_NUMBER() OVER (PARTITION BY sheet_num ORDER BY id DESC) AS newest, \
                   COUNT(*) OVER (PARTITION BY sheet_num) AS total \
                   FROM attempts WHERE job_id=?1 AND id>?4 \
                   AND (error_code IS NOT NULL OR error_message IS NOT NULL)) \
                 WHERE newest <= ?2 ORDER BY sheet_num, id",
            )
            .map_err(self.err(&ctx))?;
        let per_sheet = i64::try_from(per_sheet).unwrap_or(i64::MAX);
        let tail = i64::try_from(ERROR_OUTPUT_TAIL_CHARS).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![job_id, per_sheet, tail, after_attempt], |r| {
                let total: i64 = r.get(16)?;
                Ok((
                    AttemptRecord {
                        cost_usd: r.get(11)?,
                        input_tokens: r.get(12)?,
                        output_tokens: r.get(13)?,
                        output: r.get(14)?,
                        executed_at: r.get(15)?,
                        ..attempt_summary(r, job_id)?
                    },
                    u64::try_from(total).unwrap_or(0),
                ))
            })
            .map_err(self.err(&ctx))?;
        let mut sheets: Vec<SheetAttemptErrors> = Vec::new();
        for row in rows {
            let (record, total) = row.map_err(self.err(&ctx))?;
            match sheets.last_mut() {
                Some(s) if s.sheet_num == record.sheet_num => s.attempts.push(record),
                _ => sheets.push(SheetAttemptErrors {
                    sheet_num: record.sheet_num,
                    attempts: vec![record],
                    omitted: total,
                }),
            }
        }
        for s in &mut sheets {
            s.omitted = s.omitted.saturating_sub(s.attempts.len() as u64);
        }
        Ok(sheets)
    }

    // ---------------------------------------------------------------- hooks

    /// Stores (or replaces) the result of hook `hook_index` of a job.
    pub fn record_hook_result(&self, job_id: &str, h: &HookResultRecord) -> Result<()> {
        insert_hook_result(&self.conn, job_id, h).map_err(self.err(format!(
            "recording hook {} result of job '{job_id}'",
            h.hook_index
        )))?;
        Ok(())
    }

    /// Replaces every hook result of a job with `results`, in one transaction (the results
    /// a resume of an edited score keeps, at the positions of the hooks they are now for).
    pub fn replace_hook_results(&self, job_id: &str, results: &[HookResultRecord]) -> Result<()> {
        let ctx = || format!("replacing the hook results of job '{job_id}'");
        let tx = self.begin("replace_hook_results")?;
        tx.execute("DELETE FROM hook_results WHERE job_id=?1", [job_id])
            .map_err(self.err_lazy(ctx))?;
        for h in results {
            insert_hook_result(&tx, job_id, h).map_err(self.err_lazy(ctx))?;
        }
        tx.commit().map_err(self.err_lazy(ctx))
    }

    /// Hook results of a job in hook order.
    pub fn hook_results(&self, job_id: &str) -> Result<Vec<HookResultRecord>> {
        let ctx = format!("reading hook results of job '{job_id}'");
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT hook_index, hook_type, description, success, output, error_message, \
                 exit_code, chained_job_id, started_at, finished_at, fingerprint FROM hook_results \
                 WHERE job_id=?1 ORDER BY hook_index",
            )
            .map_err(self.err(&ctx))?;
        let rows = stmt
            .query_map([job_id], |r| {
                Ok(HookResultRecord {
                    hook_index: r.get(0)?,
                    hook_type: r.get(1)?,
                    description: r.get(2)?,
                    success: r.get(3)?,
                    output: r.get(4)?,
                    error_message: r.get(5)?,
                    exit_code: r.get(6)?,
                    chained_job_id: r.get(7)?,
                    started_at: r.get(8)?,
                    finished_at: r.get(9)?,
                    fingerprint: r.get(10)?,
                })
            })
            .map_err(self.err(&ctx))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err(ctx))
    }

    /// Forgets a job's hook results (before its hooks run again).
    pub fn clear_hook_results(&self, job_id: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM hook_results WHERE job_id=?1", [job_id])
            .map_err(self.err(format!("clearing hook results of job '{job_id}'")))?;
        Ok(())
    }

    /// Removes the failed hook results of a job (the successful ones stay): what a resume
    /// of a job whose hooks failed runs again.
    pub fn clear_failed_hook_results(&self, job_id: &str) -> Result<()> {
        self.conn
            .execute(
                "DELETE FROM hook_results WHERE job_id=?1 AND NOT success",
                [job_id],
            )
            .map_err(self.err(format!("clearing failed hook results of job '{job_id}'")))?;
        Ok(())
    }

    /// Stores the score's `on_success` hooks so they survive a restart.
    pub fn set_hook_config(&self, job_id: &str, hooks: &Value) -> Result<()> {
        let n = self
            .conn
            .execute(
                "UPDATE jobs SET hook_config_json=?2, updated_at=?3 WHERE job_id=?1",
                params![job_id, hooks.to_string(), epoch_now()],
            )
            .map_err(self.err(format!("storing hook config of job '{job_id}'")))?;
        self.expect_row(n, job_id)
    }

    // ---------------------------------------------------------------- remote leftovers

    /// Notes that the files of a remote attempt in `dir` are to be removed: its result is
    /// saved (in the same transaction, when called inside [`Registry::batch`]), so no
    /// conductor will re-attach to it. Kept until [`Registry::forget_remote_leftovers`].
    pub fn note_remote_leftover(&self, dir: &str) -> Result<()> {
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO remote_leftovers (dir) VALUES (?1)")
            .and_then(|mut st| st.execute([dir]))
            .map_err(self.err("noting a finished remote attempt's files"))?;
        Ok(())
    }

    /// The remote attempts' directories whose removal is still owed.
    pub fn remote_leftovers(&self) -> Result<Vec<String>> {
        let read = || -> rusqlite::Result<Vec<String>> {
            let mut st = self.conn.prepare("SELECT dir FROM remote_leftovers")?;
            let rows = st.query_map([], |r| r.get(0))?;
            rows.collect()
        };
        read().map_err(self.err("reading the finished remote attempts' files"))
    }

    /// Forgets the removals of `dirs`: their files are gone.
    pub fn forget_remote_leftovers(&self, dirs: &[String]) -> Result<()> {
        for dir in dirs {
            self.conn
                .prepare_cached("DELETE FROM remote_leftovers WHERE dir = ?1")
                .and_then(|mut st| st.execute([dir]))
                .map_err(self.err("forgetting removed remote attempts' files"))?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------- rate limits

    /// Parks `instrument` until `until` (epoch seconds), the `streak`th rate limit in a row.
    /// Replaces any previous entry; the caller decides whether a shorter wait may shorten an
    /// existing one.
    pub fn set_rate_limit(
        &self,
        instrument: &str,
        until: f64,
        reason: Option<&str>,
        streak: u32,
    ) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO rate_limits (instrument, until, reason, recorded_at, streak) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(instrument) DO UPDATE SET \
                 until=excluded.until, reason=excluded.reason, \
                 recorded_at=excluded.recorded_at, streak=excluded.streak",
                params![instrument, until, reason, epoch_now(), streak],
            )
            .map_err(self.err(format!("storing rate limit of instrument '{instrument}'")))?;
        Ok(())
    }

    /// Removes one instrument's limit, or all when `None`, with every job's own wait on it;
    /// returns how many rows went (expired ones included, as upstream's `clear` counts them).
    pub fn clear_rate_limit(&self, instrument: Option<&str>) -> Result<usize> {
        let mut cleared = 0;
        for table in ["rate_limits", "job_rate_limits"] {
            cleared += self
                .conn
                .execute(
                    &format!("DELETE FROM {table} WHERE ?1 IS NULL OR instrument=?1"),
                    [instrument],
                )
                .map_err(self.err("clearing rate limits"))?;
        }
        Ok(cleared)
    }

    /// Holds `job_id`'s sheets on `instrument` until `until` (epoch seconds), the `streak`th
    /// rate limit in a row: a rate limit of an instrument whose limits hold one job only.
    /// Replaces the job's previous wait on it.
    pub fn set_job_rate_limit(
        &self,
        job_id: &str,
        instrument: &str,
        until: f64,
        reason: Option<&str>,
        streak: u32,
    ) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO job_rate_limits \
                 (job_id, instrument, until, reason, recorded_at, streak) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(job_id, instrument) DO UPDATE SET \
                 until=excluded.until, reason=excluded.reason, \
                 recorded_at=excluded.recorded_at, streak=excluded.streak",
                params![job_id, instrument, until, reason, epoch_now(), streak],
            )
            .map_err(self.err(format!(
                "storing the rate limit of job '{job_id}' on instrument '{instrument}'"
            )))?;
        Ok(())
    }

    /// Ends `job_id`'s own wait on `instrument`, or all of them when `None`.
    pub fn clear_job_rate_limit(&self, job_id: &str, instrument: Option<&str>) -> Result<()> {
        self.conn
            .execute(
                "DELETE FROM job_rate_limits WHERE job_id=?1 AND (?2 IS NULL OR instrument=?2)",
                params![job_id, instrument],
            )
            .map_err(self.err(format!("clearing the rate limits of job '{job_id}'")))?;
        Ok(())
    }

    /// `job_id`'s own waits still in force at `now`, soonest-expiring first.
    pub fn job_rate_limits(&self, job_id: &str, now: f64) -> Result<Vec<RateLimitRecord>> {
        self.job_waits(job_id, now, false)
    }

    /// `job_id`'s own waits still in force at `now`, and those that have ended in a run of
    /// limits that goes on (`streak` > 0: the retry after the wait has not answered yet),
    /// soonest-expiring first: what a restart restores.
    pub fn job_rate_limit_runs(&self, job_id: &str, now: f64) -> Result<Vec<RateLimitRecord>> {
        self.job_waits(job_id, now, true)
    }

    fn job_waits(&self, job_id: &str, now: f64, ended: bool) -> Result<Vec<RateLimitRecord>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT instrument, until, reason, recorded_at, streak FROM job_rate_limits \
                 WHERE job_id = ?1 AND (until > ?2 OR (?3 AND streak > 0)) ORDER BY until",
            )
            .map_err(self.err(format!("reading the rate limits of job '{job_id}'")))?;
        let rows = stmt
            .query_map(params![job_id, now, ended], |r| rate_limit_at(r, 0))
            .map_err(self.err(format!("reading the rate limits of job '{job_id}'")))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err(format!("reading the rate limits of job '{job_id}'")))
    }

    /// Every job's own waits still in force at `now`, with the job's id, soonest-expiring
    /// first.
    pub fn active_job_rate_limits(&self, now: f64) -> Result<Vec<(String, RateLimitRecord)>> {
        let ctx = "reading the jobs' rate limits";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT job_id, instrument, until, reason, recorded_at, streak FROM job_rate_limits \
                 WHERE until > ?1 ORDER BY until, job_id",
            )
            .map_err(self.err(ctx))?;
        let rows = stmt
            .query_map([now], |r| Ok((r.get(0)?, rate_limit_at(r, 1)?)))
            .map_err(self.err(ctx))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err(ctx))
    }

    /// Limits still in force at `now`, soonest-expiring first.
    pub fn active_rate_limits(&self, now: f64) -> Result<Vec<RateLimitRecord>> {
        self.instrument_waits(now, false)
    }

    /// Limits still in force at `now`, and those that have ended in a run of limits that
    /// goes on (`streak` > 0: the retry after the wait has not answered yet),
    /// soonest-expiring first: what a restart restores.
    pub fn rate_limit_runs(&self, now: f64) -> Result<Vec<RateLimitRecord>> {
        self.instrument_waits(now, true)
    }

    fn instrument_waits(&self, now: f64, ended: bool) -> Result<Vec<RateLimitRecord>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT instrument, until, reason, recorded_at, streak FROM rate_limits \
                 WHERE until > ?1 OR (?2 AND streak > 0) ORDER BY until",
            )
            .map_err(self.err("reading rate limits"))?;
        let rows = stmt
            .query_map(params![now, ended], |r| rate_limit_at(r, 0))
            .map_err(self.err("reading rate limits"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err("reading rate limits"))
    }

    // ---------------------------------------------------------------- health

    /// `PRAGMA quick_check` of the registry at `path`, opened read-only (`mozart doctor`):
    /// the problems SQLite lists, empty when it reports `ok`. An error when the file cannot
    /// be opened or read at all (see [`StateError::is_damaged`]).
    pub fn quick_check(path: &Path) -> Result<Vec<String>> {
        refuse_empty(path)?;
        let registry = Registry::open_reader(path)?;
        refuse_foreign(&registry.conn, path)?;
        let mut stmt = registry
            .conn
            .prepare("PRAGMA quick_check")
            .map_err(registry.err("checking the registry"))?;
        let lines = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(registry.err("checking the registry"))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(registry.err("checking the registry"))?;
        Ok(lines.into_iter().filter(|l| l != "ok").collect())
    }

    /// `PRAGMA integrity_check`: true when SQLite reports `ok`.
    pub fn integrity_check(&self) -> Result<bool> {
        let mut stmt = self
            .conn
            .prepare("PRAGMA integrity_check")
            .map_err(self.err("integrity check"))?;
        let lines = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(self.err("integrity check"))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err("integrity check"))?;
        if lines != ["ok"] {
            tracing::error!(path = %self.path.display(), problems = ?lines, "registry.integrity_failed");
        }
        Ok(lines == ["ok"])
    }
}

// ---------------------------------------------------------------- helpers

enum WriteError {
    Sql(rusqlite::Error),
    Json(String, &'static str, serde_json::Error),
}

impl From<rusqlite::Error> for WriteError {
    fn from(e: rusqlite::Error) -> Self {
        WriteError::Sql(e)
    }
}

/// An attempt from a row whose first eleven columns are `id, sheet_num, attempt_num, mode,
/// outcome, instrument, error_code, error_category, error_message, exit_code,
/// duration_seconds` (the summaries `errors`, `status` and `diagnose` read); the caller
/// takes the columns after them.
pub(super) fn attempt_summary(r: &Row<'_>, job_id: &str) -> rusqlite::Result<AttemptRecord> {
    Ok(AttemptRecord {
        id: r.get(0)?,
        job_id: job_id.to_string(),
        sheet_num: r.get(1)?,
        attempt_num: r.get(2)?,
        mode: r.get(3)?,
        outcome: r.get(4)?,
        instrument: r.get(5)?,
        error_code: r.get(6)?,
        error_category: r.get(7)?,
        error_message: r.get(8)?,
        exit_code: r.get(9)?,
        duration_seconds: r.get(10)?,
        ..AttemptRecord::default()
    })
}

fn placeholders(n: usize) -> String {
    vec!["?"; n].join(",")
}

/// Binds a JSON scalar as an SQL value (used for dynamically built filters).
struct JsonParam<'a>(&'a Value);

impl rusqlite::ToSql for JsonParam<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value as Sql};
        Ok(ToSqlOutput::Owned(match self.0 {
            Value::Null => Sql::Null,
            Value::Bool(b) => Sql::Integer(i64::from(*b)),
            Value::Number(n) => n
                .as_i64()
                .map(Sql::Integer)
                .unwrap_or_else(|| Sql::Real(n.as_f64().unwrap_or(0.0))),
            Value::String(s) => Sql::Text(s.clone()),
            other => Sql::Text(other.to_string()),
        }))
    }
}

fn job_params(job: &JobRecord) -> Vec<Box<dyn rusqlite::ToSql>> {
    vec![
        Box::new(job.job_id.clone()),
        Box::new(job.config_path.clone()),
        Box::new(job.workspace.clone()),
        Box::new(job.status.as_str()),
        Box::new(job.pid),
        Box::new(job.submitted_at),
        Box::new(job.started_at),
        Box::new(job.completed_at),
        Box::new(epoch_now()),
        Box::new(job.error_message.clone()),
        Box::new(job.error_traceback.clone()),
        Box::new(job.current_sheet),
        Box::new(job.total_sheets),
        Box::new(job.last_event_at),
        Box::new(job.log_path.clone()),
        Box::new(job.snapshot_path.clone()),
        Box::new(job.concert_id.clone()),
        Box::new(job.chain_depth),
        Box::new(job.parent_job_id.clone()),
        Box::new(job.concert_config.as_ref().map(Value::to_string)),
        Box::new(job.hook_config.as_ref().map(Value::to_string)),
        Box::new(job.completed_new_work),
        Box::new(Value::Object(job.options.clone()).to_string()),
    ]
}

fn as_refs(params: &[Box<dyn rusqlite::ToSql>]) -> Vec<&dyn rusqlite::ToSql> {
    params.iter().map(|b| b.as_ref()).collect()
}

/// Stores (or replaces) one hook result row.
fn insert_hook_result(
    conn: &Connection,
    job_id: &str,
    h: &HookResultRecord,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO hook_results (job_id, hook_index, hook_type, description, \
         success, output, error_message, exit_code, chained_job_id, started_at, finished_at, \
         fingerprint) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
    )?
    .execute(params![
        job_id,
        h.hook_index,
        h.hook_type,
        h.description,
        h.success,
        h.output,
        h.error_message,
        h.exit_code,
        h.chained_job_id,
        h.started_at,
        h.finished_at,
        h.fingerprint
    ])
}

fn upsert_job(tx: &Connection, job: &JobRecord) -> rusqlite::Result<usize> {
    let params = job_params(job);
    let refs = as_refs(&params);
    tx.execute(
        &format!(
            "INSERT INTO jobs ({JOB_COLUMNS}) VALUES \
             (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23) \
             ON CONFLICT(job_id) DO UPDATE SET config_path=excluded.config_path, \
             workspace=excluded.workspace, status=excluded.status, pid=excluded.pid, \
             submitted_at=excluded.submitted_at, started_at=excluded.started_at, \
             completed_at=excluded.completed_at, updated_at=excluded.updated_at, \
             error_message=excluded.error_message, error_traceback=excluded.error_traceback, \
             current_sheet=excluded.current_sheet, total_sheets=excluded.total_sheets, \
             last_event_at=excluded.last_event_at, log_path=excluded.log_path, \
             snapshot_path=excluded.snapshot_path, concert_id=excluded.concert_id, \
             chain_depth=excluded.chain_depth, parent_job_id=excluded.parent_job_id, \
             concert_config_json=excluded.concert_config_json, \
             hook_config_json=excluded.hook_config_json, \
             completed_new_work=excluded.completed_new_work, options_json=excluded.options_json"
        ),
        refs.as_slice(),
    )
}

fn write_score(tx: &Connection, job_id: &str, score: &JobScore) -> Result<(), WriteError> {
    tx.execute(
        "INSERT INTO job_scores (job_id, score_yaml, config_snapshot_json) VALUES (?1, ?2, ?3) \
         ON CONFLICT(job_id) DO UPDATE SET score_yaml=excluded.score_yaml, \
         config_snapshot_json=excluded.config_snapshot_json",
        params![
            job_id,
            score.yaml,
            score.snapshot.as_ref().map(crate::ConfigSnapshot::text)
        ],
    )?;
    Ok(())
}

/// Writes the job-level document; the number of job rows updated (0: the job is not
/// registered).
fn write_header(tx: &Connection, state: &CheckpointState, now: f64) -> Result<usize, WriteError> {
    let header = serde_json::to_string(&state.header())
        .map_err(|e| WriteError::Json(state.job_id.clone(), "checkpoint", e))?;
    let updated = tx
        .prepare_cached(
            "UPDATE jobs SET checkpoint_json=?2, current_sheet=?3, total_sheets=?4, \
         last_event_at=?5, updated_at=?5 WHERE job_id=?1",
        )?
        .execute(params![
            state.job_id,
            header,
            state.current_sheet,
            state.total_sheets,
            now
        ])?;
    Ok(updated)
}

/// A sheet's state document as the registry stores it: without its null and empty-list
/// fields, which loading gives back as their defaults (every field but `sheet_num` has one).
/// A sheet's document is ~60 fields, most of them null until something happens: 1.5 KB
/// written as is, ~0.2 KB without them — the bulk of a 100,000-sheet job's registry.
/// The JSON state file and the wire checkpoint keep upstream's whole document.
///
/// Fields the row keeps in columns of their own, which [`Registry::load_checkpoint`] lays
/// over the document, are left out of it too ([`COLUMN_FIELDS`]): the validation details
/// (the paths they name, twice each) were a third of a completed sheet's row.
///
/// Written straight to text ([`compact::to_string`]), not through a `Value` tree: one
/// sheet row per attempt's start and end, ~110 allocations each saved (issue 24).
fn compact_sheet_json(s: &SheetState) -> serde_json::Result<String> {
    compact::to_string(s, &COLUMN_FIELDS)
}

/// Sheet fields stored only in their own columns of the `sheets` row (see
/// [`compact_sheet_json`]); loading reads them from there.
const COLUMN_FIELDS: [&str; 7] = [
    "status",
    "started_at",
    "attempt_count",
    "completion_attempts",
    "healing_attempts",
    "instrument_name",
    "validation_details",
];

/// A registry file that is there but empty (0 bytes, nothing in a WAL beside it) holds no
/// registry: SQLite would take it as a new database, and `list` would say "No scores
/// found." of a home that had jobs. (A brand-new home has no file at all.)
fn refuse_empty(path: &Path) -> Result<()> {
    let len = |p: &Path| std::fs::metadata(p).ok().map(|m| m.len());
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if len(path) == Some(0) && len(Path::new(&wal)).unwrap_or(0) == 0 {
        return Err(StateError::NotARegistry {
            path: path.to_path_buf(),
            what: "the file is empty (0 bytes)".into(),
        });
    }
    Ok(())
}

/// A database of tables that are not the registry's (another program's, Mozart's learning
/// store copied over it) is refused, not migrated into: its tables would be kept, and the
/// jobs of the real registry silently gone. A database with no tables is a new registry.
fn refuse_foreign(conn: &Connection, path: &Path) -> Result<()> {
    let err = StateError::sqlite(path, "reading the registry's tables");
    let tables: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
             ORDER BY name",
        )
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .map_err(err)?;
    let has = |name: &str| tables.iter().any(|t| t == name);
    // `schema_migrations` is made first, alone: a start killed right then left only it.
    let ours =
        tables.is_empty() || (has("schema_migrations") && (has("jobs") || tables.len() == 1));
    if ours {
        return Ok(());
    }
    let mut shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
    if tables.len() > shown.len() {
        shown.push("…");
    }
    Err(StateError::NotARegistry {
        path: path.to_path_buf(),
        what: format!(
            "it is an SQLite database of other tables ({}), without the registry's jobs table",
            shown.join(", ")
        ),
    })
}

/// A rate limit from `r`'s columns `at..at + 5`: instrument, until, reason, recorded_at,
/// streak.
fn rate_limit_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<RateLimitRecord> {
    Ok(RateLimitRecord {
        instrument: r.get(at)?,
        until: r.get(at + 1)?,
        reason: r.get(at + 2)?,
        recorded_at: r.get(at + 3)?,
        streak: r.get(at + 4)?,
    })
}

/// Saves a sheet's row: updated in place when it exists (every sheet's row is written at
/// submission, so almost always), inserted otherwise. An `UPDATE` of the row costs SQLite
/// less than the `INSERT … ON CONFLICT DO UPDATE` it replaced, which built and checked the
/// row to insert before finding the conflict (issue 24: twice a sheet).
fn write_sheet(tx: &Connection, job_id: &str, s: &SheetState, now: f64) -> Result<(), WriteError> {
    let row = SheetRow::of(job_id, s, now)?;
    let mut stmt = tx.prepare_cached(
        "UPDATE sheets SET status=?3, attempt_count=?4, completion_attempts=?5, \
             healing_attempts=?6, started_at=?7, completed_at=?8, error_code=?9, \
             error_category=?10, error_message=?11, validation_passed=?12, \
             validation_details_json=?13, exit_code=?14, cost_usd=?15, input_tokens=?16, \
             output_tokens=?17, duration_seconds=?18, instrument_name=?19, state_json=?20, \
             updated_at=?21 WHERE job_id=?1 AND sheet_num=?2",
    )?;
    let updated = row.execute(&mut stmt, s)?;
    if updated == 0 {
        row.insert(tx, s)?;
    }
    Ok(())
}

/// Inserts a sheet's row, which must not exist (the job's rows were just deleted).
fn insert_sheet(tx: &Connection, job_id: &str, s: &SheetState, now: f64) -> Result<(), WriteError> {
    SheetRow::of(job_id, s, now)?.insert(tx, s)
}

/// The texts a sheet's row holds besides its columns of plain values.
struct SheetRow<'a> {
    job_id: &'a str,
    state_json: String,
    details: Option<String>,
    now: f64,
}

impl<'a> SheetRow<'a> {
    fn of(job_id: &'a str, s: &SheetState, now: f64) -> Result<Self, WriteError> {
        let json_err = |e| WriteError::Json(job_id.to_owned(), "sheet state", e);
        Ok(SheetRow {
            job_id,
            state_json: compact_sheet_json(s).map_err(json_err)?,
            details: s
                .validation_details
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(json_err)?,
            now,
        })
    }

    /// Executes `stmt` with the row's 21 values, in the order of the `sheets` columns both
    /// statements name.
    fn execute(
        &self,
        stmt: &mut rusqlite::Statement<'_>,
        s: &SheetState,
    ) -> rusqlite::Result<usize> {
        stmt.execute(params![
            self.job_id,
            s.sheet_num,
            s.status.as_str(),
            s.attempt_count,
            s.completion_attempts,
            s.healing_attempts,
            s.started_at.as_ref().map(|t| t.as_str()),
            s.completed_at.as_ref().map(|t| t.as_str()),
            s.error_code,
            s.error_category.map(|c| c.as_str()),
            s.error_message,
            s.validation_passed,
            self.details,
            s.exit_code,
            s.estimated_cost,
            s.input_tokens,
            s.output_tokens,
            s.execution_duration_seconds,
            s.instrument_name,
            self.state_json,
            self.now
        ])
    }

    fn insert(&self, tx: &Connection, s: &SheetState) -> Result<(), WriteError> {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO sheets (job_id, sheet_num, status, attempt_count, completion_attempts, \
             healing_attempts, started_at, completed_at, error_code, error_category, \
             error_message, validation_passed, validation_details_json, exit_code, cost_usd, \
             input_tokens, output_tokens, duration_seconds, instrument_name, state_json, \
             updated_at) \
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21)",
        )?;
        self.execute(&mut stmt, s)?;
        Ok(())
    }
}

/// A stored `config_snapshot_json`, kept as text (checked to be JSON).
fn parse_snapshot(job_id: &str, text: Option<String>) -> Result<Option<crate::ConfigSnapshot>> {
    text.map(|t| {
        crate::ConfigSnapshot::parse(t).map_err(|e| StateError::BadRow {
            job_id: job_id.to_owned(),
            column: "config_snapshot_json",
            reason: e.to_string(),
        })
    })
    .transpose()
}

fn parse_json_col(
    job_id: &str,
    column: &'static str,
    text: Option<String>,
) -> Result<Option<Value>> {
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| StateError::BadRow {
            job_id: job_id.to_owned(),
            column,
            reason: e.to_string(),
        })
    })
    .transpose()
}

/// A jobs row before its text columns are interpreted.
struct RawJob {
    job_id: String,
    config_path: String,
    workspace: String,
    status: String,
    pid: Option<u32>,
    submitted_at: f64,
    started_at: Option<f64>,
    completed_at: Option<f64>,
    updated_at: f64,
    error_message: Option<String>,
    error_traceback: Option<String>,
    current_sheet: Option<u32>,
    total_sheets: Option<u32>,
    last_event_at: Option<f64>,
    log_path: Option<String>,
    snapshot_path: Option<String>,
    concert_id: Option<String>,
    chain_depth: Option<u32>,
    parent_job_id: Option<String>,
    concert_config: Option<String>,
    hook_config: Option<String>,
    completed_new_work: bool,
    options: String,
}

impl RawJob {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<RawJob> {
        Ok(RawJob {
            job_id: r.get(0)?,
            config_path: r.get(1)?,
            workspace: r.get(2)?,
            status: r.get(3)?,
            pid: r.get(4)?,
            submitted_at: r.get(5)?,
            started_at: r.get(6)?,
            completed_at: r.get(7)?,
            updated_at: r.get(8)?,
            error_message: r.get(9)?,
            error_traceback: r.get(10)?,
            current_sheet: r.get(11)?,
            total_sheets: r.get(12)?,
            last_event_at: r.get(13)?,
            log_path: r.get(14)?,
            snapshot_path: r.get(15)?,
            concert_id: r.get(16)?,
            chain_depth: r.get(17)?,
            parent_job_id: r.get(18)?,
            concert_config: r.get(19)?,
            hook_config: r.get(20)?,
            completed_new_work: r.get(21)?,
            options: r.get(22)?,
        })
    }

    fn into_record(self) -> Result<JobRecord> {
        let status = DaemonJobStatus::parse(&self.status).ok_or_else(|| StateError::BadRow {
            job_id: self.job_id.clone(),
            column: "status",
            reason: format!("unknown status '{}'", self.status),
        })?;
        let options = match parse_json_col(&self.job_id, "options_json", Some(self.options))? {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        Ok(JobRecord {
            concert_config: parse_json_col(
                &self.job_id,
                "concert_config_json",
                self.concert_config,
            )?,
            hook_config: parse_json_col(&self.job_id, "hook_config_json", self.hook_config)?,
            job_id: self.job_id,
            config_path: self.config_path,
            workspace: self.workspace,
            status,
            pid: self.pid,
            submitted_at: self.submitted_at,
            started_at: self.started_at,
            completed_at: self.completed_at,
            updated_at: self.updated_at,
            error_message: self.error_message,
            error_traceback: self.error_traceback,
            current_sheet: self.current_sheet,
            total_sheets: self.total_sheets,
            last_event_at: self.last_event_at,
            log_path: self.log_path,
            snapshot_path: self.snapshot_path,
            concert_id: self.concert_id,
            chain_depth: self.chain_depth,
            parent_job_id: self.parent_job_id,
            completed_new_work: self.completed_new_work,
            options,
        })
    }
}

/// A write transaction: `BEGIN IMMEDIATE` at the top level, a savepoint inside
/// [`Registry::batch`]. Dropping it uncommitted rolls back only its own writes — except one
/// made by [`Tx::inside`], which takes nothing and leaves its statements to the batch.
struct Tx<'c> {
    conn: &'c Connection,
    nested: bool,
    done: bool,
}

impl<'c> Tx<'c> {
    /// No transaction of its own: its writes belong to the enclosing one
    /// ([`Registry::begin_single`]).
    fn inside(conn: &'c Connection) -> Self {
        Tx {
            conn,
            nested: true,
            done: true,
        }
    }

    fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        // IMMEDIATE: take the write lock at BEGIN so the transaction cannot fail halfway
        // with SQLITE_BUSY on lock upgrade.
        let nested = !conn.is_autocommit();
        conn.prepare_cached(if nested {
            "SAVEPOINT mozart_write"
        } else {
            "BEGIN IMMEDIATE"
        })?
        .execute([])?;
        Ok(Tx {
            conn,
            nested,
            done: false,
        })
    }

    fn commit(mut self) -> rusqlite::Result<()> {
        if self.done {
            return Ok(()); // `Tx::inside`: the enclosing transaction commits
        }
        self.done = true;
        let sql = if self.nested {
            "RELEASE mozart_write"
        } else {
            "COMMIT"
        };
        let result = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([]))
            .map(|_| ());
        if result.is_err() {
            self.rollback();
        }
        result
    }

    fn rollback(&self) {
        let sql = if self.nested {
            "ROLLBACK TO mozart_write; RELEASE mozart_write"
        } else {
            "ROLLBACK"
        };
        // A failed rollback leaves SQLite to roll back on its own (it does when the
        // transaction cannot continue); nothing more can be done here.
        let _ = self.conn.execute_batch(sql);
    }
}

impl std::ops::Deref for Tx<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.rollback();
        }
    }
}

/// The columns [`sheet_from_row`] reads, in its order.
pub(super) const SHEET_ROW_COLUMNS: &str = "sheet_num, state_json, status, started_at, \
     attempt_count, completion_attempts, healing_attempts, instrument_name, \
     validation_details_json";

/// Why a sheet row could not be read.
pub(super) enum SheetRowError {
    /// SQLite could not give a column.
    Sql(rusqlite::Error),
    /// The row's content is not a sheet.
    Corrupt(StateError),
}

impl From<rusqlite::Error> for SheetRowError {
    fn from(e: rusqlite::Error) -> Self {
        SheetRowError::Sql(e)
    }
}

/// One sheet from a row of [`SHEET_ROW_COLUMNS`]: the compact document with the columns
/// laid over it. The columns a started sheet updates on their own (`save_sheet_started`)
/// are newer than or equal to the document's copies, and the compact document leaves the
/// validation details to their column (rows written before it carry them in both).
pub(super) fn sheet_from_row(
    r: &Row<'_>,
    job_id: &str,
) -> std::result::Result<SheetState, SheetRowError> {
    let num: u32 = r.get(0)?;
    let corrupt = |reason: String| {
        SheetRowError::Corrupt(StateError::CorruptCheckpoint {
            job_id: job_id.to_owned(),
            reason: format!("sheet {num}: {reason}"),
        })
    };
    let text: String = r.get(1)?;
    let mut sheet: SheetState = serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?;
    let status: String = r.get(2)?;
    sheet.status =
        SheetStatus::parse(&status).ok_or_else(|| corrupt(format!("unknown status '{status}'")))?;
    sheet.started_at = r.get::<_, Option<String>>(3)?.map(Timestamp::from_raw);
    sheet.attempt_count = r.get(4)?;
    sheet.completion_attempts = r.get(5)?;
    sheet.healing_attempts = r.get(6)?;
    sheet.instrument_name = r.get(7)?;
    sheet.validation_details = r
        .get::<_, Option<String>>(8)?
        .map(|d| serde_json::from_str(&d))
        .transpose()
        .map_err(|e| corrupt(format!("validation details: {e}")))?;
    Ok(sheet)
}
