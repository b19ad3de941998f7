//! What `status`, `list` and the dashboard say is what happens (issue 23, "States that are
//! not the state"): a paused job whose sheet still runs is *pausing*, a failed or cancelled
//! job's progress bar says so, durations are wall time, a skipped sheet is done.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../fixtures/e2e/harness.rs"]
mod harness;

use harness::{list_all, submit_now, wait_status};
use mozart_tests::web::{self, login, start_dashboard};
use mozart_tests::{sleepy_shell_score as score, stdout, TestEnv};

/// A dashboard page's body, logged in with the session cookie.
fn page(addr: &str, cookie: &str, path: &str) -> String {
    let r = web::http(addr, "GET", path, &[("Cookie", cookie)], "");
    assert_eq!(r.status, 200, "{path}: {}", r.raw);
    r.body
}

#[test]
fn a_paused_job_is_pausing_until_its_running_sheet_finishes() {
    let env = TestEnv::new();
    env.start_conductor();
    let dash = start_dashboard(&env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    let path = env.write_score("slowp", &score("slowp", 2, 6.0));
    submit_now(&env, &path);
    wait_status(&env, "slowp", 30.0, |d| {
        d["sheets"]["1"]["status"] == "in_progress"
    });
    let out = env.mozart(&["pause", "slowp"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // Sheet 1 still sleeps: the job is pausing, not paused, on every surface.
    let doc = harness::status(&env, "slowp");
    assert_eq!(doc["status"], "pausing", "{doc:#}");
    assert_eq!(doc["running_sheets"], 1, "{doc:#}");
    let text = stdout(&env.mozart(&["status", "slowp"]));
    assert!(text.contains("PAUSING (1 running)"), "{text}");
    let text = stdout(&env.mozart(&["list"]));
    assert!(text.contains("pausing (1 running)"), "{text}");
    let text = stdout(&env.mozart(&["status"]));
    assert!(text.contains("PAUSING (1 running)"), "{text}");
    let row = list_all(&env)
        .into_iter()
        .find(|j| j["job_id"] == "slowp")
        .expect("slowp listed");
    assert_eq!(row["status"], "pausing", "{row:#}");
    assert_eq!(row["pausing"], 1, "{row:#}");
    let jobs = page(&dash.addr, &cookie, "/jobs");
    assert!(jobs.contains("pausing (1 running)"), "{jobs}");
    let job = page(&dash.addr, &cookie, "/jobs/slowp");
    assert!(job.contains("pausing (1 running)"), "{job}");
    // A script waiting for the pause does not return while the sheet still works.
    let waited = env.mozart(&["wait", "slowp", "--timeout", "1"]);
    assert_ne!(waited.status.code(), Some(4), "{}", stdout(&waited));

    // Once the sheet has finished, the job is paused.
    let doc = wait_status(&env, "slowp", 30.0, |d| d["status"] == "paused");
    assert_eq!(doc["sheets"]["1"]["status"], "completed", "{doc:#}");
    assert!(doc.get("running_sheets").is_none(), "{doc:#}");
    let text = stdout(&env.mozart(&["status", "slowp"]));
    assert!(
        text.contains("PAUSED") && !text.contains("PAUSING"),
        "{text}"
    );
    let text = stdout(&env.mozart(&["list"]));
    assert!(
        text.contains("paused") && !text.contains("pausing"),
        "{text}"
    );
    let jobs = page(&dash.addr, &cookie, "/jobs");
    assert!(!jobs.contains("pausing"), "{jobs}");
    let waited = env.mozart(&["wait", "slowp", "--timeout", "10"]);
    assert_eq!(waited.status.code(), Some(4), "{}", stdout(&waited));
}
