//! Concerts: `on_success` `run_job` hooks chain scores (conductor.md §19): chain depths,
//! the depth limit for `fresh` self-chains, the zero-work guard without `fresh`, and a
//! `kill -9` between two links (hooks survive a restart; each link runs exactly once).

use crate::harness;

use std::path::Path;
use std::time::Duration;

use harness::*;
use mozart_tests::{stdout, TestEnv};
use serde_json::Value;

/// A one-sheet shell score that appends its name to `ledger`, optionally chaining to
/// `next` (a score file name in the same directory).
fn link(env: &TestEnv, name: &str, ledger: &Path, next: Option<&str>, concert: &str, fresh: bool) {
    let hook = next
        .map(|n| {
            format!("on_success:\n  - type: run_job\n    job_path: {n}.yaml\n    fresh: {fresh}\n")
        })
        .unwrap_or_default();
    let yaml = format!(
        r#"name: {name}
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: echo {name} >> "{ledger}"
concert: {concert}
{hook}"#,
        ws = env.work.join(format!("{name}-ws")).display(),
        ledger = ledger.display(),
    );
    env.write_score(name, &yaml);
}

fn job<'a>(list: &'a [Value], id: &str) -> &'a Value {
    list.iter()
        .find(|j| j["job_id"] == id)
        .unwrap_or_else(|| panic!("{id} not listed: {list:?}"))
}

/// Wait until `ledger` has `n` lines, then make sure it stays there for `settle` seconds.
fn ledger_settles(env: &TestEnv, path: &Path, n: usize, secs: f64, settle: f64) -> Vec<String> {
    poll(env, secs, &format!("{n} ledger lines"), || {
        (ledger(path).len() >= n).then_some(())
    });
    std::thread::sleep(Duration::from_secs_f64(settle));
    ledger(path)
}

#[test]
fn a_three_score_chain_completes_in_order_with_chain_depths() {
    let env = TestEnv::new();
    env.start_conductor();
    let led = env.work.join("ledger");
    let concert = "{enabled: true, cooldown_between_jobs_seconds: 0}";
    link(&env, "first", &led, Some("second"), concert, false);
    link(&env, "second", &led, Some("third"), concert, false);
    link(&env, "third", &led, None, concert, false);
    run(&env, &env.work.join("first.yaml"), &[]);
    poll(&env, 30.0, "the third link to complete", || {
        let list = list_all(&env);
        list.iter()
            .any(|j| j["job_id"] == "third" && j["status"] == "completed")
            .then_some(())
    });
    assert_eq!(
        ledger_settles(&env, &led, 3, 10.0, 0.5),
        ["first", "second", "third"]
    );
    let list = list_all(&env);
    for (id, depth) in [("first", 0), ("second", 1), ("third", 2)] {
        let j = job(&list, id);
        assert_eq!(j["status"], "completed", "{id}: {j}");
        assert_eq!(j["chain_depth"].as_u64().unwrap_or(0), depth, "{id}: {j}");
    }
}

#[test]
fn a_fresh_self_chain_stops_at_max_chain_depth() {
    let env = TestEnv::new();
    env.start_conductor();
    let led = env.work.join("ledger");
    link(
        &env,
        "loop",
        &led,
        Some("loop"),
        "{enabled: true, max_chain_depth: 3, cooldown_between_jobs_seconds: 0}",
        true,
    );
    run(&env, &env.work.join("loop.yaml"), &[]);
    // Depths 0, 1, 2 and 3 run; the hook of depth 3 is refused.
    let lines = ledger_settles(&env, &led, 4, 40.0, 2.0);
    assert_eq!(lines, ["loop"; 4], "the chain stopped at the depth limit");
    wait_terminal(&env, "loop", 10.0);
    // Reaching the limit is the designed end of the concert: the last link stays completed,
    // its hook counts as a success, and waiting on it exits 0.
    let doc = poll(&env, 10.0, "the last link's hook result", || {
        let d = status(&env, "loop");
        (d["hook_results_count"].as_u64().unwrap_or(0) >= 1).then_some(d)
    });
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(doc["hook_failures"], serde_json::json!([]), "{doc:#}");
    let raw = env.raw_call("job.status", serde_json::json!({"job_id": "loop"}));
    let hooks = raw["result"]["hook_results"].to_string();
    assert!(hooks.contains("stopped at its depth limit (3)"), "{raw:#}");
    let waited = env.mozart(&["wait", "loop"]);
    assert_eq!(waited.status.code(), Some(0), "{waited:?}");
}

