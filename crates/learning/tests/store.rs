//! Black-box tests of the learning store on real SQLite files.
#![allow(clippy::unwrap_used)] // tests may unwrap (common.md rule 5)

use std::path::Path;

use mozart_learning::{
    ContextTags, JobOutcome, LearningError, LearningStore, PatternApplication, PatternDraft,
    PatternQuery, QuarantineStatus, SelectionConfig, SheetOutcome, SheetStatus, ValidationCheck,
    XorShift64, SCHEMA_VERSION,
};
use rusqlite::Connection;

fn count(db: &Path, sql: &str) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

fn completed(job: &str, sheet: u32, attempts: u32) -> SheetOutcome {
    let mut o = SheetOutcome::new(job, sheet, "/tmp/ws");
    o.status = SheetStatus::Completed;
    o.attempts = attempts;
    o.validation_pass_rate = Some(1.0);
    o.validations = vec![ValidationCheck {
        rule_type: "file_exists".into(),
        passed: true,
        ..ValidationCheck::default()
    }];
    o
}

fn failed(job: &str, sheet: u32) -> SheetOutcome {
    let mut o = SheetOutcome::new(job, sheet, "/tmp/ws");
    o.status = SheetStatus::Failed;
    o.attempts = 3;
    o.validation_pass_rate = Some(0.0);
    o.error_codes = vec!["E006".into(), "E006".into()];
    o.validations = vec![ValidationCheck {
        rule_type: "file_exists".into(),
        passed: false,
        failure_reason: Some("File not created: report.md".into()),
        failure_category: Some("missing".into()),
        ..ValidationCheck::default()
    }];
    o
}

#[test]
fn schema_is_created_with_13_tables_and_30_indexes_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("nested/home/global-learning.db");
    let store = LearningStore::open(&db).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    store
        .record_pattern(&PatternDraft {
            pattern_type: "validation_failure".into(),
            pattern_name: "x".into(),
            ..PatternDraft::default()
        })
        .unwrap();
    drop(store);
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
        ),
        13
    );
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM sqlite_master WHERE type='index' AND name LIKE 'idx_%'"
        ),
        30
    );
    assert_eq!(count(&db, "SELECT version FROM schema_version"), 15);
    let journal: String = Connection::open(&db)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(journal, "wal");
    let store = LearningStore::open(&db).unwrap();
    assert_eq!(store.patterns(10).unwrap().len(), 1);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM schema_version"), 1);
}

#[test]
fn corrupt_and_foreign_files_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.db");
    std::fs::write(
        &junk,
        b"this is definitely not an sqlite file, just some text. ".repeat(200),
    )
    .unwrap();
    let err = LearningStore::open(&junk).unwrap_err();
    assert!(matches!(err, LearningError::NotADatabase { .. }), "{err:?}");
    assert!(err.to_string().contains("junk.db"), "{err}");

    let foreign = dir.path().join("registry.db");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch(
            "CREATE TABLE jobs (job_id TEXT PRIMARY KEY); INSERT INTO jobs VALUES ('a');",
        )
        .unwrap();
    let err = LearningStore::open(&foreign).unwrap_err();
    match &err {
        LearningError::ForeignDatabase { tables, .. } => assert_eq!(tables, &["jobs"]),
        other => panic!("expected ForeignDatabase, got {other:?}"),
    }
    // Refusing must not have touched the foreign DB.
    assert_eq!(
        count(
            &foreign,
            "SELECT COUNT(*) FROM sqlite_master WHERE type='table'"
        ),
        1
    );
}

#[test]
fn legacy_upstream_database_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    // A v10-era shape: old column names, no v14 columns, FK on applications.
    Connection::open(&db)
        .unwrap()
        .execute_batch(
            "CREATE TABLE schema_version (version INTEGER PRIMARY KEY);
             INSERT INTO schema_version VALUES (10);
             CREATE TABLE executions (id TEXT PRIMARY KEY, workspace_hash TEXT NOT NULL,
                 job_hash TEXT NOT NULL, sheet_num INTEGER NOT NULL, started_at TIMESTAMP,
                 completed_at TIMESTAMP, duration_seconds REAL, status TEXT,
                 retry_count INTEGER DEFAULT 0, first_attempt_success BOOLEAN,
                 validation_pass_rate REAL, confidence_score REAL, model TEXT, error_codes TEXT);
             CREATE TABLE patterns (id TEXT PRIMARY KEY, pattern_type TEXT NOT NULL,
                 pattern_name TEXT NOT NULL, description TEXT, occurrence_count INTEGER DEFAULT 1,
                 first_seen TIMESTAMP, last_seen TIMESTAMP, last_confirmed TIMESTAMP,
                 led_to_success_count INTEGER DEFAULT 0, led_to_failure_count INTEGER DEFAULT 0,
                 effectiveness_score REAL DEFAULT 0.5, variance REAL DEFAULT 0.0,
                 suggested_action TEXT, context_tags TEXT, priority_score REAL DEFAULT 0.5);
             CREATE TABLE pattern_applications (id TEXT PRIMARY KEY,
                 pattern_id TEXT REFERENCES patterns(id), execution_id TEXT REFERENCES executions(id),
                 applied_at TIMESTAMP, outcome_improved BOOLEAN, retry_count_before INTEGER,
                 retry_count_after INTEGER);
             INSERT INTO patterns (id, pattern_type, pattern_name, priority_score, context_tags)
                 VALUES ('abcdabcdabcdabcd', 'validation_failure', 'legacy', 0.1, '[\"validation:file_exists\"]');
             INSERT INTO executions (id, workspace_hash, job_hash, sheet_num, first_attempt_success)
                 VALUES ('e1', 'w', 'j', 1, 1);
             INSERT INTO pattern_applications VALUES ('a1', 'abcdabcdabcdabcd', 'e1', '2024-01-01T00:00:00', 1, 0, 0);",
        )
        .unwrap();
    let store = LearningStore::open(&db).unwrap();
    assert_eq!(store.schema_version().unwrap(), 15);
    let p = store.get_pattern("abcdabcdabcdabcd").unwrap().unwrap();
    // v13 repair lifted the never-applied pattern's priority; new columns read as defaults.
    assert_eq!(p.priority_score, 0.5);
    assert_eq!(p.quarantine_status, QuarantineStatus::Pending);
    assert_eq!(p.trust_score, 0.5);
    assert!(p.active);
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM pragma_foreign_key_list('pattern_applications')"
        ),
        0
    );
    assert_eq!(
        count(
            &db,
            "SELECT pattern_led_to_success FROM pattern_applications"
        ),
        1
    );
    assert_eq!(
        count(&db, "SELECT success_without_retry FROM executions"),
        1
    );
}

