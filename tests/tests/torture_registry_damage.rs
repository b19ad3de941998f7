//! Torture (d): the job registry's file is damaged (a disk error, a bad copy). The
//! conductor must not start on it pretending nothing happened, must say which file and what
//! to do, `mozart doctor` must find it, and following the advice must give a working
//! conductor.

use mozart_tests::{stdout, TestEnv};

/// Overwrite every page of the database file but the first (the schema) with 0xFF.
fn damage(db: &std::path::Path) {
    let len = std::fs::metadata(db).unwrap().len();
    assert!(len > 8192, "the registry has data pages: {len} bytes");
    let mut bytes = std::fs::read(db).unwrap();
    for b in &mut bytes[4096..] {
        *b = 0xFF;
    }
    std::fs::write(db, bytes).unwrap();
}

#[test]
fn a_damaged_registry_is_named_with_what_to_do_and_doctor_finds_it() {
    let env = TestEnv::new();
    let score = env.write_score(
        "small",
        "name: small\nworkspace: ./small-ws\ninstrument: shell\npause_between_sheets_seconds: 0\nsheet: {size: 1, total_items: 20}\n\
         prompt:\n  template: \"RUN: true\"\n",
    );
    env.start_conductor();
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("small");
    let out = env.stop_conductor();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let db = env.home.join("registry.db");
    // A clean stop leaves everything in the main file.
    for side in ["registry.db-wal", "registry.db-shm"] {
        let _ = std::fs::remove_file(env.home.join(side));
    }
    damage(&db);
    let start = env.mozart(&["start"]);
    let text = stdout(&start);
    assert_eq!(start.status.code(), Some(1), "{text}");
    let p = db.display().to_string();
    assert!(text.contains("the job registry is damaged"), "{text}");
    assert!(text.contains(&format!("mv {p} {p}.damaged")), "{text}");
    let doctor = env.mozart(&["doctor"]);
    let text = stdout(&doctor);
    assert!(
        text.lines()
            .any(|l| l.contains("✗ Job registry") && l.contains("damaged")),
        "{text}"
    );
    assert!(text.contains("Mozart is not ready"), "{text}");
    let json: serde_json::Value =
        serde_json::from_slice(&env.mozart(&["doctor", "--json"]).stdout).unwrap();
    assert_eq!(json["registry"]["status"], "error", "{json:#}");

    // The advice works: moved aside, a new conductor starts and runs work.
    std::fs::rename(&db, env.home.join("registry.db.damaged")).unwrap();
    env.start_conductor();
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("small");
    let doctor = stdout(&env.mozart(&["doctor"]));
    assert!(
        doctor.lines().any(|l| l.contains("✓ Job registry")),
        "{doctor}"
    );
}
