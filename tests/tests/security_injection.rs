//! No shell injection through score variables, workspace paths or job IDs into the commands
//! the conductor runs itself: validation `command_succeeds`, `skip_when_command` and
//! `on_success` `run_command` hooks. Placeholders are substituted shell-quoted (score.md
//! §5.8.2–§5.8.4), so a value such as `$(touch pwned)` or `'; touch pwned; '` is an inert
//! word, never code.

use crate::support;

use std::path::{Path, PathBuf};

use mozart_tests::TestEnv;
use support::*;

/// Payloads that would each create `<dir>/<name>` if a shell ever evaluated them.
fn payloads(dir: &Path, tag: &str) -> Vec<(String, PathBuf)> {
    let p = |n: &str| dir.join(format!("pwned-{tag}-{n}"));
    vec![
        (format!("$(touch {})", p("subst").display()), p("subst")),
        (
            format!("`touch {}`", p("backtick").display()),
            p("backtick"),
        ),
        (
            format!("'; touch {}; '", p("squote").display()),
            p("squote"),
        ),
        (
            format!("\"; touch {}; \"", p("dquote").display()),
            p("dquote"),
        ),
        (format!("x; touch {}", p("semi").display()), p("semi")),
        (format!("x && touch {} #", p("and").display()), p("and")),
        (format!("x\ntouch {}", p("newline").display()), p("newline")),
        (format!("x | touch {}", p("pipe").display()), p("pipe")),
    ]
}

fn assert_none_created(created: &[(String, PathBuf)]) {
    let hits: Vec<_> = created.iter().filter(|(_, p)| p.exists()).collect();
    assert!(hits.is_empty(), "payloads were executed: {hits:#?}");
}

