//! Opening a learning database and bringing it to schema version 15 (learning.md §4).
//!
//! Fresh databases get the whole schema from `migrations/0015_schema.sql`. Upstream databases
//! older than 15 first get the conditional upgrades upstream applies (missing columns, the
//! v11/v12 column renames, the v13 priority repair, the v15 foreign-key drop), all in one
//! transaction. A database already at 15 or newer is left untouched, as upstream does.

use std::path::Path;

use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use crate::error::{LearningError, Result};

/// Schema version this build writes (upstream `SCHEMA_VERSION`).
pub const SCHEMA_VERSION: u32 = 15;

const SCHEMA_SQL: &str = include_str!("../migrations/0015_schema.sql");
const PRIORITY_REPAIR_SQL: &str = include_str!("../migrations/0013_priority_repair.sql");
const DROP_APPLICATION_FKS_SQL: &str =
    include_str!("../migrations/0015_applications_without_fk.sql");

/// Longest wait for another process's write lock.
pub const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The 12 data tables (plus `schema_version`) of §3; used to tell our DB from a foreign one.
pub(crate) const DATA_TABLES: &[&str] = &[
    "executions",
    "patterns",
    "pattern_applications",
    "error_recoveries",
    "workspace_clusters",
    "rate_limit_events",
    "escalation_decisions",
    "pattern_discovery_events",
    "evolution_trajectory",
    "exploration_budget",
    "entropy_responses",
    "pattern_entropy_history",
];

/// Columns added over upstream versions 10–14, for tables that predate them (§4 step 2a).
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    ("patterns", "quarantine_status", "TEXT DEFAULT 'pending'"),
    ("patterns", "provenance_job_hash", "TEXT"),
    ("patterns", "provenance_sheet_num", "INTEGER"),
    ("patterns", "quarantined_at", "TIMESTAMP"),
    ("patterns", "validated_at", "TIMESTAMP"),
    ("patterns", "quarantine_reason", "TEXT"),
    ("patterns", "trust_score", "REAL DEFAULT 0.5"),
    ("patterns", "trust_calculation_date", "TIMESTAMP"),
    ("patterns", "success_factors", "TEXT"),
    ("patterns", "success_factors_updated_at", "TIMESTAMP"),
    ("patterns", "active", "INTEGER DEFAULT 1"),
    ("patterns", "content_hash", "TEXT"),
    ("patterns", "instrument_name", "TEXT"),
    ("pattern_applications", "grounding_confidence", "REAL"),
];

/// Column renames of v11 and v12 (§4 step 2b).
const RENAMED_COLUMNS: &[(&str, &str, &str)] = &[
    (
        "pattern_applications",
        "outcome_improved",
        "pattern_led_to_success",
    ),
    (
        "executions",
        "first_attempt_success",
        "success_without_retry",
    ),
];

/// Opens (creating if needed) the database file with upstream's connection settings (§2):
/// WAL journal and foreign keys on. Upstream waits up to 30 s for a busy database; we give
/// up after [`BUSY_TIMEOUT`] because a learning write must never hold up a job for long —
/// the caller logs the error and the job goes on.
pub(crate) fn open_connection(path: &Path) -> Result<Connection> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| LearningError::CreateDir {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let not_db = |source| LearningError::NotADatabase {
        path: path.to_path_buf(),
        source,
    };
    let conn = Connection::open(path).map_err(not_db)?;
    // The first statement that reads the file is where a corrupt or foreign file shows up.
    conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))
        .map_err(not_db)?;
    // WAL with synchronous=NORMAL: a commit survives the conductor being killed, and only a
    // power loss can take the last outcomes back. Upstream's default (FULL) fsyncs on every
    // commit, and the learning store commits after every sheet — a sync the next sheet's
    // pattern selection waited behind.
    // A 512 KiB page cache (SQLite's default is 2 MiB per connection): the conductor's
    // writes touch recent pages, and a conductor running for days should not grow by it.
    conn.execute_batch(
        "PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-512;",
    )
    .map_err(not_db)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(not_db)?;
    // Query-planner stability: without it SQLite marks a cached statement whose `LIMIT ?`
    // (or a comparison the planner looked at) reads a bound parameter, and re-parses and
    // re-plans it on every rebind — each pattern query was prepared anew (issue 24). The
    // answers are the same; only the plan no longer adapts to the bound values.
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map_err(not_db)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// Reads the stored schema version; a missing or empty `schema_version` table is 0.
pub(crate) fn current_version(conn: &Connection, path: &Path) -> Result<u32> {
    if !table_exists(conn, "schema_version").map_err(|source| LearningError::NotADatabase {
        path: path.to_path_buf(),
        source,
    })? {
        return Ok(0);
    }
    let v: Option<i64> = conn
        .query_row("SELECT version FROM schema_version LIMIT 1", [], |r| {
            r.get(0)
        })
        .optional()
        .map_err(|source| LearningError::Sqlite {
            path: path.to_path_buf(),
            operation: "reading schema_version".into(),
            source,
        })?;
    Ok(v.map(|v| u32::try_from(v).unwrap_or(0)).unwrap_or(0))
}

