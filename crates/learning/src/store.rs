//! The store handle: one SQLite connection behind a mutex, opened with upstream's settings.
//!
//! Upstream opens a connection per operation; one long-lived connection is equivalent for
//! readers in other processes (WAL, 30 s busy timeout) and avoids re-running the pragmas.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::cache::{CachedPatterns, CachedSelection, PatternsVersion};
use crate::error::{LearningError, Result};
use crate::patterns::PendingPattern;
use crate::schema;
use crate::time::Now;

/// Handle on the global learning database. Cheap to share behind an `Arc`; every method
/// takes `&self` and returns a `Result`, never panics.
#[derive(Debug)]
pub struct LearningStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    fixed_now: Option<jiff::Timestamp>,
    /// The system time zone, looked up once: naive local timestamps (§2.1) are written per
    /// sheet, and Python likewise reads the zone once per process.
    time_zone: jiff::tz::TimeZone,
    /// Results of pattern queries, valid while the patterns table is unchanged (see
    /// [`PatternsVersion`]); every sheet's prompt asks the same few queries.
    pub(crate) pattern_cache: Mutex<HashMap<String, CachedPatterns>>,
    /// Job and workspace hashes already computed (§5): every sheet of a job stores the same
    /// two, and the workspace's one costs a path resolution (a syscall per component).
    identities: Mutex<Identities>,
    /// This connection's changes to `patterns`.
    changes: Arc<PatternChanges>,
    /// The last `data_version` read, and when.
    data_version_seen: Mutex<Option<(i64, Instant)>>,
    /// How often `data_version` is read for prompts.
    foreign_write_staleness: Duration,
    /// Finished selections per prompt query (see the `select` module).
    pub(crate) prompt_cache: Mutex<Vec<CachedSelection>>,
    /// While a [`LearningStore::batch`] is open: the patterns its applications counted,
    /// written at its commit (see [`crate::patterns::PendingPattern`]). Locked after the
    /// connection, never before it.
    pending_patterns: Mutex<Option<HashMap<String, PendingPattern>>>,
}

/// Remembered [`crate::hash_job`] / [`crate::hash_workspace`] results, bounded.
#[derive(Debug, Default)]
struct Identities {
    jobs: HashMap<String, String>,
    workspaces: HashMap<PathBuf, String>,
}

/// Most identities remembered of each kind; a conductor running for days starts over.
const IDENTITY_CACHE_LIMIT: usize = 256;

/// How long a prompt's pattern selection may miss another process's write, by default:
/// `data_version` is read at most this often for prompts (each read is a read transaction).
pub const FOREIGN_WRITE_STALENESS: Duration = Duration::from_millis(50);

/// Changes this connection made to `patterns`, counted by SQLite hooks: no statement is
/// needed to learn that nothing changed.
#[derive(Debug, Default)]
struct PatternChanges {
    /// Rows inserted or deleted, and transactions rolled back (which may undo anything).
    rows: AtomicU64,
    /// Rows updated.
    updates: AtomicU64,
}

/// Installs the hooks behind [`PatternChanges`]. The counters only grow, so a change that a
/// savepoint later undoes still moves the version (one needless re-query, never a stale
/// answer). SQLite skips the update hook for a `DELETE FROM patterns` without `WHERE`
/// (its truncate shortcut); no code here issues one.
fn install_change_hooks(conn: &Connection, changes: &Arc<PatternChanges>) {
    let on_change = changes.clone();
    conn.update_hook(Some(
        move |action: rusqlite::hooks::Action, _db: &str, table: &str, _rowid: i64| {
            if table == "patterns" {
                let counter = if action == rusqlite::hooks::Action::SQLITE_UPDATE {
                    &on_change.updates
                } else {
                    &on_change.rows
                };
                counter.fetch_add(1, Ordering::Release);
            }
        },
    ));
    let on_rollback = changes.clone();
    conn.rollback_hook(Some(move || {
        on_rollback.rows.fetch_add(1, Ordering::Release);
    }));
}

/// `conn.execute` through the statement cache (the per-sheet statements are parsed once).
pub(crate) fn exec(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute(params)
}

/// `conn.query_row` through the statement cache.
pub(crate) fn query_one<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.prepare_cached(sql)?.query_row(params, f)
}

