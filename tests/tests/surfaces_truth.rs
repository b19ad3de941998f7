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

/// MCP `status` gave `running_sheets: [3]` without paging arguments, but `[]` with `limit:
/// 1` or `state: "failed"`: it listed the running sheets of the page, not of the job. The
/// job's running sheets now come whatever page is asked for (and the dashboard tails their
/// output on any page).
#[test]
fn running_sheets_are_the_jobs_whatever_page_is_asked_for() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml =
        "name: slow\nworkspace: ./slow-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {size: 1, total_items: 3}\nprompt:\n  template: |\n    \
         RUN: if [ {{ sheet_num }} = 3 ]; then echo sheet-three-runs; sleep 120; fi\n";
    let score = env.write_score("slow", yaml);
    crate::harness::run(&env, &score, &[]);
    crate::harness::wait_status(&env, "slow", 60.0, |d| {
        d["sheets"]["3"]["status"] == "in_progress"
    });
    let args = [
        serde_json::json!({"job_id": "slow"}),
        serde_json::json!({"job_id": "slow", "limit": 1}),
        serde_json::json!({"job_id": "slow", "state": "failed"}),
        serde_json::json!({"job_id": "slow", "state": "completed", "offset": 1}),
    ];
    let calls: Vec<Value> = args
        .iter()
        .map(|a| serde_json::json!({"name": "status", "arguments": a}))
        .collect();
    for (doc, asked) in mcp_docs(&env, &calls).iter().zip(&args) {
        assert_eq!(
            doc["running_sheets"],
            serde_json::json!([3]),
            "{asked}: {doc:#}"
        );
    }
    // The dashboard's page of completed sheets still tails the running sheet's output.
    crate::harness::poll(&env, 30.0, "sheet 3's output", || {
        stdout(&env.mozart(&["logs", "slow", "--sheet", "3"]))
            .contains("sheet-three-runs")
            .then_some(())
    });
    let page = job_page(&env, "/jobs/slow?state=completed");
    assert!(page.contains("Live output of running sheets"), "{page}");
    env.mozart(&["cancel", "slow"]);
}

/// mcp.md says a job's resource `mozart://jobs/<id>` is the `status` tool's document, but
/// for a large job `resources/read` returned every sheet (1.4 MB for 5,000) with
/// `"sheets_view": null` while the tool returned the capped summary. Both are now the same
/// document.
#[test]
fn a_large_jobs_resource_is_the_status_tools_capped_document() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml =
        "name: big\nworkspace: ./big-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {size: 1, total_items: 60}\nprompt:\n  template: |\n    RUN: true\n";
    let score = env.write_score("big", yaml);
    crate::harness::run(&env, &score, &[]);
    let done = crate::harness::wait_terminal(&env, "big", 120.0);
    assert_eq!(done["status"], "completed", "{done:#}");
    let replies = web::mcp_requests(
        &env,
        &[
            (
                "tools/call",
                serde_json::json!({"name": "status", "arguments": {"job_id": "big"}}),
            ),
            (
                "resources/read",
                serde_json::json!({"uri": "mozart://jobs/big"}),
            ),
        ],
    );
    let text = |v: &Value| -> Value {
        serde_json::from_str(v.as_str().unwrap_or_default()).unwrap_or(Value::Null)
    };
    let tool = text(&replies[0]["result"]["content"][0]["text"]);
    let resource = text(&replies[1]["result"]["contents"][0]["text"]);
    assert!(tool["sheets_view"].is_object(), "{tool:#}");
    assert_eq!(
        resource["sheets_view"], tool["sheets_view"],
        "{}",
        replies[1]
    );
    assert_eq!(resource["sheets"], tool["sheets"], "{}", replies[1]);
    assert_eq!(resource["sheets_done"], 60, "{}", replies[1]);
}

