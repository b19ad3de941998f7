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

/// A registry file that is there but holds no registry — emptied (`truncate -s 0`), or
/// another database copied over it (the learning store) — was taken as a new registry:
/// `mozart list --all` said "No scores found." of a home that had jobs, and nothing said
/// why. Now `start` refuses it, naming the file, what it is and what to do (restore a
/// backup, or move it aside to start empty), `doctor` says the same, and the advice works.
#[test]
fn a_registry_file_that_is_empty_or_another_database_is_refused_not_taken_as_new() {
    let env = TestEnv::new();
    let score = env.write_score(
        "kept",
        "name: kept\nworkspace: ./kept-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: \"RUN: true\"\n",
    );
    env.start_conductor();
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("kept");
    let out = env.stop_conductor();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let db = env.home.join("registry.db");
    let p = db.display().to_string();
    let learning = env.home.join("global-learning.db");
    let clear_sides = || {
        for side in ["registry.db-wal", "registry.db-shm"] {
            let _ = std::fs::remove_file(env.home.join(side));
        }
    };
    let cases = [
        ("empty", "the file is empty (0 bytes)"),
        ("the learning store", "an SQLite database of other tables"),
    ];
    for (what, says) in cases {
        clear_sides();
        if what == "empty" {
            std::fs::write(&db, b"").unwrap();
        } else {
            std::fs::copy(&learning, &db).unwrap();
        }
        let start = env.mozart(&["start"]);
        let text = stdout(&start);
        assert_eq!(start.status.code(), Some(1), "{what}: {text}");
        assert!(
            text.contains(&format!("{p} is not a Mozart job registry: ")) && text.contains(says),
            "{what}: {text}"
        );
        assert!(
            text.contains("restore the registry from a backup"),
            "{what}: {text}"
        );
        assert!(
            text.contains(&format!("mv {p} {p}.not-registry")),
            "{what}: {text}"
        );
        let doctor = stdout(&env.mozart(&["doctor"]));
        assert!(
            doctor
                .lines()
                .any(|l| l.contains("✗ Job registry") && l.contains("not a Mozart job registry")),
            "{what}: {doctor}"
        );
        assert!(doctor.contains("Mozart is not ready"), "{what}: {doctor}");
    }
    // The learning store copied over it was left as it was: nothing of ours written into it.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let ours: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('jobs', 'schema_migrations')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(ours, 0);
    drop(conn);

    // The advice works: moved aside, a new conductor starts with an empty registry.
    std::fs::rename(&db, env.home.join("registry.db.not-registry")).unwrap();
    clear_sides();
    env.start_conductor();
    let list = stdout(&env.mozart(&["list", "--all"]));
    assert!(list.contains("No scores found"), "{list}");
}

/// A damaged learning store (`global-learning.db`'s pages overwritten): `learning-stats`
/// named the store, then hinted "The job registry is damaged", the wrong file; `doctor`
/// did not check the store and said "Mozart is ready" with nothing about it. Now the hint
/// names the learning store, `doctor` checks it (a warning: scores still run) with what to
/// do, and the advice works.
#[test]
fn a_damaged_learning_store_is_named_as_such_and_doctor_checks_it() {
    let env = TestEnv::new();
    env.start_conductor();
    let out = env.stop_conductor();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let db = env.home.join("global-learning.db");
    for side in ["global-learning.db-wal", "global-learning.db-shm"] {
        let _ = std::fs::remove_file(env.home.join(side));
    }
    damage(&db);
    let p = db.display().to_string();

    let out = env.mozart(&["learning-stats"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("Cannot open the learning store {p}")),
        "{text}"
    );
    assert!(
        text.contains("The learning store is damaged: `mozart doctor` checks it"),
        "{text}"
    );
    assert!(
        !text.contains("job registry"),
        "the registry is fine: {text}"
    );

    let doctor = stdout(&env.mozart(&["doctor"]));
    assert!(
        doctor.lines().any(|l| l.contains("! Learning store")
            && l.contains(&p)
            && l.contains(&format!("mv {p} {p}.damaged"))),
        "{doctor}"
    );
    assert!(
        doctor.lines().any(|l| l.contains("✓ Job registry")),
        "{doctor}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&env.mozart(&["doctor", "--json"]).stdout).unwrap();
    assert_eq!(json["learning_store"]["status"], "warning", "{json:#}");
    assert_eq!(json["registry"]["status"], "ok", "{json:#}");

    // The advice works: moved aside, the next start makes a new store.
    std::fs::rename(&db, env.home.join("global-learning.db.damaged")).unwrap();
    env.start_conductor();
    let out = env.mozart(&["learning-stats"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doctor = stdout(&env.mozart(&["doctor"]));
    assert!(
        doctor.lines().any(|l| l.contains("✓ Learning store")),
        "{doctor}"
    );
}
