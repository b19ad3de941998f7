//! The dashboard and the MCP server say what `mozart status` says: a sheet parked on a rate
//! limit is waiting, not running; a job's running sheets are the job's whatever page is
//! asked for; the progress chart counts done sheets as the header does; the errors table
//! lists what `mozart errors` lists.

use mozart_tests::{stdout, web, TestEnv};
use serde_json::Value;

/// The `status` tool's document of each call's reply.
fn mcp_docs(env: &TestEnv, calls: &[Value]) -> Vec<Value> {
    web::mcp_calls(env, calls)
        .iter()
        .map(|r| {
            let text = r["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default();
            serde_json::from_str(text).unwrap_or_else(|_| panic!("{r}"))
        })
        .collect()
}

/// The job page's HTML, as a logged-in browser gets it.
fn job_page(env: &TestEnv, path: &str) -> String {
    let dash = web::start_dashboard(env, &[]);
    let cookie = web::login(&dash.addr, &dash.url);
    let page = web::http(&dash.addr, "GET", path, &[("Cookie", &cookie)], "");
    assert_eq!(page.status, 200, "{}", page.raw);
    page.body
}

/// A sheet waiting out a rate limit was `in_progress` in MCP `status` (and among its
/// `running_sheets`) and on the dashboard's sheet table and timeline, while `mozart status`
/// said "waiting (rate limit, … left)"; after a restart MCP said `pending`. Every view now
/// says it waits, and for how long, before and after a restart.
#[test]
fn a_sheet_waiting_out_a_rate_limit_is_waiting_in_mcp_and_on_the_dashboard() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: rl\nworkspace: ./rl-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {size: 1, total_items: 2}\nprompt:\n  template: |\n    \
         RUN: echo 'HTTP 429 Too Many Requests: rate limit exceeded, retry after 600 seconds'; exit 1\n";
    let score = env.write_score("rl", yaml);
    crate::harness::run(&env, &score, &[]);
    crate::harness::wait_status(&env, "rl", 30.0, |d| {
        d["sheets"]["1"]["rate_limit"].is_object()
    });
    let check = |when: &str| {
        let text = stdout(&env.mozart(&["status", "rl", "--sheets"]));
        assert!(text.contains("waiting (rate limit, "), "{when}: {text}");
        let docs = mcp_docs(
            &env,
            &[serde_json::json!({"name": "status", "arguments": {"job_id": "rl"}})],
        );
        let doc = &docs[0];
        assert_eq!(
            doc["running_sheets"],
            serde_json::json!([]),
            "{when}: {doc:#}"
        );
        let sheet = &doc["sheets"][0];
        assert_eq!(sheet["status"], "waiting", "{when}: {doc:#}");
        assert!(
            sheet["state"]
                .as_str()
                .is_some_and(|s| s.starts_with("waiting (rate limit, ") && s.ends_with(" left)")),
            "{when}: {doc:#}"
        );
        let page = job_page(&env, "/jobs/rl");
        assert!(
            page.contains(r#"data-sheet="1" data-status="waiting""#),
            "{when}: {page}"
        );
        assert!(page.contains("waiting (rate limit, "), "{when}: {page}");
        assert!(
            !page.contains("in_progress"),
            "nothing on the page says the parked sheet runs ({when}): {page}"
        );
    };
    check("while the conductor waits");
    let pid = env.conductor_pid().unwrap();
    mozart_tests::signal(pid, "KILL");
    crate::harness::poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    env.start_conductor();
    crate::harness::wait_status(&env, "rl", 30.0, |d| {
        d["sheets"]["1"]["rate_limit"].is_object()
    });
    check("after a restart");
    env.mozart(&["cancel", "rl"]);
}

