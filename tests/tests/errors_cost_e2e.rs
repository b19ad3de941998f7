//! `mozart errors` lists every failed attempt of a sheet (from the conductor's attempt
//! history, not only the sheet's last error), and `cost_limits.max_cost_per_sheet` pauses
//! the job once a sheet spends more than it.

use mozart_tests::{stdout, TestEnv};
use serde_json::Value;

use crate::harness::{run, sheet, wait_terminal};

/// One sheet whose validation fails on its first three attempts and passes on the fourth:
/// each attempt bumps a counter file; the fourth writes the file the validation wants.
const THIRD_TIME_LUCKY: &str = r#"name: lucky
workspace: ./lucky-ws
instrument: shell
retry:
  max_retries: 4
  base_delay_seconds: 0.1
sheet:
  size: 1
  total_items: 1
prompt:
  template: |
    RUN: n=$(cat "{{ workspace }}/count" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "{{ workspace }}/count"
    RUN: if [ "$(cat "{{ workspace }}/count")" -ge 4 ]; then echo done > "{{ workspace }}/done.txt"; fi
validations:
  - type: file_exists
    path: "{workspace}/done.txt"
"#;

fn json_of(out: &std::process::Output, what: &str) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what} prints JSON: {e}: {}", stdout(out)))
}

#[test]
fn errors_list_every_failed_attempt_of_a_sheet_that_passed_in_the_end() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score("lucky", THIRD_TIME_LUCKY);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "lucky", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(sheet(&doc, 1)["attempt_count"], 4, "{doc:#}");

    let out = env.mozart(&["errors", "lucky", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let errors = json_of(&out, "errors --json");
    assert_eq!(errors["total_errors"], 3, "{errors:#}");
    let listed: Vec<(u64, u64, &str)> = errors["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["sheet_num"].as_u64().unwrap(),
                e["attempt_number"].as_u64().unwrap(),
                e["error_code"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![(1, 1, "E900"), (1, 2, "E900"), (1, 3, "E900")],
        "{errors:#}"
    );
    for e in errors["errors"].as_array().unwrap() {
        assert_eq!(e["error_type"], "permanent", "{e:#}");
        let message = e["error_message"].as_str().unwrap();
        assert!(message.contains("done.txt"), "{message}");
        assert!(e["timestamp"].as_str().unwrap().starts_with("20"), "{e:#}");
        assert_eq!(e["context"]["exit_code"], 0, "{e:#}");
    }
    let times: Vec<&str> = errors["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["timestamp"].as_str().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");

    // The table says the same; the filters still apply.
    let text = stdout(&env.mozart(&["errors", "lucky"]));
    assert!(text.contains("\nTotal: 3 error(s)\n"), "{text}");
    let only_sheet_2 = json_of(
        &env.mozart(&["errors", "lucky", "--json", "--sheet", "2"]),
        "errors --sheet 2",
    );
    assert_eq!(only_sheet_2["total_errors"], 0, "{only_sheet_2:#}");

    // `job.errors` carries them in the sheet's error_history, as upstream's CLI reads them.
    let answer = env.raw_call("job.errors", serde_json::json!({"job_id": "lucky"}));
    let history = &answer["result"]["state"]["sheets"]["1"]["error_history"];
    assert_eq!(history.as_array().map(Vec::len), Some(3), "{answer:#}");
    assert_eq!(history[2]["attempt_number"], 3, "{answer:#}");

    // diagnose lists them too.
    let report = json_of(
        &env.mozart(&["diagnose", "lucky", "--json"]),
        "diagnose --json",
    );
    let attempts: Vec<u64> = report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["attempt_number"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, vec![1, 2, 3], "{report:#}");
}
