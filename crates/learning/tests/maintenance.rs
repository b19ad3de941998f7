//! Entropy response, exploration budget, rate limits, learned waits, drift and stats on
//! real SQLite files.
#![allow(clippy::unwrap_used)] // tests may unwrap (common.md rule 5)

use mozart_learning::{
    BudgetRules, EntropyResponseConfig, LearningStore, PatternApplication, PatternDraft,
    SheetOutcome, SheetStatus,
};
use rusqlite::Connection;

fn store_at(dir: &tempfile::TempDir, iso: &str) -> LearningStore {
    LearningStore::open(dir.path().join("learning.db"))
        .unwrap()
        .with_fixed_time(iso.parse().unwrap())
}

fn pattern(store: &LearningStore, name: &str) -> String {
    store
        .record_pattern(&PatternDraft {
            pattern_type: "semantic_insight".into(),
            pattern_name: name.into(),
            description: Some(format!("about {name}")),
            ..PatternDraft::default()
        })
        .unwrap()
}

fn apply(store: &LearningStore, id: &str, ok: bool, grounding: Option<f64>) {
    store
        .record_pattern_application(&PatternApplication {
            pattern_id: id.into(),
            execution_id: "sheet_1".into(),
            led_to_success: ok,
            retry_count_before: 0,
            retry_count_after: 0,
            grounding_confidence: grounding,
        })
        .unwrap();
}

#[test]
fn entropy_collapse_triggers_one_response_then_cooldown() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(&dir, "2025-03-01T10:00:00Z");
    let dominant = pattern(&store, "dominant");
    let rare = pattern(&store, "rare");
    let jailed = pattern(&store, "jailed");
    for _ in 0..18 {
        apply(&store, &dominant, true, None);
    }
    apply(&store, &rare, true, None);
    store.quarantine_pattern(&jailed, Some("bad")).unwrap();

    let m = store.pattern_entropy().unwrap();
    assert_eq!(
        (
            m.unique_pattern_count,
            m.effective_pattern_count,
            m.total_applications
        ),
        (3, 2, 19)
    );
    assert!(m.diversity_index < 0.5, "{m:?}");

    let check = store
        .check_entropy_response_needed("daemon-entropy-check", 0.5, 3600.0)
        .unwrap();
    assert!(check.needs_response, "{check:?}");
    assert!(check.reason.starts_with("Entropy 0.2"), "{}", check.reason);

    let cfg = EntropyResponseConfig {
        budget_boost_amount: 0.15,
        ..EntropyResponseConfig::default()
    };
    let resp = store
        .trigger_entropy_response(
            "daemon-entropy-check",
            check.current_entropy.unwrap(),
            0.5,
            &cfg,
        )
        .unwrap();
    assert_eq!(resp.actions_taken, ["budget_boost", "quarantine_revisit"]);
    assert!(
        (resp.new_budget.unwrap() - 0.30).abs() < 1e-9,
        "0.15 default + 0.15 boost"
    );
    assert_eq!(resp.patterns_revisited, vec![jailed.clone()]);
    let p = store.get_pattern(&jailed).unwrap().unwrap();
    assert_eq!(
        p.quarantine_status,
        mozart_learning::QuarantineStatus::Pending
    );
    assert_eq!(
        p.quarantine_reason.as_deref(),
        Some("Entropy response: revisiting for revalidation")
    );

    let again = store
        .check_entropy_response_needed("daemon-entropy-check", 0.5, 3600.0)
        .unwrap();
    assert!(!again.needs_response);
    assert_eq!(again.reason, "Cooldown active (3600s remaining)");

    let later = LearningStore::open(store.path())
        .unwrap()
        .with_fixed_time("2025-03-01T11:00:01Z".parse().unwrap());
    assert!(
        later
            .check_entropy_response_needed("daemon-entropy-check", 0.5, 3600.0)
            .unwrap()
            .needs_response
    );
}

