//! The store handle: one SQLite connection behind a mutex, opened with upstream's settings.
//!
//! Upstream opens a connection per operation; one long-lived connection is equivalent for
//! readers in other processes (WAL, 30 s busy timeout) and avoids re-running the pragmas.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::Connection;

use crate::error::{LearningError, Result};
use crate::schema;
use crate::time::Now;

/// Handle on the global learning database. Cheap to share behind an `Arc`; every method
/// takes `&self` and returns a `Result`, never panics.
#[derive(Debug)]
pub struct LearningStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    fixed_now: Option<jiff::Timestamp>,
}

impl LearningStore {
    /// Opens (creating directory, file and schema as needed) the learning DB at `path`.
    /// A corrupt file or a foreign SQLite database is refused with a named error.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let mut conn = schema::open_connection(&path)?;
        schema::migrate(&mut conn, &path).map_err(|e| reclassify(e, &path))?;
        Ok(LearningStore {
            path,
            conn: Mutex::new(conn),
            fixed_now: None,
        })
    }

    /// Freezes the store's clock (deterministic tests and replays of recorded outcomes).
    pub fn with_fixed_time(mut self, now: jiff::Timestamp) -> Self {
        self.fixed_now = Some(now);
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
            Some(ts) => Now::fixed(ts),
            None => Now::system(),
        }
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
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T> {
        let mut conn = self.lock()?;
        let run = |conn: &mut Connection| -> rusqlite::Result<T> {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        };
        run(&mut conn).map_err(|source| self.sql_error(operation(), source))
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
pub(crate) fn new_row_id() -> String {
    uuid::Uuid::new_v4().to_string()
}
