//! `mozart status` of a large job (issue 24): a summary that fits a screen, with counts that
//! are true and the way to see more; `--sheets` pages through every sheet exactly once;
//! `--json` says how many sheets there are and what it left out.

use crate::harness;

use std::collections::BTreeSet;

use harness::{submit_now, wait_status};
use mozart_tests::{stdout, TestEnv};
use serde_json::Value;

/// Sheets of the large job: more than `status --json` lists whole (1,000).
const SHEETS: u32 = 1_200;

/// One movement fanned out to [`SHEETS`] voices on the `shell` instrument, 20 at a time;
/// every 100th voice fails (no retries), so the job ends failed with 12 failed sheets.
fn big_score(name: &str) -> String {
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
    {{% if instance % 100 == 0 %}}RUN: exit 3{{% else %}}RUN: true{{% endif %}}
retry:
  max_retries: 0
"#
    )
}

/// The sheets that fail in [`big_score`].
fn failing() -> BTreeSet<u32> {
    (1..=SHEETS).filter(|n| n % 100 == 0).collect()
}

/// Runs the large job to its end (failed) and returns the environment.
fn finished_big_job(name: &str) -> TestEnv {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score(name, &big_score(name));
    submit_now(&env, &path);
    wait_status(&env, name, 180.0, |d| d["status"] == "failed");
    env
}