#[test]
fn exploration_budget_follows_spec_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(&dir, "2025-03-01T10:00:00Z");
    let rules = BudgetRules::default();
    let first = store
        .calculate_budget_adjustment("job", 0.9, &rules)
        .unwrap();
    assert_eq!(
        (first.budget_value, first.adjustment_type.as_str()),
        (0.15, "initial")
    );
    let boost = store
        .calculate_budget_adjustment("job", 0.2, &rules)
        .unwrap();
    assert!((boost.budget_value - 0.25).abs() < 1e-9);
    assert_eq!(boost.adjustment_type, "boost");
    let decay = store
        .calculate_budget_adjustment("job", 0.5, &rules)
        .unwrap();
    assert!((decay.budget_value - 0.2375).abs() < 1e-9);
    assert_eq!(decay.adjustment_type, "decay");
    let floor = store
        .update_exploration_budget("job", 0.04, "decay", None, None, 0.05, 0.5)
        .unwrap();
    assert_eq!(
        (floor.budget_value, floor.adjustment_type.as_str()),
        (0.05, "floor_enforced")
    );
    assert_eq!(
        floor.adjustment_reason.as_deref(),
        Some("Budget 0.040 enforced to floor 0.050")
    );
    let exact = store
        .update_exploration_budget("job", 0.05, "decay", None, None, 0.05, 0.5)
        .unwrap();
    assert_eq!(exact.adjustment_type, "decay");
    assert_eq!(
        store
            .exploration_budget_history(Some("job"), 10)
            .unwrap()
            .len(),
        5
    );
}

#[test]
fn rate_limit_events_expire_at_80_percent_and_are_seen_by_other_stores() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(&dir, "2025-03-01T10:00:00Z");
    store
        .record_rate_limit_event("E101", 100.0, "job-a", Some("sonnet"))
        .unwrap();
    let events = store.active_rate_limits(Some("sonnet")).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].recorded_at, "2025-03-01T10:00:00+00:00");
    assert_eq!(events[0].expires_at, "2025-03-01T10:01:20+00:00");
    assert_eq!(
        events[0].source_job_hash,
        mozart_learning::hash_job("job-a")
    );
    // Another process (another store on the same file) 30 s later sees 50 s remaining.
    let other = LearningStore::open(store.path())
        .unwrap()
        .with_fixed_time("2025-03-01T10:00:30Z".parse().unwrap());
    let remaining = other
        .rate_limit_remaining(Some("sonnet"), None)
        .unwrap()
        .unwrap();
    assert!((remaining - 50.0).abs() < 1e-6, "{remaining}");
    assert_eq!(
        other.rate_limit_remaining(Some("opus"), None).unwrap(),
        None
    );
    let after = LearningStore::open(store.path())
        .unwrap()
        .with_fixed_time("2025-03-01T10:01:21Z".parse().unwrap());
    assert_eq!(
        after.rate_limit_remaining(Some("sonnet"), None).unwrap(),
        None
    );
    assert_eq!(after.cleanup_expired_rate_limits().unwrap(), 1);
    assert!(store
        .record_rate_limit_event("E101", f64::NAN, "job-a", None)
        .is_err());
}

#[test]
fn learned_waits_blend_with_static_delay_by_confidence() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(&dir, "2025-03-01T10:00:00Z");
    let none = store
        .learned_wait_time_with_fallback("E103", 60.0, None)
        .unwrap();
    assert_eq!(
        (none.delay_seconds, none.strategy),
        (60.0, "static_fallback")
    );
    for wait in [20.0, 40.0, 60.0] {
        store
            .record_error_recovery("E103", 30.0, wait, true, Some("m"))
            .unwrap();
    }
    store
        .record_error_recovery("E103", 30.0, 5.0, false, Some("m"))
        .unwrap();
    // learned = (mean 40 + min 20) / 2 = 30; confidence 0.3 → blend 3/7 of 30 + 4/7 of 60.
    assert_eq!(
        store.learned_wait_time("E103", None, 3).unwrap(),
        Some(30.0)
    );
    let blend = store
        .learned_wait_time_with_fallback("E103", 60.0, None)
        .unwrap();
    assert_eq!(blend.strategy, "global_learned_blend");
    assert!((blend.confidence - 0.3).abs() < 1e-9);
    assert!((blend.delay_seconds - (30.0 * 3.0 / 7.0 + 60.0 * 4.0 / 7.0)).abs() < 1e-9);
    for _ in 0..4 {
        store
            .record_error_recovery("E103", 30.0, 30.0, true, None)
            .unwrap();
    }
    let learned = store
        .learned_wait_time_with_fallback("E103", 100.0, None)
        .unwrap();
    assert_eq!(learned.strategy, "global_learned");
    assert_eq!(
        learned.delay_seconds, 50.0,
        "floored at half the static delay"
    );
    let window = store.optimal_execution_window(Some("E103")).unwrap();
    assert_eq!(window.sample_count, 8);
}