impl LearningStore {
    /// Opens (creating directory, file and schema as needed) the learning DB at `path`.
    /// A corrupt file or a foreign SQLite database is refused with a named error.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let mut conn = schema::open_connection(&path)?;
        schema::migrate(&mut conn, &path).map_err(|e| reclassify(e, &path))?;
        let changes = Arc::new(PatternChanges::default());
        install_change_hooks(&conn, &changes);
        Ok(LearningStore {
            path,
            conn: Mutex::new(conn),
            fixed_now: None,
            time_zone: jiff::tz::TimeZone::system(),
            pattern_cache: Mutex::new(HashMap::new()),
            identities: Mutex::default(),
            changes,
            data_version_seen: Mutex::new(None),
            foreign_write_staleness: FOREIGN_WRITE_STALENESS,
            prompt_cache: Mutex::default(),
            pending_patterns: Mutex::default(),
        })
    }

    /// `PRAGMA quick_check` of the store at `path`, opened read-only (`mozart doctor`): the
    /// problems SQLite lists, empty when it reports `ok`. An error when the file cannot be
    /// opened or read at all (damaged header, not a database).
    pub fn quick_check(path: impl AsRef<Path>) -> Result<Vec<String>> {
        let path = path.as_ref();
        let not_db = |source| LearningError::NotADatabase {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(not_db)?;
        conn.busy_timeout(schema::BUSY_TIMEOUT).map_err(not_db)?;
        let lines = conn
            .prepare("PRAGMA quick_check")
            .and_then(|mut stmt| {
                stmt.query_map([], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(not_db)?;
        Ok(lines.into_iter().filter(|l| l != "ok").collect())
    }

    /// Freezes the store's clock (deterministic tests and replays of recorded outcomes).
    pub fn with_fixed_time(mut self, now: jiff::Timestamp) -> Self {
        self.fixed_now = Some(now);
        self
    }

    /// Sets how long a prompt's pattern selection may miss another process's write
    /// (default [`FOREIGN_WRITE_STALENESS`]; zero reads `data_version` for every prompt).
    pub fn with_foreign_write_staleness(mut self, staleness: Duration) -> Self {
        self.foreign_write_staleness = staleness;
        self
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version stored in the file.
    pub fn schema_version(&self) -> Result<u32> {
        let conn = self.lock()?;
        schema::current_version(&conn, &self.path)
    }

    pub(crate) fn now(&self) -> Now {
        match self.fixed_now {
            Some(ts) => Now::fixed_in(ts, &self.time_zone),
            None => Now::system_in(&self.time_zone),
        }
    }

    /// The current [`PatternsVersion`], or `None` when it cannot be known (no caching then).
    pub(crate) fn patterns_version(&self, conn: &Connection) -> Option<PatternsVersion> {
        let data: i64 = conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .ok()?;
        if let Ok(mut seen) = self.data_version_seen.lock() {
            *seen = Some((data, Instant::now()));
        }
        Some(self.version_with(data))
    }

    /// [`LearningStore::patterns_version`], except that `data_version` (which only another
    /// process's commit moves) is read at most every [`FOREIGN_WRITE_STALENESS`]: each
    /// read is a read transaction, two lock syscalls, and a prompt is built per sheet.
    /// This connection's own changes are always seen at once.
    pub(crate) fn recent_patterns_version(&self) -> Option<PatternsVersion> {
        if let Some(known) = self.known_patterns_version() {
            return Some(known);
        }
        let conn = self.lock().ok()?;
        self.patterns_version(&conn)
    }

    /// [`LearningStore::recent_patterns_version`] without waiting: from memory, or read here
    /// when the connection is free (a read transaction, microseconds); `None` only when the
    /// connection is busy — the outcome writer's batch — and the version is not known.
    ///
    /// A prompt is built on the way from one sheet's end to the next one's spawn: sending
    /// the read to the blocking pool instead (a thread hand-off, a new thread when the pool
    /// was idle) held up one sheet in ten of a sequential job by up to 6 ms (issue 24).
    pub(crate) fn ready_patterns_version(&self) -> Option<PatternsVersion> {
        if let Some(known) = self.known_patterns_version() {
            return Some(known);
        }
        let conn = self.conn.try_lock().ok()?;
        self.patterns_version(&conn)
    }

    /// [`LearningStore::recent_patterns_version`] if it needs no statement, else `None`.
    pub(crate) fn known_patterns_version(&self) -> Option<PatternsVersion> {
        let seen = *self.data_version_seen.lock().ok()?;
        let (data, at) = seen?;
        (at.elapsed() < self.foreign_write_staleness).then(|| self.version_with(data))
    }

    fn version_with(&self, data: i64) -> PatternsVersion {
        PatternsVersion {
            data,
            rows: self.changes.rows.load(Ordering::Acquire),
            updates: self.changes.updates.load(Ordering::Acquire),
        }
    }

    /// [`crate::hash_job`] of `job_id`, computed once per job.
    pub(crate) fn job_hash(&self, job_id: &str) -> String {
        let Ok(mut ids) = self.identities.lock() else {
            return crate::hash::hash_job(job_id);
        };
        if let Some(h) = ids.jobs.get(job_id) {
            return h.clone();
        }
        let h = crate::hash::hash_job(job_id);
        if ids.jobs.len() >= IDENTITY_CACHE_LIMIT {
            ids.jobs.clear();
        }
        ids.jobs.insert(job_id.to_string(), h.clone());
        h
    }

    /// [`crate::hash_workspace`] of `path`, resolved once per workspace. A path that does
    /// not resolve yet is hashed again next time (it may exist by then).
    pub(crate) fn workspace_hash(&self, path: &Path) -> String {
        if let Ok(ids) = self.identities.lock() {
            if let Some(h) = ids.workspaces.get(path) {
                return h.clone();
            }
        }
        let (h, resolved) = crate::hash::hash_workspace_resolving(path);
        if resolved {
            if let Ok(mut ids) = self.identities.lock() {
                if ids.workspaces.len() >= IDENTITY_CACHE_LIMIT {
                    ids.workspaces.clear();
                }
                ids.workspaces.insert(path.to_path_buf(), h.clone());
            }
        }
        h
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Connection>> {
        self.conn.lock().map_err(|_| LearningError::Poisoned {
            path: self.path.clone(),
        })
    }

    /// Runs `f` on the connection; SQLite errors are wrapped with `operation`.
    pub(crate) fn read<T>(
        &self,
        operation: impl FnOnce() -> String,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T> {
        let conn = self.lock()?;
        f(&conn).map_err(|source| self.sql_error(operation(), source))
    }

    /// Runs `f` inside one IMMEDIATE transaction; rolled back on error.
    pub(crate) fn write<T>(
        &self,
        operation: impl FnOnce() -> String,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T> {
        self.write_with(operation, f, true)
    }

    /// [`LearningStore::write`] of a pattern application, which inside a batch leaves the
    /// patterns it counted to the batch's commit (every other write writes them first, so
    /// that it reads and changes the rows as they stand).
    pub(crate) fn write_application<T>(
        &self,
        operation: impl FnOnce() -> String,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T> {
        self.write_with(operation, f, false)
    }

    fn write_with<T>(
        &self,
        operation: impl FnOnce() -> String,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
        flush_patterns: bool,
    ) -> Result<T> {
        let conn = self.lock()?;
        if flush_patterns {
            self.write_pending_patterns(&conn);
        }
        // Inside [`LearningStore::batch`] a write is a savepoint of the batch's transaction.
        let nested = !conn.is_autocommit();
        let (begin, commit, rollback) = if nested {
            (
                "SAVEPOINT learning_write",
                "RELEASE learning_write",
                "ROLLBACK TO learning_write; RELEASE learning_write",
            )
        } else {
            ("BEGIN IMMEDIATE", "COMMIT", "ROLLBACK")
        };
        let exec = |conn: &Connection, sql: &str| -> rusqlite::Result<()> {
            conn.prepare_cached(sql)?.execute([]).map(|_| ())
        };
        let run = |conn: &Connection| -> rusqlite::Result<T> {
            exec(conn, begin)?;
            match f(conn).and_then(|out| exec(conn, commit).map(|()| out)) {
                Ok(out) => Ok(out),
                Err(e) => {
                    let _ = conn.execute_batch(rollback);
                    Err(e)
                }
            }
        };
        run(&conn).map_err(|source| self.sql_error(operation(), source))
    }

    /// [`LearningStore::write`] for an `f` that changes the database with one statement
    /// (reads around it are fine). Inside a [`LearningStore::batch`] it needs no savepoint
    /// of its own: a failed statement undoes only itself. That is two statements fewer per
    /// sheet outcome.
    pub(crate) fn write_one<T>(
        &self,
        operation: impl FnOnce() -> String,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T> {
        let conn = self.lock()?;
        if conn.is_autocommit() {
            drop(conn);
            return self.write(operation, f);
        }
        f(&conn).map_err(|source| self.sql_error(operation(), source))
    }

    /// Runs `f` with every write it makes through this store in one transaction (one commit
    /// for many sheet outcomes); each write keeps its own savepoint, so a failed one loses
    /// only itself. Other threads' writes in the meantime join the same transaction.
    pub fn batch<T>(&self, f: impl FnOnce(&LearningStore) -> T) -> Result<T> {
        {
            let conn = self.lock()?;
            if !conn.is_autocommit() {
                // Already inside a batch (another thread's): its commit covers ours.
                drop(conn);
                return Ok(f(self));
            }
            // Through the statement cache: a batch per few sheets should not parse these.
            exec(&conn, "BEGIN IMMEDIATE", [])
                .map_err(|source| self.sql_error("beginning a batch".into(), source))?;
            *self.pending_patterns() = Some(HashMap::new());
        }
        let out = f(self);
        let conn = match self.lock() {
            Ok(conn) => conn,
            Err(e) => {
                self.pending_patterns().take();
                return Err(e);
            }
        };
        self.write_pending_patterns(&conn);
        self.pending_patterns().take();
        if let Err(source) = exec(&conn, "COMMIT", []) {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(self.sql_error("committing a batch".into(), source));
        }
        Ok(out)
    }

    /// Writes the patterns the open batch's applications counted so far, each once (on
    /// `conn`, held by the caller: the lock order is connection, then pending patterns).
    fn write_pending_patterns(&self, conn: &Connection) {
        let pending = match self.pending_patterns().as_mut() {
            Some(pending) if !pending.is_empty() => std::mem::take(pending),
            _ => return,
        };
        for (pattern_id, p) in &pending {
            if let Err(e) = crate::patterns::write_pending_tx(conn, pattern_id, p) {
                tracing::warn!(pattern_id = %pattern_id, error = %e,
                    "learning: cannot update the pattern's counters");
            }
        }
    }

    /// The patterns an open batch's applications counted (`None` outside a batch).
    pub(crate) fn pending_patterns(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<HashMap<String, PendingPattern>>> {
        self.pending_patterns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn sql_error(&self, operation: String, source: rusqlite::Error) -> LearningError {
        if schema::is_not_a_database(&source) {
            LearningError::NotADatabase {
                path: self.path.clone(),
                source,
            }
        } else {
            LearningError::Sqlite {
                path: self.path.clone(),
                operation,
                source,
            }
        }
    }
}

/// A damaged file can pass the header check and fail later, inside a migration step.
fn reclassify(err: LearningError, path: &Path) -> LearningError {
    match err {
        LearningError::Migration { source, .. } | LearningError::Sqlite { source, .. }
            if schema::is_not_a_database(&source) =>
        {
            LearningError::NotADatabase {
                path: path.to_path_buf(),
                source,
            }
        }
        other => other,
    }
}

/// A fresh UUID4 string for row ids (§2.1).
/// A fresh row id: a UUID as upstream's, but time-ordered (version 7) rather than random
/// (version 4), so each insert lands at the end of the tables' primary-key indexes — one page
/// written per batch of outcomes — instead of on a random page of an index that grows with
/// every sheet ever run (a page read and a page written per outcome once the store is
/// larger than its cache).
pub(crate) fn new_row_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[cfg(test)]
mod row_id_tests {
    #[test]
    fn row_ids_are_uuids_in_the_order_they_were_made() {
        let ids: Vec<String> = (0..200).map(|_| super::new_row_id()).collect();
        for id in &ids {
            assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
        }
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(
            sorted, ids,
            "ids must sort in creation order (appends to the index)"
        );
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn counter_updates_may_be_a_second_late_new_rows_and_other_writers_never() {
        let v = |data, rows, updates| PatternsVersion {
            data,
            rows,
            updates,
        };
        let now = Instant::now();
        let old = now.checked_sub(Duration::from_secs(2)).unwrap_or(now);
        assert!(v(1, 1, 1).still_valid(now, &v(1, 1, 1)));
        assert!(
            v(1, 1, 1).still_valid(now, &v(1, 1, 5)),
            "fresh answer, counters moved"
        );
        if old < now {
            assert!(
                !v(1, 1, 1).still_valid(old, &v(1, 1, 5)),
                "older than a second"
            );
            assert!(v(1, 1, 1).still_valid(old, &v(1, 1, 1)), "nothing changed");
        }
        assert!(
            !v(1, 1, 1).still_valid(now, &v(1, 2, 1)),
            "a pattern was added"
        );
        assert!(
            !v(1, 1, 1).still_valid(now, &v(2, 1, 1)),
            "another connection wrote"
        );
    }
}