#[test]
fn a_self_chain_without_fresh_stops_after_one_link_on_the_zero_work_guard() {
    let env = TestEnv::new();
    env.start_conductor();
    let led = env.work.join("ledger");
    link(
        &env,
        "again",
        &led,
        Some("again"),
        "{enabled: true, max_chain_depth: 10, cooldown_between_jobs_seconds: 0}",
        false,
    );
    run(&env, &env.work.join("again.yaml"), &[]);
    // The second link keeps the completed sheet, does no work, and fires no hook.
    let lines = ledger_settles(&env, &led, 1, 20.0, 3.0);
    assert_eq!(lines, ["again"], "no link after one with zero work");
    let doc = wait_terminal(&env, "again", 10.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
}

#[test]
fn a_kill_9_between_two_links_still_completes_the_concert_once() {
    let env = TestEnv::new();
    env.start_conductor();
    let led = env.work.join("ledger");
    // The cooldown holds the first link's hook open long enough to kill the conductor.
    link(
        &env,
        "opening",
        &led,
        Some("closing"),
        "{enabled: true, cooldown_between_jobs_seconds: 4}",
        false,
    );
    link(
        &env,
        "closing",
        &led,
        None,
        "{enabled: true, cooldown_between_jobs_seconds: 0}",
        false,
    );
    run(&env, &env.work.join("opening.yaml"), &[]);
    wait_status(&env, "opening", 20.0, |d| d["status"] == "completed");
    assert_eq!(ledger(&led), ["opening"]);

    let pid = env.conductor_pid().unwrap();
    mozart_tests::signal(pid, "KILL");
    poll(&env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    assert_eq!(
        ledger(&led),
        ["opening"],
        "killed before the second link ran"
    );
    env.start_conductor();

    poll(&env, 30.0, "the closing link to complete", || {
        let list = list_all(&env);
        list.iter()
            .any(|j| j["job_id"] == "closing" && j["status"] == "completed")
            .then_some(())
    });
    assert_eq!(
        ledger_settles(&env, &led, 2, 10.0, 1.0),
        ["opening", "closing"],
        "each link ran exactly once"
    );
    let list = list_all(&env);
    assert_eq!(job(&list, "closing")["chain_depth"], 1, "{list:?}");
}

/// A job that failed only in an `on_success` hook owes its hooks: `mozart resume` runs the
/// failed hook and those after it again (the chain goes on), not the ones that succeeded.
/// It used to complete on the zero-work guard with no hook run and the chain lost, while
/// its status showed COMPLETED beside a failed hook.
#[test]
fn resuming_a_job_failed_in_its_hooks_runs_the_failed_hooks_and_continues_the_chain() {
    owed_hooks_run_again(|env| env.mozart(&["resume", "first"]));
}

/// The same owed hooks through a plain `mozart run` of the unchanged score: it said
/// "nothing was run, the job is completed" beside the failed hook, and the chain was lost.
#[test]
fn running_a_job_failed_in_its_hooks_again_runs_the_failed_hooks_and_continues_the_chain() {
    owed_hooks_run_again(|env| env.mozart(&["run", env.work.join("first.yaml").to_str().unwrap()]));
}

/// A job failed by its gate hook; once the gate is open, `again` (resume, or run) runs the
/// failed hook and those after it — not the one that succeeded — and the chain goes on.
fn owed_hooks_run_again(again: impl Fn(&TestEnv) -> std::process::Output) {
    let env = TestEnv::new();
    env.start_conductor();
    let led = env.work.join("ledger");
    let gate = env.work.join("gate");
    link(&env, "second", &led, None, "{enabled: false}", false);
    let yaml = format!(
        r#"name: first
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: echo first >> "{led}"
on_success:
  - type: run_command
    command: "echo hook-ok >> '{led}'"
  - type: run_command
    command: "test -f '{gate}'"
    description: "the gate"
    on_failure: abort
  - type: run_job
    job_path: second.yaml
"#,
        ws = env.work.join("first-ws").display(),
        led = led.display(),
        gate = gate.display(),
    );
    env.write_score("first", &yaml);
    run(&env, &env.work.join("first.yaml"), &[]);
    let out = env.mozart(&["wait", "first"]);
    assert_eq!(out.status.code(), Some(1), "the gate hook fails the job");
    assert_eq!(ledger(&led), ["first", "hook-ok"]);
    std::fs::write(&gate, "").unwrap();
    let out = again(&env);
    assert!(out.status.success(), "{}", stdout(&out));
    // No sheet runs, but the hooks do: "nothing was run" would be false.
    assert!(
        stdout(&out)
            .contains("Every sheet is finished: no sheet was run; its on_success hooks run again"),
        "{}",
        stdout(&out)
    );
    poll(&env, 30.0, "the chained job to complete", || {
        list_all(&env)
            .iter()
            .any(|j| j["job_id"] == "second" && j["status"] == "completed")
            .then_some(())
    });
    let out = env.mozart(&["wait", "first"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc = status(&env, "first");
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert!(
        doc["hook_failures"].as_array().is_none_or(|f| f.is_empty()),
        "{doc:#}"
    );
    // The first hook succeeded the first time and is not repeated.
    assert_eq!(
        ledger_settles(&env, &led, 3, 10.0, 1.0),
        ["first", "hook-ok", "second"]
    );
}

/// A job failed by its `on_success` hooks says why where a user looks: `mozart errors`
/// lists each failed hook whole (it said "No errors found" for the failed job), and
/// `mozart logs` says which hook failed and why (it said `hooks.executed hook=0
/// success=False`). A chained score that does not load names its file, line and the fix.
#[test]
fn errors_and_logs_say_why_a_hook_failed_the_job() {
    let env = TestEnv::new();
    env.start_conductor();
    env.write_score(
        "broken",
        "name: broken\nworkspace: ./broken-ws\ninstrument: shell\nsheet: {size: 1, total_items: 1}\nretries: 3\nprompt: {template: hi}\n",
    );
    let yaml = format!(
        r#"name: hooked
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: true
on_success:
  - type: run_command
    command: "echo the deploy key is missing; exit 3"
    description: "deploy"
  - type: run_job
    job_path: broken.yaml
"#,
        ws = env.work.join("hooked-ws").display(),
    );
    env.write_score("hooked", &yaml);
    run(&env, &env.work.join("hooked.yaml"), &[]);
    let out = env.mozart(&["wait", "hooked"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&env.mozart(&["errors", "hooked"]));
    assert!(!text.contains("No errors found"), "{text}");
    assert!(text.contains("Hook Failures"), "{text}");
    assert!(text.contains("run_command: deploy — exit code 3"), "{text}");
    assert!(text.contains("the deploy key is missing"), "{text}");
    assert!(text.contains("broken.yaml, line 5"), "{text}");
    assert!(
        text.contains("'mozart resume hooked' runs its run_job hook again"),
        "{text}"
    );
    assert!(!text.contains("--workspace"), "{text}");
    let json: Value =
        serde_json::from_str(&stdout(&env.mozart(&["errors", "hooked", "--json"]))).unwrap();
    assert_eq!(
        json["hook_failures"].as_array().map(Vec::len),
        Some(2),
        "{json:#}"
    );
    let logs = stdout(&env.mozart(&["logs", "hooked"]));
    assert!(
        logs.contains("on_success hook 1 (run_command 'deploy') failed: exit code 3 (last output: the deploy key is missing)"),
        "{logs}"
    );
    assert!(
        logs.contains("on_success hook 2 (run_job) failed: Chained job rejected"),
        "{logs}"
    );
    // `mozart status` sends the user to `diagnose`, which names the hooks too.
    let report = stdout(&env.mozart(&["diagnose", "hooked"]));
    assert!(report.contains("Hook Failures"), "{report}");
    assert!(
        report.contains("run_command: deploy — exit code 3"),
        "{report}"
    );
}

/// Hook paths are the score's, not the conductor's: a relative `working_directory` and
/// `concert.concert_log_path` are taken from the score's directory (they were taken from
/// the directory `mozart start` ran in) and `{workspace}` expands in them; a missing
/// directory or program is named in the failure (it said `No such file or directory (os
/// error 2)`).
#[test]
fn hook_working_directories_resolve_against_the_score_and_failures_name_the_path() {
    let env = TestEnv::new();
    env.start_conductor();
    let dir = env.work.join("project");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let ws = env.work.join("wd-ws");
    let yaml = format!(
        r#"name: wd
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: mkdir -p "{ws}/made"
on_success:
  - type: run_command
    command: "pwd > {{workspace}}/pwd-sub.txt"
    working_directory: sub
  - type: run_command
    command: "pwd > {{workspace}}/pwd-made.txt"
    working_directory: "{{workspace}}/made"
  - type: run_script
    command: "no-such-program-for-mozart-hooks --now"
  - type: run_command
    command: "true"
    working_directory: nothere
concert:
  enabled: true
  concert_log_path: concert.log
"#,
        ws = ws.display(),
    );
    std::fs::write(dir.join("wd.yaml"), yaml).unwrap();
    run(&env, &dir.join("wd.yaml"), &[]);
    let out = env.mozart(&["wait", "wd"]);
    assert_eq!(out.status.code(), Some(1), "two hooks fail");
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    assert_eq!(
        read(&ws.join("pwd-sub.txt")).trim(),
        dir.join("sub").to_string_lossy()
    );
    assert_eq!(
        read(&ws.join("pwd-made.txt")).trim(),
        ws.join("made").to_string_lossy()
    );
    assert!(
        dir.join("concert.log").exists(),
        "the concert log is beside the score"
    );
    let json: Value =
        serde_json::from_str(&stdout(&env.mozart(&["errors", "wd", "--json"]))).unwrap();
    let reasons: Vec<&str> = json["hook_failures"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|h| h["error_message"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(reasons.len(), 2, "{json:#}");
    assert!(
        reasons[0].starts_with("cannot run 'no-such-program-for-mozart-hooks': "),
        "{reasons:?}"
    );
    assert!(
        reasons[1].starts_with(&format!(
            "working_directory does not exist: {}",
            dir.join("nothere").display()
        )),
        "{reasons:?}"
    );
}

/// `mozart cancel` of a completed job whose `on_success` hooks run stops them: the running
/// hook's processes end, no later hook runs and no chained job is submitted; the job shows
/// cancelled, and `mozart resume` runs the stopped hook and the rest. It said `Score not
/// found or already stopped` while status said the hooks were running, and the concert
/// went on.
#[test]
fn cancel_stops_running_hooks_and_the_chain_and_resume_continues_it() {
    let env = TestEnv::new();
    env.start_conductor();
    let led = env.work.join("ledger");
    let gate = env.work.join("gate");
    let ws = env.work.join("hooks-ws");
    link(&env, "after", &led, None, "{enabled: false}", false);
    let yaml = format!(
        r#"name: hooks
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: true
on_success:
  - type: run_command
    command: "echo $$ > hook.pid; test -f '{gate}' || sleep 60"
  - type: run_job
    job_path: after.yaml
"#,
        ws = ws.display(),
        gate = gate.display(),
    );
    env.write_score("hooks", &yaml);
    run(&env, &env.work.join("hooks.yaml"), &[]);
    let pid: u32 = poll(&env, 20.0, "the hook to start", || {
        std::fs::read_to_string(ws.join("hook.pid"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
    });
    let out = env.mozart(&["cancel", "hooks"]);
    assert!(
        out.status.success(),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout(&out).contains("Score 'hooks' cancelled."),
        "{}",
        stdout(&out)
    );
    let doc = status(&env, "hooks");
    assert_eq!(doc["status"], "cancelled", "{doc:#}");
    assert_eq!(
        doc["error"], "Cancelled while its on_success hooks ran",
        "{doc:#}"
    );
    // Upstream's key, with the hook's type (upstream: "unknown" for every hook).
    assert_eq!(
        doc["hook_failures"][0]["hook_name"], "run_command",
        "{doc:#}"
    );
    poll(&env, 5.0, "the hook's shell to end", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !list_all(&env).iter().any(|j| j["job_id"] == "after"),
        "no chained job after a cancel"
    );
    std::fs::write(&gate, "").unwrap();
    let out = env.mozart(&["resume", "hooks"]);
    assert!(out.status.success(), "{}", stdout(&out));
    poll(&env, 30.0, "the chained job to complete", || {
        list_all(&env)
            .iter()
            .any(|j| j["job_id"] == "after" && j["status"] == "completed")
            .then_some(())
    });
    assert_eq!(status(&env, "hooks")["status"], "completed");
}

/// Upstream's own concerts name the next score from their project's root (`job_path:
/// examples/issue-fixer.yaml` inside `examples/issue-fixer.yaml`): the chain goes on (it
/// failed with `Job config not found: …/examples/examples/…`); a path found nowhere names
/// the directory it is taken from.
#[test]
fn a_job_path_written_from_the_project_root_still_chains() {
    let env = TestEnv::new();
    env.start_conductor();
    let examples = env.work.join("project/examples");
    std::fs::create_dir_all(&examples).unwrap();
    let led = env.work.join("ledger");
    let score = |name: &str, hook: &str| {
        format!(
            "name: {name}\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\nsheet: {{size: 1, total_items: 1}}\nprompt:\n  template: |\n    RUN: echo {name} >> \"{led}\"\n{hook}",
            ws = env.work.join(format!("{name}-ws")).display(),
            led = led.display()
        )
    };
    std::fs::write(
        examples.join("up1.yaml"),
        score(
            "up1",
            "on_success:\n  - type: run_job\n    job_path: examples/up2.yaml\n",
        ),
    )
    .unwrap();
    std::fs::write(examples.join("up2.yaml"), score("up2", "")).unwrap();
    std::fs::write(
        examples.join("lost.yaml"),
        score(
            "lost",
            "on_success:\n  - type: run_job\n    job_path: examples/nowhere.yaml\n",
        ),
    )
    .unwrap();
    run(&env, &examples.join("up1.yaml"), &[]);
    run(&env, &examples.join("lost.yaml"), &[]);
    poll(&env, 30.0, "the chained job to complete", || {
        list_all(&env)
            .iter()
            .any(|j| j["job_id"] == "up2" && j["status"] == "completed")
            .then_some(())
    });
    assert_eq!(env.mozart(&["wait", "up1"]).status.code(), Some(0));
    assert_eq!(env.mozart(&["wait", "lost"]).status.code(), Some(1));
    let text = stdout(&env.mozart(&["errors", "lost"]));
    assert!(
        text.contains(&format!(
            "Job config not found: {} (a relative job_path is taken from the score's directory, {})",
            examples.join("examples/nowhere.yaml").display(),
            examples.display()
        )),
        "{text}"
    );
}

/// A chained score without `workspace:` runs in `./workspace` of the directory the chain's
/// `mozart run` was called from — what `mozart run --dry-run` of it there shows — not of the
/// conductor's directory (where it ran) nor the score's.
#[test]
fn a_chained_score_without_a_workspace_runs_in_the_submitting_directory() {
    let env = TestEnv::new();
    env.start_conductor(); // from env.work
    let (x, y) = (env.work.join("X"), env.work.join("Y"));
    std::fs::create_dir_all(&x).unwrap();
    std::fs::create_dir_all(&y).unwrap();
    let body = "instrument: shell\npause_between_sheets_seconds: 0\nsheet: {size: 1, total_items: 1}\nprompt:\n  template: |\n    RUN: pwd > \"{{ workspace }}/where.txt\"\n";
    std::fs::write(
        x.join("aa.yaml"),
        format!("name: aa\nworkspace: ./wsA\n{body}on_success:\n  - type: run_job\n    job_path: bb.yaml\n"),
    )
    .unwrap();
    std::fs::write(x.join("bb.yaml"), format!("name: bb\n{body}")).unwrap();
    let out = env
        .command(&["run", "../X/aa.yaml"])
        .current_dir(&y)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    poll(&env, 30.0, "the chained job to complete", || {
        list_all(&env)
            .iter()
            .any(|j| j["job_id"] == "bb" && j["status"] == "completed")
            .then_some(())
    });
    let preview = env
        .command(&["run", "--dry-run", "--json", "../X/bb.yaml"])
        .current_dir(&y)
        .output()
        .unwrap();
    let preview: Value = serde_json::from_str(&stdout(&preview)).unwrap();
    let want = y.join("workspace");
    assert_eq!(
        preview["workspace"],
        want.to_string_lossy().as_ref(),
        "{preview:#}"
    );
    assert_eq!(
        std::fs::read_to_string(want.join("where.txt"))
            .unwrap_or_default()
            .trim(),
        want.to_string_lossy(),
        "bb ran in Y/workspace"
    );
    assert!(
        !env.work.join("workspace").exists(),
        "not the conductor's directory"
    );
    let listed = list_all(&env);
    assert_eq!(
        job(&listed, "bb")["workspace"],
        want.to_string_lossy().as_ref(),
        "{listed:#?}"
    );
}

/// `mozart clear` keeps a completed job whose `on_success` hooks still run, and says so
/// (it said `No matching scores to clear.` about the very job it was asked to clear).
#[test]
fn clear_says_a_job_whose_hooks_run_is_kept() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("busy-ws");
    let yaml = format!(
        "name: busy\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\nsheet: {{size: 1, total_items: 1}}\nprompt:\n  template: |\n    RUN: true\non_success:\n  - type: run_command\n    command: \"touch started; sleep 30\"\n",
        ws = ws.display()
    );
    env.write_score("busy", &yaml);
    run(&env, &env.work.join("busy.yaml"), &[]);
    poll(&env, 20.0, "the hook to start", || {
        ws.join("started").exists().then_some(())
    });
    let out = env.mozart(&["clear", "-j", "busy", "-y"]);
    let text = stdout(&out);
    assert!(
        text.contains("Not cleared: busy — its on_success hooks are still running"),
        "{text}"
    );
    assert!(!text.contains("No matching scores"), "{text}");
    assert!(list_all(&env).iter().any(|j| j["job_id"] == "busy"));
    assert!(env.mozart(&["cancel", "busy"]).status.success());
}

/// A hook that prints a lot costs the conductor no memory for it: only the end of its
/// output is kept (the whole of it was held, twice — 400 MB printed took 800 MB), with
/// stdout and stderr merged in the order written.
#[test]
fn a_hook_printing_hundreds_of_megabytes_keeps_only_its_end_in_memory() {
    let env = TestEnv::new();
    env.start_conductor();
    let pid = env.conductor_pid().expect("conductor pid");
    let peak = || -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    let before = peak();
    let yaml = format!(
        "name: loud\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\nsheet: {{size: 1, total_items: 1}}\nprompt:\n  template: |\n    RUN: true\non_success:\n  - type: run_command\n    command: \"head -c 300000000 /dev/zero | tr '\\\\0' x; echo; echo out-last; echo err-last >&2; exit 4\"\n",
        ws = env.work.join("loud-ws").display()
    );
    env.write_score("loud", &yaml);
    run(&env, &env.work.join("loud.yaml"), &[]);
    assert_eq!(env.mozart(&["wait", "loud"]).status.code(), Some(1));
    let grown_mb = peak().saturating_sub(before) / 1024;
    assert!(
        grown_mb < 100,
        "the conductor's peak memory grew by {grown_mb} MB"
    );
    let text = stdout(&env.mozart(&["errors", "loud"]));
    assert!(text.contains("exit code 4"), "{text}");
    assert!(text.contains("out-last\n      err-last"), "{text}");
}

/// A concert run again from its first link (`--fresh`) whose next link already completed
/// with the same score: that link runs nothing, and its hook's result says so — with how to
/// have it run again — instead of "Chained job submitted".
#[test]
fn a_chained_job_that_had_already_completed_is_said_to_have_run_nothing() {
    let env = TestEnv::new();
    env.start_conductor();
    let led = env.work.join("ledger");
    let concert = "{enabled: true, cooldown_between_jobs_seconds: 0}";
    link(&env, "opening", &led, Some("encore"), concert, false);
    link(&env, "encore", &led, None, concert, false);
    run(&env, &env.work.join("opening.yaml"), &[]);
    assert_eq!(
        ledger_settles(&env, &led, 2, 30.0, 0.5),
        ["opening", "encore"]
    );
    env.wait_completed("encore");
    run(&env, &env.work.join("opening.yaml"), &["--fresh"]);
    let raw = poll(&env, 30.0, "the opening's hook result", || {
        let raw = env.raw_call("job.status", serde_json::json!({"job_id": "opening"}));
        (raw["result"]["hook_results"]
            .as_array()
            .is_some_and(|h| !h.is_empty()))
        .then_some(raw)
    });
    let hooks = raw["result"]["hook_results"].to_string();
    assert!(
        hooks.contains("Chained job encore had already completed with this score: nothing was run"),
        "{raw:#}"
    );
    assert!(!hooks.contains("Chained job submitted"), "{raw:#}");
    assert_eq!(ledger(&led), ["opening", "encore", "opening"]);
}

/// `run_script` splits its command as written, then fills each word's placeholders: a
/// workspace with a space in its name stays one argument (it was split into two, and a
/// stray file named after the first half appeared).
#[test]
fn run_script_keeps_a_placeholder_with_spaces_one_argument() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("ws with space");
    let yaml = format!(
        "name: spaced\nworkspace: {ws}\ninstrument: shell\npause_between_sheets_seconds: 0\n\
         sheet: {{size: 1, total_items: 1}}\nprompt:\n  template: \"RUN: true\"\n\
         on_success:\n  - type: run_script\n    command: \"/bin/touch {{workspace}}/copy3.txt\"\n",
        ws = ws.display()
    );
    let path = env.write_score("spaced", &yaml);
    run(&env, &path, &[]);
    let out = env.mozart(&["wait", "spaced"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        ws.join("copy3.txt").exists(),
        "the hook's file is not in the workspace"
    );
    assert!(
        !ws.join("with").exists(),
        "the path was split at its spaces"
    );
}

/// A conductor killed (`kill -9`) while a `run_command` hook runs: the hook's process group
/// is ended with it (the watchdog, or the next start before anything runs), and the owed
/// hook runs again once — never beside the copy the dead conductor started. It used to run
/// on, orphaned, while the restarted conductor ran it a second time alongside.
#[test]
fn a_hook_running_when_the_conductor_is_killed_never_runs_beside_its_rerun() {
    let env = TestEnv::new();
    let led = env.work.join("ledger");
    let command = format!(
        "echo start >> '{led}'; sleep 4; echo end >> '{led}'",
        led = led.display()
    );
    kill_once_started(
        &env,
        "hooked",
        &format!("on_success:\n  - type: run_command\n    command: \"{command}\"\n"),
    );
    let doc = poll(&env, 30.0, "the hook's result", || {
        let d = status(&env, "hooked");
        (d["hook_results_count"].as_u64().unwrap_or(0) >= 1).then_some(d)
    });
    assert_eq!(doc["status"], "completed", "{doc:#}");
    // The killed copy never wrote its end; the rerun ran alone, start to end.
    assert_eq!(
        ledger_settles(&env, &led, 4, 10.0, 5.0),
        ["sheet", "start", "start", "end"],
        "the sheet ran once, the hook's first copy died with the conductor"
    );
}

/// A `run_command` hook that leaves processes behind — one detached with `setsid`, one in
/// the background holding the hook's output — completes once the hook itself has ended,
/// and both are ended with it. The first used to outlive the hook (and the conductor); the
/// second held the output open, so the hook ran into its 300 s timeout and failed.
#[test]
fn what_a_hook_leaves_running_ends_with_the_hook() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("bg-ws");
    let command =
        "setsid sh -c 'echo $$ > detached.pid; exec sleep 120' </dev/null >/dev/null 2>&1 & \
                   sh -c 'echo $$ > held.pid; exec sleep 120' & echo started";
    let yaml = format!(
        "name: bg\nworkspace: {ws}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
         prompt:\n  template: \"RUN: true\"\non_success:\n  - type: run_command\n    command: {command:?}\n",
        ws = ws.display()
    );
    let path = env.write_score("bg", &yaml);
    run(&env, &path, &[]);
    let doc = poll(&env, 60.0, "the hook's result", || {
        let d = status(&env, "bg");
        (d["hook_results_count"].as_u64().unwrap_or(0) >= 1).then_some(d)
    });
    assert_eq!(doc["status"], "completed", "{doc:#}");
    let raw = env.raw_call("job.status", serde_json::json!({"job_id": "bg"}));
    let hooks = &raw["result"]["hook_results"][0];
    assert_eq!(hooks["success"], true, "{raw:#}");
    assert!(
        hooks["output"]
            .as_str()
            .is_some_and(|o| o.contains("started")),
        "{raw:#}"
    );
    for file in ["detached.pid", "held.pid"] {
        let pid: u32 = std::fs::read_to_string(ws.join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .trim()
            .parse()
            .unwrap();
        poll(&env, 15.0, &format!("{file}'s process to end"), || {
            (!mozart_tests::alive(pid)).then_some(())
        });
    }
}

/// The same for a `command_succeeds` validation: killed with the conductor, its check runs
/// again with the sheet's re-run — alone, never beside the copy the dead conductor started.
#[test]
fn a_validation_command_running_when_the_conductor_is_killed_never_runs_beside_its_rerun() {
    let env = TestEnv::new();
    let led = env.work.join("ledger");
    let command = format!(
        "echo start >> '{led}'; sleep 4; echo end >> '{led}'",
        led = led.display()
    );
    kill_once_started(
        &env,
        "checked",
        &format!("validations:\n  - type: command_succeeds\n    command: \"{command}\"\n"),
    );
    let doc = wait_terminal(&env, "checked", 30.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(
        ledger_settles(&env, &led, 5, 10.0, 5.0),
        ["sheet", "start", "sheet", "start", "end"],
        "the check's first copy died with the conductor; the re-run's ran alone"
    );
}

/// Run the one-sheet score `name` (its sheet appends `sheet` to `ledger`; `tail` adds the
/// command that appends `start`, sleeps, then `end`), `kill -9` the conductor once `start`
/// is written, and start a new one.
fn kill_once_started(env: &TestEnv, name: &str, tail: &str) {
    env.start_conductor();
    let led = env.work.join("ledger");
    let yaml = format!(
        "name: {name}\nworkspace: {ws}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\nprompt:\n  template: |\n    RUN: echo sheet >> \"{led}\"\n{tail}",
        ws = env.work.join(format!("{name}-ws")).display(),
        led = led.display(),
    );
    env.write_score(name, &yaml);
    run(env, &env.work.join(format!("{name}.yaml")), &[]);
    poll(env, 20.0, "the command to start", || {
        (ledger(&led) == ["sheet", "start"]).then_some(())
    });
    let pid = env.conductor_pid().unwrap();
    mozart_tests::signal(pid, "KILL");
    poll(env, 10.0, "the conductor to die", || {
        (!mozart_tests::alive(pid)).then_some(())
    });
    env.start_conductor();
}

/// A concert whose next score has this job's file name in another directory (`a/score.yaml`
/// chaining `../b/score.yaml`): both would be job `score`, and the second replaced the
/// first's record (its hook result shown as the second's). The hook fails instead, saying
/// why and what to do; the first job's record stays its own.
#[test]
fn a_chained_score_of_the_same_file_name_elsewhere_is_refused_not_taken_for_this_job() {
    let env = TestEnv::new();
    env.start_conductor();
    let led = env.work.join("ledger");
    for (dir, next) in [("a", Some("../b/score.yaml")), ("b", None)] {
        let d = env.work.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        let hook = next
            .map(|n| format!("on_success:\n  - type: run_job\n    job_path: {n}\n"))
            .unwrap_or_default();
        std::fs::write(
            d.join("score.yaml"),
            format!(
                "name: {dir}\nworkspace: ./ws\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\nprompt:\n  template: |\n    RUN: echo {dir} >> \"{led}\"\n{hook}",
                led = led.display()
            ),
        )
        .unwrap();
    }
    run(&env, &env.work.join("a/score.yaml"), &[]);
    let out = env.mozart(&["wait", "score"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let raw = env.raw_call("job.status", serde_json::json!({"job_id": "score"}));
    let hooks = raw["result"]["hook_results"].to_string();
    assert!(
        hooks.contains("would be job 'score', the ID of this job"),
        "{raw:#}"
    );
    assert!(
        raw["result"]["config_path"]
            .as_str()
            .is_some_and(|p| p.ends_with("a/score.yaml")),
        "{raw:#}"
    );
    assert_eq!(ledger_settles(&env, &led, 1, 5.0, 2.0), ["a"]);
}

/// A job that failed on a sheet before its hooks ever ran: once the sheet is recovered
/// (`mozart recover`, its validation passes now), `mozart resume` completes the job and its
/// `on_success` hooks run for this first success — the concert goes on. The resume said
/// "Every sheet is finished: nothing was run, the job is completed", and the hooks never ran
/// (`hooks.skipped_zero_work`).
#[test]
fn a_job_recovered_and_resumed_runs_the_hooks_it_never_ran() {
    let env = TestEnv::new();
    env.start_conductor();
    let led = env.work.join("ledger");
    let ws = env.work.join("rc-ws");
    link(&env, "after", &led, None, "{enabled: false}", false);
    let yaml = format!(
        r#"name: rc
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
retry: {{max_retries: 0}}
sheet: {{size: 1, total_items: 2}}
prompt:
  template: "RUN: {{% if sheet_num == 2 %}}exit 1{{% else %}}echo done > {ws}/out-{{{{ sheet_num }}}}.txt{{% endif %}}"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
on_success:
  - type: run_command
    command: "echo hook >> '{led}'"
  - type: run_job
    job_path: after.yaml
"#,
        ws = ws.display(),
        led = led.display(),
    );
    let path = env.write_score("rc", &yaml);
    run(&env, &path, &[]);
    let out = env.mozart(&["wait", "rc"]);
    assert_eq!(out.status.code(), Some(1), "sheet 2 fails the job");
    std::fs::write(ws.join("out-2.txt"), "done\n").unwrap();
    let out = env.mozart(&["recover", "rc"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let out = env.mozart(&["resume", "rc"]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("no sheet was run; its on_success hooks, not run yet, run now"),
        "{}",
        stdout(&out)
    );
    poll(&env, 30.0, "the chained job to complete", || {
        list_all(&env)
            .iter()
            .any(|j| j["job_id"] == "after" && j["status"] == "completed")
            .then_some(())
    });
    let out = env.mozart(&["wait", "rc"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(ledger_settles(&env, &led, 2, 10.0, 1.0), ["hook", "after"]);
}

/// Hook results of an older run are not this run's: a job whose gate hook failed is run
/// again with `--fresh`, fails on a sheet, and once that sheet is recovered (`mozart
/// recover`) `mozart resume` runs every hook of this run — the notification hook too, which
/// only the OLDER run had run. Its resume took the older run's success for this run's and
/// skipped it (the notification never ran; a `run_job` there never submitted its link).
#[test]
fn a_fresh_run_owes_every_hook_whatever_the_run_before_it_ran() {
    owed_hooks_are_this_runs(|env, path| {
        run(env, path, &["--fresh"]);
    });
}

/// The same after a resume with an edited score (a sheet added, which fails): the run that
/// completes owes every hook, not only those the run before the edit failed.
#[test]
fn a_resume_with_an_edited_score_owes_every_hook_whatever_the_run_before_it_ran() {
    owed_hooks_are_this_runs(|env, path| {
        let text = std::fs::read_to_string(path).unwrap();
        std::fs::write(path, text.replace("total_items: 2", "total_items: 3")).unwrap();
        let out = env.mozart(&["resume", "relay"]);
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "{}",
            stdout(&out)
        );
    });
}

/// A job whose gate hook failed (its notification hook ran); `again` starts a new run,
/// which fails on its last sheet; that sheet recovered, `mozart resume` runs both hooks.
fn owed_hooks_are_this_runs(again: impl Fn(&TestEnv, &Path)) {
    let env = TestEnv::new();
    env.start_conductor();
    let led = env.work.join("ledger");
    let gate = env.work.join("gate");
    let broken = env.work.join("broken");
    let ws = env.work.join("relay-ws");
    let yaml = format!(
        r#"name: relay
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
retry: {{max_retries: 0}}
sheet: {{size: 1, total_items: 2}}
prompt:
  template: "RUN: if [ {{{{ sheet_num }}}} -gt 1 ] && [ -f '{broken}' ]; then exit 1; fi; echo done > {ws}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
on_success:
  - type: run_command
    command: "echo note >> '{led}'"
  - type: run_command
    command: "test -f '{gate}'"
    description: "the gate"
    on_failure: abort
"#,
        ws = ws.display(),
        led = led.display(),
        gate = gate.display(),
        broken = broken.display(),
    );
    let path = env.write_score("relay", &yaml);
    run(&env, &path, &[]);
    let out = env.mozart(&["wait", "relay"]);
    assert_eq!(out.status.code(), Some(1), "the gate hook fails the job");
    assert_eq!(ledger(&led), ["note"]);

    // The next run fails on its last sheet, before any hook of its own.
    std::fs::write(&broken, "").unwrap();
    for n in 1..=3 {
        let _ = std::fs::remove_file(ws.join(format!("out-{n}.txt")));
    }
    again(&env, &path);
    let out = env.mozart(&["wait", "relay"]);
    assert_eq!(out.status.code(), Some(1), "a sheet fails the new run");
    assert_eq!(ledger(&led), ["note"], "no hook of the new run ran");

    // Its failed sheet done by hand and recovered: the resume completes the job, and every
    // hook of this run is owed.
    std::fs::remove_file(&broken).unwrap();
    std::fs::write(&gate, "").unwrap();
    for n in 1..=3 {
        std::fs::write(ws.join(format!("out-{n}.txt")), "done\n").unwrap();
    }
    let out = env.mozart(&["recover", "relay"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let out = env.mozart(&["resume", "relay"]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("no sheet was run; its on_success hooks, not run yet, run now"),
        "{}",
        stdout(&out)
    );
    let out = env.mozart(&["wait", "relay"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc = status(&env, "relay");
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(
        ledger_settles(&env, &led, 2, 10.0, 1.0),
        ["note", "note"],
        "the notification hook ran for this run too, once"
    );
}

/// A job failed by its gate hook (its notification hook ran); the score is edited before
/// the resume — a new notification inserted first, the gate fixed. The resume runs the new
/// hook and the gate, not the notification that already ran (results count for the hook
/// they were of, not for the position): it used to skip the new hook, never run, because
/// the old notification had succeeded at its position, and ran the old one a second time.
#[test]
fn a_resume_after_the_hooks_were_edited_runs_the_new_hook_and_not_the_one_that_ran() {
    let env = TestEnv::new();
    env.start_conductor();
    let led = env.work.join("ledger");
    let gate = env.work.join("gate");
    let score = |hooks: &str| {
        format!(
            r#"name: edited
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
sheet: {{size: 1, total_items: 1}}
prompt:
  template: |
    RUN: echo sheet >> "{led}"
on_success:
{hooks}"#,
            ws = env.work.join("edited-ws").display(),
            led = led.display(),
        )
    };
    let note = format!(
        "  - type: run_command\n    command: \"echo note >> '{}'\"\n",
        led.display()
    );
    let path = env.write_score(
        "edited",
        &score(&format!(
            "{note}  - type: run_command\n    command: \"test -f '{}'\"\n    on_failure: abort\n",
            gate.display()
        )),
    );
    run(&env, &path, &[]);
    let out = env.mozart(&["wait", "edited"]);
    assert_eq!(out.status.code(), Some(1), "the gate hook fails the job");
    assert_eq!(ledger(&led), ["sheet", "note"]);

    // Edited: a new hook first, the gate fixed (another command, so another hook).
    std::fs::write(&gate, "").unwrap();
    let fixed = format!(
        "  - type: run_command\n    command: \"echo new >> '{led}'\"\n{note}  - type: run_command\n    command: \"test -f '{gate}' && echo gate >> '{led}'\"\n",
        led = led.display(),
        gate = gate.display(),
    );
    std::fs::write(&path, score(&fixed)).unwrap();
    let out = env.mozart(&["resume", "edited"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let out = env.mozart(&["wait", "edited"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(
        ledger_settles(&env, &led, 4, 10.0, 1.0),
        ["sheet", "note", "new", "gate"],
        "the new hook ran once, the notification that ran was not repeated"
    );
    let doc = status(&env, "edited");
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(
        doc["hook_results_count"], 3,
        "one result for each hook: {doc:#}"
    );
}