#[test]
fn sheet_and_job_outcomes_are_recorded_once_and_patterns_detected() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let store = LearningStore::open(&db).unwrap();
    let mut sheets = vec![
        failed("job-a", 1),
        failed("job-a", 2),
        completed("job-a", 3, 1),
        completed("job-a", 4, 1),
        completed("job-a", 5, 1),
        completed("job-a", 6, 2),
        completed("job-a", 7, 3),
    ];
    for (i, s) in sheets.iter_mut().enumerate() {
        s.finished_at_epoch = 1_700_000_000.0 + i as f64;
    }
    store.record_sheet_outcome(&sheets[0]).unwrap();
    let job = JobOutcome {
        job_id: "job-a".into(),
        sheets: sheets.clone(),
        instrument: Some("claude-code".into()),
    };
    let summary = store.record_job_outcome(&job).unwrap();
    assert_eq!(summary.outcomes_recorded, 6, "sheet 1 was already recorded");
    assert!(summary.patterns_detected >= 6, "{summary:?}");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM executions"), 7);
    // A resumed job reporting the same sheets again writes no duplicate rows.
    assert_eq!(store.record_job_outcome(&job).unwrap().outcomes_recorded, 0);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM executions"), 7);
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM executions WHERE success_without_retry = 1"
        ),
        3
    );
    let codes: String = Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT error_codes FROM executions WHERE sheet_num = 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(codes, r#"["E006","E006"]"#);

    let all = store
        .get_patterns(&PatternQuery {
            min_priority: 0.0,
            limit: 100,
            ..Default::default()
        })
        .unwrap();
    let names: Vec<&str> = all.iter().map(|p| p.pattern_name.as_str()).collect();
    for expected in [
        "validation_failure:validation:file_exists",
        "retry_success:retry:effective",
        "first_attempt_success:success:first_attempt",
        "semantic_failure:failure_category:missing",
        "semantic_failure:failure_reason:file not created",
        "validation_failure:error_code:E006",
        "validation_failure:error_category:E00x",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    // Detected twice (two job-end aggregations) → one row, occurrence 2.
    let v = all
        .iter()
        .find(|p| p.pattern_name == "validation_failure:validation:file_exists")
        .unwrap();
    assert_eq!(v.occurrence_count, 2);
    assert_eq!(v.instrument_name.as_deref(), Some("claude-code"));
    assert_eq!(
        v.suggested_action.as_deref(),
        Some("⚠️ Common issue: 'file_exists' validation tends to fail (seen 2x)")
    );
}

#[test]
fn record_pattern_merges_by_normalized_name_and_content_hash() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let store = LearningStore::open(&db).unwrap();
    let draft = |name: &str, desc: Option<&str>, tags: Vec<&str>| PatternDraft {
        pattern_type: "semantic_insight".into(),
        pattern_name: name.into(),
        description: desc.map(String::from),
        context_tags: tags.into_iter().map(String::from).collect(),
        ..PatternDraft::default()
    };
    let a = store
        .record_pattern(&draft("File  Not Created", Some("first"), vec!["t1"]))
        .unwrap();
    let b = store
        .record_pattern(&draft("file not created", None, vec![]))
        .unwrap();
    assert_eq!(a, b);
    let p = store.get_pattern(&a).unwrap().unwrap();
    assert_eq!(p.occurrence_count, 2);
    assert_eq!(
        p.description.as_deref(),
        Some("first"),
        "COALESCE keeps the old description"
    );
    assert!(p.context_tags.is_empty(), "re-detection overwrites tags");
    assert_eq!(
        p.pattern_name, "File  Not Created",
        "the stored name is not normalized"
    );

    // A legacy row whose id was computed differently is found by content hash.
    let hash = mozart_learning::content_hash("semantic_insight", "legacy thing", Some("d"));
    Connection::open(&db)
        .unwrap()
        .execute(
            "INSERT INTO patterns (id, pattern_type, pattern_name, description, content_hash, active)
             VALUES ('legacy-id', 'semantic_insight', 'Legacy Thing', 'd', ?1, 0)",
            [hash],
        )
        .unwrap();
    let c = store
        .record_pattern(&draft("legacy thing", Some("d"), vec![]))
        .unwrap();
    // The new id does not exist, so the content-hash match wins and reactivates the row.
    assert_eq!(c, "legacy-id");
    let legacy = store.get_pattern("legacy-id").unwrap().unwrap();
    assert!(legacy.active);
    assert_eq!(legacy.occurrence_count, 2);
}

