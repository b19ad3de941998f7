//! An outside audit of the execution engine, as a user running jobs unattended: what a
//! `shell` sheet's failures do to the job and to other jobs, and what `mozart status`
//! says while a sheet waits or after a cost limit stopped it.

use crate::harness;

use harness::*;
use mozart_tests::TestEnv;

/// A one-sheet `shell` score running `script` with a file_exists validation on `out.txt`.
fn shell_score(env: &TestEnv, name: &str, script: &str, extra: &str) -> std::path::PathBuf {
    let ws = env.work.join(format!("{name}-ws"));
    let yaml = format!(
        r#"name: {name}
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
retry:
  max_retries: 2
  base_delay_seconds: 0.3
  jitter: false
sheet:
  size: 1
  total_items: 1
{extra}
prompt:
  template: |
    RUN: {script}
validations:
  - type: file_exists
    path: "{{workspace}}/out.txt"
"#,
        ws = ws.display()
    );
    env.write_score(name, &yaml)
}

/// A command failing with `EDQUOT` ("Disk quota exceeded") is a failure: retried, then the
/// job fails. It used to read as a rate limit (the word "quota"): the sheet waited on the
/// probe schedule forever (waits have no cap) and held every other job's shell sheets.
#[test]
fn a_full_disk_quota_fails_the_sheet_instead_of_waiting_forever() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = shell_score(
        &env,
        "edquot",
        r#"echo "cp: error writing 'big.bin': Disk quota exceeded" >&2; exit 1"#,
        "",
    );
    run(&env, &score, &[]);
    // The first probe of a rate-limit wait is 15 s away: a failure ends well before.
    let doc = wait_terminal(&env, "edquot", 12.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(doc["execution"]["rate_limit_waits"], 0, "{doc:#}");
    assert_eq!(sheet(&doc, 1)["attempt_count"], 2, "{doc:#}");
    let error = sheet(&doc, 1)["error_message"].as_str().unwrap_or_default();
    assert!(error.contains("Disk quota exceeded"), "{doc:#}");
    assert!(!error.contains("Rate limit"), "{doc:#}");
}
