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
}

/// Every migration, in order. Append only; never edit a shipped file.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_initial",
        sql: include_str!("../migrations/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "0002_small_hot_rows",
        sql: include_str!("../migrations/0002_small_hot_rows.sql"),
    },
];

/// Highest schema version this build knows.
pub const SCHEMA_VERSION: u32 = 2;

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
