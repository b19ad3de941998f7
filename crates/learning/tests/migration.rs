//! A database written by an earlier build keeps working: the fixture is the schema-15
//! database as the store wrote it before issue 12 moved the crate's modules around (tables,
//! indexes and rows), loaded into a real SQLite file and opened with the current code.
#![allow(clippy::unwrap_used)] // tests may unwrap (common.md rule 5)

use std::path::Path;

use mozart_learning::{
    ContextTags, LearningStore, PatternQuery, SelectionConfig, SheetOutcome, SheetStatus,
    ValidationCheck, XorShift64, SCHEMA_VERSION,
};
use rusqlite::Connection;

const FIXTURE: &str = include_str!("fixtures/learning-schema-v15.sql");

fn count(db: &Path, sql: &str) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

fn fixture_db(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("global-learning.db");
    Connection::open(&db)
        .unwrap()
        .execute_batch(FIXTURE)
        .unwrap();
    db
}

#[test]
fn todays_database_opens_with_its_rows_intact() {
    let dir = tempfile::tempdir().unwrap();
    let db = fixture_db(dir.path());
    let store = LearningStore::open(&db).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM schema_version"), 1);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM executions"), 6);

    let patterns = store.patterns(20).unwrap();
    assert_eq!(patterns.len(), 6, "{patterns:?}");
    let applied = patterns
        .iter()
        .find(|p| p.pattern_name == "report not written")
        .expect("the fixture's hand-recorded pattern");
    let record = store.get_pattern(&applied.id).unwrap().unwrap();
    assert_eq!(
        (record.led_to_success_count, record.led_to_failure_count),
        (3, 1)
    );
    let tagged = store
        .get_patterns(&PatternQuery {
            context_tags: Some(vec!["validation:file_exists".into()]),
            ..PatternQuery::default()
        })
        .unwrap();
    assert!(tagged.iter().any(|p| p.id == applied.id), "{tagged:?}");
}

#[test]
fn todays_database_takes_new_outcomes_and_knows_its_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    let db = fixture_db(dir.path());
    let store = LearningStore::open(&db).unwrap();

    // Sheet 3 of the fixture's job, reported again after a restart: the row the earlier
    // build wrote is found, not duplicated.
    let mut replay = SheetOutcome::new("fixture-job", 3, "/tmp/fixture-ws");
    replay.status = SheetStatus::Completed;
    replay.attempts = 1;
    replay.validation_pass_rate = Some(1.0);
    replay.finished_at_epoch = 1_763_632_803.0;
    replay.validations = vec![ValidationCheck {
        rule_type: "file_exists".into(),
        passed: true,
        ..ValidationCheck::default()
    }];
    store.record_sheet_outcome(&replay).unwrap();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM executions"), 6);

    let mut fresh = replay.clone();
    fresh.job_id = "next-job".into();
    fresh.applied_patterns = store
        .patterns_for_prompt(
            &ContextTags::for_validations(&["file_exists"]),
            &SelectionConfig::default(),
            &mut XorShift64::new(7),
        )
        .unwrap()
        .pattern_ids();
    store.record_sheet_outcome(&fresh).unwrap();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM executions"), 7);
    drop(store);

    // And the database still opens afterwards.
    let again = LearningStore::open(&db).unwrap();
    assert_eq!(again.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(again.patterns(20).unwrap().len(), 6);
}