#[test]
fn drift_is_found_and_declining_patterns_retired() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("learning.db");
    let store = LearningStore::open(&db).unwrap();
    let id = pattern(&store, "fading");
    let steady = pattern(&store, "steady");
    for _ in 0..10 {
        apply(&store, &steady, true, Some(0.9));
    }
    for i in 0..10 {
        apply(&store, &id, true, Some(0.9));
        // Distinct, ordered timestamps: older applications first.
        Connection::open(&db)
            .unwrap()
            .execute(
                "UPDATE pattern_applications SET applied_at = ?1 WHERE applied_at = (SELECT MAX(applied_at) FROM pattern_applications WHERE pattern_id = ?2) AND pattern_id = ?2",
                rusqlite::params![format!("2025-01-01T00:00:{i:02}"), id],
            )
            .unwrap();
    }
    Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE pattern_applications SET pattern_led_to_success = 0, grounding_confidence = 0.5
              WHERE pattern_id = ?1 AND applied_at >= '2025-01-01T00:00:05'",
            [&id],
        )
        .unwrap();
    let d = store
        .calculate_effectiveness_drift(&id, 5, 0.2)
        .unwrap()
        .unwrap();
    assert_eq!(d.drift_direction, "negative");
    assert!((d.effectiveness_after - 0.0833333).abs() < 1e-6);
    let drifting = store.drifting_patterns(0.2, 5, 10).unwrap();
    assert_eq!(
        drifting
            .iter()
            .map(|d| d.pattern_id.as_str())
            .collect::<Vec<_>>(),
        [id.as_str()]
    );
    let e = store
        .calculate_epistemic_drift(&id, 5, 0.15)
        .unwrap()
        .unwrap();
    assert_eq!(e.drift_direction, "weakening");
    let retired = store.retire_drifting_patterns(0.2, 5).unwrap();
    assert_eq!(retired.len(), 1);
    let p = store.get_pattern(&id).unwrap().unwrap();
    assert_eq!(p.priority_score, 0.0);
    assert!(p
        .suggested_action
        .unwrap()
        .starts_with("Auto-retired: drift negative (0.83)"));
}

#[test]
fn stats_summarise_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(&dir, "2025-03-01T10:00:00Z");
    let empty = store.stats().unwrap();
    assert!(empty.migration_needed());
    for (n, attempts) in [(1, 1), (2, 1), (3, 2), (4, 1)] {
        let mut o = SheetOutcome::new("job", n, dir.path());
        o.status = SheetStatus::Completed;
        o.attempts = attempts;
        o.validation_pass_rate = Some(1.0);
        store.record_sheet_outcome(&o).unwrap();
    }
    store
        .record_error_recovery("E101", 1.0, 1.0, true, None)
        .unwrap();
    store
        .record_error_recovery("E101", 1.0, 1.0, false, None)
        .unwrap();
    pattern(&store, "x");
    let s = store.stats().unwrap();
    assert_eq!(s.total_executions, 4);
    assert_eq!(s.unique_workspaces, 1);
    let j = s.to_cli_json();
    assert_eq!(j["executions"]["success_without_retry_rate"], 75.0);
    assert_eq!(j["patterns"]["total"], 1);
    assert_eq!(j["patterns"]["avg_effectiveness"], 0.5);
    assert_eq!(j["error_recoveries"]["total"], 2);
    assert_eq!(j["error_recoveries"]["success_rate"], 50.0);
    assert_eq!(j["migration_needed"], false);
}