fn seed_pattern(
    store: &LearningStore,
    name: &str,
    tag: &str,
    successes: u32,
    failures: u32,
) -> String {
    let id = store
        .record_pattern(&PatternDraft {
            pattern_type: "validation_failure".into(),
            pattern_name: name.into(),
            description: Some(format!("{name} tends to fail")),
            context_tags: vec![tag.into()],
            ..PatternDraft::default()
        })
        .unwrap();
    for i in 0..successes + failures {
        store
            .record_pattern_application(&PatternApplication {
                pattern_id: id.clone(),
                execution_id: format!("sheet_{i}"),
                led_to_success: i < successes,
                retry_count_before: 0,
                retry_count_after: 0,
                grounding_confidence: None,
            })
            .unwrap();
    }
    id
}

#[test]
fn applications_drive_effectiveness_lifecycle_and_trust() {
    let dir = tempfile::tempdir().unwrap();
    let store = LearningStore::open(dir.path().join("l.db")).unwrap();
    let good = seed_pattern(&store, "good", "validation:file_exists", 3, 0);
    let bad = seed_pattern(&store, "bad", "validation:file_exists", 0, 3);
    let meh = seed_pattern(&store, "meh", "validation:file_exists", 1, 1);
    let g = store.get_pattern(&good).unwrap().unwrap();
    assert!((g.effectiveness_score - 0.9625).abs() < 1e-6);
    assert!((g.priority_score - 0.5775).abs() < 1e-6);
    let m = store.get_pattern(&meh).unwrap().unwrap();
    assert!(
        (m.effectiveness_score - 0.55).abs() < 1e-9,
        "cold start below 3 applications"
    );

    assert_eq!(
        store
            .record_pattern_application(&PatternApplication {
                pattern_id: "local:1:0".into(),
                execution_id: "sheet_1".into(),
                led_to_success: true,
                retry_count_before: 0,
                retry_count_after: 0,
                grounding_confidence: None,
            })
            .unwrap(),
        None,
        "unknown ids write nothing"
    );

    let report = store.maintain_after_job().unwrap();
    assert_eq!(report.promoted, vec![good.clone()]);
    assert_eq!(report.quarantined, vec![bad.clone()]);
    assert!(report.degraded.is_empty());
    let g = store.get_pattern(&good).unwrap().unwrap();
    assert_eq!(g.quarantine_status, QuarantineStatus::Validated);
    assert!(g.validated_at.is_some());
    // s=3, occ=1 → success_rate capped at 1: 0.5 + 0.3 + 0.2 + 0.1 (validated) = 1.0.
    assert!((g.trust_score - 1.0).abs() < 1e-9, "{}", g.trust_score);
    let b = store.get_pattern(&bad).unwrap().unwrap();
    assert_eq!(b.quarantine_status, QuarantineStatus::Quarantined);
    assert_eq!(
        store.get_pattern(&meh).unwrap().unwrap().quarantine_status,
        QuarantineStatus::Pending
    );

    // Degradation: a validated pattern that starts failing is quarantined again.
    for i in 0..6 {
        store
            .record_pattern_application(&PatternApplication {
                pattern_id: good.clone(),
                execution_id: format!("later_{i}"),
                led_to_success: false,
                retry_count_before: 0,
                retry_count_after: 1,
                grounding_confidence: None,
            })
            .unwrap();
    }
    let report = store.promote_ready_patterns().unwrap();
    assert_eq!(report.degraded, vec![good.clone()]);

    // Manual transitions.
    assert!(store.validate_pattern(&bad).unwrap());
    assert!(store.retire_pattern(&meh).unwrap());
    assert!(!store.retire_pattern("nope").unwrap());
    assert_eq!(
        store.get_pattern(&meh).unwrap().unwrap().quarantine_status,
        QuarantineStatus::Retired
    );
    assert!(store.quarantine_pattern(&bad, Some("hand")).unwrap());
    assert_eq!(
        store
            .get_pattern(&bad)
            .unwrap()
            .unwrap()
            .quarantine_reason
            .as_deref(),
        Some("hand")
    );
}