fn status_json(env: &TestEnv, args: &[&str]) -> Value {
    let out = env.mozart(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stdout(&out));
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn status_of_a_large_job_is_a_bounded_summary_with_true_counts() {
    let env = finished_big_job("wide");
    let out = env.mozart(&["status", "wide"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    let lines = text.lines().count();
    assert!(
        lines <= 60,
        "a summary that fits a screen, got {lines} lines:\n{text}"
    );
    assert!(
        text.contains("1,200 sheets: 1,188 completed, 12 failed"),
        "true counts:\n{text}"
    );
    assert!(text.contains("Failed Sheets (12 of 12)"), "{text}");
    for n in failing() {
        assert!(
            text.contains(&format!("Sheet {n:>6}: failed")),
            "failed sheet {n} listed:\n{text}"
        );
    }
    assert!(
        text.contains("Movement 1 (sheets 1–1200, 1,200 sheets)"),
        "the movement with its counts:\n{text}"
    );
    assert!(
        text.contains("mozart status wide --sheets"),
        "says how to see every sheet:\n{text}"
    );

    // After a restart the job is read from the registry, not memory: the same truth.
    env.stop_conductor();
    env.start_conductor();
    let again = stdout(&env.mozart(&["status", "wide"]));
    assert!(
        again.contains("1,200 sheets: 1,188 completed, 12 failed"),
        "true counts from the registry:\n{again}"
    );
    assert!(again.contains("Failed Sheets (12 of 12)"), "{again}");
    let doc = status_json(
        &env,
        &[
            "status", "wide", "--json", "--state", "failed", "--limit", "1000",
        ],
    );
    let failed: BTreeSet<u32> = doc["sheets"]
        .as_object()
        .expect("sheets map")
        .keys()
        .map(|k| k.parse().expect("sheet number"))
        .collect();
    assert_eq!(failed, failing(), "the failed sheets, from the registry");
    assert_eq!(
        doc["sheets"]["100"]["error_message"],
        "Shell exited with code 3 (not retried: exit code 3 is not one Mozart retries; 1, 2 and 124 are)"
    );
}

#[test]
fn paging_returns_every_sheet_exactly_once() {
    let env = finished_big_job("paged");
    let mut seen: Vec<u32> = Vec::new();
    let mut offset = 0u64;
    let mut pages = 0;
    loop {
        let off = offset.to_string();
        let doc = status_json(
            &env,
            &[
                "status", "paged", "--sheets", "--json", "--offset", &off, "--limit", "500",
            ],
        );
        let view = &doc["sheets_view"];
        assert_eq!(view["total"], SHEETS, "{view:#}");
        assert_eq!(view["matched"], SHEETS, "{view:#}");
        let sheets = doc["sheets"].as_object().expect("sheets map");
        assert!(sheets.len() <= 500, "a page holds at most --limit sheets");
        seen.extend(
            sheets
                .keys()
                .map(|k| k.parse::<u32>().expect("sheet number")),
        );
        pages += 1;
        match view["next_offset"].as_u64() {
            Some(next) => offset = next,
            None => break,
        }
        assert!(pages < 10, "paging does not end: {view:#}");
    }
    seen.sort_unstable();
    assert_eq!(pages, 3);
    assert_eq!(seen, (1..=SHEETS).collect::<Vec<_>>(), "every sheet once");

    // Filtered: exactly the failed sheets, and the human page says where it is.
    let doc = status_json(
        &env,
        &[
            "status", "paged", "--json", "--state", "failed", "--limit", "1000",
        ],
    );
    let failed: BTreeSet<u32> = doc["sheets"]
        .as_object()
        .expect("sheets map")
        .keys()
        .map(|k| k.parse().expect("sheet number"))
        .collect();
    assert_eq!(failed, failing());
    let out = env.mozart(&[
        "status", "paged", "--sheets", "--state", "failed", "--limit", "5",
    ]);
    let text = stdout(&out);
    assert!(
        text.contains("Sheets 1–5 of 12 matching state failed (1,200 sheets in the job)."),
        "{text}"
    );
    assert!(
        text.contains(
            "Next page: mozart status paged --sheets --state failed --offset 5 --limit 5"
        ),
        "{text}"
    );
    // A state that is not one is refused, naming the flag's values.
    let out = env.mozart(&["status", "paged", "--state", "broken"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
}

#[test]
fn json_status_of_a_large_job_reports_total_and_what_was_cut() {
    let env = finished_big_job("cut");
    let out = env.mozart(&["status", "cut", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let size = out.stdout.len();
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        doc["progress"]["completed"],
        SHEETS - 12,
        "{}",
        doc["progress"]
    );
    assert_eq!(doc["progress"]["total"], SHEETS);
    let view = &doc["sheets_view"];
    assert_eq!(view["total"], SHEETS, "{view:#}");
    assert_eq!(view["truncated"], true, "{view:#}");
    assert_eq!(view["counts"]["completed"], SHEETS - 12, "{view:#}");
    assert_eq!(view["counts"]["failed"], 12, "{view:#}");
    let sheets = doc["sheets"].as_object().expect("sheets map");
    assert_eq!(view["returned"], sheets.len(), "{view:#}");
    let listed: BTreeSet<u32> = sheets.keys().map(|k| k.parse().unwrap()).collect();
    assert_eq!(listed, failing(), "the failed sheets are the ones listed");
    assert!(size < 64 * 1024, "bounded: {size} bytes");

    // Upstream's clients send no sheet query: a job of this size still gets every sheet,
    // in the shape they read.
    let reply = env.raw_call("job.status", serde_json::json!({"job_id": "cut"}));
    let result = &reply["result"];
    assert_eq!(
        result["sheets"].as_object().map(serde_json::Map::len),
        Some(SHEETS as usize),
        "{reply:#}"
    );
    assert!(result.get("sheets_view").is_none(), "no view key unasked");
}

/// A job whose every sheet fails: its error names the first few sheets and how many more,
/// not every one of them, in `status`, `status --json`, `wait` and `list --all --json`.
#[test]
fn a_job_with_many_failed_sheets_has_a_one_screen_error() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = big_score("allfail")
        .replace(&format!("1: {SHEETS}"), "1: 300")
        .replace(
            "{% if instance % 100 == 0 %}RUN: exit 3{% else %}RUN: true{% endif %}",
            "RUN: exit 3",
        );
    assert!(
        score.contains("1: 300") && !score.contains("RUN: true"),
        "{score}"
    );
    let path = env.write_score("allfail", &score);
    submit_now(&env, &path);
    let doc = wait_status(&env, "allfail", 180.0, |d| d["status"] == "failed");
    let error = doc["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        error.starts_with(
            "sheets [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] and 290 more failed — sheet 1: Shell exited with code 3"
        ),
        "the first sheets and how many more: {error}"
    );
    assert!(
        error.len() < 500,
        "one readable line: {} bytes",
        error.len()
    );

    let text = stdout(&env.mozart(&["status", "allfail"]));
    let line = text
        .lines()
        .find(|l| l.starts_with("Error: "))
        .unwrap_or_else(|| panic!("an Error line:\n{text}"));
    assert!(line.contains("and 290 more failed"), "{line}");
    assert!(line.len() < 500, "{line}");

    let out = env.mozart(&["wait", "allfail"]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("and 290 more failed"), "{text}");
    assert!(text.len() < 2_000, "wait says it in a few lines:\n{text}");

    let job = harness::list_all(&env)
        .into_iter()
        .find(|j| j["job_id"] == "allfail")
        .expect("the job is listed");
    assert_eq!(
        job["error_message"].as_str(),
        Some(error.as_str()),
        "{job:#}"
    );
}

/// `mozart diagnose` of a large job: an answer bounded whatever the job's size — the counts
/// of every sheet, the failed sheets listed, and the command that shows every failed one.
#[test]
fn diagnose_of_a_large_job_is_bounded_and_says_what_it_covers() {
    let env = finished_big_job("diag");
    let doc = status_json(&env, &["diagnose", "diag", "--json"]);
    assert_eq!(
        doc["progress"]["total_sheets"], SHEETS,
        "{:#}",
        doc["progress"]
    );
    assert_eq!(
        doc["progress"]["completed"],
        SHEETS - 12,
        "{:#}",
        doc["progress"]
    );
    assert_eq!(doc["progress"]["failed"], 12, "{:#}", doc["progress"]);
    let timeline = doc["execution_timeline"].as_array().expect("timeline");
    let listed: BTreeSet<u32> = timeline
        .iter()
        .map(|row| row["sheet_num"].as_u64().expect("sheet_num") as u32)
        .collect();
    assert_eq!(listed, failing(), "the failed sheets, not all 1,200");
    let cut = &doc["sheets_listed"];
    assert_eq!(cut["total_sheets"], SHEETS, "{cut:#}");
    assert_eq!(cut["listed"], 12, "{cut:#}");
    assert_eq!(cut["failed"], 12, "{cut:#}");
    assert_eq!(cut["failed_listed"], 12, "{cut:#}");
    assert_eq!(
        cut["see_failed"],
        "mozart status diag --sheets --state failed"
    );

    let text = stdout(&env.mozart(&["diagnose", "diag"]));
    assert!(
        text.contains("This report covers 12 of 1,200 sheets (12 of 12 failed); every failed sheet: mozart status diag --sheets --state failed"),
        "{text}"
    );
}

/// `mozart history` of a large job: a cut list says it is cut, with the true total and how
/// to see every record; `--limit 0` lists every one.
#[test]
fn history_of_a_large_job_says_it_is_cut_and_limit_0_lists_every_attempt() {
    let env = finished_big_job("hist");
    let out = env.mozart(&["history", "hist"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "Showing the newest 50 of 1,200 record(s); every one: mozart history hist --limit 0"
        ),
        "{text}"
    );
    assert!(!text.contains("Total: 50 record(s)"), "{text}");

    let doc = status_json(&env, &["history", "hist", "--json"]);
    assert_eq!(doc["total_records"], SHEETS, "the true total");
    assert_eq!(doc["returned"], 50);
    assert_eq!(doc["truncated"], true);
    assert_eq!(doc["records"].as_array().map(Vec::len), Some(50));

    let doc = status_json(&env, &["history", "hist", "--json", "--limit", "0"]);
    let sheets: BTreeSet<u64> = doc["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| r["sheet_num"].as_u64().expect("sheet_num"))
        .collect();
    assert_eq!(
        sheets.len(),
        SHEETS as usize,
        "every attempt: one per sheet"
    );
    assert_eq!(doc["total_records"], SHEETS);
    assert_eq!(doc["truncated"], false);
    let text = stdout(&env.mozart(&["history", "hist", "--limit", "0"]));
    assert!(
        text.contains("Total: 1200 record(s)"),
        "{}",
        &text[text.len().saturating_sub(300)..]
    );
}

/// A job that gets no sheet because another job's sheets fill every one of the conductor's
/// `max_concurrent_sheets` slots (default 10) says so, in `status`, `status --json` and the
/// dashboard's detail page; once a slot frees it runs and says nothing of slots.
#[test]
fn a_job_held_back_by_the_conductors_sheet_slots_says_why() {
    let env = TestEnv::new();
    env.start_conductor();
    let hog = r#"name: hog
workspace: ./hog-ws
instrument: shell
sheet:
  size: 1
  total_items: 1
  fan_out:
    1: 12
parallel:
  enabled: true
  max_concurrent: 20
pause_between_sheets_seconds: 0
prompt:
  template: |
    RUN: while [ ! -e "{{ workspace }}/../go" ]; do sleep 0.05; done
retry:
  max_retries: 0
"#;
    let small = r#"name: small
workspace: ./small-ws
instrument: shell
sheet:
  size: 1
  total_items: 3
pause_between_sheets_seconds: 0
prompt:
  template: |
    RUN: true
"#;
    let path = env.write_score("hog", hog);
    submit_now(&env, &path);
    wait_status(&env, "hog", 60.0, |d| {
        d["sheets"]
            .as_object()
            .is_some_and(|s| s.values().filter(|s| s["status"] == "in_progress").count() == 10)
    });
    let path = env.write_score("small", small);
    submit_now(&env, &path);
    let words = "waiting for a sheet slot: the conductor runs its max_concurrent_sheets (10) sheets for other jobs";
    let doc = wait_status(&env, "small", 60.0, |d| d["waiting_reason"] == words);
    assert_eq!(doc["status"], "running", "{doc:#}");
    let text = stdout(&env.mozart(&["status", "small"]));
    assert!(text.contains(&format!("Waiting: {words}")), "{text}");

    std::fs::write(env.work.join("go"), "").expect("gate");
    let doc = wait_status(&env, "small", 60.0, |d| d["status"] == "completed");
    assert!(doc["waiting_reason"].is_null(), "{doc:#}");
    wait_status(&env, "hog", 60.0, |d| d["status"] == "completed");
}
