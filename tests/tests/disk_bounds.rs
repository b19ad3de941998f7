//! What a long-lived conductor keeps on disk stays bounded: its log is rotated by size as
//! upstream's (50 MiB, 5 backups), and `mozart clear` gives the registry's freed pages back.

use mozart_tests::{stdout, TestEnv};

/// A conductor log already at 50 MiB is rotated when the conductor starts: the old one
/// becomes `conductor.log.1`, the conductor writes a new `conductor.log`; earlier backups
/// move up one and the sixth is dropped.
#[test]
fn the_conductor_log_is_rotated_at_50_mib_keeping_5_backups() {
    let env = TestEnv::new();
    let logs = env.home.join("logs");
    std::fs::create_dir_all(&logs).expect("logs dir");
    let log = logs.join("conductor.log");
    // Sparse: 50 MiB of size without writing it.
    let big = std::fs::File::create(&log).expect("log");
    big.set_len(50 * 1024 * 1024).expect("50 MiB");
    drop(big);
    for n in 1..=5 {
        std::fs::write(
            logs.join(format!("conductor.log.{n}")),
            format!("backup {n}\n"),
        )
        .expect("backup");
    }
    let out = env.start_conductor();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = env.mozart(&["conductor-status"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    let size = |p: &str| {
        std::fs::metadata(logs.join(p))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    assert_eq!(
        size("conductor.log.1"),
        50 * 1024 * 1024,
        "the full log moved to .1"
    );
    let read = |p: &str| std::fs::read_to_string(logs.join(p)).unwrap_or_default();
    assert_eq!(read("conductor.log.2"), "backup 1\n");
    assert_eq!(read("conductor.log.5"), "backup 4\n");
    assert!(
        !logs.join("conductor.log.6").exists(),
        "five backups, no more"
    );
    assert!(size("conductor.log") < 1024 * 1024, "a new log");
    // The detached conductor's stderr (where a panic goes) is the new log, not the backup.
    let pid = read("../conductor.pid");
    let stderr = std::fs::read_link(format!("/proc/{}/fd/2", pid.trim())).expect("fd 2");
    assert_eq!(stderr, log, "stderr follows the log");
    assert!(
        read("conductor.log").contains("\"level\""),
        "the conductor writes its lines to the new log: {}",
        read("conductor.log")
    );
}

/// `mozart clear` of a large job gives the registry's space back: the registry shrinks to
/// a fraction of its pages (before: it kept them all, free, and its file as large).
#[test]
fn clear_gives_the_registrys_space_back() {
    let env = TestEnv::new();
    env.start_conductor();
    // Each sheet prints 3,000 bytes, which the registry keeps with its attempt.
    let score = r#"name: wide
workspace: ./wide-ws
instrument: shell
sheet:
  size: 1
  total_items: 1
  fan_out:
    1: 400
parallel:
  enabled: true
  max_concurrent: 20
pause_between_sheets_seconds: 0
prompt:
  template: |
    RUN: head -c 3000 /dev/zero | tr '\000' x; exit 3
retry:
  max_retries: 0
"#;
    let path = env.write_score("wide", score);
    crate::harness::submit_now(&env, &path);
    crate::harness::wait_status(&env, "wide", 180.0, |d| d["status"] == "failed");
    let db = env.home.join("registry.db");
    // The registry's pages in use and free, as SQLite counts them (its WAL included).
    let pages = || {
        let conn =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .expect("open registry");
        let count = |p: &str| -> i64 {
            conn.query_row(&format!("PRAGMA {p}"), [], |r| r.get(0))
                .expect("pragma")
        };
        (count("page_count"), count("freelist_count"))
    };
    let (before, _) = pages();
    assert!(before > 600, "the job filled the registry: {before} pages");
    let out = env.mozart(&["clear", "-y"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("Cleared 1 score"), "{}", stdout(&out));
    crate::harness::poll(
        &env,
        60.0,
        "the registry to give its pages back after clear",
        || {
            let (now, free) = pages();
            // The file itself shrinks once the WAL holding the shorter registry is
            // checkpointed into it.
            let file = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(u64::MAX);
            (now < before / 4 && free < 100 && file < before as u64 * 4096 / 4).then_some(())
        },
    );
    // The conductor goes on: a new job runs and is recorded.
    let path = env.write_score(
        "again",
        &score.replace("wide", "again").replace("1: 400", "1: 3"),
    );
    crate::harness::submit_now(&env, &path);
    crate::harness::wait_status(&env, "again", 60.0, |d| d["status"] == "failed");
}

/// The conductor's peak resident memory (`VmHWM`), in bytes.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM")
        * 1024
}

/// Checks read a file of any size in bounded memory: `content_contains` finds a pattern at
/// the end of a 512 MiB file and `capture_files` (max_output_chars 2000) takes only its
/// start, cut and marked, without the conductor holding the file (before: its memory grew
/// by the file's size, twice over); `content_regex` on a file over its 64 MiB cap fails,
/// saying the file's size and the cap.
#[test]
fn content_checks_and_captured_files_read_big_files_in_bounded_memory() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("bigread-ws");
    let yaml = format!(
        "name: bigread\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {{size: 1, total_items: 2}}\nretry: {{max_retries: 0}}\n\
         cross_sheet:\n  capture_files: [\"{{{{ workspace }}}}/big.txt\"]\n  max_output_chars: 2000\n\
         prompt:\n  template: |\n    RUN: [ -e big.txt ] || {{ truncate -s 512M big.txt && echo THE-END >> big.txt; }}\n\
         validations:\n  - type: content_contains\n    path: \"{{workspace}}/big.txt\"\n    pattern: THE-END\n",
        ws = ws.display(),
    );
    let score = env.write_score("bigread", &yaml);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    env.wait_completed("bigread");
    let pid = env.conductor_pid().expect("conductor pid");
    let peak = peak_memory(pid);
    assert!(
        peak < 256 * 1024 * 1024,
        "the conductor's memory peaked at {} MiB reading a 512 MiB file",
        peak / (1024 * 1024)
    );

    let ws2 = env.work.join("bigre-ws");
    let yaml = format!(
        "name: bigre\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {{size: 1, total_items: 1}}\nretry: {{max_retries: 0}}\n\
         prompt:\n  template: |\n    RUN: truncate -s 65M mid.txt\n\
         validations:\n  - type: content_regex\n    path: \"{{workspace}}/mid.txt\"\n    pattern: \"x+\"\n",
        ws = ws2.display(),
    );
    let score = env.write_score("bigre", &yaml);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    let out = env.mozart(&["wait", "bigre"]);
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    let errors = stdout(&env.mozart(&["errors", "bigre", "-V"]));
    assert!(
        errors.contains("mid.txt is 65.0 MiB; content_regex reads at most 64.0 MiB"),
        "{errors}"
    );
    let peak = peak_memory(pid);
    assert!(
        peak < 256 * 1024 * 1024,
        "the conductor's memory peaked at {} MiB",
        peak / (1024 * 1024)
    );
}
