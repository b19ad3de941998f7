//! Issue 24, the engine half: what a user sees of the limits and the disk when jobs get
//! large — the sheet limit at `validate`, the per-sheet log files left in the workspace,
//! and the registry's WAL after a job.

use std::time::{Duration, Instant};

use mozart_tests::{stdout, TestEnv};

fn fan_out_score(name: &str, voices: u64) -> String {
    format!(
        "name: {name}\nworkspace: ./{name}-ws\ninstrument: shell\n\
         sheet:\n  size: 1\n  total_items: 1\n  fan_out:\n    1: {voices}\n\
         prompt:\n  template: \"RUN: true\"\n"
    )
}

/// The limit is 100,000 sheets: a score of exactly that many validates, one more is refused
/// by `validate` naming the limit, why it exists and what to do instead.
#[test]
fn a_score_over_the_sheet_limit_is_refused_at_validate_with_the_limit_and_the_reason() {
    let env = TestEnv::new();
    let at = env.write_score("at-limit", &fan_out_score("at-limit", 100_000));
    let out = env.mozart(&["validate", at.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "100,000 sheets are within the limit:\n{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );

    let over = env.write_score("over-limit", &fan_out_score("over-limit", 100_001));
    let out = env.mozart(&["validate", over.to_str().unwrap()]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "refused: {:?}\n{text}",
        out.status
    );
    assert!(text.contains("score plans 100001 sheets"), "{text}");
    assert!(text.contains("at most 100000 are supported"), "{text}");
    assert!(
        text.contains("tracked by the conductor and the registry"),
        "the reason: {text}"
    );
    assert!(
        text.contains("split the work over several scores"),
        "{text}"
    );
}

/// A sheet whose instrument printed nothing on a stream leaves no empty log file for it
/// (a 100,000-sheet job left 200,000 files, half of them empty); what was printed is kept.
/// (The sheets run past the second after which output goes to a file: a quicker, short one
/// leaves none, logs_quick.rs.)
#[test]
fn silent_streams_leave_no_empty_log_files_and_printed_output_stays() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: quiet\nworkspace: ./quiet-ws\ninstrument: shell\n\
                pause_between_sheets_seconds: 0\n\
                sheet: {size: 1, total_items: 2}\n\
                prompt:\n  template: |\n    \
                {% if sheet_num == 1 %}RUN: echo hello-out; sleep 1.2{% else %}RUN: echo hello-err >&2; sleep 1.2{% endif %}\n";
    let score = env.write_score("quiet", yaml);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("quiet");
    let logs = env.work.join("quiet-ws/logs");
    let out1 = std::fs::read_to_string(logs.join("sheet-01.stdout.log")).unwrap();
    assert!(out1.contains("hello-out"), "{out1}");
    assert!(
        !logs.join("sheet-01.stderr.log").exists(),
        "sheet 1 printed nothing on stderr: no stderr log"
    );
    let err2 = std::fs::read_to_string(logs.join("sheet-02.stderr.log")).unwrap();
    assert!(err2.contains("hello-err"), "{err2}");
    assert!(
        !logs.join("sheet-02.stdout.log").exists(),
        "sheet 2 printed nothing on stdout: no stdout log"
    );
    env.stop_conductor();
}

/// A sheet's log holds its last attempt's output only, whatever earlier attempt of its job
/// wrote one: a retried attempt, an earlier run of the job in this conductor, a run before
/// the conductor started. The conductor skips the look for an earlier log when it knows there
/// is none (issue 24): what it knows must cover all three. Another job's run in the same
/// workspace writes in its own `logs/{job_id}/` and leaves the first job's logs as they are.
#[test]
fn a_silent_attempt_leaves_no_earlier_attempts_log() {
    let env = TestEnv::new();
    let logs = env.work.join("relog-ws/logs");
    std::fs::create_dir_all(&logs).unwrap();
    // A run of relog-a before the conductor started: its claim on `logs/` and a log.
    std::fs::write(logs.join(mozart_ipc::paths::SHEET_LOGS_OWNER), "relog-a\n").unwrap();
    std::fs::write(logs.join("sheet-03.stderr.log"), "from a run before\n").unwrap();
    env.start_conductor();
    let first = "name: relog-a\nworkspace: ./relog-ws\ninstrument: shell\n\
                 pause_between_sheets_seconds: 0\n\
                 retry: {max_retries: 2, base_delay_seconds: 1, jitter: false}\n\
                 sheet: {size: 1, total_items: 3}\n\
                 prompt:\n  template: |\n    \
                 {% if sheet_num == 1 %}RUN: if [ -e tried ]; then echo ok; else touch tried; echo first-attempt-err >&2; sleep 1.2; exit 1; fi\
                 {% elif sheet_num == 2 %}RUN: if [ -e rerun ]; then echo quiet-two; else echo a-two-err >&2; sleep 1.2; fi\
                 {% else %}RUN: echo quiet{% endif %}\n";
    let score_a = env.write_score("relog-a", first);
    let out = env.mozart(&["run", score_a.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("relog-a");
    assert!(
        !logs.join("sheet-01.stderr.log").exists(),
        "sheet 1's second attempt printed nothing on stderr: its first attempt's log is gone"
    );
    assert!(
        !logs.join("sheet-03.stderr.log").exists(),
        "sheet 3 printed nothing on stderr: the log of a run before the conductor started is gone"
    );
    let two = std::fs::read_to_string(logs.join("sheet-02.stderr.log")).unwrap();
    assert!(two.contains("a-two-err"), "{two}");

    let second = "name: relog-b\nworkspace: ./relog-ws\ninstrument: shell\n\
                  pause_between_sheets_seconds: 0\n\
                  sheet: {size: 1, total_items: 2}\n\
                  prompt:\n  template: \"RUN: echo b\"\n";
    let score = env.write_score("relog-b", second);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("relog-b");
    let two = std::fs::read_to_string(logs.join("sheet-02.stderr.log")).unwrap();
    assert!(
        two.contains("a-two-err"),
        "the other job's run leaves relog-a's log: {two}"
    );
    assert!(
        logs.join("relog-b").is_dir() && !logs.join("relog-b/sheet-02.stdout.log").exists(),
        "relog-b's short output is in the registry, no file (issue 24), in its own directory"
    );

    // relog-a again: its sheet 2 now prints nothing on stderr, and its earlier log is gone.
    std::fs::write(env.work.join("relog-ws/rerun"), "").unwrap();
    let out = env.mozart(&["run", score_a.to_str().unwrap(), "--fresh"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("relog-a");
    assert!(
        !logs.join("sheet-02.stderr.log").exists(),
        "sheet 2 printed nothing on stderr this run: the earlier run's log is gone"
    );
    env.stop_conductor();
}

/// After a job, once the conductor has gone quiet, the registry's WAL does not keep the
/// size the job's writes gave it (it stayed at 104 MB after a 10,000-sheet job).
#[test]
fn the_registry_wal_is_truncated_once_the_conductor_is_quiet() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: walgrow\nworkspace: ./walgrow-ws\ninstrument: shell\n\
                pause_between_sheets_seconds: 0\n\
                parallel: {enabled: true, max_concurrent: 20}\n\
                sheet: {size: 1, total_items: 1, fan_out: {1: 300}}\n\
                prompt:\n  template: \"RUN: true\"\n";
    let score = env.write_score("walgrow", yaml);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("walgrow");
    let wal = env.home.join("registry.db-wal");
    let size = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    // Emptied, then started over by the checkpointer (its header and one 4 KiB page), so
    // that the next commit need not sync a new WAL header itself.
    let one_frame = 32 + 24 + 4096;
    let deadline = Instant::now() + Duration::from_secs(10);
    while size() > one_frame && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        size() <= one_frame,
        "the WAL is emptied once nothing is written: {} bytes",
        size()
    );
    // Nothing was lost by it: the job and its sheets are still there.
    let out = env.mozart(&["status", "walgrow", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["status"], "completed", "{doc}");
    env.stop_conductor();
}

/// A score whose first sheet is quick (`RUN: true`) and whose later sheets run `later`.
fn first_quick_then(name: &str, sheets: u32, later: &str) -> String {
    format!(
        "name: {name}\nworkspace: ./{name}-ws\ninstrument: shell\n\
         pause_between_sheets_seconds: 0\n\
         sheet: {{size: 1, total_items: {sheets}}}\n\
         prompt:\n  template: |\n    \
         {{% if sheet_num == 1 %}}RUN: true{{% else %}}RUN: {later}{{% endif %}}\n"
    )
}

/// `job.watch` — `mozart run`'s early-failure look in one call (issue 24): it answers as soon
/// as the job's first sheet completed, or at once for a job waiting for a job slot, instead
/// of `run` polling for 1.5 s per score.
#[test]
fn job_watch_answers_when_the_first_sheet_completes_or_the_job_waits_for_a_slot() {
    let env = TestEnv::new();
    std::fs::write(env.home.join("conductor.yaml"), "max_concurrent_jobs: 1\n").unwrap();
    env.start_conductor();
    let yaml = |name: &str| first_quick_then(name, 2, "sleep 30");
    let watch = |job: &str| {
        let started = Instant::now();
        let doc = env.raw_call(
            "job.watch",
            serde_json::json!({"job_id": job, "timeout_ms": 5000}),
        );
        (doc, started.elapsed())
    };
    let first = env.write_score("first", &yaml("first"));
    let out = env.mozart(&["run", first.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let (doc, took) = watch("first");
    let result = &doc["result"];
    assert_eq!(result["sheet_completed"], true, "{doc}");
    assert_eq!(result["status"], "running", "{doc}");
    assert_eq!(result["timed_out"], false, "{doc}");
    assert!(took < Duration::from_secs(4), "answered at once: {took:?}");

    // One job slot, taken by `first` (its sheet 2 sleeps): `second` waits for it.
    let second = env.write_score("second", &yaml("second"));
    let out = env.mozart(&["run", second.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let (doc, took) = watch("second");
    let result = &doc["result"];
    assert_eq!(result["status"], "queued", "{doc}");
    assert_eq!(result["sheet_completed"], false, "{doc}");
    assert_eq!(result["timed_out"], false, "{doc}");
    assert!(took < Duration::from_secs(4), "answered at once: {took:?}");

    let doc = env.raw_call(
        "job.watch",
        serde_json::json!({"job_id": "nosuch", "timeout_ms": 100}),
    );
    assert!(
        doc["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("nosuch")),
        "{doc}"
    );
    env.mozart(&["cancel", "first"]);
    env.mozart(&["cancel", "second"]);
    env.stop_conductor();
}

/// `job.watch` with `until_done` (ours): a client that waits for a job's end without polling
/// its status (the benchmark does, so that it measures the conductor instead of its own
/// polls). It answers when the job ends — not at its first completed sheet — and, when its
/// time runs out first, says so with the status the job is in.
#[test]
fn job_watch_until_done_answers_when_the_job_ends_not_at_its_first_sheet() {
    let env = TestEnv::new();
    env.start_conductor();
    // A job whose first sheet completes at once and whose later ones run `later`.
    let submit = |name: &str, later: &str| {
        let score = env.write_score(name, &first_quick_then(name, 3, later));
        let out = env.mozart(&["run", score.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    };
    let watch = |job: &str, timeout_ms: u64| {
        let started = Instant::now();
        let doc = env.raw_call(
            "job.watch",
            serde_json::json!({"job_id": job, "timeout_ms": timeout_ms, "until_done": true}),
        );
        (doc, started.elapsed())
    };

    submit("done", "sleep 0.5");
    let (doc, _) = watch("done", 5000);
    let result = &doc["result"];
    assert_eq!(result["status"], "completed", "{doc}");
    assert_eq!(result["timed_out"], false, "{doc}");
    let out = env.mozart(&["status", "done", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["status"], "completed", "{status}");

    // Time runs out before the job ends: the answer says so, with the job still running.
    submit("slow", "sleep 30");
    let (doc, took) = watch("slow", 700);
    let result = &doc["result"];
    assert_eq!(result["status"], "running", "{doc}");
    assert_eq!(result["sheet_completed"], true, "{doc}");
    assert_eq!(result["timed_out"], true, "{doc}");
    assert!(
        took >= Duration::from_millis(600),
        "waited its time: {took:?}"
    );
    // Watches given up on one after another (each caller gone when its time ran out) leave
    // the next one waiting as before.
    for _ in 0..20 {
        let (doc, _) = watch("slow", 20);
        assert_eq!(doc["result"]["timed_out"], true, "{doc}");
    }

    // A cancel ends it: a watch waiting then answers with the end.
    let canceller = std::thread::scope(|scope| {
        let waiting = scope.spawn(|| watch("slow", 5000));
        std::thread::sleep(Duration::from_millis(300));
        let out = env.mozart(&["cancel", "slow"]);
        assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
        waiting.join().unwrap()
    });
    let (doc, took) = canceller;
    let result = &doc["result"];
    assert_eq!(result["status"], "cancelled", "{doc}");
    assert_eq!(result["timed_out"], false, "{doc}");
    assert!(
        took < Duration::from_secs(4),
        "answered at the cancel: {took:?}"
    );
    env.stop_conductor();
}

/// `job.submit` with `watch_ms` (ours) — how `mozart run` submits (issue 24): the answer
/// comes once the accepted job shows how it goes, and says where it stood (`watched`), so
/// the early-failure look needs no second call while the job's first sheet starts. Without
/// it the answer is upstream's, at once; `mozart run --json` still prints upstream's shape,
/// and a job that fails at once is still reported failed.
#[test]
fn a_submission_that_asks_to_wait_is_answered_once_the_first_sheet_completed() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = |name: &str, first: &str| {
        format!(
            "name: {name}\nworkspace: ./{name}-ws\ninstrument: shell\n\
             pause_between_sheets_seconds: 0\n\
             sheet: {{size: 1, total_items: 2}}\n\
             prompt:\n  template: |\n    \
             {{% if sheet_num == 2 %}}RUN: sleep 30{{% else %}}RUN: {first}{{% endif %}}\n"
        )
    };
    let waited = env.write_score("waited", &yaml("waited", "true"));
    let started = Instant::now();
    let doc = env.raw_call(
        "job.submit",
        serde_json::json!({"config_path": waited.to_str().unwrap(), "watch_ms": 5000}),
    );
    let took = started.elapsed();
    let result = &doc["result"];
    assert_eq!(result["status"], "accepted", "{doc}");
    assert_eq!(result["watched"]["job_id"], "waited", "{doc}");
    assert_eq!(result["watched"]["sheet_completed"], true, "{doc}");
    assert_eq!(result["watched"]["status"], "running", "{doc}");
    assert_eq!(result["watched"]["timed_out"], false, "{doc}");
    assert!(
        took < Duration::from_secs(4),
        "answered at sheet 1: {took:?}"
    );
    // Sheet 1 completed when the answer came: the job says so too.
    let status = env.raw_call("job.status", serde_json::json!({"job_id": "waited"}));
    assert_eq!(
        status["result"]["sheets"]["1"]["status"], "completed",
        "{status}"
    );

    let plain = env.write_score("plain", &yaml("plain", "true"));
    let doc = env.raw_call(
        "job.submit",
        serde_json::json!({"config_path": plain.to_str().unwrap()}),
    );
    let mut keys: Vec<&String> = doc["result"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["job_id", "message", "status"],
        "upstream's shape: {doc}"
    );

    let json = env.write_score("json", &yaml("json", "true"));
    let out = env.mozart(&["run", json.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut keys: Vec<&String> = printed.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["job_id", "message", "status"], "{printed}");

    let broken = env.write_score("broken", &yaml("broken", "exit 3"));
    let out = env.mozart(&["run", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("The score has already failed: broken"),
        "{}",
        stdout(&out)
    );
    for job in ["waited", "plain", "json"] {
        env.mozart(&["cancel", job]);
    }
    env.stop_conductor();
}

/// An output log is made when its stream prints, not when the instrument starts: while a
/// sheet runs and has printed nothing, its workspace holds no log file for it (each sheet
/// used to create two files, most of them removed again empty — the kernel's file creation
/// was the largest cost of many short sheets). What the sheet prints is still all there.
#[test]
fn output_logs_appear_when_a_stream_prints() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: lazy\nworkspace: ./lazy-ws\ninstrument: shell\n\
                sheet: {size: 1, total_items: 1}\n\
                prompt:\n  template: |\n    \
                RUN: touch {{ workspace }}/started && \
                while [ ! -e {{ workspace }}/go ]; do sleep 0.05; done; echo printed-late\n";
    let score = env.write_score("lazy", yaml);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let ws = env.work.join("lazy-ws");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ws.join("started").exists() {
        assert!(Instant::now() < deadline, "sheet 1 never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let logs = ws.join("logs");
    for name in ["sheet-01.stdout.log", "sheet-01.stderr.log"] {
        assert!(
            !logs.join(name).exists(),
            "sheet 1 runs and has printed nothing yet: no {name}"
        );
    }
    // Past the first second: what the sheet prints from now on goes to a file (a sheet over
    // sooner, having printed little, leaves none: issue 24).
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(ws.join("go"), "").unwrap();
    env.wait_completed("lazy");
    let out1 = std::fs::read_to_string(logs.join("sheet-01.stdout.log")).unwrap();
    assert_eq!(out1, "printed-late\n");
    assert!(!logs.join("sheet-01.stderr.log").exists());
    env.stop_conductor();
}