/// The lowest y (highest point) of the "sheets done" line of the job page's progress chart.
fn done_line_top(page: &str) -> f64 {
    let chart = page
        .split(r#"aria-label="Progress and cost""#)
        .nth(1)
        .unwrap_or_else(|| panic!("no progress chart: {page}"));
    let points = chart
        .split(r##"stroke="#2f7ed8" stroke-width="2" points=""##)
        .nth(1)
        .and_then(|p| p.split('"').next())
        .unwrap_or_else(|| panic!("no sheets-done line: {chart}"));
    points
        .split_whitespace()
        .filter_map(|xy| xy.split(',').nth(1)?.parse::<f64>().ok())
        .fold(f64::MAX, f64::min)
}

/// The progress chart's "sheets done" line counted failed sheets as done (a job whose header
/// said "1/3 done, failed" climbed to 3 of 3), and for a large job counted only the sheets
/// the page listed (flat near 0 at 802/1201 done). It now climbs only with completed or
/// skipped sheets, as the header counts them, and for a job whose page lists only some of
/// its sheets it says where the job stands and why no history is drawn.
#[test]
fn the_progress_chart_counts_done_sheets_as_the_header_does() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml =
        "name: fail\nworkspace: ./fail-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         retry: {max_retries: 0}\nsheet: {size: 1, total_items: 3}\nprompt:\n  template: |\n    \
         RUN: if [ {{ sheet_num }} = 2 ]; then exit 3; fi\n";
    let score = env.write_score("fail", yaml);
    crate::harness::run(&env, &score, &[]);
    let doc = crate::harness::wait_terminal(&env, "fail", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let page = job_page(&env, "/jobs/fail");
    assert!(page.contains("1&#x2f;3 done, failed"), "{page}");
    // The chart's plot runs from y=138 (0 sheets) up to y=10 (all 3): one sheet done is a
    // third of the way up.
    let top = done_line_top(&page);
    assert!(
        (top - (138.0 - 128.0 / 3.0)).abs() < 0.2,
        "the line rises to 1 of 3 sheets, not {top}: {page}"
    );

    let yaml =
        "name: many\nworkspace: ./many-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {size: 1, total_items: 60}\nprompt:\n  template: |\n    RUN: true\n";
    let score = env.write_score("many", yaml);
    crate::harness::run(&env, &score, &[]);
    let doc = crate::harness::wait_terminal(&env, "many", 120.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    // A page of the sheet list (as a large job's page is): 10 of the 60 sheets listed.
    let page = job_page(&env, "/jobs/many?offset=50");
    assert!(page.contains("60 of 60 sheets done now"), "{page}");
    assert!(
        page.contains("Not drawn over time: this page lists 10 of the job&#39;s 60 sheets."),
        "{page}"
    );
}

/// The rows of the job page's "Errors and attempts" table: (sheet, attempt, code, type).
fn error_rows(page: &str) -> Vec<(String, String, String, String)> {
    let Some(table) = page.split(r#"<table class="attempts">"#).nth(1) else {
        return Vec::new();
    };
    let table = table.split("</table>").next().unwrap_or_default();
    table
        .split("<tr><td>")
        .skip(1)
        .map(|row| {
            let cells: Vec<String> = row
                .split("</td><td")
                .map(|c| {
                    let c = c.trim_start_matches(|ch| ch != '>').trim_start_matches('>');
                    c.replace(r#"<span class="code">"#, "")
                        .replace("</span>", "")
                        .split("</td>")
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect();
            let first = row.split("</td>").next().unwrap_or_default().to_string();
            // "not run": attempt 0.
            let attempt = cells[1].replace("not run", "0");
            (first, attempt, cells[3].clone(), cells[4].clone())
        })
        .collect()
}

/// The same list from `mozart errors --json`.
fn cli_error_rows(env: &TestEnv, id: &str) -> Vec<(String, String, String, String)> {
    let doc: Value = serde_json::from_slice(&env.mozart(&["errors", id, "--json"]).stdout).unwrap();
    doc["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["sheet_num"].to_string(),
                e["attempt_number"].to_string(),
                e["error_code"].as_str().unwrap_or_default().to_string(),
                e["error_type"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The dashboard's "Errors and attempts" table left out errors `mozart errors` lists (a
/// sheet waiting out a rate limit: no section at all) and gave the same attempt another
/// type (one row "attempt 2 … transient" where `mozart errors` lists attempt 1 transient
/// and attempt 2 permanent). It now lists what `mozart errors` lists, with the same types.
#[test]
fn the_dashboards_errors_are_the_ones_mozart_errors_lists() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: retry1\nworkspace: ./retry1-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         retry: {max_retries: 2, base_delay_seconds: 0.1, jitter: false}\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: |\n    RUN: exit 1\n";
    let score = env.write_score("retry1", yaml);
    crate::harness::run(&env, &score, &[]);
    let doc = crate::harness::wait_terminal(&env, "retry1", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let cli = cli_error_rows(&env, "retry1");
    assert!(cli.len() >= 2, "{cli:?}");
    let page = job_page(&env, "/jobs/retry1");
    assert_eq!(error_rows(&page), cli, "{page}");

    let yaml = "name: rl\nworkspace: ./rl-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: |\n    \
         RUN: echo 'HTTP 429 Too Many Requests: rate limit exceeded, retry after 600 seconds'; exit 1\n";
    let score = env.write_score("rl", yaml);
    crate::harness::run(&env, &score, &[]);
    crate::harness::wait_status(&env, "rl", 30.0, |d| {
        d["sheets"]["1"]["rate_limit"].is_object()
    });
    let cli = cli_error_rows(&env, "rl");
    assert!(cli.iter().any(|r| r.2 == "E101"), "{cli:?}");
    let page = job_page(&env, "/jobs/rl");
    assert_eq!(error_rows(&page), cli, "{page}");
    env.mozart(&["cancel", "rl"]);
}

/// An MCP request over 16 MiB got no answer at all (rmcp dropped the line, logging
/// "Incoming message exceeded the maximum line length" on stderr): a client sending a 30 MB
/// inline score waited 10 minutes and more. It now gets a JSON-RPC error for its id that
/// says the size and the limit, and the session goes on.
#[test]
fn an_oversized_mcp_request_gets_an_error_not_silence() {
    use std::io::{BufRead, BufReader, Write};
    let env = TestEnv::new();
    let mut child = env
        .command(&["mcp"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Replies, read on their own thread so that silence fails the test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if tx
                .send(serde_json::from_str(&line).unwrap_or(Value::Null))
                .is_err()
            {
                break;
            }
        }
    });
    let big = "a".repeat(17 * 1024 * 1024);
    for request in [
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "surfaces-test", "version": "1"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "validate", "arguments": {"yaml": big}}}),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
    ] {
        writeln!(stdin, "{request}").unwrap();
    }
    stdin.flush().unwrap();
    let mut replies = std::collections::HashMap::new();
    while replies.len() < 3 {
        let Ok(reply) = rx.recv_timeout(std::time::Duration::from_secs(60)) else {
            break;
        };
        replies.insert(reply["id"].to_string(), reply);
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let error = replies
        .get("1")
        .unwrap_or_else(|| panic!("no answer to the oversized request: {replies:?}"));
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("The message is ")
            && message.contains("at most 16777216 are read in one MCP message"),
        "{error}"
    );
    assert!(replies["2"]["result"]["tools"].is_array(), "{replies:?}");
}

/// The dashboard's validator answered a paste over ~2 MB with 400 "Nothing to validate —
/// The form carried no score." (untrue: the form was over the server's body limit). A score
/// over the limit of scores is now told its size and the limit, as MCP does, and a form too
/// large to read says so.
#[test]
fn the_validator_says_a_pasted_score_is_too_large() {
    let env = TestEnv::new();
    let dash = web::start_dashboard(&env, &[]);
    let cookie = web::login(&dash.addr, &dash.url);
    let base = format!("http://{}", dash.addr);
    let page = web::http(&dash.addr, "GET", "/validate", &[("Cookie", &cookie)], "");
    let csrf = web::form_token(&page.body);
    let post = |yaml: &str| {
        web::http(
            &dash.addr,
            "POST",
            "/validate",
            &[("Cookie", &cookie), ("Origin", &base)],
            &format!("token={csrf}&yaml={}", web::form_encode(yaml)),
        )
    };
    let score = format!("name: big\n# {}\n", "a".repeat(2_500_000));
    let r = post(&score);
    assert_eq!(r.status, 200, "{}", r.raw);
    assert!(
        r.body.contains(&format!(
            "The score is {} bytes; at most 2097152 are accepted here.",
            score.len()
        )),
        "{}",
        r.body
    );
    assert!(!r.body.contains("Nothing to validate"), "{}", r.body);
    let r = post(&"a".repeat(7_000_000));
    assert_eq!(r.status, 413, "{}", r.raw);
    assert!(
        r.body
            .contains("so it was not read; a score of at most 2097152 bytes is accepted here"),
        "{}",
        r.body
    );
}

/// MCP `list` and `resources/list` said `paused` while the job was still pausing (its sheet
/// still running; `mozart list` said "pausing (1 running)", MCP `status` "pausing"). They
/// now say `pausing` too.
#[test]
fn mcp_list_says_pausing_while_a_paused_jobs_sheet_still_runs() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml =
        "name: slowp\nworkspace: ./slowp-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {size: 1, total_items: 2}\nprompt:\n  template: |\n    RUN: sleep 120\n";
    let score = env.write_score("slowp", yaml);
    crate::harness::run(&env, &score, &[]);
    crate::harness::wait_status(&env, "slowp", 60.0, |d| {
        d["sheets"]["1"]["status"] == "in_progress"
    });
    let out = env.mozart(&["pause", "slowp"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&env.mozart(&["list"]));
    assert!(text.contains("pausing (1 running)"), "{text}");
    let replies = web::mcp_requests(
        &env,
        &[
            (
                "tools/call",
                serde_json::json!({"name": "list", "arguments": {}}),
            ),
            ("resources/list", serde_json::json!({})),
        ],
    );
    let list: Value = serde_json::from_str(
        replies[0]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default(),
    )
    .unwrap();
    assert_eq!(list["jobs"][0]["status"], "pausing", "{list:#}");
    assert_eq!(
        replies[1]["result"]["resources"][0]["description"], "Mozart job slowp (pausing)",
        "{}",
        replies[1]
    );
    env.mozart(&["cancel", "slowp"]);
}

/// The dashboard's jobs list showed a job waiting for a job slot as started: a Started time
/// (its submission) and a growing Elapsed, though its own page and `mozart status` said it
/// had not started. A queued job's row now shows neither.
#[test]
fn the_jobs_list_shows_no_start_for_a_queued_job() {
    let env = TestEnv::new();
    std::fs::write(env.home.join("conductor.yaml"), "max_concurrent_jobs: 1\n").unwrap();
    env.start_conductor();
    let gate = env.work.join("go");
    let score = |name: &str, run: &str| {
        env.write_score(
            name,
            &format!(
                "name: {name}\nworkspace: ./{name}-ws\ninstrument: shell\n\
                 sheet: {{size: 1, total_items: 1}}\nprompt: {{template: \"RUN: {run}\"}}\n"
            ),
        )
    };
    let holder = score(
        "holder",
        &format!("while [ ! -f {} ]; do sleep 0.1; done", gate.display()),
    );
    crate::harness::submit_now(&env, &holder);
    crate::harness::wait_status(&env, "holder", 30.0, |d| d["status"] == "running");
    crate::harness::submit_now(&env, &score("waiter", "true"));
    crate::harness::wait_status(&env, "waiter", 30.0, |d| d["status"] == "queued");
    let page = job_page(&env, "/?status=queued");
    let row = page
        .split("<tr data-job=")
        .find(|r| r.starts_with("\"waiter\""))
        .unwrap_or_else(|| panic!("no row of waiter: {page}"));
    // The row's last two cells: Started and Elapsed.
    let cells: Vec<&str> = row
        .split("</tr>")
        .next()
        .unwrap_or_default()
        .split("<td>")
        .collect();
    let tail = &cells[cells.len() - 2..];
    assert_eq!(tail, ["</td>", "</td>"], "a queued job has no start: {row}");
    std::fs::write(&gate, "").unwrap();
}

/// The job page's "Live output of running sheets" showed the last lines of a sheet that had
/// printed megabytes with no word that the rest was left out; MCP `logs` said "[N earlier
/// bytes not shown; the whole output: …]". The page now says it too.
#[test]
fn the_live_output_says_it_is_cut_and_where_the_whole_is() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml =
        "name: flood\nworkspace: ./flood-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: |\n    \
         RUN: seq 1 20000; echo flood-printed; sleep 120\n";
    let score = env.write_score("flood", yaml);
    crate::harness::run(&env, &score, &[]);
    crate::harness::poll(&env, 60.0, "the sheet's output", || {
        stdout(&env.mozart(&["logs", "flood", "--sheet", "1"]))
            .contains("flood-printed")
            .then_some(())
    });
    let page = job_page(&env, "/jobs/flood");
    let log = page
        .split(r#"<pre class="log">"#)
        .nth(1)
        .unwrap_or_else(|| panic!("no live output: {page}"));
    assert!(
        log.starts_with("[") && log.contains(" earlier bytes not shown; the whole output: "),
        "{log}"
    );
    assert!(log.contains("sheet-01.stdout.log]"), "{log}");
    env.mozart(&["cancel", "flood"]);
}

/// Small untruths of the dashboard: `?offset=-5` answered "Failed to deserialize query
/// string…" in plain text; `?offset=99999` said "Sheets 99999–99999 of 3"; `?state=bogus`
/// and `/?status=bogus` were silently ignored; a hook without a description showed "None";
/// a wait that is no instrument hold (a pause between sheets) was listed under "Instrument
/// holds"; and with the conductor stopped the jobs page showed counts "all (0) …" beside
/// "not running". Each now says what is true, or what to do.
#[test]
fn the_dashboard_says_what_is_wrong_with_an_address_and_shows_no_false_counts() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: small\nworkspace: ./small-ws\ninstrument: shell\npause_between_sheets_seconds: 600\n\
         sheet: {size: 1, total_items: 3}\nprompt:\n  template: |\n    RUN: true\n\
         on_success:\n  - type: run_command\n    command: \"true\"\n";
    let score = env.write_score("small", yaml);
    crate::harness::run(&env, &score, &[]);
    crate::harness::wait_status(&env, "small", 60.0, |d| {
        d["sheets"]["1"]["status"] == "completed"
    });
    let dash = web::start_dashboard(&env, &[]);
    let cookie = web::login(&dash.addr, &dash.url);
    let get = |path: &str| web::http(&dash.addr, "GET", path, &[("Cookie", &cookie)], "");

    // Waiting out the pause between sheets: said, but not as an instrument hold.
    let page = crate::harness::poll(&env, 30.0, "the pause between sheets", || {
        let page = get("/jobs/small");
        page.body.contains("Waiting: ").then_some(page)
    });
    assert!(!page.body.contains("Instrument holds"), "{}", page.body);

    let r = get("/jobs/small?offset=-5");
    assert_eq!(r.status, 400, "{}", r.raw);
    assert!(r.raw.contains("text/html"), "{}", r.raw);
    assert!(
        r.body
            .contains("offset &#x27;-5&#x27; is not a sheet position"),
        "{}",
        r.body
    );
    let r = get("/jobs/small?offset=99999");
    assert_eq!(r.status, 200, "{}", r.raw);
    assert!(
        r.body.contains("No sheets from position 99999"),
        "{}",
        r.body
    );
    assert!(!r.body.contains("Sheets 99999"), "{}", r.body);
    let r = get("/jobs/small?state=bogus");
    assert_eq!(r.status, 400, "{}", r.raw);
    assert!(
        r.body.contains("Unknown sheet state &#x27;bogus&#x27;."),
        "{}",
        r.body
    );
    let r = get("/?status=bogus");
    assert_eq!(r.status, 400, "{}", r.raw);
    assert!(
        r.body.contains("Unknown status &#x27;bogus&#x27;."),
        "{}",
        r.body
    );

    env.mozart(&["cancel", "small"]);
    let doc = crate::harness::wait_terminal(&env, "small", 60.0);
    assert_eq!(doc["status"], "cancelled", "{doc:#}");

    // A finished job's hooks: no "None" for a hook without a description.
    let yaml = "name: hooked\nworkspace: ./hooked-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: |\n    RUN: true\n\
         on_success:\n  - type: run_command\n    command: \"true\"\n";
    let score = env.write_score("hooked", yaml);
    crate::harness::run(&env, &score, &[]);
    crate::harness::wait_status(&env, "hooked", 60.0, |d| {
        d["status"] == "completed" && d["hook_results_count"] == 1
    });
    let page = get("/jobs/hooked");
    let hooks = page
        .body
        .split(r#"<table class="hooks">"#)
        .nth(1)
        .unwrap_or_else(|| panic!("no hook results: {}", page.body));
    assert!(!hooks.contains("<td>None</td>"), "{hooks}");

    env.stop_conductor();
    let page = get("/");
    assert!(page.body.contains("not running"), "{}", page.body);
    assert!(!page.body.contains("(0)"), "{}", page.body);
}

/// MCP errors about an inline score named files that do not exist: `validate {"yaml": …}`
/// with an unknown field said "in …/mcp-scores/inline-score.yaml, line 5", and a refused
/// `run {"yaml": …}` "…/mcp-scores/x.yaml, line 3" (the file put back, so gone). They now
/// name what the caller gave: "the yaml you passed".
#[test]
fn mcp_errors_about_inline_yaml_name_the_yaml_passed() {
    let env = TestEnv::new();
    env.start_conductor();
    let replies = web::mcp_calls(
        &env,
        &[
            serde_json::json!({"name": "validate", "arguments": {"yaml":
                "name: x\nsheet: {size: 1, total_items: 1}\nprompt:\n  template: hi\nbogus_field: 1\n"}}),
            serde_json::json!({"name": "run", "arguments": {"yaml": "name: x\nsheet: [1,2\n"}}),
        ],
    );
    let text = |i: usize| {
        replies[i]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let validate = text(0);
    assert!(
        validate.contains("in the yaml you passed, line 5"),
        "{validate}"
    );
    assert!(!validate.contains("inline-score.yaml"), "{validate}");
    let run = text(1);
    assert!(run.contains("the yaml you passed\", line 3"), "{run}");
    assert!(!run.contains("x.yaml"), "{run}");
}

/// `mozart errors` listed a sheet parked on a rate limit twice: attempt 1 from its error
/// history and "not run" (attempt 0) from its last message, the same error; the dashboard
/// showed both rows too. Each attempt is now one row, before and after a restart.
#[test]
fn a_sheet_parked_on_a_rate_limit_is_one_error_row() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: rl\nworkspace: ./rl-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: |\n    \
         RUN: echo 'HTTP 429 Too Many Requests: rate limit exceeded, retry after 600 seconds'; exit 1\n";
    let score = env.write_score("rl", yaml);
    crate::harness::run(&env, &score, &[]);
    crate::harness::wait_status(&env, "rl", 30.0, |d| {
        d["sheets"]["1"]["rate_limit"].is_object()
    });
    let check = |when: &str| {
        let cli = cli_error_rows(&env, "rl");
        assert_eq!(
            cli,
            vec![(
                "1".to_string(),
                "1".to_string(),
                "E101".to_string(),
                "rate_limit".to_string()
            )],
            "{when}"
        );
        let text = stdout(&env.mozart(&["errors", "rl"]));
        assert!(!text.contains("not run"), "{when}: {text}");
        assert!(text.contains("Total: 1 error"), "{when}: {text}");
        let page = job_page(&env, "/jobs/rl");
        assert_eq!(error_rows(&page), cli, "{when}: {page}");
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

/// After a conductor restart, `mozart logs rl --sheet 1` and MCP `logs` said "no output
/// recorded" of a sheet waiting out a rate limit though it printed the 429 line (before
/// the restart they showed it): the restart kept its error but not the attempt's output.
/// Both show the line, before and after a restart.
#[test]
fn a_rate_limited_sheets_output_is_in_logs_after_a_restart() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: rl\nworkspace: ./rl-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: |\n    \
         RUN: echo 'HTTP 429 Too Many Requests: rate limit exceeded, retry after 600 seconds'; exit 1\n";
    let score = env.write_score("rl", yaml);
    crate::harness::run(&env, &score, &[]);
    crate::harness::wait_status(&env, "rl", 30.0, |d| {
        d["sheets"]["1"]["rate_limit"].is_object()
    });
    let line = "HTTP 429 Too Many Requests: rate limit exceeded, retry after 600 seconds";
    let check = |when: &str| {
        let text = stdout(&env.mozart(&["logs", "rl", "--sheet", "1"]));
        assert!(text.contains(line), "{when}: {text}");
        assert!(!text.contains("no output recorded"), "{when}: {text}");
        let replies = web::mcp_calls(
            &env,
            &[serde_json::json!({"name": "logs", "arguments": {"job_id": "rl", "sheet": 1}})],
        );
        let text = replies[0]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(text.contains(line), "{when}: {}", replies[0]);
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

/// `list --json` (and MCP `list`) gave `current_sheet: 30` of a job cancelled while its
/// sheet 1 of 30 ran: the cancel's ending of every sheet not yet run moved it to the last.
/// It is now the sheet the job was at (or none, as before the restart), before and after a
/// restart.
#[test]
fn a_cancelled_jobs_current_sheet_is_the_one_it_was_at() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml =
        "name: many\nworkspace: ./many-ws\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {size: 1, total_items: 30}\nprompt:\n  template: |\n    RUN: sleep 300\n";
    let score = env.write_score("many", yaml);
    crate::harness::run(&env, &score, &[]);
    crate::harness::wait_status(&env, "many", 30.0, |d| {
        d["sheets"]["1"]["status"] == "in_progress"
    });
    env.mozart(&["cancel", "many"]);
    let doc = crate::harness::wait_terminal(&env, "many", 60.0);
    assert_eq!(doc["status"], "cancelled", "{doc:#}");
    let check = |when: &str| {
        let list: Value =
            serde_json::from_slice(&env.mozart(&["list", "--all", "--json"]).stdout).unwrap();
        let job = &list["jobs"][0];
        assert_eq!(job["job_id"], "many", "{when}: {list:#}");
        // The sheet it was at, or none (a finished job runs none).
        let at = |v: &Value| v.is_null() || *v == 1;
        assert!(at(&job["current_sheet"]), "{when}: {list:#}");
        let docs = mcp_docs(
            &env,
            &[serde_json::json!({"name": "list", "arguments": {"status": "cancelled"}})],
        );
        let jobs = docs[0]["jobs"].as_array().cloned().unwrap_or_default();
        let job = jobs.iter().find(|j| j["job_id"] == "many");
        assert!(
            job.is_some_and(|j| at(&j["current_sheet"])),
            "{when}: {:#}",
            docs[0]
        );
    };
    check("before a restart");
    env.stop_conductor();
    env.start_conductor();
    check("after a restart");
}