#[test]
fn selection_is_deterministic_excludes_quarantined_and_renders_the_section() {
    let dir = tempfile::tempdir().unwrap();
    let store = LearningStore::open(dir.path().join("l.db")).unwrap();
    let good = seed_pattern(&store, "good", "validation:file_exists", 3, 0);
    let other = seed_pattern(&store, "other", "validation:command_succeeds", 3, 0);
    let bad = seed_pattern(&store, "bad", "validation:file_exists", 3, 0);
    store.quarantine_pattern(&bad, None).unwrap();
    let tags = ContextTags::for_validations(&["file_exists"]);
    let cfg = SelectionConfig::default();

    let run = |seed| {
        let mut rng = XorShift64::new(seed);
        (0..20)
            .map(|_| store.patterns_for_prompt(&tags, &cfg, &mut rng).unwrap())
            .collect::<Vec<_>>()
    };
    let first = run(7);
    assert_eq!(first, run(7), "same seed, same choices");
    for sel in &first {
        let ids = sel.pattern_ids();
        assert_eq!(
            ids,
            vec![good.clone()],
            "tag match only, quarantined excluded: {sel:?}"
        );
    }
    let section = first[0].prompt_section().unwrap();
    assert!(section.starts_with("## Learned Patterns\n\nBased on previous executions"));
    assert!(
        section.contains("1. ✓ good tends to fail (seen 1x, 96% effective)"),
        "{section}"
    );

    // Without a tag match the query falls back to the best pattern of any tag.
    let fallback = store
        .patterns_for_prompt(
            &ContextTags::for_validations(&["regex"]),
            &cfg,
            &mut XorShift64::new(1),
        )
        .unwrap();
    assert_eq!(fallback.pattern_ids().len(), 2);
    assert!(fallback.pattern_ids().contains(&other));

    // Exploration (epsilon 1.0) reaches low-priority patterns exploitation never shows.
    let low = seed_pattern(&store, "rare", "validation:file_exists", 0, 0);
    Connection::open(store.path())
        .unwrap()
        .execute(
            "UPDATE patterns SET priority_score = 0.1 WHERE id = ?1",
            [&low],
        )
        .unwrap();
    let exploit = store
        .patterns_for_prompt(&tags, &cfg, &mut XorShift64::new(3))
        .unwrap();
    assert!(!exploit.pattern_ids().contains(&low));
    let explore_cfg = SelectionConfig {
        exploration_rate: 1.0,
        ..SelectionConfig::default()
    };
    let explore = store
        .patterns_for_prompt(&tags, &explore_cfg, &mut XorShift64::new(3))
        .unwrap();
    assert!(explore.pattern_ids().contains(&low));
    assert!(explore
        .patterns
        .iter()
        .any(|p| p.pattern_id == low && p.exploration));
}

#[test]
fn sheet_feedback_updates_applied_patterns() {
    let dir = tempfile::tempdir().unwrap();
    let store = LearningStore::open(dir.path().join("l.db")).unwrap();
    let id = seed_pattern(&store, "p", "validation:file_exists", 0, 0);
    let mut ok = completed("job-b", 1, 1);
    ok.applied_patterns = vec![id.clone()];
    store.record_sheet_outcome(&ok).unwrap();
    let mut retried = completed("job-b", 2, 2);
    retried.applied_patterns = vec![id.clone()];
    store.record_sheet_outcome(&retried).unwrap();
    let mut skipped = completed("job-b", 3, 1);
    skipped.status = SheetStatus::Skipped;
    skipped.applied_patterns = vec![id.clone()];
    store.record_sheet_outcome(&skipped).unwrap();
    let p = store.get_pattern(&id).unwrap().unwrap();
    assert_eq!(p.led_to_success_count, 1);
    assert_eq!(
        p.led_to_failure_count, 1,
        "a success after a retry counts against the pattern"
    );
    let factors = p.success_factors.unwrap();
    assert_eq!(
        factors["validation_types"],
        serde_json::json!(["file_exists"])
    );
    assert_eq!(factors["occurrence_count"], 1);
}

/// A pattern's row as applications leave it: counters, confirmation, scores and factors.
fn pattern_row(db: &Path, id: &str) -> Vec<Option<String>> {
    Connection::open(db)
        .unwrap()
        .query_row(
            "SELECT CAST(led_to_success_count AS TEXT), CAST(led_to_failure_count AS TEXT),
                    last_confirmed, CAST(effectiveness_score AS TEXT),
                    CAST(priority_score AS TEXT), success_factors, success_factors_updated_at
               FROM patterns WHERE id = ?1",
            [id],
            |r| (0..7).map(|i| r.get(i)).collect(),
        )
        .unwrap()
}

