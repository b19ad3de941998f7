//! MCP `run` with an inline score (issue 23): the score file `<dir>/<name>.yaml` is replaced
//! only when the run is accepted; a refused run leaves what was there.

use mozart_tests::web::mcp_calls;
use mozart_tests::{sleepy_shell_score, TestEnv};
use serde_json::json;

#[test]
fn a_refused_inline_run_does_not_overwrite_the_saved_score() {
    let env = TestEnv::new();
    let dir = env.work.join("inline");
    std::fs::create_dir_all(&dir).unwrap();
    let saved = dir.join("keep.yaml");
    let original = sleepy_shell_score("keep", 1, 0.1);
    std::fs::write(&saved, &original).unwrap();
    let broken = "name: keep\nworkspace: ./ws\ninstrument: shell\nsheet:\n  size: 1\n  total_items: 1\nprompt:\n  template: \"RUN: echo {{ nope }}\"\n";
    let valid = sleepy_shell_score("keep", 2, 0.1);
    let dir_arg = dir.to_str().unwrap();

    // No conductor: the run is refused, and the file is what it was.
    let replies = mcp_calls(
        &env,
        &[
            json!({"name": "run", "arguments": {"yaml": broken, "directory": dir_arg}}),
            json!({"name": "run", "arguments": {"yaml": valid, "directory": dir_arg}}),
        ],
    );
    for reply in &replies {
        assert_eq!(reply["result"]["isError"], true, "{reply}");
    }
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), original);
    let fresh = dir.join("fresh.yaml");
    let replies = mcp_calls(
        &env,
        &[
            json!({"name": "run", "arguments": {"yaml": sleepy_shell_score("fresh", 1, 0.1), "directory": dir_arg}}),
        ],
    );
    assert_eq!(replies[0]["result"]["isError"], true, "{}", replies[0]);
    assert!(
        !fresh.exists(),
        "a refused new inline score stays unwritten"
    );

    // Accepted: the file is the new score.
    env.start_conductor();
    let replies = mcp_calls(
        &env,
        &[json!({"name": "run", "arguments": {"yaml": valid, "directory": dir_arg}})],
    );
    assert_ne!(replies[0]["result"]["isError"], true, "{}", replies[0]);
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), valid);
    // A job that got a slot at once is "started", not "queued" (it said queued every time).
    let text = replies[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    let doc: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    assert_eq!(
        doc["message"], "Job started (concurrency limit: 15)",
        "{text}"
    );
    env.wait_completed("keep");
}

/// Issue 23 (lists that lie by omission): MCP `list` answers one page (50 by default) with
/// the true total, and says where the next page starts.
#[test]
fn mcp_list_answers_a_page_with_the_total_and_the_next_offset() {
    let env = TestEnv::new();
    env.start_conductor();
    for n in 1..=3 {
        let name = format!("page-{n}");
        let path = env.write_score(&name, &sleepy_shell_score(&name, 1, 0.0));
        crate::harness::submit_now(&env, &path);
        env.wait_completed(&name);
    }
    let replies = mcp_calls(
        &env,
        &[
            json!({"name": "list", "arguments": {}}),
            json!({"name": "list", "arguments": {"limit": 2}}),
            json!({"name": "list", "arguments": {"limit": 2, "offset": 2}}),
        ],
    );
    let doc = |i: usize| -> serde_json::Value {
        let text = replies[i]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("");
        serde_json::from_str(text).unwrap_or_else(|_| panic!("{}", replies[i]))
    };
    let all = doc(0);
    assert_eq!(all["limit"], 50, "the default page: {all:#}");
    assert_eq!(all["total"], 3, "{all:#}");
    assert_eq!(all["jobs"].as_array().map(Vec::len), Some(3), "{all:#}");
    assert!(all.get("next_offset").is_none(), "{all:#}");
    let first = doc(1);
    assert_eq!(first["total"], 3, "{first:#}");
    assert_eq!(first["jobs"].as_array().map(Vec::len), Some(2), "{first:#}");
    assert_eq!(
        first["jobs"][0]["job_id"], "page-3",
        "newest first: {first:#}"
    );
    assert_eq!(first["next_offset"], 2, "{first:#}");
    assert!(
        first["note"].as_str().is_some_and(|n| !n.is_empty()),
        "{first:#}"
    );
    let rest = doc(2);
    assert_eq!(rest["jobs"].as_array().map(Vec::len), Some(1), "{rest:#}");
    assert_eq!(rest["jobs"][0]["job_id"], "page-1", "{rest:#}");
    assert!(rest.get("next_offset").is_none(), "{rest:#}");
}

