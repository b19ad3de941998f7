//! `mozart status` of a job of more than 10,000 sheets *while it runs* (issue 24): the answer
//! stays small (the score's per-voice stage map is not in it), and a page of completed sheets
//! shows each one whole — output tail, validation details — although the conductor no longer
//! keeps those details in memory once a sheet's row is saved. Pausing such a job (which
//! writes its checkpoint), resuming it and `kill -9` of the conductor lose none of them and
//! run no completed sheet again.

use crate::harness;

use harness::{poll, submit_now, wait_status};
use mozart_tests::{stdout, TestEnv};
use serde_json::{json, Value};

/// More sheets than a whole `job.status` answer lists (10,000).
const SHEETS: u32 = 10_040;

/// One movement fanned out to [`SHEETS`] voices on the `shell` instrument, 20 at a time;
/// each notes its run in `ledger.txt`, prints `said-N` and writes the file its validation
/// looks for.
fn score(name: &str) -> String {
    format!(
        r#"name: {name}
workspace: ./{name}-ws
instrument: shell
sheet:
  size: 1
  total_items: 1
  fan_out:
    1: {SHEETS}
parallel:
  enabled: true
  max_concurrent: 20
pause_between_sheets_seconds: 0
prompt:
  template: |
    RUN: echo {{{{ sheet_num }}}} >> ledger.txt
    RUN: echo said-{{{{ sheet_num }}}}
    RUN: touch out-{{{{ sheet_num }}}}.txt
retry:
  max_retries: 0
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
    description: "the voice's file exists"
"#
    )
}

/// `job.status` with a sheet query, as `mozart status` sends it.
fn status(env: &TestEnv, id: &str, sheets: Value) -> Value {
    let reply = env.raw_call("job.status", json!({"job_id": id, "sheets": sheets}));
    assert!(reply.get("error").is_none(), "{reply:#}");
    reply["result"].clone()
}

/// The first `limit` completed sheets, each checked to be shown whole.
fn completed_page_is_whole(env: &TestEnv, id: &str, limit: u32, when: &str) {
    let page = status(
        env,
        id,
        json!({"mode": "page", "states": ["completed"], "limit": limit}),
    );
    let sheets = page["sheets"].as_object().expect("sheets map");
    assert_eq!(sheets.len(), limit as usize, "{when}: {page:#}");
    for (num, sheet) in sheets {
        let said = format!("said-{num}");
        assert!(
            sheet["stdout_tail"]
                .as_str()
                .is_some_and(|t| t.contains(&said)),
            "{when}: sheet {num}'s output tail is shown: {sheet:#}"
        );
        assert_eq!(
            sheet["passed_validations"],
            json!(["the voice's file exists"]),
            "{when}: sheet {num}: {sheet:#}"
        );
        let details = sheet["validation_details"].as_array();
        assert!(
            details.is_some_and(|d| d.len() == 1 && d[0]["passed"] == true),
            "{when}: sheet {num}'s validation details are shown: {sheet:#}"
        );
    }
}

#[test]
fn status_of_a_large_running_job_is_small_and_shows_completed_sheets_whole() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("wide", &score("wide"));
    submit_now(&env, &path);
    wait_status(&env, "wide", 300.0, |d| {
        d["status"] == "running" && d["progress"]["completed"].as_u64() >= Some(300)
    });

    // The summary of the running job: bounded, and the score without its stage map (one
    // entry per voice); the rest of the score is there.
    let reply = env.raw_call(
        "job.status",
        json!({"job_id": "wide", "sheets": {"mode": "summary"}}),
    );
    let size = reply.to_string().len();
    let summary = &reply["result"];
    assert_eq!(summary["status"], "running", "{summary:#}");
    assert_eq!(summary["sheets_view"]["total"], SHEETS, "{summary:#}");
    let sheet_cfg = &summary["config_snapshot"]["sheet"];
    assert_eq!(sheet_cfg["size"], 1, "{sheet_cfg:#}");
    assert!(
        sheet_cfg.get("fan_out_stage_map").is_none(),
        "the per-voice stage map is left out of a view"
    );
    assert!(size < 64 * 1024, "the answer is bounded: {size} bytes");
    // Upstream's clients (no query) get the same bounded summary at this size.
    let plain = env.raw_call("job.status", json!({"job_id": "wide"}));
    let plain_size = plain.to_string().len();
    assert!(plain_size < 64 * 1024, "bounded: {plain_size} bytes");

    completed_page_is_whole(&env, "wide", 50, "while running");

    // Pausing writes the checkpoint: the completed sheets' rows stay whole.
    let out = env.mozart(&["pause", "wide"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    wait_status(&env, "wide", 120.0, |d| d["status"] == "paused");
    completed_page_is_whole(&env, "wide", 50, "paused");

    let out = env.mozart(&["resume", "wide"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // kill -9 in the middle; the restarted conductor carries on from the registry.
    let ws = env.work.join("wide-ws");
    let ledger = || std::fs::read_to_string(ws.join("ledger.txt")).unwrap_or_default();
    poll(&env, 600.0, "half of the sheets", || {
        (ledger().lines().count() as u32 >= SHEETS / 2).then_some(())
    });
    let pid = env.conductor_pid().expect("conductor pid file");
    mozart_tests::signal(pid, "KILL");
    poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    env.start_conductor();
    let done = wait_status(&env, "wide", 900.0, |d| {
        matches!(d["status"].as_str(), Some("completed" | "failed"))
    });
    assert_eq!(done["status"], "completed", "{done:#}");
    // Every sheet ran once and is recorded whole: the last page too.
    let counts = status(&env, "wide", json!({"mode": "summary"}));
    assert_eq!(
        counts["sheets_view"]["counts"]["completed"], SHEETS,
        "{counts:#}"
    );
    completed_page_is_whole(&env, "wide", 50, "after the end");
    let last = status(
        &env,
        "wide",
        json!({"mode": "page", "states": ["completed"], "offset": SHEETS - 5, "limit": 5}),
    );
    let nums: Vec<&String> = last["sheets"].as_object().unwrap().keys().collect();
    assert_eq!(nums.len(), 5, "{last:#}");
    let mut runs = vec![0u32; SHEETS as usize + 1];
    for line in ledger().lines() {
        runs[line.trim().parse::<usize>().unwrap()] += 1;
    }
    for n in 1..=SHEETS {
        assert!(runs[n as usize] >= 1, "sheet {n} never ran");
        assert!(ws.join(format!("out-{n}.txt")).exists(), "sheet {n}'s file");
    }
    // Only the attempts in flight at the kill (at most 20) may have run twice.
    let twice: u32 = runs.iter().map(|r| r.saturating_sub(1)).sum();
    assert!(twice <= 20, "{twice} sheets ran twice after one kill");
}