#[test]
fn a_batch_leaves_every_pattern_as_the_same_outcomes_recorded_one_by_one_do() {
    // A batch writes each pattern's row once, at its commit, instead of once an
    // application: the row must end as sheet-by-sheet recording leaves it.
    let fixed: jiff::Timestamp = "2024-05-01T12:00:00Z".parse().unwrap();
    let outcomes = |job: &str, ids: &[String]| -> Vec<SheetOutcome> {
        let mut v = vec![
            completed(job, 1, 1),
            failed(job, 2),
            completed(job, 3, 2),
            completed(job, 4, 1),
            failed(job, 5),
        ];
        v[3].validations.push(ValidationCheck {
            rule_type: "command_succeeds".into(),
            passed: true,
            ..ValidationCheck::default()
        });
        for (i, o) in v.iter_mut().enumerate() {
            // Pattern p on every sheet, q on the odd ones, r only on failures.
            o.applied_patterns = vec![ids[0].clone()];
            if i % 2 == 0 {
                o.applied_patterns.push(ids[1].clone());
            }
            if o.status == SheetStatus::Failed {
                o.applied_patterns.push(ids[2].clone());
            }
        }
        v
    };
    let dir = tempfile::tempdir().unwrap();
    let mut rows = Vec::new();
    for batched in [false, true] {
        let db = dir.path().join(format!("l-{batched}.db"));
        let store = LearningStore::open(&db).unwrap().with_fixed_time(fixed);
        let ids = vec![
            seed_pattern(&store, "p", "validation:file_exists", 2, 1),
            seed_pattern(&store, "q", "validation:file_exists", 0, 0),
            seed_pattern(&store, "r", "validation:file_exists", 1, 0),
        ];
        let list = outcomes("job-eq", &ids);
        if batched {
            store
                .batch(|s| {
                    for o in &list {
                        s.record_sheet_outcome(o).unwrap();
                    }
                })
                .unwrap();
        } else {
            for o in &list {
                store.record_sheet_outcome(o).unwrap();
            }
        }
        assert_eq!(
            count(&db, "SELECT COUNT(*) FROM pattern_applications"),
            4 + 5 + 3 + 2
        );
        rows.push(
            ids.iter()
                .map(|id| pattern_row(&db, id))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(rows[0], rows[1], "one by one, then batched");
    // And the batch did count: p saw 2 + 3 successes (one retried: against) ...
    assert_eq!(rows[1][0][0].as_deref(), Some("4"), "{:?}", rows[1][0]);
    assert_eq!(rows[1][0][1].as_deref(), Some("4"), "{:?}", rows[1][0]);
    // ... and r, applied only to failures, kept its last confirmation.
    assert_eq!(rows[1][2][1].as_deref(), Some("2"), "{:?}", rows[1][2]);
}

#[test]
fn a_write_inside_a_batch_reads_the_patterns_as_its_applications_left_them() {
    // The job end's re-weighting joins the writer's open batch (another thread's write):
    // it must start from the counters the batch's applications have counted so far, and
    // its priorities must not be overwritten by them at the commit.
    let fixed: jiff::Timestamp = "2024-05-01T12:00:00Z".parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut rows = Vec::new();
    for batched in [false, true] {
        let db = dir.path().join(format!("l-{batched}.db"));
        let store = LearningStore::open(&db).unwrap().with_fixed_time(fixed);
        let id = seed_pattern(&store, "p", "validation:file_exists", 1, 2);
        let mut list = vec![completed("job-rw", 1, 1), completed("job-rw", 2, 1)];
        for o in &mut list {
            o.applied_patterns = vec![id.clone()];
        }
        let run = |s: &LearningStore| {
            for o in &list {
                s.record_sheet_outcome(o).unwrap();
            }
            s.reweight_priorities().unwrap();
        };
        if batched {
            store.batch(run).unwrap();
        } else {
            run(&store);
        }
        rows.push(pattern_row(&db, &id));
    }
    assert_eq!(rows[0], rows[1], "one by one, then batched");
    assert_eq!(rows[1][0].as_deref(), Some("3"), "{:?}", rows[1]);
}

#[test]
fn a_batch_of_sheet_outcomes_counts_every_application_and_folds_every_success_into_the_factors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let store = LearningStore::open(&db).unwrap();
    let id = seed_pattern(&store, "p", "validation:file_exists", 0, 0);
    // Success, success, a retried success (counts against), a failure, a success with a
    // second validation type; then the whole batch replayed.
    let mut outcomes = vec![
        completed("job-f", 1, 1),
        completed("job-f", 2, 1),
        completed("job-f", 3, 2),
        failed("job-f", 4),
        completed("job-f", 5, 1),
    ];
    outcomes[4].validations.push(ValidationCheck {
        rule_type: "command_succeeds".into(),
        passed: true,
        ..ValidationCheck::default()
    });
    for o in &mut outcomes {
        o.applied_patterns = vec![id.clone()];
    }
    for _ in 0..2 {
        store
            .batch(|s| {
                for o in &outcomes {
                    s.record_sheet_outcome(o).unwrap();
                }
            })
            .unwrap();
    }
    assert_eq!(count(&db, "SELECT COUNT(*) FROM executions"), 5);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM pattern_applications"), 5);
    let p = store.get_pattern(&id).unwrap().unwrap();
    assert_eq!((p.led_to_success_count, p.led_to_failure_count), (3, 2));
    let factors = p.success_factors.unwrap();
    assert_eq!(factors["occurrence_count"], 3, "{factors}");
    assert_eq!(
        factors["validation_types"],
        serde_json::json!(["command_succeeds", "file_exists"])
    );
    // The rate as it stood after the last success: 3 of 5.
    assert_eq!(factors["success_rate"], 0.6);
    let why = store.analyze_pattern_why(&id).unwrap().unwrap();
    assert_eq!(why.observation_count, 3);
}

#[test]
fn replayed_sheet_outcome_is_stored_and_credited_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let store = LearningStore::open(&db).unwrap();
    let id = seed_pattern(&store, "p", "validation:file_exists", 0, 0);
    let mut ok = completed("job-c", 1, 1);
    ok.applied_patterns = vec![id.clone()];
    let first = store.record_sheet_outcome(&ok).unwrap();
    let second = store.record_sheet_outcome(&ok).unwrap();
    assert_eq!(first, second);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM executions"), 1);
    assert_eq!(
        store
            .get_pattern(&id)
            .unwrap()
            .unwrap()
            .led_to_success_count,
        1
    );
}

#[test]
fn why_analysis_reflects_success_factors() {
    let dir = tempfile::tempdir().unwrap();
    let store = LearningStore::open(dir.path().join("l.db")).unwrap();
    let id = seed_pattern(&store, "p", "validation:file_exists", 0, 0);
    let before = store.analyze_pattern_why(&id).unwrap().unwrap();
    assert!(!before.has_factors);
    assert_eq!(before.factors_summary, "No success factors captured yet");
    for sheet in 1..=6 {
        let mut ok = completed("job-w", sheet, 1);
        ok.applied_patterns = vec![id.clone()];
        store.record_sheet_outcome(&ok).unwrap();
    }
    let why = store.analyze_pattern_why(&id).unwrap().unwrap();
    assert!(why.has_factors);
    assert_eq!(why.observation_count, 6);
    assert!(why
        .factors_summary
        .starts_with("validation types: file_exists; typically succeeds in: "));
    assert_eq!(
        why.key_conditions,
        [
            "Succeeds on first attempt",
            "Works with 1 validation type",
            "Succeeds without escalation"
        ]
    );
    assert!((why.confidence - 0.6).abs() < 1e-9);
    assert_eq!(
        why.recommendations[0],
        "High confidence pattern - consider for auto-apply"
    );
    assert_eq!(store.patterns_with_why(1, 10).unwrap().len(), 1);
    assert!(store.patterns_with_why(7, 10).unwrap().is_empty());
    assert!(store.analyze_pattern_why("missing").unwrap().is_none());
}

