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
    // Each was retried (and the sheet passed in the end): none was permanent.
    for e in errors["errors"].as_array().unwrap() {
        assert_eq!(e["error_type"], "transient", "{e:#}");
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
    assert!(text.contains("\nTotal: 3 errors\n"), "{text}");
    assert!(!text.contains("permanent"), "{text}");
    assert_eq!(text.matches(" transient ").count(), 3, "{text}");
    let only_sheet_1 = json_of(
        &env.mozart(&["errors", "lucky", "--json", "--sheet", "1"]),
        "errors --sheet 1",
    );
    assert_eq!(only_sheet_1["total_errors"], 3, "{only_sheet_1:#}");
    let only_code = json_of(
        &env.mozart(&["errors", "lucky", "--json", "--code", "E001"]),
        "errors --code E001",
    );
    assert_eq!(only_code["total_errors"], 0, "{only_code:#}");
    // A sheet the score does not have is said so, not "no errors".
    let out = env.mozart(&["errors", "lucky", "--json", "--sheet", "2"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("Score lucky has no sheet 2 (it has 1 sheet)."),
        "{}",
        stdout(&out)
    );

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

/// A profile whose every call reports 1,000 input and 2,000 output tokens at $1 per 1K:
/// $3.00 an attempt.
fn install_pricey_instrument(env: &TestEnv) {
    let script = env.root().join("pricey.sh");
    mozart_tests::write_executable(
        &script,
        "#!/bin/sh\necho '{\"answer\":\"ok\",\"usage\":{\"in\":1000,\"out\":2000}}'\n",
    );
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("pricey.yaml"),
        format!(
            r#"name: pricey
display_name: Pricey
kind: cli
default_model: fast
models:
  - {{name: fast, context_window: 128000, cost_per_1k_input: 1.0, cost_per_1k_output: 1.0}}
cli:
  command:
    executable: {}
  output:
    format: json
    result_path: answer
    input_tokens_path: usage.in
    output_tokens_path: usage.out
"#,
            script.display()
        ),
    )
    .unwrap();
}

/// Two sheets on the pricey instrument under a $0.50 sheet limit; `validation` is the
/// score's validations section.
fn pricey_score(name: &str, validations: &str) -> String {
    format!(
        r#"name: {name}
workspace: ./{name}-ws
instrument: pricey
cost_limits: {{enabled: true, max_cost_per_sheet: 0.50}}
retry:
  max_retries: 3
  base_delay_seconds: 0.1
sheet:
  size: 1
  total_items: 2
prompt:
  template: "answer ok"
{validations}"#
    )
}

#[test]
fn a_sheet_over_its_cost_limit_pauses_the_job_and_keeps_its_passing_work() {
    let env = TestEnv::new();
    install_pricey_instrument(&env);
    env.start_conductor();

    // Sheet 1's attempt passes and costs $3.00: it stays completed, the job pauses.
    let score = env.write_score("spender", &pricey_score("spender", ""));
    run(&env, &score, &[]);
    let out = env.mozart(&["wait", "spender"]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "wait exits 4 on a pause: {}",
        stdout(&out)
    );
    let doc = crate::harness::status(&env, "spender");
    assert_eq!(doc["status"], "paused", "{doc:#}");
    assert_eq!(
        doc["error"], "Cost limit: sheet 1 cost $3.0000 exceeds limit $0.5000",
        "{doc:#}"
    );
    assert_eq!(doc["cost"]["cost_limit_reached"], true, "{doc:#}");
    assert_eq!(sheet(&doc, 1)["status"], "completed", "{doc:#}");
    assert_eq!(sheet(&doc, 2)["status"], "pending", "{doc:#}");
    let text = stdout(&env.mozart(&["status", "spender"]));
    assert!(
        text.contains("  Cost: $3.00 (limit: $0.50 per sheet)\n"),
        "the status names the limit in force: {text}"
    );
    assert!(
        text.contains("Cost limit reached — score was paused"),
        "{text}"
    );

    // A resume goes on with sheet 2, which is over its own limit too: the last sheet, so
    // the job completes, saying why the limit shows as reached.
    assert_eq!(env.mozart(&["resume", "spender"]).status.code(), Some(0));
    let doc = wait_terminal(&env, "spender", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(
        doc["error"], "Cost limit: sheet 2 cost $3.0000 exceeds limit $0.5000",
        "{doc:#}"
    );
    let text = stdout(&env.mozart(&["status", "spender"]));
    assert!(
        text.contains("Cost limit reached — by the last sheet; the score completed"),
        "{text}"
    );

    // A failing attempt over the limit is not retried: the sheet fails, the job pauses.
    // (Two voices of one movement, so sheet 2 does not wait for sheet 1: a failed
    // prerequisite would fail it and end the job instead.)
    let failing = pricey_score(
        "failing",
        "validations:\n  - type: file_exists\n    path: \"{workspace}/never.txt\"\n",
    )
    .replace(
        "  total_items: 2\n",
        "  total_items: 1\n  fan_out: {1: 2}\n",
    );
    let score = env.write_score("failing", &failing);
    run(&env, &score, &[]);
    let out = env.mozart(&["wait", "failing"]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let doc = crate::harness::status(&env, "failing");
    assert_eq!(doc["status"], "paused", "{doc:#}");
    assert_eq!(
        doc["error"], "Cost limit: sheet 1 cost $3.0000 exceeds limit $0.5000",
        "{doc:#}"
    );
    let first = sheet(&doc, 1);
    assert_eq!(first["status"], "failed", "{doc:#}");
    assert_eq!(first["attempt_count"], 1, "no retry: {doc:#}");
    assert_eq!(sheet(&doc, 2)["status"], "pending", "{doc:#}");
}

/// A profile that reports what each call cost: $0.30, or $0.20 for a prompt saying `FAIL`
/// (which fails). Each call adds a line to `calls.log`; the call whose number `block-at`
/// holds waits until `release` exists.
fn install_coin_instrument(env: &TestEnv) {
    let root = env.root();
    let script = root.join("coin.sh");
    mozart_tests::write_executable(
        &script,
        &format!(
            r#"#!/bin/sh
cd '{root}'
echo call >> calls.log
n=$(wc -l < calls.log)
if [ "$(cat block-at 2>/dev/null)" = "$n" ]; then
  while [ ! -e release ]; do sleep 0.1; done
fi
case "$*" in
  *FAIL*) echo '{{"error":{{"message":"always fails"}},"cost":0.2}}'; exit 1;;
esac
echo '{{"answer":"ok","cost":0.3}}'
"#,
            root = root.display()
        ),
    );
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("coin.yaml"),
        format!(
            "name: coin\ndisplay_name: Coin\nkind: cli\ncli:\n  command:\n    executable: {}\n  output:\n    format: json\n    result_path: answer\n    error_path: error.message\n    cost_path: cost\n",
            script.display()
        ),
    )
    .unwrap();
}

/// `coin` calls made so far.
fn coin_calls(env: &TestEnv) -> usize {
    std::fs::read_to_string(env.root().join("calls.log"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// A job's cost limit counts what it spent before it was resumed with an edited score or
/// the conductor restarted: the spend restarted at $0 on each (a $0.50 job paused at $0.60,
/// its limit raised to $0.70, ran three more $0.30 sheets before pausing at "$0.9000",
/// status showing $1.50 spent; after a restart it ran on to $1.80 under the $0.70 limit).
#[test]
fn a_job_cost_limit_counts_what_was_spent_before_a_resume_and_a_restart() {
    let env = TestEnv::new();
    install_coin_instrument(&env);
    env.start_conductor();
    let yaml = |limit: &str| {
        format!(
            "name: spend\nworkspace: ./spend-ws\ninstrument: coin\n\
             cost_limits: {{enabled: true, max_cost_per_job: {limit}}}\n\
             sheet: {{size: 1, total_items: 5}}\nprompt:\n  template: \"answer ok\"\n"
        )
    };
    let score = env.write_score("spend", &yaml("0.5"));
    run(&env, &score, &[]);
    let out = env.mozart(&["wait", "spend"]);
    assert_eq!(out.status.code(), Some(4), "paused: {}", stdout(&out));
    let doc = crate::harness::status(&env, "spend");
    assert_eq!(
        doc["error"], "Cost limit: job cost $0.6000 exceeds limit $0.5000",
        "{doc:#}"
    );

    // The limit raised to $0.70: one more sheet takes the job to $0.90, over it.
    env.write_score("spend", &yaml("0.7"));
    let out = env.mozart(&["resume", "spend"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let settled = |d: &Value| {
        d["status"] != "running" && d["status"] != "queued" && sheet(d, 3)["status"] == "completed"
    };
    let doc = crate::harness::wait_status(&env, "spend", 60.0, settled);
    assert_eq!(doc["status"], "paused", "{doc:#}");
    assert_eq!(
        doc["error"], "Cost limit: job cost $0.9000 exceeds limit $0.7000",
        "{doc:#}"
    );
    assert_eq!(sheet(&doc, 4)["status"], "pending", "{doc:#}");
    assert_eq!(coin_calls(&env), 3);

    // Across a restart too: raised to $1.00, sheet 4 takes it to $1.20 and it pauses.
    let out = env.mozart(&["restart", "--yes"]);
    assert!(out.status.success(), "{}", stdout(&out));
    env.write_score("spend", &yaml("1.0"));
    let out = env.mozart(&["resume", "spend"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let settled = |d: &Value| {
        d["status"] != "running" && d["status"] != "queued" && sheet(d, 4)["status"] == "completed"
    };
    let doc = crate::harness::wait_status(&env, "spend", 60.0, settled);
    assert_eq!(doc["status"], "paused", "{doc:#}");
    assert_eq!(
        doc["error"], "Cost limit: job cost $1.2000 exceeds limit $1.0000",
        "{doc:#}"
    );
    assert_eq!(sheet(&doc, 5)["status"], "pending", "{doc:#}");
    assert_eq!(coin_calls(&env), 4);
}

/// A sheet's cost limit counts the attempts made before a restart: a $0.50 sheet limit
/// over $0.20 failing attempts, the conductor restarted during attempt 3, gave the sheet
/// three more attempts ("sheet 1 cost $0.6000" while it had spent $1.00).
#[test]
fn a_sheet_cost_limit_counts_the_attempts_made_before_a_restart() {
    let env = TestEnv::new();
    install_coin_instrument(&env);
    std::fs::write(env.root().join("block-at"), "3\n").unwrap();
    env.start_conductor();
    let score = env.write_score(
        "burner",
        "name: burner\nworkspace: ./burner-ws\ninstrument: coin\n\
         cost_limits: {enabled: true, max_cost_per_sheet: 0.5}\n\
         retry: {max_retries: 6, base_delay_seconds: 0.1}\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: \"FAIL\"\n",
    );
    run(&env, &score, &[]);
    // Attempt 3 is running (and waits): the conductor is killed under it and started
    // again; the interrupted attempt runs again without spending a retry.
    crate::harness::poll(&env, 60.0, "attempt 3", || {
        (coin_calls(&env) >= 3).then_some(())
    });
    crate::support::kill9_conductor(&env);
    std::fs::write(env.root().join("release"), "").unwrap();
    env.start_conductor();
    // The attempt that takes it over the limit is not retried: the job's one sheet fails.
    let doc = crate::harness::wait_terminal(&env, "burner", 60.0);
    assert_eq!(
        doc["error"],
        "sheets [1] failed — sheet 1: Cost limit: sheet 1 cost $0.6000 exceeds limit $0.5000",
        "{doc:#}"
    );
    let first = sheet(&doc, 1);
    assert_eq!(first["attempt_count"], 3, "{doc:#}");
    let spent = first["estimated_cost"].as_f64().unwrap_or(0.0);
    assert!((spent - 0.6).abs() < 1e-9, "{doc:#}");
}

/// Costs and limits under a cent keep their digits: a $0.003339 sheet under a $0.003 sheet
/// limit showed "Cost: $0.00 (limit: $0.00 per sheet)" next to the error naming both, and
/// `instruments check` listed a $0.00015/1K price as "$0.0001/1K".
#[test]
fn a_cost_under_a_cent_and_its_limit_show_their_digits() {
    let env = TestEnv::new();
    let script = env.root().join("cheap.sh");
    mozart_tests::write_executable(
        &script,
        "#!/bin/sh\necho '{\"answer\":\"ok\",\"usage\":{\"in\":2000,\"out\":113}}'\n",
    );
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("cheap.yaml"),
        format!(
            r#"name: cheap
display_name: Cheap
kind: cli
default_model: small
models:
  - {{name: small, context_window: 128000, cost_per_1k_input: 0.0015, cost_per_1k_output: 0.003}}
  - {{name: tiny, context_window: 128000, cost_per_1k_input: 0.00015, cost_per_1k_output: 0.0006}}
cli:
  command:
    executable: {}
  output:
    format: json
    result_path: answer
    input_tokens_path: usage.in
    output_tokens_path: usage.out
"#,
            script.display()
        ),
    )
    .unwrap();
    let check = stdout(&env.mozart(&["instruments", "check", "cheap"]));
    assert!(
        check.contains("small: 128,000 ctx ($0.0015/1K in, $0.003/1K out)"),
        "{check}"
    );
    assert!(
        check.contains("tiny: 128,000 ctx ($0.00015/1K in, $0.0006/1K out)"),
        "{check}"
    );
    env.start_conductor();
    let score = env.write_score(
        "cheap",
        "name: cheap\nworkspace: ./cheap-ws\ninstrument: cheap\ncost_limits: {enabled: true, max_cost_per_sheet: 0.003}\nsheet: {size: 1, total_items: 2}\nprompt:\n  template: \"answer ok\"\n",
    );
    run(&env, &score, &[]);
    let out = env.mozart(&["wait", "cheap"]);
    assert_eq!(out.status.code(), Some(4), "paused: {}", stdout(&out));
    let doc = crate::harness::status(&env, "cheap");
    assert_eq!(doc["status"], "paused", "{doc:#}");
    assert_eq!(
        doc["error"], "Cost limit: sheet 1 cost $0.0033 exceeds limit $0.0030",
        "{doc:#}"
    );
    let text = stdout(&env.mozart(&["status", "cheap"]));
    assert!(
        text.contains("  Cost: $0.003339 (limit: $0.003 per sheet)\n"),
        "the cost and the limit as they are, not $0.00: {text}"
    );
    // The dashboard shows the same figure.
    let dash = mozart_tests::web::start_dashboard(&env, &[]);
    let cookie = mozart_tests::web::login(&dash.addr, &dash.url);
    for path in ["/jobs/cheap", "/"] {
        let page = mozart_tests::web::http(&dash.addr, "GET", path, &[("Cookie", &cookie)], "");
        assert_eq!(page.status, 200, "{}", page.raw);
        assert!(page.body.contains("$0.003339"), "{path}: {}", page.body);
    }
}

/// "Cost: unknown" says why only where it is so: a `claude_cli` sheet in its default
/// stream-json mode whose CLI failed before reporting was told "(claude_cli with
/// output_format: text does not; stream-json does)", as were `claude-code` jobs; the hint is
/// for `claude_cli` with `output_format: text`.
#[test]
fn the_text_mode_cost_hint_is_only_for_claude_cli_in_text_mode() {
    let env = TestEnv::new();
    let claude = env.bin.join("claude");
    let _ = std::fs::remove_file(&claude);
    // Text mode: an answer and exit 0; any other mode: a crash before any output.
    mozart_tests::write_executable(&claude, "#!/bin/sh\ncase \"$*\" in *stream-json*|*json*) echo 'boom' >&2; exit 1;; esac\necho done\n");
    env.start_conductor();
    let hint = "output_format: text";
    for (job, backend, wanted) in [
        ("streamed", "", "failed"),
        ("profile", "instrument: claude-code\n", "failed"),
        ("texted", "backend: {output_format: text}\n", "completed"),
    ] {
        let score = env.write_score(
            job,
            &format!(
                "name: {job}\nworkspace: ./{job}-ws\n{backend}retry: {{max_retries: 0}}\n\
                 sheet: {{size: 1, total_items: 1}}\nprompt: {{template: \"answer ok\"}}\n"
            ),
        );
        run(&env, &score, &[]);
        let doc = wait_terminal(&env, job, 60.0);
        assert_eq!(doc["status"], wanted, "{doc:#}");
        let text = stdout(&env.mozart(&["status", job]));
        assert!(text.contains("Cost: unknown"), "{job}: {text}");
        assert_eq!(text.contains(hint), job == "texted", "{job}: {text}");
    }
}

/// The attempt a failed sheet ended on is `permanent` whatever its code — an `exit 1`
/// (E009, a code of the transient class) that ran out of retries is not passing — and the
/// ones before it were retried, so `transient`; `--type permanent` finds the last one.
#[test]
fn the_attempt_a_failed_sheet_ended_on_is_permanent_whatever_its_code() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score(
        "exit1",
        "name: exit1\nworkspace: ./exit1-ws\ninstrument: shell\n\
         retry: {max_retries: 2, base_delay_seconds: 0.1}\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: \"RUN: exit 1\"\n",
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "exit1", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let out = env.mozart(&["errors", "exit1", "--json"]);
    let errors = json_of(&out, "errors --json");
    let types: Vec<(u64, &str, &str)> = errors["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["attempt_number"].as_u64().unwrap(),
                e["error_code"].as_str().unwrap(),
                e["error_type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        types,
        [(1, "E009", "transient"), (2, "E009", "permanent")],
        "{errors:#}"
    );
    let out = env.mozart(&["errors", "exit1", "--type", "permanent", "--json"]);
    let only = json_of(&out, "errors --type permanent --json");
    assert_eq!(only["total_errors"], 1, "{only:#}");
    assert_eq!(only["errors"][0]["attempt_number"], 2, "{only:#}");
}

/// A `RUN:` line naming a program that is not installed fails the sheet at once (E505) with
/// a hint about that command — not about installing the built-in `shell`, which
/// `mozart instruments check shell` calls ready.
#[test]
fn a_missing_program_in_a_run_line_is_named_as_the_users_command() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score(
        "missing",
        "name: missing\nworkspace: ./missing-ws\ninstrument: shell\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: \"RUN: no_such_program_xyz --flag\"\n",
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "missing", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let message = sheet(&doc, 1)["error_message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert_eq!(sheet(&doc, 1)["error_code"], "E505", "{doc:#}");
    assert!(
        message.contains("no_such_program_xyz")
            && message.contains("a command of the prompt's RUN: lines was not found"),
        "{message}"
    );
    assert!(!message.contains("instruments check shell"), "{message}");
}

/// A prompt over the kernel's limit for one argument (the `shell` instrument passes it as
/// one) fails the sheet at once, saying what to do — it was a transient E999 ("terminated
/// without an exit code") that spent every retry.
#[test]
fn a_prompt_too_long_for_an_argument_fails_at_once_saying_so() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score(
        "huge",
        "name: huge\nworkspace: ./huge-ws\ninstrument: shell\n\
         retry: {max_retries: 3, base_delay_seconds: 0.1}\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: |\n    \
         {% for i in range(5000) %}padding line number {{ i }} with some text to make it long.\n    {% endfor %}RUN: true\n",
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "huge", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    assert_eq!(sheet(&doc, 1)["attempt_count"], 1, "retried: {doc:#}");
    let message = sheet(&doc, 1)["error_message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        message.contains("too long to pass as a command-line argument")
            && message.contains("prompt_stdin_args"),
        "{message}"
    );
}

/// A profile that reports `cost` (1.7e308 USD a call: two add up to infinity) and appends
/// the sheet's number to `ledger` in the workspace, after `pause` seconds.
fn install_absurd_instrument(env: &TestEnv, pause: f64) {
    let script = env.root().join("absurd.sh");
    mozart_tests::write_executable(&script, &format!(
            "#!/bin/sh\nsleep {pause}\nprintf '%s\\n' \"$1\" | grep -o 'SHEET-[0-9]*' >> ledger\necho '{{\"answer\":\"ok\",\"cost\":1.7e308}}'\n"
        ));
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("absurd.yaml"),
        format!(
            "name: absurd\ndisplay_name: Absurd\nkind: cli\ncli:\n  command:\n    executable: {}\n  output:\n    format: json\n    result_path: answer\n    cost_path: cost\n",
            script.display()
        ),
    )
    .unwrap();
}

fn absurd_score(env: &TestEnv) -> std::path::PathBuf {
    env.write_score(
        "absurd-job",
        "name: absurd-job\nworkspace: ./absurd-ws\ninstrument: absurd\npause_between_sheets_seconds: 0\nsheet: {size: 1, total_items: 3}\nprompt:\n  template: \"SHEET-{{ sheet_num }}\"\n",
    )
}

/// How many times each sheet ran, from the instrument's ledger.
fn runs(env: &TestEnv) -> std::collections::BTreeMap<String, usize> {
    let text = std::fs::read_to_string(env.work.join("absurd-ws/ledger")).unwrap_or_default();
    let mut runs = std::collections::BTreeMap::new();
    for line in text.lines() {
        *runs.entry(line.to_string()).or_insert(0) += 1;
    }
    runs
}

/// An instrument reporting a cost no attempt can have (1.7e308 USD; added up: infinity, which
/// a checkpoint stored as `null` and could not read back) reports no cost: the job's cost is
/// unknown, not astronomical. It used to make the stored state unreadable: `status` failed
/// with "stored checkpoint … is corrupt", and a restart ran every completed sheet again.
#[test]
fn an_absurd_reported_cost_is_unknown_and_a_kill_9_reruns_no_completed_sheet() {
    let env = TestEnv::new();
    install_absurd_instrument(&env, 1.0);
    env.start_conductor();
    let score = absurd_score(&env);
    run(&env, &score, &[]);
    crate::harness::poll(&env, 30.0, "two sheets to complete", || {
        let doc = crate::harness::status(&env, "absurd-job");
        (sheet(&doc, 2)["status"] == "completed").then_some(())
    });
    let doc = crate::harness::status(&env, "absurd-job");
    assert_eq!(doc["cost"]["total_estimated_cost"], 0.0, "{doc:#}");
    assert_eq!(doc["cost"]["cost_confidence"], 0.0, "unknown: {doc:#}");
    let pid = env.conductor_pid().unwrap();
    mozart_tests::signal(pid, "KILL");
    crate::harness::poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    env.start_conductor();
    let doc = wait_terminal(&env, "absurd-job", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let runs = runs(&env);
    assert_eq!(runs.get("SHEET-1"), Some(&1), "sheet 1 ran once: {runs:?}");
    assert_eq!(runs.get("SHEET-2"), Some(&1), "sheet 2 ran once: {runs:?}");
    let out = env.mozart(&["status", "absurd-job"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// An instrument reporting a token count no attempt can have — 2^63 (over what SQLite can
/// store), a negative — wedged its job: "Paused: a checkpoint could not be saved (… out of
/// range integral type conversion attempted)", refused on every resume, and a negative count
/// priced the attempt at an exact $0.00. Such a count is no count: the job completes, its
/// cost is unknown, and the totals do not wrap round.
#[test]
fn absurd_token_counts_are_unknown_and_never_wedge_the_job() {
    let env = TestEnv::new();
    let script = env.root().join("tokens.sh");
    mozart_tests::write_executable(
        &script,
        "#!/bin/sh
case \"$1\" in
         *SHEET-1*) echo '{\"answer\":\"ok\",\"usage\":{\"in\":100,\"out\":9223372036854775808}}' ;;
         *SHEET-2*) echo '{\"answer\":\"ok\",\"usage\":{\"in\":-5000,\"out\":-7000}}' ;;
         *) echo '{\"answer\":\"ok\",\"usage\":{\"in\":100,\"out\":10}}' ;;
esac
",
    );
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tokens.yaml"),
        format!(
            "name: tokens\ndisplay_name: Tokens\nkind: cli\ndefault_model: m1\nmodels:\n  - {{name: m1, context_window: 1000, cost_per_1k_input: 0.01, cost_per_1k_output: 0.1}}\ncli:\n  command:\n    executable: {}\n  output:\n    format: json\n    result_path: answer\n    input_tokens_path: usage.in\n    output_tokens_path: usage.out\n",
            script.display()
        ),
    )
    .unwrap();
    env.start_conductor();
    let score = env.write_score(
        "tokens-job",
        "name: tokens-job\nworkspace: ./tokens-ws\ninstrument: tokens\npause_between_sheets_seconds: 0\nsheet: {size: 1, total_items: 3}\nprompt:\n  template: \"SHEET-{{ sheet_num }}\"\n",
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "tokens-job", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    assert_eq!(doc["cost"]["cost_confidence"], 0.0, "unknown: {doc:#}");
    for n in [1, 2] {
        assert_ne!(
            sheet(&doc, n)["cost_confidence"],
            1.0,
            "sheet {n}'s cost is not exact: {doc:#}"
        );
    }
    // Sheet 3's exact cost is all that is counted; no count wrapped round into the totals.
    let total = doc["cost"]["total_estimated_cost"].as_f64().unwrap_or(-1.0);
    assert!((total - 0.002).abs() < 1e-9, "{doc:#}");
    let text = stdout(&env.mozart(&["status", "tokens-job"]));
    assert!(!text.contains("18,446,744"), "{text}");
    // Saved and readable after a restart.
    env.stop_conductor();
    env.start_conductor();
    let doc = crate::harness::status(&env, "tokens-job");
    assert_eq!(doc["status"], "completed", "{doc:#}");
}

/// A job whose stored state cannot be read is not run as new — that would run its completed
/// sheets again: the resume is refused, saying so and how to start over, and nothing runs.
#[test]
fn a_job_whose_stored_state_cannot_be_read_is_refused_not_rerun() {
    let env = TestEnv::new();
    install_absurd_instrument(&env, 0.0);
    env.start_conductor();
    let score = absurd_score(&env);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "absurd-job", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    env.stop_conductor();
    {
        let db = rusqlite::Connection::open(env.home.join("registry.db")).unwrap();
        let changed = db
            .execute(
                "UPDATE sheets SET state_json='{not json' WHERE job_id='absurd-job' AND sheet_num=2",
                [],
            )
            .unwrap();
        assert_eq!(changed, 1);
        db.execute(
            "UPDATE sheets SET status='pending' WHERE job_id='absurd-job' AND sheet_num=3",
            [],
        )
        .unwrap();
    }
    env.start_conductor();
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("The stored state of job 'absurd-job' cannot be read, so it is not run"),
        "{text}"
    );
    assert!(text.contains("--fresh"), "says how to start over: {text}");
    std::thread::sleep(std::time::Duration::from_secs(2));
    let runs = runs(&env);
    assert_eq!(
        runs.values().copied().collect::<Vec<_>>(),
        [1, 1, 1],
        "nothing ran again: {runs:?}"
    );
}

/// A profile `name` whose CLI prints `{"answer": "ok", "data": {"items": [{"t": 3},
/// {"t": 4}]}, "out": 7}` and reads its input tokens at `input_path` (summed), its output
/// tokens at `out`, at $1 per 1K tokens.
fn install_listing_instrument(env: &TestEnv, name: &str, input_path: &str) {
    let script = env.root().join("listing.sh");
    mozart_tests::write_executable(&script, "#!/bin/sh\necho '{\"answer\":\"ok\",\"data\":{\"items\":[{\"t\":3},{\"t\":4}]},\"out\":7}'\n");
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(format!("{name}.yaml")),
        format!(
            r#"name: {name}
display_name: Listing
kind: cli
default_model: fast
models:
  - {{name: fast, context_window: 128000, cost_per_1k_input: 1.0, cost_per_1k_output: 1.0}}
cli:
  command:
    executable: {}
  output:
    format: json
    result_path: answer
    input_tokens_path: {input_path}
    output_tokens_path: out
    aggregate_tokens: true
"#,
            script.display()
        ),
    )
    .unwrap();
}

/// `*` in a token path goes over an array's items as over an object's values, and a job
/// whose instrument reported one token count but not the other is not said to have
/// reported neither.
#[test]
fn token_paths_go_over_arrays_and_status_says_what_was_reported() {
    let env = TestEnv::new();
    install_listing_instrument(&env, "listing", "data.items.*.t");
    install_listing_instrument(&env, "halfway", "data.nothing.*.t");
    env.start_conductor();
    for (job, instrument) in [("listed", "listing"), ("half", "halfway")] {
        let path = env.write_score(
            job,
            &format!(
                "name: {job}\nworkspace: ./{job}-ws\ninstrument: {instrument}\n\
                 sheet: {{size: 1, total_items: 1}}\nprompt: {{template: \"answer ok\"}}\n"
            ),
        );
        run(&env, &path, &[]);
        let doc = wait_terminal(&env, job, 60.0);
        assert_eq!(doc["status"], "completed", "{doc:#}");
    }
    let doc = wait_terminal(&env, "listed", 5.0);
    assert_eq!(sheet(&doc, 1)["input_tokens"], 7, "{doc:#}");
    assert_eq!(sheet(&doc, 1)["output_tokens"], 7, "{doc:#}");
    assert_eq!(sheet(&doc, 1)["cost_confidence"], 1.0, "{doc:#}");
    let text = stdout(&env.mozart(&["status", "listed"]));
    assert!(text.contains("Cost: $0.01"), "{text}");
    let text = stdout(&env.mozart(&["status", "half"]));
    assert!(!text.contains("neither"), "{text}");
    assert!(
        text.contains("reported no cost and only some of its tokens (input 0, output 7)"),
        "{text}"
    );
}

/// A sheet whose instrument failed without reporting a cost, then passed on its fallback
/// (`shell`): status blamed "claude_cli with output_format: text", which never ran. It names
/// the instrument that ran and did not report.
#[test]
fn an_unknown_cost_names_the_instrument_that_ran_not_claude() {
    let env = TestEnv::new();
    let script = env.work.join("broken-agent");
    mozart_tests::write_executable(&script, "#!/bin/sh\necho 'agent crashed' >&2\nexit 2\n");
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("broken.yaml"),
        format!(
            "name: broken\ndisplay_name: Broken\nkind: cli\ncli:\n  command:\n    executable: {}\n  output:\n    format: json\n    result_path: answer\n    cost_path: cost\n",
            script.display()
        ),
    )
    .unwrap();
    env.start_conductor();
    let score = env.write_score(
        "fb",
        "name: fb\nworkspace: ./fb-ws\ninstrument: broken\ninstrument_fallbacks: [shell]\nretry: {max_retries: 1}\nsheet: {size: 1, total_items: 1}\nprompt:\n  template: \"RUN: touch {{ workspace }}/out.txt\"\nvalidations:\n  - {type: file_exists, path: \"{workspace}/out.txt\"}\n",
    );
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "fb", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let out = env.mozart(&["status", "fb"]);
    let text = stdout(&out);
    assert!(
        text.contains(
            "Cost: unknown (no limit set) — broken reported neither its cost nor its tokens"
        ),
        "{text}"
    );
    assert!(!text.contains("claude_cli"), "{text}");
}