/// Brings the database to [`SCHEMA_VERSION`] if it is older; returns the version it is at.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<u32> {
    let current = current_version(conn, path)?;
    if current >= SCHEMA_VERSION {
        if current > SCHEMA_VERSION {
            // Upstream leaves newer databases alone and keeps using them (§4 step 3).
            tracing::warn!(path = %path.display(), found = current, supported = SCHEMA_VERSION,
                "learning.schema_newer_than_supported");
        }
        return Ok(current);
    }
    refuse_foreign(conn, path)?;
    let step_err = |step: String| {
        let path = path.to_path_buf();
        move |source| LearningError::Migration {
            path,
            version: SCHEMA_VERSION,
            step,
            source,
        }
    };
    // IMMEDIATE: two processes opening a fresh DB must not both run the upgrade.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(step_err("begin".into()))?;
    for (table, column, decl) in ADDED_COLUMNS {
        if table_exists(&tx, table).map_err(step_err(format!("inspect {table}")))?
            && !column_exists(&tx, table, column).map_err(step_err(format!("inspect {table}")))?
        {
            tx.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"))
                .map_err(step_err(format!("add column {table}.{column}")))?;
        }
    }
    for (table, old, new) in RENAMED_COLUMNS {
        let exists = |c: &str| column_exists(&tx, table, c);
        if exists(old).map_err(step_err(format!("inspect {table}")))?
            && !exists(new).map_err(step_err(format!("inspect {table}")))?
        {
            tx.execute_batch(&format!("ALTER TABLE {table} RENAME COLUMN {old} TO {new}"))
                .map_err(step_err(format!("rename {table}.{old} to {new}")))?;
        }
    }
    if current < 13 && table_exists(&tx, "patterns").map_err(step_err("inspect patterns".into()))? {
        tx.execute_batch(PRIORITY_REPAIR_SQL)
            .map_err(step_err("v13 priority repair".into()))?;
    }
    if table_exists(&tx, "pattern_applications")
        .map_err(step_err("inspect pattern_applications".into()))?
    {
        let fk_count: i64 = tx
            .query_row(
                "SELECT COUNT(*) FROM pragma_foreign_key_list('pattern_applications')",
                [],
                |r| r.get(0),
            )
            .map_err(step_err("inspect pattern_applications foreign keys".into()))?;
        if fk_count > 0 {
            tx.execute_batch(DROP_APPLICATION_FKS_SQL)
                .map_err(step_err(
                    "v15 drop pattern_applications foreign keys".into(),
                ))?;
        }
    }
    tx.execute_batch(SCHEMA_SQL)
        .map_err(step_err("create tables and indexes".into()))?;
    tx.commit().map_err(step_err("commit".into()))?;
    tracing::info!(path = %path.display(), from = current, to = SCHEMA_VERSION, "learning.schema_migrated");
    Ok(SCHEMA_VERSION)
}

/// A database below our version whose tables (besides a `schema_version` of its own) are
/// none of ours belongs to something else (the job registry, say); adding 13 tables to it
/// would be vandalism.
fn refuse_foreign(conn: &Connection, path: &Path) -> Result<()> {
    let tables: Vec<String> = (|| {
        let mut stmt = conn.prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
        )?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    })()
    .map_err(|source| LearningError::NotADatabase {
        path: path.to_path_buf(),
        source,
    })?;
    let others: Vec<&String> = tables.iter().filter(|t| *t != "schema_version").collect();
    if !others.is_empty() && !others.iter().any(|t| DATA_TABLES.contains(&t.as_str())) {
        return Err(LearningError::ForeignDatabase {
            path: path.to_path_buf(),
            tables,
        });
    }
    Ok(())
}

fn table_exists(conn: &Connection, table: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
        [table],
        |r| r.get(0),
    )
}

fn column_exists(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)",
        [table, column],
        |r| r.get(0),
    )
}

/// True when SQLite reported that the file is not a database.
pub(crate) fn is_not_a_database(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
    )
}