#[test]
fn store_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<LearningStore>();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let store = std::sync::Arc::new(LearningStore::open(&db).unwrap());
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for s in 0..25 {
                    let mut o = completed(&format!("job-{t}"), s, 1);
                    o.finished_at_epoch = 1_700_000_000.0 + f64::from(s);
                    store.record_sheet_outcome(&o).unwrap();
                }
            })
        })
        .collect();
    // A second connection (another process, in effect) writes at the same time.
    let other = LearningStore::open(&db).unwrap();
    for s in 0..25 {
        other
            .record_error_recovery("E101", 1.0, 2.0, s % 2 == 0, None)
            .unwrap();
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(count(&db, "SELECT COUNT(*) FROM executions"), 100);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM error_recoveries"), 25);
}

#[test]
fn unusable_location_is_a_named_error() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "x").unwrap();
    let err = LearningStore::open(blocker.join("sub/learning.db")).unwrap_err();
    assert!(matches!(err, LearningError::CreateDir { .. }), "{err:?}");
    assert!(err.to_string().contains("file/sub"), "{err}");
}

#[test]
fn foreign_database_with_its_own_schema_version_is_refused_and_newer_ours_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("other.db");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch(
            "CREATE TABLE schema_version (version INTEGER PRIMARY KEY); INSERT INTO schema_version VALUES (3);
             CREATE TABLE notes (id INTEGER PRIMARY KEY);",
        )
        .unwrap();
    assert!(matches!(
        LearningStore::open(&foreign).unwrap_err(),
        LearningError::ForeignDatabase { .. }
    ));

    let newer = dir.path().join("newer.db");
    LearningStore::open(&newer).unwrap();
    Connection::open(&newer)
        .unwrap()
        .execute_batch("UPDATE schema_version SET version = 99; DROP TABLE workspace_clusters;")
        .unwrap();
    let store = LearningStore::open(&newer).unwrap();
    assert_eq!(store.schema_version().unwrap(), 99);
    // Upstream leaves a newer DB untouched (§4 step 3): the dropped table stays dropped.
    assert_eq!(
        count(
            &newer,
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'workspace_clusters'"
        ),
        0
    );
    assert!(store.patterns(5).unwrap().is_empty());
}

#[test]
fn at_most_five_patterns_are_chosen_and_near_duplicates_collapse() {
    let dir = tempfile::tempdir().unwrap();
    let store = LearningStore::open(dir.path().join("l.db")).unwrap();
    for i in 0..8 {
        seed_pattern(
            &store,
            &format!("distinct{i}"),
            "validation:file_exists",
            3,
            0,
        );
    }
    // Same words once "error"/"the" are dropped → one dedup group; the more effective stays.
    let weak = store
        .record_pattern(&PatternDraft {
            pattern_type: "semantic_insight".into(),
            pattern_name: "dup-a".into(),
            description: Some("The disk error fills".into()),
            context_tags: vec!["validation:regex".into()],
            ..PatternDraft::default()
        })
        .unwrap();
    let strong = store
        .record_pattern(&PatternDraft {
            pattern_type: "semantic_insight".into(),
            pattern_name: "dup-b".into(),
            description: Some("disk fills".into()),
            context_tags: vec!["validation:regex".into()],
            ..PatternDraft::default()
        })
        .unwrap();
    Connection::open(store.path())
        .unwrap()
        .execute_batch(&format!(
            "UPDATE patterns SET effectiveness_score = 0.9 WHERE id = '{strong}';
             UPDATE patterns SET effectiveness_score = 0.4 WHERE id = '{weak}';"
        ))
        .unwrap();
    let cfg = SelectionConfig::default();
    let many = store
        .patterns_for_prompt(
            &ContextTags::for_validations(&["file_exists"]),
            &cfg,
            &mut XorShift64::new(5),
        )
        .unwrap();
    assert_eq!(many.patterns.len(), 5);
    let dup = store
        .patterns_for_prompt(
            &ContextTags::for_validations(&["regex"]),
            &cfg,
            &mut XorShift64::new(5),
        )
        .unwrap();
    assert_eq!(dup.pattern_ids(), vec![strong]);
}

#[test]
fn cached_pattern_queries_see_every_change_from_this_and_other_connections() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let store = LearningStore::open(&db).unwrap();
    let q = PatternQuery {
        min_priority: 0.0,
        ..PatternQuery::default()
    };
    let draft = |name: &str| PatternDraft {
        pattern_type: "semantic_insight".into(),
        pattern_name: name.into(),
        ..PatternDraft::default()
    };
    assert!(store.get_patterns(&q).unwrap().is_empty());
    assert!(store.get_patterns(&q).unwrap().is_empty(), "cached answer");
    // A write through the same store invalidates the cached answer...
    let id = store.record_pattern(&draft("first")).unwrap();
    assert_eq!(store.get_patterns(&q).unwrap().len(), 1);
    // ...so does an update of an existing row...
    Connection::open(&db)
        .unwrap()
        .execute("UPDATE patterns SET active = 0 WHERE id = ?1", [&id])
        .unwrap();
    assert!(
        store.get_patterns(&q).unwrap().is_empty(),
        "a change committed by another connection is seen"
    );
    // ...and a write by another store on the same file.
    let other = LearningStore::open(&db).unwrap();
    other.record_pattern(&draft("second")).unwrap();
    let names: Vec<String> = store
        .get_patterns(&q)
        .unwrap()
        .into_iter()
        .map(|p| p.pattern_name)
        .collect();
    assert_eq!(names, ["second"]);
}