/// MCP `logs` of a sheet that printed megabytes (one 3 MB line, then 100,000 short ones):
/// the answer is bounded, keeps the end of each stream, and says how much came before and
/// where the whole output is; a `lines` past the cap says it was capped.
#[test]
fn mcp_logs_of_a_huge_output_is_bounded_and_says_what_it_left_out() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: loud\nworkspace: ./loud-ws\ninstrument: shell\n\
                pause_between_sheets_seconds: 0\n\
                sheet: {size: 1, total_items: 1}\n\
                prompt:\n  template: |\n    \
                RUN: head -c 3000000 /dev/zero | tr '\\\\0' a; echo; seq 1 100000; echo the-end\n";
    let score = env.write_score("loud", yaml);
    crate::harness::submit_now(&env, &score);
    env.wait_completed("loud");
    let log = env.work.join("loud-ws/logs/sheet-01.stdout.log");
    assert!(
        std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) > 3_000_000,
        "the sheet's log holds all it printed"
    );
    let replies = mcp_calls(
        &env,
        &[
            json!({"name": "logs", "arguments": {"job_id": "loud"}}),
            json!({"name": "logs", "arguments": {"job_id": "loud", "lines": 1_000_000}}),
        ],
    );
    let text = |i: usize| -> String {
        assert_ne!(replies[i]["result"]["isError"], true, "{}", replies[i]);
        replies[i]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let default = text(0);
    assert!(
        default.ends_with("100000\nthe-end\n"),
        "the end is kept:\n{default}"
    );
    assert!(
        default
            .lines()
            .filter(|l| l.chars().all(|c| c.is_ascii_digit()))
            .count()
            == 49,
        "the default is the last 50 lines:\n{default}"
    );
    let note = format!(
        "earlier bytes not shown; the whole output: {}]",
        log.display()
    );
    assert!(default.contains(&note), "the cut is said:\n{default}");
    let all = text(1);
    assert!(
        all.len() < 300 * 1024,
        "a huge `lines` is still a bounded answer: {} bytes",
        all.len()
    );
    assert!(
        all.starts_with("[`lines` is at most 2000"),
        "the cap is said:\n{}",
        &all[..all.len().min(300)]
    );
    assert!(all.contains(&note) && all.ends_with("the-end\n"));
    assert!(
        !all.contains(&"a".repeat(100)),
        "the 3 MB line is before the last 2000 lines"
    );
}

