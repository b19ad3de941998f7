//! Diagnostic commands without a conductor: the standard failure, the `-w` workspace
//! escape hatch, score-ID usage errors, and `mozart logs` on plain files, including
//! `--follow` (cli.md §1.4, §1.7, §5.1–5.4).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use mozart_tests::{signal, stdout, TestEnv};
use serde_json::{json, Value};

const NOT_RUNNING: &str =
    "Error: Mozart conductor is not running.\n\nHints:\n  - Start it with: mozart start\n";

#[test]
fn diagnostic_commands_need_the_conductor() {
    let env = TestEnv::new();
    for cmd in ["errors", "diagnose", "history"] {
        let out = env.mozart(&[cmd, "demo"]);
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        assert_eq!(stdout(&out), NOT_RUNNING, "{cmd}");
        let out = env.mozart(&[cmd, "demo", "--json"]);
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            doc,
            json!({"success": false, "message": "Mozart conductor is not running.",
                   "hints": ["Start it with: mozart start"]}),
            "{cmd}"
        );
    }
}

#[test]
fn malformed_score_ids_are_usage_errors() {
    let env = TestEnv::new();
    for cmd in ["errors", "diagnose", "history", "logs"] {
        let out = env.mozart(&[cmd, "-bad id"]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let out = env.mozart(&[cmd, "bad/id"]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("Invalid value: Invalid score ID 'bad/id'."),
            "{cmd}: {err}"
        );
    }
}

/// A failed checkpoint in `<ws>/<id>.json`, as a JSON state backend leaves it.
fn write_workspace_state(ws: &Path, id: &str) {
    std::fs::create_dir_all(ws).unwrap();
    let state = json!({
        "job_id": id, "job_name": id, "total_sheets": 1, "status": "failed",
        "created_at": "2026-03-01T09:00:00Z", "updated_at": "2026-03-01T09:05:00Z",
        "started_at": "2026-03-01T09:00:00Z", "completed_at": "2026-03-01T09:05:00Z",
        "error_message": "sheet 1 failed",
        "sheets": {"1": {
            "sheet_num": 1, "status": "failed", "attempt_count": 3,
            "error_history": [
                {"timestamp": "2026-03-01T09:01:00Z", "error_type": "transient",
                 "error_code": "E001", "error_message": "timed out after 30s",
                 "attempt_number": 1, "context": {"exit_signal": 15},
                 "stderr_tail": "killed"},
                {"timestamp": "2026-03-01T09:04:00Z", "error_type": "permanent",
                 "error_code": "E201", "error_message": "validation failed",
                 "attempt_number": 3}
            ]
        }}
    });
    let path = mozart_state::json_state::state_file_path(ws, id);
    std::fs::write(path, serde_json::to_vec_pretty(&state).unwrap()).unwrap();
}

#[test]
fn workspace_escape_hatch_reads_the_state_file_without_a_conductor() {
    let env = TestEnv::new();
    let ws = env.work.join("old-ws");
    write_workspace_state(&ws, "old");
    let ws_arg = ws.to_str().unwrap();

    let out = env.mozart(&["errors", "old", "-w", ws_arg, "--json", "-V"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["total_errors"], 2);
    assert_eq!(doc["errors"][0]["error_code"], "E001");
    assert_eq!(doc["errors"][0]["error_type"], "transient");
    assert_eq!(doc["errors"][0]["context"], json!({"exit_signal": 15}));
    assert_eq!(doc["errors"][0]["stderr_tail"], "killed");
    assert_eq!(doc["errors"][1]["attempt_number"], 3);

    let out = env.mozart(&["errors", "old", "-w", ws_arg]);
    let text = stdout(&out);
    assert!(
        // The attempt's last stderr line follows the message (the cause, without -V).
        text.contains(
            "\n1      09:01:00  transient  E001  1        timed out after 30s — stderr: killed\n"
        ),
        "{text}"
    );

    let out = env.mozart(&["diagnose", "old", "--workspace", ws_arg]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("  Status: FAILED\n"), "{text}");
    assert!(text.contains("\nTiming\n  Duration: 5m 0s\n"), "{text}");
    assert!(text.contains("\nErrors (2)\n"), "{text}");
    assert!(text.contains("\nScore Error: sheet 1 failed\n"), "{text}");

    let out = env.mozart(&["errors", "other", "-w", ws_arg]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).starts_with("Error: Score not found: other\n"),
        "{}",
        stdout(&out)
    );
    let missing = env.work.join("nowhere");
    let out = env.mozart(&["diagnose", "old", "-w", missing.to_str().unwrap()]);
    assert_eq!(
        stdout(&out),
        format!("Error: Workspace not found: {}\n", missing.display())
    );

    // The attempt history is in the conductor's registry, whatever the state backend: not
    // "requires the SQLite state backend" (it said so of a job that used it), but where it
    // is and what to do.
    let registry = env.home.join("registry.db");
    let out = env.mozart(&["history", "old", "-w", ws_arg]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        format!(
            "Error: Mozart conductor is not running: the execution history of every job is in its registry ({}), not in the workspace\n\nHints:\n  - Start the conductor (mozart start), then run: mozart history old\n",
            registry.display()
        )
    );
    let out = env.mozart(&["history", "old", "-w", ws_arg, "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["success"], false, "{doc}");
    assert_eq!(
        doc["hints"],
        json!(["Start the conductor (mozart start), then run: mozart history old"])
    );
    // A job whose state is only in the registry: the workspace has no state file, and the
    // hints say where the state is and to start the conductor (not "use --workspace", which
    // was given).
    for cmd in ["status", "errors", "diagnose"] {
        let out = env.mozart(&[cmd, "other", "-w", ws_arg]);
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        assert_eq!(
            stdout(&out),
            format!(
                "Error: Score not found: other\n\nHints:\n  - {ws_arg} has no other.json state file: a workspace holds one only for a score with `state_backend: json`; every job's state is in the conductor's registry ({})\n  - Start the conductor (mozart start), then run: mozart {cmd} other\n",
                registry.display()
            ),
            "{cmd}"
        );
    }
}

#[test]
fn logs_without_a_log_file_say_where_they_looked() {
    let env = TestEnv::new();
    let out = env.mozart(&["logs"]);
    assert_eq!(out.status.code(), Some(1));
    let expected = env.home.join("logs/conductor.log");
    assert!(
        stdout(&out).starts_with(&format!("No log files found at: {}\n", expected.display())),
        "{}",
        stdout(&out)
    );
    let out = env.mozart(&["logs", "-w", env.work.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains(&format!("{}", env.work.join("logs/mozart.log").display())));
}

/// `mozart logs --file PATH` (or `-w DIR`) where no file is said "Use --log-file or
/// --log-format=both with mozart run to enable file logging" — untrue here: `--log-file`
/// logs only the CLI and the conductor always writes its own log. The hint now names that
/// log; `--help` lists every level `--level` takes (CRITICAL too).
#[test]
fn logs_of_a_missing_file_name_the_conductors_log() {
    let env = TestEnv::new();
    let conductor_log = env.home.join("logs/conductor.log");
    let missing = env.work.join("nonexistent.log");
    let out = env.mozart(&["logs", "--file", missing.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.starts_with(&format!("No log files found at: {}\n", missing.display())),
        "{text}"
    );
    assert!(!text.contains("--log-file"), "{text}");
    assert!(
        text.contains(&format!(
            "Check the path given with --file. Mozart's log is the conductor's, {}",
            conductor_log.display()
        )),
        "{text}"
    );
    let out = env.mozart(&["logs", "-w", env.work.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(!text.contains("--log-file"), "{text}");
    assert!(
        text.contains("no per-workspace logs/mozart.log")
            && text.contains(&conductor_log.display().to_string()),
        "{text}"
    );
    let help = stdout(&env.mozart(&["logs", "--help"]));
    assert!(
        help.contains("DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        "{help}"
    );
}

#[test]
fn logs_read_upstream_json_files_with_filters() {
    let env = TestEnv::new();
    let file = env.work.join("mozart.log");
    std::fs::write(
        &file,
        [
            r#"{"event": "job.started", "level": "info", "timestamp": "2026-03-01T09:00:00.123+00:00", "component": "runner", "job_id": "a", "sheet_num": 1, "attempt": 2}"#,
            r#"{"event": "job.failed", "level": "error", "timestamp": "2026-03-01T09:00:05+00:00", "component": "runner", "job_id": "a"}"#,
            r#"{"event": "other", "level": "warning", "timestamp": "2026-03-01T09:00:06+00:00", "job_id": "b"}"#,
            "",
            "not json at all",
        ]
        .join("\n"),
    )
    .unwrap();
    let f = file.to_str().unwrap();

    let out = env.mozart(&["logs", "--file", f]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        format!(
            "Log file: {f}\n\
             09:00:00 INFO    runner a sheet:1 job.started attempt=2\n\
             09:00:05 ERROR   runner a job.failed\n\
             09:00:06 WARNING b other\n\
             not json at all\n"
        )
    );
    let out = env.mozart(&["logs", "a", "-f", f, "--level", "WARNING"]);
    assert_eq!(
        stdout(&out),
        format!("Log file: {f}\n09:00:05 ERROR   runner a job.failed\n")
    );
    let out = env.mozart(&["logs", "-f", f, "--json", "-n", "2"]);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let last: Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(last, json!({"event": "not json at all", "_raw": true}));

    let out = env.mozart(&["logs", "-f", f, "-l", "loud"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        "Invalid log level: loud\nValid levels: DEBUG, INFO, WARNING, ERROR, CRITICAL\n"
    );

    let empty = env.work.join("empty.log");
    std::fs::write(&empty, "").unwrap();
    let out = env.mozart(&["-q", "logs", "-f", empty.to_str().unwrap()]);
    assert_eq!(stdout(&out), "No log entries found.\n");
}

#[test]
fn follow_prints_new_entries_survives_rotation_and_stops_on_ctrl_c() {
    let env = TestEnv::new();
    let file = env.work.join("follow.log");
    std::fs::write(&file, "{\"event\": \"old\", \"job_id\": \"x\"}\n").unwrap();
    let mut child = env
        .command(&["logs", "x", "--follow", "--file", file.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in reader.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |needle: &str| -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("no {needle:?}; saw {seen:?}"));
            let hit = line.contains(needle);
            seen.push(line);
            if hit {
                return seen;
            }
        }
    };
    let head = wait_for("Press Ctrl+C to stop");
    assert!(head.iter().all(|l| !l.contains("old")), "{head:?}");
    let append = |text: &str| {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    };
    append("{\"event\": \"other job\", \"job_id\": \"y\"}\n");
    append("{\"event\": \"fresh\", \"job_id\": \"x\", \"level\": \"info\"}\n");
    let seen = wait_for("fresh");
    assert!(seen.iter().all(|l| !l.contains("other job")), "{seen:?}");

    // Rotation: the file goes away and a new one appears.
    std::fs::remove_file(&file).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    std::fs::write(
        &file,
        "{\"event\": \"after rotation\", \"job_id\": \"x\"}\n",
    )
    .unwrap();
    let seen = wait_for("after rotation");
    assert!(
        seen.iter().any(|l| l.contains("Log file rotated")),
        "{seen:?}"
    );

    signal(child.id(), "INT");
    let seen = wait_for("Stopped following logs.");
    assert!(!seen.is_empty());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}