#[test]
fn execution_rows_store_exact_identities_and_a_replay_from_another_process_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let fixed: jiff::Timestamp = "2024-05-01T12:00:00Z".parse().unwrap();
    let store = LearningStore::open(&db).unwrap().with_fixed_time(fixed);
    let mut outcomes = Vec::new();
    for sheet in 1..=3 {
        let mut o = SheetOutcome::new("job-rows", sheet, &workspace);
        o.status = SheetStatus::Completed;
        o.validation_pass_rate = Some(1.0);
        o.finished_at_epoch = 1_700_000_000.25 + f64::from(sheet);
        outcomes.push(o);
    }
    // The writer's batch, as the conductor records outcomes.
    let ids: Vec<String> = store
        .batch(|s| {
            outcomes
                .iter()
                .map(|o| s.record_sheet_outcome(o).unwrap())
                .collect()
        })
        .unwrap();
    let row = |sheet: u32| -> (String, String, String, String, String, String) {
        Connection::open(&db)
            .unwrap()
            .query_row(
                "SELECT id, workspace_hash, job_hash, started_at, completed_at, error_codes
                   FROM executions WHERE sheet_num = ?1",
                [sheet],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                },
            )
            .unwrap()
    };
    let (id, ws_hash, job_hash, started, completed, codes) = row(2);
    assert_eq!(id, ids[1]);
    assert_eq!(
        ws_hash,
        mozart_learning::hash_workspace(&workspace.canonicalize().unwrap())
    );
    assert_eq!(job_hash, mozart_learning::hash_job("job-rows"));
    assert_eq!(started, "2023-11-14T22:13:22.250000+00:00");
    let local = fixed.to_zoned(jiff::tz::TimeZone::system()).datetime();
    assert_eq!(
        completed,
        local.strftime("%Y-%m-%dT%H:%M:%S").to_string(),
        "naive local time, no microseconds when zero"
    );
    assert_eq!(codes, "[]");

    // A restarted conductor (another connection) replays the same outcomes: nothing new.
    let again = LearningStore::open(&db).unwrap();
    assert_eq!(again.record_sheet_outcome(&outcomes[1]).unwrap(), ids[1]);
    let summary = again
        .record_job_outcome(&JobOutcome {
            job_id: "job-rows".into(),
            sheets: outcomes.clone(),
            instrument: None,
        })
        .unwrap();
    assert_eq!(summary.outcomes_recorded, 0);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM executions"), 3);
    // A sheet that ran again (a new finish time) is a new outcome.
    let mut rerun = outcomes[0].clone();
    rerun.finished_at_epoch += 60.0;
    assert_ne!(again.record_sheet_outcome(&rerun).unwrap(), ids[0]);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM executions"), 4);
}

#[test]
fn prompt_selection_sees_new_patterns_from_this_store_at_once_and_from_others_within_50_ms() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let store = LearningStore::open(&db).unwrap();
    let tags = ContextTags::for_validations(&["file_exists"]);
    let cfg = SelectionConfig {
        exploration_rate: 0.0,
        instrument: Some("sh".into()),
        ..SelectionConfig::default()
    };
    let mut rng = XorShift64::new(11);
    let mut select = || store.patterns_for_prompt(&tags, &cfg, &mut rng).unwrap();
    // An empty store, asked once per sheet: nothing, every time.
    for _ in 0..100 {
        assert!(select().patterns.is_empty());
    }
    // A pattern this store learns is offered to the very next prompt.
    let mine = seed_pattern(&store, "mine", "validation:file_exists", 3, 0);
    assert_eq!(select().pattern_ids(), vec![mine.clone()]);
    assert_eq!(select().pattern_ids(), vec![mine.clone()], "cached answer");

    // Another process (upstream's tools, a second store) adds one: seen within 50 ms.
    let other = LearningStore::open(&db).unwrap();
    let theirs = seed_pattern(&other, "theirs", "validation:file_exists", 3, 0);
    std::thread::sleep(std::time::Duration::from_millis(60));
    let ids = select().pattern_ids();
    assert!(ids.contains(&theirs) && ids.contains(&mine), "{ids:?}");

    // And one it removes from view is gone by then too.
    other.soft_delete_pattern(&theirs).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(60));
    assert_eq!(select().pattern_ids(), vec![mine]);
}

