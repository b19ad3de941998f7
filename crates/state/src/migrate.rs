//! Versioned schema migrations: SQL files embedded at build time, applied in order, each in
//! its own transaction together with the row that records it.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{Result, StateError};
use crate::time::epoch_now;

/// One migration file.
struct Migration {
    version: u32,
    name: &'static str,
    sql: &'static str,
    /// A step SQL alone cannot say, run after `sql` in the same transaction.
    code: Option<fn(&rusqlite::Transaction<'_>) -> rusqlite::Result<()>>,
}

/// Every migration, in order. Append only; never edit a shipped file.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_initial",
        sql: include_str!("../migrations/0001_initial.sql"),
        code: None,
    },
    Migration {
        version: 2,
        name: "0002_small_hot_rows",
        sql: include_str!("../migrations/0002_small_hot_rows.sql"),
        code: None,
    },
    Migration {
        version: 3,
        name: "0003_status_checks_without_in_lists",
        sql: "",
        code: Some(status_checks_without_in_lists),
    },
    Migration {
        version: 4,
        name: "0004_failed_attempts_index",
        sql: include_str!("../migrations/0004_failed_attempts_index.sql"),
        code: None,
    },
    Migration {
        version: 5,
        name: "0005_job_rate_limits",
        sql: include_str!("../migrations/0005_job_rate_limits.sql"),
        code: None,
    },
    Migration {
        version: 6,
        name: "0006_job_runs",
        sql: include_str!("../migrations/0006_job_runs.sql"),
        code: None,
    },
    Migration {
        version: 7,
        name: "0007_remote_leftovers",
        sql: include_str!("../migrations/0007_remote_leftovers.sql"),
        code: None,
    },
    Migration {
        version: 8,
        name: "0008_rate_limit_streak",
        sql: include_str!("../migrations/0008_rate_limit_streak.sql"),
        code: None,
    },
    Migration {
        version: 9,
        name: "0009_hook_fingerprint",
        sql: include_str!("../migrations/0009_hook_fingerprint.sql"),
        code: None,
    },
];

/// Highest schema version this build knows.
pub const SCHEMA_VERSION: u32 = 9;

/// The `status` CHECK constraints of `jobs` and `sheets` as an `IN (…)` list, and the same
/// test as a chain of comparisons.
const STATUS_CHECKS: [(&str, &str, &str); 2] = [
    (
        "jobs",
        "CHECK (status IN ('queued','running','completed','paused','failed','cancelled','pending'))",
        "CHECK (status = 'queued' OR status = 'running' OR status = 'completed' OR \
         status = 'paused' OR status = 'failed' OR status = 'cancelled' OR status = 'pending')",
    ),
    (
        "sheets",
        "CHECK (status IN ('pending','in_progress','completed','failed','skipped'))",
        "CHECK (status = 'pending' OR status = 'in_progress' OR status = 'completed' OR \
         status = 'failed' OR status = 'skipped')",
    ),
];

/// Schema 3: SQLite evaluates a CHECK's `IN (…)` list of constants by building a temporary
/// b-tree of its values on every INSERT and UPDATE of the row — a page allocated, zeroed,
/// filled and freed, twice for each of the two rows (`jobs`, `sheets`) every sheet
/// transition writes (issue 24: ~5 % of the conductor's instructions per sheet). The same
/// test written as `=` comparisons costs a few VDBE steps. The constraint is the same
/// set of values, so no row changes: the table definitions are edited in place, the way
/// SQLite documents for changing CHECK constraints (lang_altertable.html §7: writable
/// schema, schema cookie incremented), not rebuilt — a registry of millions of sheet rows
/// migrates at once, and `jobs`, which other tables reference, is never dropped.
fn status_checks_without_in_lists(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    let cookie: i64 = tx.query_row("PRAGMA schema_version", [], |r| r.get(0))?;
    tx.execute_batch("PRAGMA writable_schema = ON")?;
    let edited = (|| {
        for (table, from, to) in STATUS_CHECKS {
            let changed = tx.execute(
                "UPDATE sqlite_schema SET sql = replace(sql, ?2, ?3) \
                 WHERE type = 'table' AND name = ?1 AND instr(sql, ?2) > 0",
                rusqlite::params![table, from, to],
            )?;
            if changed != 1 {
                // A registry whose table reads otherwise (edited by hand?) keeps its
                // definition: the constraint is only slower, never wrong.
                tracing::warn!(
                    table,
                    "registry: status CHECK not in the expected form; left as it is"
                );
            }
        }
        tx.pragma_update(None, "schema_version", cookie + 1)
    })();
    tx.execute_batch("PRAGMA writable_schema = OFF")?;
    edited
}

/// Brings the database up to [`SCHEMA_VERSION`]; a no-op on an up-to-date database.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<u32> {
    let sql_err = |operation: &str| StateError::sqlite(path, operation.to_owned());
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    INTEGER PRIMARY KEY NOT NULL,
             name       TEXT NOT NULL,
             applied_at REAL NOT NULL
         );",
    )
    .map_err(sql_err("creating schema_migrations"))?;
    let current: u32 = conn
        .query_row("SELECT MAX(version) FROM schema_migrations", [], |r| {
            r.get::<_, Option<u32>>(0)
        })
        .optional()
        .map_err(sql_err("reading schema version"))?
        .flatten()
        .unwrap_or(0);
    if current > SCHEMA_VERSION {
        return Err(StateError::SchemaTooNew {
            path: path.to_path_buf(),
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > current) {
        let wrap = |source| StateError::Migration {
            path: path.to_path_buf(),
            version: m.version,
            name: m.name,
            source,
        };
        // IMMEDIATE takes the write lock up front, so two processes opening a fresh
        // database cannot both apply the same migration.
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(wrap)?;
        let already: bool = tx
            .query_row(
                "SELECT EXISTS(SELECT 1 FROM schema_migrations WHERE version = ?1)",
                [m.version],
                |r| r.get(0),
            )
            .map_err(wrap)?;
        if already {
            continue;
        }
        tx.execute_batch(m.sql).map_err(wrap)?;
        if let Some(code) = m.code {
            code(&tx).map_err(wrap)?;
        }
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
            params![m.version, m.name, epoch_now()],
        )
        .map_err(wrap)?;
        tx.commit().map_err(wrap)?;
        tracing::info!(version = m.version, name = m.name, "registry.migrated");
    }
    Ok(SCHEMA_VERSION)
}