/// YAML double-quoted form of a string (JSON strings are valid YAML).
fn y(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

#[test]
fn score_variables_are_inert_in_validation_skip_and_hook_commands() {
    let env = TestEnv::new();
    let pwn_dir = env.root().join("pwn");
    std::fs::create_dir_all(&pwn_dir).unwrap();
    let evil = payloads(&pwn_dir, "var");
    let ws = env.work.join("inject-ws");

    let mut vars = String::new();
    let mut checks = String::new();
    for (i, (payload, _)) in evil.iter().enumerate() {
        vars.push_str(&format!("    v{i}: {}\n", y(payload)));
        // The command must also *see* the exact value: the variable is one argument.
        checks.push_str(&format!(
            "  - type: command_succeeds\n    command: {}\n",
            y(&format!("test {{v{i}}} = {}", support_quote(payload)))
        ));
    }
    let skip_cmds: String = (0..evil.len())
        .map(|i| {
            format!(
                "    {}:\n      command: {}\n",
                i + 2,
                y(&format!("test -z {{v{i}}}"))
            )
        })
        .collect();
    let yaml = format!(
        r#"name: inject
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
retry:
  max_retries: 0
sheet:
  size: 1
  total_items: {total}
  skip_when_command:
{skip_cmds}prompt:
  variables:
{vars}  template: |
    RUN: echo ok > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
{checks}on_success:
  - type: run_command
    command: {hook}
"#,
        ws = ws.display(),
        total = evil.len() + 1,
        hook = y("echo {job_id} {workspace} > hook-ran.txt")
    );
    let score = env.write_score("inject", &yaml);
    env.start_conductor();
    assert_eq!(submit(&env, &score)["status"], "accepted");
    let doc = wait_all_terminal(&env, &["inject".to_string()], 60).remove(0);
    assert_none_created(&evil);
    // Every validation saw its variable as exactly one intact word, and no skip command
    // mistook a non-empty value for an empty one.
    assert_eq!(doc["status"], "completed", "{doc:#}");
    for n in 1..=(evil.len() as u32 + 1) {
        assert_eq!(sheet(&doc, n)["status"], "completed", "sheet {n}: {doc:#}");
    }
    let hook_out = wait_for_file(&ws.join("hook-ran.txt"));
    assert_eq!(hook_out.trim(), format!("inject {}", ws.display()));
}

#[test]
fn hostile_job_ids_and_workspace_paths_are_inert_in_commands() {
    let env = TestEnv::new();
    // The job ID is the score file's stem (conductor.md §7.3) and a file name cannot hold
    // a `/`, so these payloads touch relative names, searched for everywhere afterwards.
    let tag = std::process::id();
    let by_id = format!("pwned-jobid-{tag}");
    let by_ws = format!("pwned-workspace-{tag}");
    let id = format!("job$(touch {by_id})");
    let ws = env.work.join(format!("ws $(touch {by_ws}) '"));
    let yaml = format!(
        r#"name: hostile
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
retry:
  max_retries: 0
sheet:
  size: 1
  total_items: 2
  skip_when_command:
    2:
      command: "test ! -d {{workspace}}"
prompt:
  template: |
    RUN: echo ok > out-{{{{ sheet_num }}}}.txt
validations:
  - type: command_succeeds
    command: "test -f {{workspace}}/out-{{sheet_num}}.txt"
on_success:
  - type: run_command
    command: "printf '%s\n' {{job_id}} {{workspace}} > hook-ran.txt"
"#,
        ws = y(&ws.display().to_string())
    );
    let score = env.work.join(format!("{id}.yaml"));
    std::fs::write(&score, yaml).unwrap();
    env.start_conductor();
    let resp = submit(&env, &score);
    if resp["status"] == "accepted" {
        let job_id = resp["job_id"].as_str().unwrap().to_string();
        let doc = rpc_wait_terminal(&env, &job_id, 60);
        assert_eq!(doc["status"], "completed", "{doc:#}");
        let hook = wait_for_file(&ws.join("hook-ran.txt"));
        assert_eq!(hook, format!("{job_id}\n{}\n", ws.display()));
    } else {
        // Refusing such an ID outright is fine too; running its code is not.
        eprintln!("hostile job id refused: {resp}");
    }
    for name in [&by_id, &by_ws] {
        let found = find_named(env.root(), name);
        assert!(found.is_empty(), "payload executed: {found:?}");
        for dir in ["/", "/tmp"] {
            assert!(
                !Path::new(dir).join(name).exists(),
                "payload executed in {dir}"
            );
        }
    }
}

/// A variable whose value names another placeholder must not let the second value out of
/// the first one's quotes: `a: "{b}"`, `b: "$(touch pwned)"` and `test -n {a}` expands
/// (one replace after the other) to `test -n ''$(touch pwned)''`.
#[test]
fn a_value_naming_another_placeholder_cannot_break_its_quotes() {
    let env = TestEnv::new();
    let pwned = env.root().join("pwned-nested");
    let ws = env.work.join("nested-ws");
    let yaml = format!(
        r#"name: nested
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
retry:
  max_retries: 0
sheet:
  size: 1
  total_items: 1
prompt:
  variables:
    a: "{{b}}"
    b: {payload}
  template: |
    RUN: echo ok > "{{{{ workspace }}}}/out.txt"
validations:
  - type: command_succeeds
    command: "test -n {{a}}"
"#,
        ws = ws.display(),
        payload = y(&format!("$(touch {})", pwned.display()))
    );
    let score = env.write_score("nested", &yaml);
    env.start_conductor();
    assert_eq!(submit(&env, &score)["status"], "accepted");
    wait_all_terminal(&env, &["nested".to_string()], 60);
    assert!(
        !pwned.exists(),
        "the nested placeholder's value was executed"
    );
}

/// Every path under `root` whose file name is `name`.
fn find_named(root: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_name().to_string_lossy() == name {
                found.push(path.clone());
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    found
}

/// Python `shlex.quote`, to write the expected value into the test command itself.
fn support_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\"'\"'"))
}

/// Hooks run after the job is marked completed; give them a moment.
fn wait_for_file(path: &Path) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if !text.is_empty() {
                return text;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} never written",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