#[test]
fn memory_only_selection_answers_like_the_full_one_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    // A long window, so a slow test machine cannot see it run out mid-comparison.
    let store = LearningStore::open(&db)
        .unwrap()
        .with_foreign_write_staleness(std::time::Duration::from_secs(3600));
    let tags = ContextTags::for_validations(&["file_exists"]);
    let cfg = SelectionConfig::default();
    let good = seed_pattern(&store, "good", "validation:file_exists", 3, 0);
    // Nothing asked yet: only SQLite can answer, and the draw is left for that call.
    let mut rng = XorShift64::new(9);
    assert!(store
        .cached_patterns_for_prompt(&tags, &cfg, &mut rng)
        .is_none());
    let mut twin = XorShift64::new(9);
    assert_eq!(rng.next_u64(), twin.next_u64(), "rng untouched by a miss");

    // Once both modes were asked, memory answers exactly as the full selection does.
    let mut warm = XorShift64::new(1);
    for _ in 0..50 {
        store.patterns_for_prompt(&tags, &cfg, &mut warm).unwrap();
    }
    let (mut a, mut b) = (XorShift64::new(42), XorShift64::new(42));
    for _ in 0..50 {
        let full = store.patterns_for_prompt(&tags, &cfg, &mut a).unwrap();
        let fast = store
            .cached_patterns_for_prompt(&tags, &cfg, &mut b)
            .expect("answered from memory");
        assert_eq!(full, fast);
    }
    assert_eq!(a.next_u64(), b.next_u64(), "same draws");
    assert!(store
        .cached_patterns_for_prompt(&tags, &cfg, &mut b)
        .unwrap()
        .pattern_ids()
        .contains(&good));

    // A pattern learned since: memory does not know the answer any more.
    seed_pattern(&store, "newer", "validation:file_exists", 3, 0);
    assert!(store
        .cached_patterns_for_prompt(&tags, &cfg, &mut b)
        .is_none());
    // Once the window is over, memory still answers when nothing was written meanwhile: the
    // version is read right there (the connection is free), not left to a blocking thread
    // (issue 24: that hand-off held up a sequential job's next sheet by milliseconds).
    let short = LearningStore::open(&db)
        .unwrap()
        .with_foreign_write_staleness(std::time::Duration::from_millis(20));
    for _ in 0..50 {
        short.patterns_for_prompt(&tags, &cfg, &mut b).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(30));
    let mut c = b.clone();
    let fast = short
        .cached_patterns_for_prompt(&tags, &cfg, &mut b)
        .expect("answered from memory after the window, nothing written");
    assert_eq!(
        fast,
        short.patterns_for_prompt(&tags, &cfg, &mut c).unwrap()
    );
    // But not once another process has written: its pattern is not missed.
    let other = LearningStore::open(&db).unwrap();
    seed_pattern(&other, "theirs", "validation:file_exists", 3, 0);
    std::thread::sleep(std::time::Duration::from_millis(30));
    assert!(short
        .cached_patterns_for_prompt(&tags, &cfg, &mut b)
        .is_none());
}

#[test]
fn each_application_stores_counters_confirmation_and_scores_of_the_spec() {
    let dir = tempfile::tempdir().unwrap();
    let fixed: jiff::Timestamp = "2024-05-01T12:00:00Z".parse().unwrap();
    let store = LearningStore::open(dir.path().join("l.db"))
        .unwrap()
        .with_fixed_time(fixed);
    let id = seed_pattern(&store, "mixed", "validation:file_exists", 0, 0);
    let apply = |ok: bool, grounding: Option<f64>| {
        store
            .record_pattern_application(&PatternApplication {
                pattern_id: id.clone(),
                execution_id: "exec".into(),
                led_to_success: ok,
                retry_count_before: 0,
                retry_count_after: u8::from(!ok).into(),
                grounding_confidence: grounding,
            })
            .unwrap()
            .unwrap()
    };
    // (outcome, grounding) in order; expectations from §9.1/§9.2 by hand.
    let steps = [
        (false, None),
        (false, Some(0.5)),
        (true, None),
        (false, None),
        (true, Some(1.0)),
        (true, None),
    ];
    let mut history: Vec<(bool, Option<f64>)> = Vec::new();
    for (ok, grounding) in steps {
        apply(ok, grounding);
        history.push((ok, grounding));
        let p = store.get_pattern(&id).unwrap().unwrap();
        let s = history.iter().filter(|(ok, _)| *ok).count() as i64;
        let f = history.len() as i64 - s;
        assert_eq!((p.led_to_success_count, p.led_to_failure_count), (s, f));
        let recent: Vec<&(bool, Option<f64>)> = history.iter().rev().take(5).collect();
        let outcomes: Vec<bool> = recent.iter().map(|(ok, _)| *ok).collect();
        let groundings: Vec<f64> = recent.iter().filter_map(|(_, g)| *g).collect();
        let eff = mozart_learning::effectiveness(s, f, &outcomes, &groundings, 0);
        assert!((p.effectiveness_score - eff).abs() < 1e-12, "{p:?}");
        let priority = mozart_learning::store_priority(eff, p.occurrence_count, p.variance);
        assert!((p.priority_score - priority).abs() < 1e-12, "{p:?}");
    }
    // Confirmation time moves only with a success; an unknown pattern stores nothing.
    let confirmed = store.get_pattern(&id).unwrap().unwrap().last_confirmed;
    apply(false, None);
    assert_eq!(
        store.get_pattern(&id).unwrap().unwrap().last_confirmed,
        confirmed
    );
    assert!(store
        .record_pattern_application(&PatternApplication {
            pattern_id: "no-such-pattern".into(),
            execution_id: "exec".into(),
            led_to_success: true,
            retry_count_before: 0,
            retry_count_after: 0,
            grounding_confidence: None,
        })
        .unwrap()
        .is_none());
    assert_eq!(
        count(store.path(), "SELECT COUNT(*) FROM pattern_applications"),
        7
    );
}