/// MCP `resources/list` answers the conductor's jobs 100 at a time with a `nextCursor`
/// (it answered every job in one list); a cursor it did not give is a clear error.
#[test]
fn mcp_resources_are_listed_a_page_at_a_time() {
    let env = TestEnv::new();
    env.start_conductor();
    for n in 1..=102 {
        let name = format!("res-{n}");
        let path = env.write_score(&name, &sleepy_shell_score(&name, 1, 0.0));
        crate::harness::submit_now(&env, &path);
    }
    for n in 1..=102 {
        env.wait_completed(&format!("res-{n}"));
    }
    let replies = mozart_tests::web::mcp_requests(
        &env,
        &[
            ("resources/list", json!({})),
            ("resources/list", json!({"cursor": "100"})),
            ("resources/list", json!({"cursor": "bogus"})),
        ],
    );
    let uris = |i: usize| -> Vec<String> {
        replies[i]["result"]["resources"]
            .as_array()
            .unwrap_or_else(|| panic!("{}", replies[i]))
            .iter()
            .map(|r| r["uri"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let first = uris(0);
    assert_eq!(first.len(), 100, "{}", replies[0]);
    assert_eq!(first[0], "mozart://jobs/res-102", "newest first");
    assert_eq!(replies[0]["result"]["nextCursor"], "100", "{}", replies[0]);
    let rest = uris(1);
    assert_eq!(rest, ["mozart://jobs/res-2", "mozart://jobs/res-1"]);
    assert!(
        replies[1]["result"].get("nextCursor").is_none(),
        "{}",
        replies[1]
    );
    let bad = &replies[2]["error"];
    assert_eq!(bad["code"], -32602, "{}", replies[2]);
    assert!(
        bad["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Unknown cursor 'bogus'"),
        "{bad}"
    );
}

/// MCP `status` of a job of 25 movements lists 20 of them in `sheets_view.movements` and
/// says so (`movements_total`, `movements_note`); it cut them silently.
#[test]
fn mcp_status_says_when_it_lists_only_some_movements() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score("moves", &sleepy_shell_score("moves", 25, 0.0));
    crate::harness::submit_now(&env, &path);
    env.wait_completed("moves");
    let replies = mcp_calls(
        &env,
        &[json!({"name": "status", "arguments": {"job_id": "moves"}})],
    );
    let text = replies[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let doc: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|_| panic!("{}", replies[0]));
    let view = &doc["sheets_view"];
    assert_eq!(
        view["movements"].as_array().map(Vec::len),
        Some(20),
        "{view:#}"
    );
    assert_eq!(view["movements_total"], 25, "{view:#}");
    assert!(
        view["movements_note"]
            .as_str()
            .is_some_and(|n| n.starts_with("Showing the first 20 of 25 movements")),
        "{view:#}"
    );
    assert_eq!(
        doc["sheets"].as_array().map(Vec::len),
        Some(25),
        "every sheet is listed"
    );
}

/// The text of a tool reply.
fn reply_text(reply: &serde_json::Value) -> String {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// An inline score of an existing job's name (the file name is the job ID) in another
/// `directory` than the job's score: it was written there and reported as the run's
/// `score` — over a file of the user's of that name — while the conductor's job kept its
/// old score and ran nothing ("already completed"). It is now refused before anything is
/// written, naming the job's score and what to pass instead.
#[test]
fn an_inline_run_of_a_jobs_name_in_another_directory_is_refused_before_writing() {
    let env = TestEnv::new();
    env.start_conductor();
    let (first, other) = (env.work.join("first"), env.work.join("other"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    // One workspace whichever directory the score is in: only the score's path differs.
    let workspace = env.work.join("twin-ws");
    let yaml = sleepy_shell_score("twin", 1, 0.0).replace(
        "workspace: ./twin-ws",
        &format!("workspace: {}", workspace.display()),
    );
    let replies = mcp_calls(
        &env,
        &[
            json!({"name": "run", "arguments": {"yaml": yaml, "directory": first.to_str().unwrap()}}),
        ],
    );
    assert_ne!(replies[0]["result"]["isError"], true, "{}", replies[0]);
    env.wait_completed("twin");

    // A file of the user's where the second score would go.
    let mine = other.join("twin.yaml");
    std::fs::write(&mine, "# my notes, not a score\n").unwrap();
    let fresh_dir = env.work.join("empty");
    std::fs::create_dir_all(&fresh_dir).unwrap();
    let replies = mcp_calls(
        &env,
        &[
            json!({"name": "run", "arguments": {"yaml": yaml, "directory": other.to_str().unwrap()}}),
            json!({"name": "run", "arguments": {"yaml": yaml, "directory": fresh_dir.to_str().unwrap(), "fresh": true}}),
        ],
    );
    let job_score = first.join("twin.yaml").display().to_string();
    for reply in &replies {
        assert_eq!(reply["result"]["isError"], true, "{reply}");
        let text = reply_text(reply);
        assert!(
            text.contains(&format!("its score is {job_score}")),
            "names the job's score: {text}"
        );
        assert!(
            text.contains(&format!("pass `directory` {}", first.display()))
                && text.contains("another `name`"),
            "says what to pass: {text}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&mine).unwrap(),
        "# my notes, not a score\n",
        "the user's file is untouched"
    );
    assert!(!fresh_dir.join("twin.yaml").exists(), "nothing is written");

    // The job's own directory, or another name, is run.
    let replies = mcp_calls(
        &env,
        &[
            json!({"name": "run", "arguments": {"yaml": yaml, "directory": first.to_str().unwrap(), "fresh": true}}),
            json!({"name": "run", "arguments": {"yaml": yaml, "directory": other.to_str().unwrap(), "name": "twin-2"}}),
        ],
    );
    for reply in &replies {
        assert_ne!(reply["result"]["isError"], true, "{reply}");
    }
    env.wait_completed("twin");
    env.wait_completed("twin-2");
}

/// A `directory` that does not exist (a typo) was created, a new tree made silently; it is
/// now refused, naming it, and nothing is created.
#[test]
fn an_inline_run_into_a_missing_directory_is_refused_and_creates_nothing() {
    let env = TestEnv::new();
    env.start_conductor();
    let typo = env.work.join("projcet/scores");
    let replies = mcp_calls(
        &env,
        &[json!({"name": "run", "arguments": {
            "yaml": sleepy_shell_score("typo", 1, 0.0),
            "directory": typo.to_str().unwrap()}})],
    );
    assert_eq!(replies[0]["result"]["isError"], true, "{}", replies[0]);
    let text = reply_text(&replies[0]);
    assert!(
        text.contains(&format!("{} does not exist", typo.display())),
        "{text}"
    );
    assert!(text.contains("omit `directory`"), "{text}");
    assert!(!env.work.join("projcet").exists(), "no directory is made");
    let list = mozart_tests::stdout(&env.mozart(&["list", "--all"]));
    assert!(!list.contains("typo"), "nothing is submitted: {list}");
}
