//! `mozart errors` and `mozart diagnose` after `mozart run --fresh`: they listed the errors
//! of the job's earlier run (the registry keeps every attempt) as if this run had them. They
//! now show the current run's — a resume continues the run, so its earlier failures stay —
//! say how many errors earlier runs had, and `--all-runs` lists those too. `status`'s
//! Recent Errors and the MCP server's `errors` tool follow the same rule.

use mozart_tests::{stdout, TestEnv};
use serde_json::{json, Value};

/// One shell sheet that fails with `first-run-boom` until `ok` exists; no retry.
fn score(env: &TestEnv, ok: &std::path::Path) -> std::path::PathBuf {
    let yaml = format!(
        "name: again\nworkspace: ./again-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         retry: {{max_retries: 0}}\nsheet: {{size: 1, total_items: 1}}\nprompt:\n  template: |\n    \
         RUN: if [ ! -f '{}' ]; then echo 'first-run-boom: the API key is missing' >&2; exit 3; fi\n",
        ok.display()
    );
    env.write_score("again", &yaml)
}

fn json_of(env: &TestEnv, args: &[&str]) -> Value {
    let out = env.mozart(args);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?} prints JSON: {e}: {}", stdout(&out)))
}

#[test]
fn errors_after_a_fresh_run_are_that_runs_and_all_runs_lists_the_earlier_ones() {
    let env = TestEnv::new();
    env.start_conductor();
    let ok = env.root().join("key-ok");
    let path = score(&env, &ok);
    crate::harness::run(&env, &path, &[]);
    let doc = crate::harness::wait_terminal(&env, "again", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");

    // A resume is the same run: its earlier failure stays listed, nothing is "earlier".
    let out = env.mozart(&["resume", "again"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    crate::harness::wait_status(&env, "again", 60.0, |d| {
        d["status"] == "failed" && d["sheets"]["1"]["attempt_count"].as_u64() >= Some(2)
    });
    let resumed = json_of(&env, &["errors", "again", "--json"]);
    assert_eq!(resumed["total_errors"], 2, "{resumed:#}");
    assert_eq!(resumed["run"], 1, "{resumed:#}");
    assert_eq!(resumed["earlier_runs_errors_not_shown"], 0, "{resumed:#}");
    let text = stdout(&env.mozart(&["errors", "again"]));
    assert!(text.contains("first-run-boom"), "{text}");
    assert!(!text.contains("--all-runs"), "{text}");

    // The cause is fixed and the job runs again from scratch: it completes.
    std::fs::write(&ok, "").unwrap();
    crate::harness::run(&env, &path, &["--fresh"]);
    let doc = crate::harness::wait_terminal(&env, "again", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    assert!(
        doc.get("recent_attempt_errors").is_none(),
        "status's Recent Errors are this run's: {doc:#}"
    );
    let status = stdout(&env.mozart(&["status", "again"]));
    assert!(!status.contains("first-run-boom"), "{status}");

    let text = stdout(&env.mozart(&["errors", "again"]));
    assert!(
        !text.contains("first-run-boom"),
        "the earlier run's: {text}"
    );
    assert!(
        text.contains("Only this run's errors are shown (run 2, started afresh")
            && text.contains("2 errors of earlier runs are not: mozart errors again --all-runs"),
        "{text}"
    );
    let current = json_of(&env, &["errors", "again", "--json"]);
    assert_eq!(current["total_errors"], 0, "{current:#}");
    assert_eq!(current["run"], 2, "{current:#}");
    assert_eq!(current["all_runs"], false, "{current:#}");
    assert_eq!(current["earlier_runs_errors_not_shown"], 2, "{current:#}");

    let text = stdout(&env.mozart(&["errors", "again", "--all-runs"]));
    assert!(text.contains("first-run-boom"), "{text}");
    assert!(!text.contains("Only this run's"), "{text}");
    let all = json_of(&env, &["errors", "again", "--json", "--all-runs"]);
    assert_eq!(all["total_errors"], 2, "{all:#}");
    assert_eq!(all["all_runs"], true, "{all:#}");
    assert_eq!(all["earlier_runs_errors_not_shown"], 0, "{all:#}");

    let diag = stdout(&env.mozart(&["diagnose", "again"]));
    assert!(!diag.contains("first-run-boom"), "{diag}");
    assert!(
        diag.contains("2 errors of earlier runs are not: mozart diagnose again --all-runs"),
        "{diag}"
    );
    let diag = json_of(&env, &["diagnose", "again", "--json"]);
    assert_eq!(diag["earlier_runs_errors_not_shown"], 2, "{diag:#}");
    let diag = stdout(&env.mozart(&["diagnose", "again", "--all-runs"]));
    assert!(diag.contains("first-run-boom"), "{diag}");

    // `history` is the whole history, every run's attempts.
    let history = stdout(&env.mozart(&["history", "again"]));
    assert!(history.contains("Total: 3 record(s)"), "{history}");

    // The MCP server's `errors` tool.
    let replies = mozart_tests::web::mcp_calls(
        &env,
        &[
            json!({"name": "errors", "arguments": {"job_id": "again"}}),
            json!({"name": "errors", "arguments": {"job_id": "again", "all_runs": true}}),
        ],
    );
    let tool_doc = |i: usize| -> Value {
        let text = replies[i]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        serde_json::from_str(text).unwrap_or_else(|_| panic!("{}", replies[i]))
    };
    let (mcp, mcp_all) = (tool_doc(0), tool_doc(1));
    assert_eq!(mcp["error_count"], 0, "{mcp:#}");
    assert_eq!(mcp["earlier_runs_errors_not_shown"], 2, "{mcp:#}");
    assert_eq!(mcp_all["error_count"], 2, "{mcp_all:#}");
}

/// `--all-runs` lists at least what the default view does: a sheet that did not run in this
/// run (blocked by a failed dependency) but failed in an earlier one showed only the earlier
/// run's error, and this run's `not run` row disappeared (`Total: 2 errors` against the
/// default view's 2 of this run alone).
#[test]
fn all_runs_keeps_this_runs_not_run_rows() {
    let env = TestEnv::new();
    env.start_conductor();
    let flag = env.work.join("ar-flag");
    let yaml = format!(
        "name: ar\nworkspace: ./ar-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         retry: {{max_retries: 0}}\nsheet: {{size: 1, total_items: 2}}\nprompt:\n  template: |\n    \
         {{% if sheet_num == 1 %}}RUN: test ! -f '{}'{{% else %}}RUN: exit 1{{% endif %}}\n",
        flag.display()
    );
    let path = env.write_score("ar", &yaml);
    crate::harness::run(&env, &path, &[]);
    let doc = crate::harness::wait_terminal(&env, "ar", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    std::fs::write(&flag, "").unwrap();
    crate::harness::run(&env, &path, &["--fresh"]);
    crate::harness::wait_status(&env, "ar", 60.0, |d| {
        d["status"] == "failed" && d["sheets"]["1"]["attempt_count"] == 1
    });

    let rows = |doc: &Value| -> Vec<(u64, String, u64)> {
        doc["errors"]
            .as_array()
            .unwrap_or_else(|| panic!("errors: {doc:#}"))
            .iter()
            .map(|e| {
                (
                    e["sheet_num"].as_u64().unwrap_or(0),
                    e["error_code"].as_str().unwrap_or_default().to_string(),
                    e["attempt_number"].as_u64().unwrap_or(99),
                )
            })
            .collect()
    };
    let current = json_of(&env, &["errors", "ar", "--json"]);
    let this_run = rows(&current);
    assert_eq!(
        this_run,
        vec![(1, "E009".into(), 1), (2, "E999".into(), 0)],
        "{current:#}"
    );
    let all = json_of(&env, &["errors", "ar", "--json", "--all-runs"]);
    let every = rows(&all);
    for row in &this_run {
        assert!(
            every.contains(row),
            "{row:?} missing from --all-runs: {all:#}"
        );
    }
    assert!(
        every.contains(&(2, "E009".into(), 1)),
        "run 1's failure of sheet 2: {all:#}"
    );
    assert_eq!(all["total_errors"], every.len(), "{all:#}");
    let text = stdout(&env.mozart(&["errors", "ar", "--all-runs"]));
    assert!(text.contains("not run"), "{text}");
    // `diagnose --all-runs` lists the same errors.
    let diag = json_of(&env, &["diagnose", "ar", "--json", "--all-runs"]);
    assert_eq!(rows(&diag), every, "{diag:#}");
}

/// A sheet whose process ignored SIGTERM at its timeout was ended with SIGKILL: the error
/// says SIGKILL, not the SIGTERM its driver shell alone died of.
#[test]
fn a_timeout_that_needed_sigkill_says_so() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("deaf-ws");
    let yaml = format!(
        "name: deaf\nworkspace: {ws}\ninstrument: shell\nretry: {{max_retries: 0}}\n\
         sheet: {{size: 1, total_items: 1}}\nbackend: {{timeout_seconds: 3}}\n\
         prompt:\n  template: |\n    RUN: trap '' TERM; echo working; sleep 600\n",
        ws = ws.display()
    );
    let score = env.write_score("deaf", &yaml);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "run: {}", stdout(&out));
    let doc = crate::harness::wait_terminal(&env, "deaf", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let errors = stdout(&env.mozart(&["errors", "deaf", "-V"]));
    assert!(
        errors.contains("Process killed by SIGKILL due to timeout"),
        "{errors}"
    );
}
