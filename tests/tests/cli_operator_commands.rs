//! The operator commands of issue 15 as a user types them, against the real binary:
//! `init`, `doctor`, `config …`, `clear-rate-limits`, `wait`, `completion`, `man`, the help
//! panels, and the 12 learning commands over a store filled by running a score twice
//! through the stand-in AI CLI (cli.md §2.5, §5.6, §6.1, §6.2, §8).

use crate::harness;

use harness::*;
use mozart_tests::{sleepy_shell_score, stdout, TestEnv};
use serde_json::{json, Value};

fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            stdout(out),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

#[test]
fn help_lists_every_command_in_upstreams_panels() {
    let env = TestEnv::new();
    let out = env.mozart(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let panels = [
        "Getting Started:",
        "Jobs:",
        "Monitoring:",
        "Diagnostics:",
        "Conductor:",
        "Learning:",
    ];
    let mut last = 0;
    for p in panels {
        let at = text
            .find(p)
            .unwrap_or_else(|| panic!("no panel {p}: {text}"));
        assert!(at >= last, "{p} out of order");
        last = at;
    }
    let learning = &text[text.find("Learning:").unwrap()..];
    for cmd in [
        "patterns-list",
        "patterns-why",
        "patterns-entropy",
        "patterns-budget",
        "learning-stats",
        "learning-insights",
        "learning-drift",
        "learning-epistemic-drift",
        "learning-activity",
        "learning-export",
        "learning-record-evolution",
        "entropy-status",
    ] {
        assert!(learning.contains(cmd), "{cmd} not under Learning: {text}");
    }
    for cmd in [
        "init",
        "doctor",
        "clear-rate-limits",
        "config",
        "wait",
        "completion",
        "man",
    ] {
        assert!(
            text.contains(&format!("\n  {cmd} ")),
            "{cmd} missing: {text}"
        );
    }
    assert!(!text.contains("__complete-jobs"), "hidden command shown");
}

#[test]
fn init_creates_a_project_whose_score_validates_and_refuses_bad_names() {
    let env = TestEnv::new();
    let out = env.mozart(&["init", "demo", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc = json_of(&out);
    assert_eq!(keys(&doc), ["name", "score_file", "success", "target_path"]);
    assert_eq!(doc["name"], "demo");
    assert!(env.work.join(".mozart").is_dir());
    assert!(env.work.join("workspaces").is_dir());
    let out = env.mozart(&["validate", "demo.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("Sheets: 3"), "{}", stdout(&out));
    // Again without --force: refused, exit 1.
    let out = env.mozart(&["init", "demo"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("Score already exists"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        env.mozart(&["init", "demo", "--force"]).status.code(),
        Some(0)
    );
    for (name, message) in [
        ("my score", "cannot contain spaces"),
        (".hidden", "cannot start with a dot"),
        ("a/b", "path separators"),
    ] {
        let out = env.mozart(&["init", "--name", name]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(stdout(&out).contains(message), "{name}: {}", stdout(&out));
    }
}

/// `mozart init --path newproj/deep demo` said "3. Run the score: mozart run demo.yaml",
/// which fails from where the user is (exit 2, "path 'demo.yaml' does not exist"); the
/// next steps now name the score by the path that works from here, and it does.
#[test]
fn init_with_a_path_names_the_score_as_reached_from_here() {
    let env = TestEnv::new();
    let out = env.mozart(&["init", "--path", "newproj/deep", "demo"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("1. Edit newproj/deep/demo.yaml to describe your task"),
        "{text}"
    );
    assert!(
        text.contains("3. Run the score:        mozart run newproj/deep/demo.yaml\n"),
        "{text}"
    );
    let out = env.mozart(&["validate", "newproj/deep/demo.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // Without --path the score is in this directory, named as before.
    let out = env.mozart(&["init", "here"]);
    assert!(
        stdout(&out).contains("mozart run here.yaml\n"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn doctor_reports_conductor_and_instruments_and_never_fails() {
    let env = TestEnv::new();
    let out = env.mozart(&["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let doc = json_of(&out);
    for k in [
        "python_version",
        "mozart_version",
        "conductor",
        "instruments",
        "safety_warnings",
        "warnings_count",
        "errors_count",
    ] {
        assert!(doc.get(k).is_some(), "missing {k}: {doc:#}");
    }
    assert_eq!(
        doc["conductor"],
        json!({"status": "not running", "pid": null})
    );
    let claude = doc["instruments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "claude_cli")
        .expect("claude_cli listed");
    // The test PATH has the stand-in as `claude`.
    assert_eq!(claude["status"], "ok", "{claude}");
    env.start_conductor();
    let doc = json_of(&env.mozart(&["doctor", "--json"]));
    assert_eq!(doc["conductor"]["status"], "running");
    assert_eq!(
        doc["conductor"]["pid"].as_u64(),
        env.conductor_pid().map(u64::from)
    );
    let text = stdout(&env.mozart(&["doctor"]));
    assert!(
        text.contains("Mozart Doctor") && text.contains("Mozart is ready."),
        "{text}"
    );
}

/// An instrument profile `my-agent` in the Mozart home whose program is in a directory only
/// this shell's PATH will have (see [`first_on_path`]): that directory. `cli_extra` goes into
/// the profile's `cli.command` (e.g. its `required_env`).
fn agent_only_in_this_shell(env: &TestEnv, cli_extra: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let only_here = env.root().join("only-in-this-shell");
    std::fs::create_dir_all(&only_here).unwrap();
    let program = only_here.join("my-agent");
    std::fs::write(&program, "#!/bin/sh\necho ok\n").unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(env.home.join("instruments")).unwrap();
    std::fs::write(
        env.home.join("instruments/my-agent.yaml"),
        format!("name: my-agent\ndisplay_name: My agent\nkind: cli\ncli:\n  command:\n    executable: my-agent\n{cli_extra}  output:\n    format: text\n"),
    )
    .unwrap();
    only_here
}

/// `cmd` with `dir` first on its PATH.
fn first_on_path<'c>(
    cmd: &'c mut std::process::Command,
    dir: &std::path::Path,
) -> &'c mut std::process::Command {
    let base = cmd
        .get_envs()
        .find(|(k, _)| *k == "PATH")
        .and_then(|(_, v)| v.map(std::ffi::OsStr::to_os_string))
        .unwrap();
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(&base));
    cmd.env("PATH", std::env::join_paths(dirs).unwrap())
}

/// When doctor cannot read the running conductor's environment it looks in this shell's —
/// and says so, as a warning, instead of showing the shell's findings as the conductor's.
#[test]
fn doctor_says_when_it_could_not_look_where_the_conductor_runs_instruments() {
    let env = TestEnv::new();
    assert!(env.mozart(&["start"]).status.success());
    let doc = json_of(&env.mozart(&["doctor", "--json"]));
    assert!(doc["instruments_looked_up_here"].is_null(), "{doc:#}");
    let before = doc["warnings_count"].as_u64().unwrap();

    // A conductor holds the lock, but its PID file is gone: which process it is (and so its
    // environment) is unknown.
    let pid_file = env.home.join("conductor.pid");
    let kept = env.home.join("conductor.pid.kept");
    std::fs::rename(&pid_file, &kept).unwrap();
    let text = stdout(&env.mozart(&["doctor"]));
    let doc = json_of(&env.mozart(&["doctor", "--json"]));
    std::fs::rename(&kept, &pid_file).unwrap();

    let line = text
        .lines()
        .find(|l| l.contains("PID file"))
        .unwrap_or_default();
    assert!(
        line.trim_start().starts_with("! A conductor is running")
            && line.contains("so this shell's was used")
            && line.contains("the conductor may find other programs and keys"),
        "{text}"
    );
    let why = doc["instruments_looked_up_here"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("PID file"), "{doc:#}");
    assert_eq!(doc["warnings_count"].as_u64(), Some(before + 1), "{doc:#}");
}

/// Instruments run with the running conductor's PATH (a systemd unit's, another shell's),
/// not with the PATH of the shell `doctor` runs in: a program only this shell finds is not
/// ✓, since every sheet on it would fail to start; once the conductor finds it, it is.
#[test]
fn doctor_and_instruments_check_look_where_the_conductor_runs_instruments() {
    let env = TestEnv::new();
    let only_here = agent_only_in_this_shell(&env, "    required_env: [MY_AGENT_API_KEY]\n");
    let program = only_here.join("my-agent");
    let shell_path = |cmd: &mut std::process::Command| {
        first_on_path(cmd, &only_here)
            .env("MY_AGENT_API_KEY", "k")
            .env("ANTHROPIC_API_KEY", "sk-ant-doctor-test");
    };
    let check = || {
        let mut cmd = env.command(&["instruments", "check", "my-agent"]);
        shell_path(&mut cmd);
        cmd.output().unwrap()
    };
    let doctor = |json: bool| {
        let mut cmd = env.command(if json {
            &["doctor", "--json"]
        } else {
            &["doctor"]
        });
        shell_path(&mut cmd);
        cmd.output().unwrap()
    };
    let agent = |doc: &Value| {
        doc["instruments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == "my-agent")
            .cloned()
            .expect("my-agent listed")
    };
    // No conductor: this shell's PATH is all there is to go by.
    let doc = json_of(&doctor(true));
    assert_eq!(agent(&doc)["status"], "ok", "{doc:#}");

    // A conductor started without that directory on its PATH.
    let mut start = env.command(&["start"]);
    start.env_remove("ANTHROPIC_API_KEY");
    assert!(start.output().unwrap().status.success());
    let doc = json_of(&doctor(true));
    let entry = agent(&doc);
    assert_eq!(entry["status"], "warning", "{entry}");
    let detail = entry["detail"].as_str().unwrap();
    assert!(
        detail.contains("not on the running conductor's")
            && detail.contains(&only_here.display().to_string()),
        "{detail}"
    );
    let text = stdout(&doctor(false));
    let line = text
        .lines()
        .find(|l| l.contains("my-agent"))
        .unwrap_or_default()
        .to_string();
    assert!(line.trim_start().starts_with('!'), "{text}");
    // An HTTP instrument's key, too: set in this shell, not in the conductor's environment.
    let api = doc["instruments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "anthropic_api")
        .cloned()
        .unwrap();
    assert_eq!(api["status"], "optional", "{api}");
    assert_eq!(
        api["detail"], "ANTHROPIC_API_KEY is not set in the running conductor's environment",
        "{api}"
    );
    // `instruments check` looks in the conductor's environment too: program and key.
    let out = check();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("not on the running conductor's PATH")
            && text.contains(&only_here.display().to_string()),
        "{text}"
    );
    assert!(
        text.contains("none of MY_AGENT_API_KEY is set in the running conductor's environment"),
        "{text}"
    );
    // The stand-in `claude` is on both PATHs: still ✓.
    let claude = doc["instruments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "claude_cli")
        .cloned()
        .unwrap();
    assert_eq!(claude["status"], "ok", "{claude}");

    // Restarted from this shell, the conductor finds it.
    assert!(env.mozart(&["stop"]).status.success());
    let mut start = env.command(&["start"]);
    shell_path(&mut start);
    assert!(start.output().unwrap().status.success());
    let doc = json_of(&doctor(true));
    assert_eq!(agent(&doc)["status"], "ok", "{doc:#}");
    assert_eq!(
        agent(&doc)["detail"].as_str(),
        Some(program.display().to_string().as_str())
    );
    let out = check();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("MY_AGENT_API_KEY is set in the running conductor's environment"),
        "{text}"
    );
    env.mozart(&["stop"]);
    // No conductor: this shell's environment, said as such.
    let text = stdout(&check());
    assert!(
        text.contains(
            "MY_AGENT_API_KEY is set here (no conductor is running; what counts is the environment"
        ),
        "{text}"
    );
}

/// `mozart validate` (V213) looks for an instrument's program and key where the running
/// conductor will run it — its PATH and environment, as `doctor` does — not on the shell's
/// PATH: a program only this shell finds is a warning naming the conductor's PATH and what to
/// do; one only the conductor finds is no warning. With no conductor, the shell's PATH is
/// what there is, and the warning says so.
#[test]
fn validate_looks_for_programs_where_the_conductor_runs_instruments() {
    let env = TestEnv::new();
    let only_here = agent_only_in_this_shell(&env, "");
    let program = only_here.join("my-agent");
    let agent = env.write_score(
        "agent",
        "name: agent\nworkspace: ./agent-ws\ninstrument: my-agent\nsheet: {size: 1, total_items: 1}\nprompt: {template: hi}\n",
    );
    let api = env.write_score(
        "api",
        "name: api\nworkspace: ./api-ws\ninstrument: anthropic_api\nsheet: {size: 1, total_items: 1}\nprompt: {template: hi}\n",
    );
    let with_program = |cmd: &mut std::process::Command| {
        first_on_path(cmd, &only_here);
    };
    let validate = |score: &std::path::Path, program_here: bool| {
        let mut cmd = env.command(&["validate", score.to_str().unwrap()]);
        if program_here {
            with_program(&mut cmd);
        }
        let out = cmd
            .env("ANTHROPIC_API_KEY", "sk-ant-validate-test")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
        stdout(&out)
    };

    // No conductor: this shell's PATH, said as such.
    assert!(!validate(&agent, true).contains("[V213]"));
    let text = validate(&agent, false);
    assert!(
        text.contains("[V213] Instrument 'my-agent' runs `my-agent`, which is not on this shell's PATH (no conductor is running)"),
        "{text}"
    );

    // A conductor started without that directory on its PATH, nor the API key.
    let mut start = env.command(&["start"]);
    start.env_remove("ANTHROPIC_API_KEY");
    assert!(start.output().unwrap().status.success());
    let text = validate(&agent, true);
    assert!(
        text.contains(&format!(
            "[V213] Instrument 'my-agent' runs `my-agent`, which is on this shell's PATH ({}) but not on the running conductor's",
            program.display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Add {} to the conductor's PATH and restart it",
            only_here.display()
        )),
        "{text}"
    );
    let text = validate(&agent, false);
    assert!(
        text.contains("which is not on the running conductor's PATH"),
        "{text}"
    );
    let text = validate(&api, false);
    assert!(
        text.contains("[V213] Instrument 'anthropic_api' cannot run from here (ANTHROPIC_API_KEY is not set in the running conductor's environment)"),
        "{text}"
    );

    // Restarted with the program on its PATH: found, whatever this shell's PATH says.
    assert!(env.mozart(&["stop"]).status.success());
    let mut start = env.command(&["start"]);
    with_program(&mut start);
    assert!(start.output().unwrap().status.success());
    let text = validate(&agent, false);
    assert!(!text.contains("[V213]"), "{text}");
    env.mozart(&["stop"]);
}

#[test]
fn config_commands_edit_the_file_the_conductor_loads() {
    let env = TestEnv::new();
    let file = env.home.join("conductor.yaml");
    let out = env.mozart(&["config", "path"]);
    assert_eq!(
        stdout(&out).trim(),
        format!("{}  (not created)", file.display())
    );
    let out = env.mozart(&["config", "check"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("Config file not found"),
        "{}",
        stdout(&out)
    );
    let out = env.mozart(&["config", "set", "max_concurrent_jobs", "12"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).starts_with(&format!(
            "Set max_concurrent_jobs = 12 in {}",
            file.display()
        )),
        "{}",
        stdout(&out)
    );
    // An out-of-range value is refused and the file keeps the old one.
    let out = env.mozart(&["config", "set", "max_concurrent_jobs", "99"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("max_concurrent_jobs"),
        "{}",
        stdout(&out)
    );
    assert!(std::fs::read_to_string(&file).unwrap().contains("12"));
    assert_eq!(env.mozart(&["config", "check"]).status.code(), Some(0));
    let out = env.mozart(&["config", "show", "--json"]);
    let doc = json_of(&out);
    let row = doc["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "max_concurrent_jobs")
        .cloned()
        .unwrap();
    assert_eq!(
        row,
        json!({"key": "max_concurrent_jobs", "value": 12, "source": "file",
               "takes_effect": "reload"})
    );
    // The conductor really loads it; a `set` reaches it on SIGHUP.
    env.start_conductor();
    let live = json_of(&env.mozart(&["config", "show", "--json", "--all"]));
    assert_eq!(live["source"], "[live] from running conductor");
    let value = |doc: &Value, key: &str| {
        doc["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == key)
            .map(|r| r["value"].clone())
    };
    assert_eq!(value(&live, "max_concurrent_jobs"), Some(json!(12)));
    assert_eq!(
        env.mozart(&["config", "set", "max_concurrent_jobs", "7"])
            .status
            .code(),
        Some(0)
    );
    mozart_tests::signal(env.conductor_pid().unwrap(), "HUP");
    poll(&env, 10.0, "the conductor to reload its config", || {
        let live = json_of(&env.mozart(&["config", "show", "--json", "--all"]));
        (value(&live, "max_concurrent_jobs") == Some(json!(7))).then_some(())
    });
    // `config init` refuses to overwrite without --force; the defaults it writes are valid.
    let out = env.mozart(&["config", "init"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("Config file already exists"));
    assert_eq!(
        env.mozart(&["config", "init", "--force"]).status.code(),
        Some(0)
    );
    assert_eq!(env.mozart(&["config", "check"]).status.code(), Some(0));
    std::fs::write(&file, "max_concurrent_jobs: [1\n").unwrap();
    let out = env.mozart(&["config", "check"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("Invalid config"), "{}", stdout(&out));
}

/// A wrongly typed conductor.yaml value is named by its field path and its line in the
/// user's file (the old loader counted lines in a re-written copy without the comments), with
/// what to do; `config set` keeps YAML 1.1's values (`enabled: yes`) and every other key.
#[test]
fn config_errors_name_the_field_path_and_the_line_in_the_users_file() {
    let env = TestEnv::new();
    let file = env.home.join("conductor.yaml");
    std::fs::write(
        &file,
        "# my conductor\n\n# limits\nmax_concurrent_jobs: 4\n\nsocket:\n  backlog: lots\n",
    )
    .unwrap();
    for args in [&["config", "check"][..], &["config", "show"][..]] {
        let out = env.mozart(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let text = stdout(&out);
        assert!(
            text.contains(&format!(
                "{}: line 7: socket.backlog: must be a whole number from 0 to 4294967295, not the text \"lots\"",
                file.display()
            )),
            "{args:?}: {text}"
        );
        assert!(text.contains("then run 'mozart config check'"), "{text}");
    }
    let out = env.mozart(&["config", "set", "log_level", "debug"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("line 7: socket.backlog"),
        "{}",
        stdout(&out)
    );

    std::fs::write(
        &file,
        "# mine\nprofiler:\n  gpu_enabled: yes\nsocket:\n  backlog: 0x80\nobserver:\n  exclude_patterns: ['*.pyc', 'yes']\n",
    )
    .unwrap();
    let out = env.mozart(&["config", "set", "learning.enabled", "no"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let doc = json_of(&env.mozart(&["config", "show", "--all", "--json"]));
    let value = |key: &str| {
        doc["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == key)
            .map(|r| (r["value"].clone(), r["source"].clone()))
    };
    assert_eq!(
        value("profiler.gpu_enabled"),
        Some((json!(true), json!("file")))
    );
    assert_eq!(value("socket.backlog"), Some((json!(128), json!("file"))));
    assert_eq!(
        value("learning.enabled"),
        Some((json!(false), json!("file")))
    );
    assert_eq!(
        value("observer.exclude_patterns"),
        Some((json!(["*.pyc", "yes"]), json!("file")))
    );
}

#[test]
fn config_show_says_the_file_is_invalid_while_a_conductor_runs() {
    let env = TestEnv::new();
    env.start_conductor();
    let file = env.home.join("conductor.yaml");
    let mut text = std::fs::read_to_string(&file).unwrap_or_default();
    text.push_str("bogus: 1\n");
    std::fs::write(&file, text).unwrap();

    let out = env.mozart(&["config", "show"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    // Still what is live, then the file's problem, naming the file and the key.
    assert!(text.contains("[live] from running conductor"), "{text}");
    assert!(text.contains(&file.display().to_string()), "{text}");
    assert!(text.contains("bogus"), "{text}");

    let out = env.mozart(&["config", "show", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc = json_of(&out);
    let err = doc["file_error"].as_str().unwrap_or_default();
    assert!(err.contains("bogus"), "{doc:#}");
    assert!(doc["settings"].is_array(), "{doc:#}");
}

#[test]
fn clear_rate_limits_needs_the_conductor_and_reports_what_it_cleared() {
    let env = TestEnv::new();
    let out = env.mozart(&["clear-rate-limits"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).starts_with("Error: Mozart conductor is not running\n"),
        "{}",
        stdout(&out)
    );
    env.start_conductor();
    let out = env.mozart(&["clear-rate-limits"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out).trim(),
        "No active rate limits on all instruments"
    );
    let doc = json_of(&env.mozart(&["clear-rate-limits", "-i", "claude-code", "--json"]));
    assert_eq!(doc, json!({"cleared": 0, "instrument": "claude-code"}));
}

#[test]
fn wait_blocks_until_the_job_ends_and_exits_with_its_outcome() {
    let env = TestEnv::new();
    env.start_conductor();
    let ok = env.write_score("slowok", &sleepy_shell_score("slowok", 1, 1.0));
    let bad = env.write_score(
        "bad",
        "name: bad\nworkspace: ./bad-ws\ninstrument: shell\nretry: {max_retries: 0}\nsheet: {size: 1, total_items: 1}\nprompt:\n  template: \"RUN: exit 3\"\n",
    );
    let started = std::time::Instant::now();
    run(&env, &ok, &[]);
    let out = env.mozart(&["wait", "slowok"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        started.elapsed().as_secs_f64() >= 1.0,
        "returned before the job ended"
    );
    assert_eq!(status(&env, "slowok")["status"], "completed");
    let out = env.mozart(&["run", bad.to_str().unwrap(), "--json"]);
    let _ = out;
    let out = env.mozart(&["wait", "bad", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(json_of(&out)["status"], "failed");
    let out = env.mozart(&["wait", "nosuchjob"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("Score not found: nosuchjob"));
    let long = env.write_score("long", &sleepy_shell_score("long", 1, 30.0));
    run(&env, &long, &[]);
    let out = env.mozart(&["wait", "long", "--timeout", "0.5"]);
    assert_eq!(out.status.code(), Some(124), "{}", stdout(&out));
    env.mozart(&["cancel", "long"]);
    let out = env.mozart(&["wait", "long", "--timeout", "20"]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
}

#[test]
fn completion_scripts_and_man_pages_come_from_the_command_tree() {
    let env = TestEnv::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = env.mozart(&["completion", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let text = stdout(&out);
        for needle in ["patterns-list", "clear-rate-limits", "__complete-jobs"] {
            assert!(text.contains(needle), "{shell} lacks {needle}");
        }
        // The internal commands are not offered: `__complete-jobs` is only what the
        // script runs for live score IDs.
        assert!(!text.contains("__watchdog"), "{shell} offers __watchdog");
        assert_eq!(
            text.matches("__complete-jobs").count(),
            text.matches("mozart __complete-jobs 2>/dev/null").count(),
            "{shell} offers __complete-jobs"
        );
    }
    let out = env.mozart(&["completion", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    // Live score IDs: nothing (and no error) without a conductor, the jobs with one.
    let out = env.mozart(&["__complete-jobs"]);
    assert_eq!((out.status.code(), stdout(&out)), (Some(0), String::new()));
    env.start_conductor();
    let s = env.write_score("listed", &sleepy_shell_score("listed", 1, 0.0));
    run(&env, &s, &[]);
    assert_eq!(stdout(&env.mozart(&["__complete-jobs"])).trim(), "listed");
    let out = env.mozart(&["man"]);
    let page = stdout(&out);
    assert!(
        page.starts_with(".ie") || page.contains(".TH mozart"),
        "{page}"
    );
    assert!(page.contains("patterns\\-list"), "man page lists commands");
    let dir = env.work.join("man");
    let out = env.mozart(&["man", "--out-dir", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(dir.join("mozart.1").is_file());
    assert!(dir.join("mozart-run.1").is_file());
    assert!(dir.join("mozart-patterns-list.1").is_file());
}

/// A five-sheet score on the stand-in AI CLI (it runs the prompt's `RUN:` lines): sheets 1
/// and 2 write their output only on their second attempt (the first fails validation and
/// is retried), sheets 3-5 on the first. Run twice, as a user re-running a score would.
fn learn_twice(env: &TestEnv) {
    install_instruments(env);
    env.start_conductor();
    let yaml = format!(
        r#"name: learner
workspace: {}
instrument: claude_cli
pause_between_sheets_seconds: 0
retry: {{max_retries: 3, base_delay_seconds: 0.1, jitter: false}}
sheet: {{size: 1, total_items: 5}}
prompt:
  template: |
    {{% if sheet_num <= 2 %}}
    RUN: if [ -f "{{{{ workspace }}}}/m-{{{{ sheet_num }}}}" ]; then echo ok > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"; fi; touch "{{{{ workspace }}}}/m-{{{{ sheet_num }}}}"
    {{% else %}}
    RUN: echo ok > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
    {{% endif %}}
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#,
        env.work.join("learner-ws").display()
    );
    let path = env.write_score("learner", &yaml);
    run(env, &path, &[]);
    env.wait_completed("learner");
    // The conductor learns from a job just after it ends: let it finish, so the second run
    // is offered the patterns of the first.
    poll(env, 15.0, "patterns of the first run", || {
        let doc = json_of(&env.mozart(&["patterns-list", "--json", "-p", "0"]));
        doc.as_array().is_some_and(|a| !a.is_empty()).then_some(())
    });
    run(env, &path, &["--fresh"]);
    env.wait_completed("learner");
}

#[test]
fn learning_commands_show_the_patterns_of_real_runs() {
    let env = TestEnv::new();
    learn_twice(&env);
    // Job-end learning runs right after the job ends.
    let patterns = poll(&env, 10.0, "patterns in the learning store", || {
        let doc = json_of(&env.mozart(&["patterns-list", "--json", "-p", "0"]));
        (doc.as_array().is_some_and(|a| !a.is_empty())).then_some(doc)
    });
    let first = &patterns[0];
    assert_eq!(
        keys(first),
        [
            "context_tags",
            "description",
            "effectiveness_score",
            "id",
            "occurrence_count",
            "pattern_name",
            "pattern_type",
            "priority_score",
            "quarantine_status",
            "trust_score"
        ]
    );
    let table = stdout(&env.mozart(&["patterns-list", "-p", "0"]));
    assert!(table.contains("Global Learning Patterns"), "{table}");
    let n = patterns.as_array().unwrap().len();
    let noun = if n == 1 { "pattern" } else { "patterns" };
    assert!(table.contains(&format!("Showing {n} {noun}")), "{table}");
    // A Type or Name cut to its column is marked as cut, not shown as if whole
    // (`validation_f` of `validation_failure`).
    let mut cuts = 0;
    for p in patterns.as_array().unwrap() {
        for (key, width) in [("pattern_type", 12), ("pattern_name", 20)] {
            let text = p[key].as_str().unwrap();
            if text.chars().count() > width {
                let shown: String = text.chars().take(width).collect();
                assert!(
                    table.contains(&format!("{shown}...")),
                    "{key} {text}: {table}"
                );
                cuts += 1;
            }
        }
    }
    assert!(cuts > 0, "no cut cell to check: {patterns:#}");

    let stats = json_of(&env.mozart(&["learning-stats", "--json"]));
    assert_eq!(
        keys(&stats),
        [
            "error_recoveries",
            "executions",
            "migration_needed",
            "patterns",
            "workspaces"
        ]
    );
    assert!(
        stats["executions"]["total"].as_i64().unwrap() >= 4,
        "{stats:#}"
    );
    assert_eq!(stats["migration_needed"], false);
    assert!(stats["patterns"]["total"].as_i64().unwrap() >= 1);

    // Success factors come from patterns applied to a prompt, and which patterns a sheet is
    // offered is partly random (exploration): run the score again until one was applied.
    let factors = || {
        let doc = json_of(&env.mozart(&["patterns-why", "--json"]));
        doc.as_array().is_some_and(|a| !a.is_empty()).then_some(doc)
    };
    let mut why = None;
    for _ in 0..3 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while why.is_none() && std::time::Instant::now() < deadline {
            why = factors();
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        if why.is_some() {
            break;
        }
        run(&env, &env.work.join("learner.yaml"), &["--fresh"]);
        assert_eq!(env.mozart(&["wait", "learner"]).status.code(), Some(0));
    }
    let why = why.expect("success factors captured");
    let with_factors = why.as_array().unwrap();
    assert_eq!(
        keys(&with_factors[0]),
        ["analysis", "pattern_id", "pattern_name"]
    );
    let id = with_factors[0]["pattern_id"].as_str().unwrap();
    let one = json_of(&env.mozart(&["patterns-why", &id[..8], "--json"]));
    assert_eq!(one["has_factors"], true);
    let out = env.mozart(&["patterns-why", "zzzz"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("No pattern found with ID starting with 'zzzz'"));

    let entropy = json_of(&env.mozart(&["patterns-entropy", "--json", "--record"]));
    assert_eq!(
        keys(&entropy),
        [
            "alert_threshold",
            "calculated_at",
            "diversity_index",
            "dominant_pattern_share",
            "effective_pattern_count",
            "max_possible_entropy",
            "shannon_entropy",
            "threshold_exceeded",
            "total_applications",
            "unique_pattern_count"
        ]
    );
    assert!(
        entropy["total_applications"].as_i64().unwrap() >= 1,
        "{entropy:#}"
    );
    let history = json_of(&env.mozart(&["patterns-entropy", "--history", "--json"]));
    assert_eq!(
        history.as_array().unwrap().len(),
        1,
        "--record stored a snapshot"
    );
    // The tables (their rows are unit-tested next to each command).
    let snapshots = stdout(&env.mozart(&["patterns-entropy", "--history"]));
    assert!(
        snapshots.starts_with("Pattern Entropy History\nTime                 Shannon H  Diversity"),
        "{snapshots}"
    );
    assert_eq!(snapshots.lines().count(), 4, "{snapshots}");
    let why_table = stdout(&env.mozart(&["patterns-why"]));
    assert!(
        why_table.starts_with("Patterns with WHY Analysis\nPattern "),
        "{why_table}"
    );
    for (args, title, none) in [
        (
            &["learning-drift"][..],
            "Patterns with Effectiveness Drift\nPattern ",
            "✓ No patterns exceeding drift threshold (0.2)\n",
        ),
        (
            &["learning-epistemic-drift"][..],
            "Patterns with Epistemic Drift\nPattern ",
            "✓ No patterns exceeding epistemic drift threshold (0.15)\n",
        ),
        (
            &["patterns-budget", "--history"][..],
            "Exploration Budget History\nTime ",
            "No exploration budget history.\n",
        ),
        (
            &["entropy-status", "--history"][..],
            "Entropy Response History\nTime ",
            "No entropy responses recorded.\n",
        ),
    ] {
        let text = stdout(&env.mozart(args));
        assert!(text.starts_with(title) || text == none, "{args:?}: {text}");
    }

    let budget = json_of(&env.mozart(&["patterns-budget", "--json"]));
    assert!(budget.get("current").is_some() && budget.get("statistics").is_some());
    let insights = stdout(&env.mozart(&["learning-insights"]));
    assert!(insights.contains("Learned Patterns"), "{insights}");
    let drift = json_of(&env.mozart(&["learning-drift", "--json"]));
    assert_eq!(keys(&drift), ["patterns", "threshold", "window_size"]);
    let summary = json_of(&env.mozart(&["learning-drift", "--summary", "--json"]));
    assert!(summary.get("patterns_drifting").is_some());
    let epi = json_of(&env.mozart(&["learning-epistemic-drift", "--json"]));
    assert_eq!(epi["threshold"], 0.15);
    let activity = json_of(&env.mozart(&["learning-activity", "--json", "-h", "1"]));
    assert_eq!(
        keys(&activity),
        [
            "avoid_hours",
            "optimal_hours",
            "patterns_active",
            "period_hours",
            "recent_executions",
            "scheduling_confidence",
            "success_without_retry_rate"
        ]
    );
    assert!(
        activity["recent_executions"].as_i64().unwrap() >= 4,
        "{activity:#}"
    );
    let status = json_of(&env.mozart(&["entropy-status", "--json"]));
    assert_eq!(keys(&status), ["last_response", "statistics"]);
    let check = json_of(&env.mozart(&["entropy-status", "--check", "--json"]));
    assert_eq!(
        keys(&check),
        ["current_entropy", "needs_response", "reason"]
    );

    let out = env.mozart(&[
        "learning-record-evolution",
        "--cycle",
        "1",
        "--evolutions-completed",
        "2",
        "--issue-classes",
        "cli,docs",
        "--implementation-loc",
        "300",
        "--test-loc",
        "120",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).starts_with("Recorded evolution cycle 1"));
    let dir = env.work.join("export");
    let out = env.mozart(&["learning-export", "-o", dir.to_str().unwrap(), "-f", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    for f in [
        "semantic-insights",
        "drift-report",
        "entropy-state",
        "pattern-health",
        "evolution-history",
        "error-landscape",
    ] {
        let text = std::fs::read_to_string(dir.join(format!("{f}.json"))).unwrap();
        let _: Value = serde_json::from_str(&text).unwrap();
    }
    let evo: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("evolution-history.json")).unwrap())
            .unwrap();
    assert_eq!(evo[0]["issue_classes"], json!(["cli", "docs"]));
    let md = env.work.join("export-md");
    env.mozart(&["learning-export", "-o", md.to_str().unwrap()]);
    assert!(md.join("semantic-insights.md").is_file());
}

/// Issue 23: `doctor` puts ✓ only next to an instrument a sheet could start on: not next to
/// an API this build refuses, an API whose key is unset, or a local server that is not there.
#[test]
fn doctor_marks_http_instruments_ready_only_when_they_could_run() {
    let env = TestEnv::new();
    let out = env
        .command(&["doctor"])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    let text = stdout(&out);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{text}"))
            .to_string()
    };
    assert!(
        line("recursive_light").contains("· recursive_light")
            && line("recursive_light").contains("not supported"),
        "{text}"
    );
    assert!(
        line("anthropic_api").contains("ANTHROPIC_API_KEY is not set"),
        "{text}"
    );
    assert!(
        line("ollama").contains("no server at http://localhost:11434"),
        "{text}"
    );
    assert!(line("shell").contains("✓ shell"), "{text}");

    let with_key = env
        .command(&["doctor", "--json"])
        .env("ANTHROPIC_API_KEY", "sk-ant-doctor-test")
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&with_key.stdout).unwrap();
    let status = |name: &str| {
        doc["instruments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == name)
            .map(|i| i["status"].as_str().unwrap_or("").to_string())
            .unwrap()
    };
    assert_eq!(status("anthropic_api"), "ok", "{doc}");
    assert_ne!(status("recursive_light"), "ok", "{doc}");
}

/// Issue 23: `instruments check` (which validate's V213 and the E505 message point to) says
/// "ready" only when `doctor` would: an HTTP instrument is not ready for being HTTP, and the
/// hint names the program, variable or server that is missing.
#[test]
fn instruments_check_says_ready_only_when_the_instrument_could_run() {
    let env = TestEnv::new();
    let check = |name: &str, key: Option<&str>, json: bool| {
        let mut args = vec!["instruments", "check", name];
        if json {
            args.push("--json");
        }
        let mut cmd = env.command(&args);
        cmd.env_remove("ANTHROPIC_API_KEY")
            .env("PATH", "/usr/bin:/bin");
        if let Some(k) = key {
            cmd.env("ANTHROPIC_API_KEY", k);
        }
        let out = cmd.output().unwrap();
        let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        (out.status.code(), text)
    };
    let (code, text) = check("recursive_light", None, false);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("not supported"), "{text}");
    assert!(!text.contains("recursive_light is ready"), "{text}");

    let (code, text) = check("anthropic_api", None, false);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("Set ANTHROPIC_API_KEY in the environment the conductor is started with"),
        "{text}"
    );
    let (code, text) = check("anthropic_api", None, true);
    assert_eq!(code, Some(0), "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["ready"], false, "{doc}");
    assert_eq!(doc["readiness"], "ANTHROPIC_API_KEY is not set", "{doc}");
    let (code, text) = check("anthropic_api", Some("sk-ant-check-test"), false);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("anthropic_api is ready."), "{text}");
    let (_, text) = check("anthropic_api", Some("sk-ant-check-test"), true);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["ready"], true, "{doc}");

    // A CLI instrument whose program is missing: the hint names the program, not the profile.
    let (code, text) = check("claude-code", None, false);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("Install 'claude' (the program the claude-code instrument runs)"),
        "{text}"
    );
}

/// `instruments check` of a CLI instrument says whether the key it needs is set: it said
/// "gemini-cli is ready." with no GEMINI_API_KEY anywhere, and the first sheet failed as a
/// refused key.
#[test]
fn instruments_check_says_whether_a_cli_instruments_key_is_set() {
    let env = TestEnv::new();
    let check = |key: Option<&str>, json: bool| {
        let mut args = vec!["instruments", "check", "gemini-cli"];
        if json {
            args.push("--json");
        }
        let mut cmd = env.command(&args);
        cmd.env_remove("GEMINI_API_KEY")
            .env_remove("GOOGLE_API_KEY");
        if let Some(k) = key {
            cmd.env("GEMINI_API_KEY", k);
        }
        let out = cmd.output().unwrap();
        format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr))
    };
    let text = check(None, false);
    assert!(
        text.contains(
            "  Credentials:   none of GEMINI_API_KEY, GOOGLE_API_KEY is set here: the CLI needs one \
             unless it is logged in"
        ),
        "{text}"
    );
    let doc: serde_json::Value = serde_json::from_str(&check(None, true)).unwrap();
    assert_eq!(
        doc["credentials"],
        serde_json::json!({"vars": ["GEMINI_API_KEY", "GOOGLE_API_KEY"], "set": [], "in_conductor": false}),
        "{doc}"
    );
    let text = check(Some("AIza-check-test"), false);
    assert!(
        text.contains("  Credentials:   GEMINI_API_KEY is set here"),
        "{text}"
    );
}

/// A profile added while the conductor runs is not one it can run (it reads profiles when
/// it starts): `instruments check` / `list` say so, and that a restart loads it — they said
/// "ready", and `run` then refused "Unknown instrument".
#[test]
fn instruments_check_says_whether_the_running_conductor_loaded_the_profile() {
    let env = TestEnv::new();
    env.start_conductor();
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("late.yaml"),
        "name: late\ndisplay_name: Late\nkind: cli\ncli:\n  command:\n    executable: sh\n  output:\n    format: text\n",
    )
    .unwrap();
    let out = env.mozart(&["instruments", "check", "late"]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(!text.contains("late is ready"), "{text}");
    assert!(
        text.contains("not loaded by the running conductor (added after it started): 'mozart restart' loads it"),
        "{text}"
    );
    let text = stdout(&env.mozart(&["instruments", "list"]));
    let row = text
        .lines()
        .find(|l| l.starts_with("late "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("✗ not loaded"), "{text}");
    let doc = json_of(&env.mozart(&["instruments", "check", "late", "--json"]));
    assert_eq!(doc["in_conductor"], "not_loaded", "{doc:#}");
    assert_eq!(doc["ready"], false, "{doc:#}");
    // Once the conductor has read it, it is ready.
    env.stop_conductor();
    env.start_conductor();
    let out = env.mozart(&["instruments", "check", "late"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("✓ loaded by the running conductor"), "{text}");
    assert!(text.contains("late is ready."), "{text}");
}

/// What a program answers to `--version` is shown, not obeyed: `instruments check` printed
/// its first line raw (a window-title escape reached the terminal).
#[test]
fn instruments_check_shows_a_version_answers_escapes_not_obeys_them() {
    let env = TestEnv::new();
    let program = env.root().join("titled");
    std::fs::write(
        &program,
        "#!/bin/sh\nprintf 'titled 1.0 \\033]0;PWNED\\007\\033[31mred\\n'\n",
    )
    .unwrap();
    let mut perms = std::fs::metadata(&program).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&program, perms).unwrap();
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("titled.yaml"),
        format!(
            "name: titled\ndisplay_name: Titled\nkind: cli\ncli:\n  command:\n    executable: {}\n",
            program.display()
        ),
    )
    .unwrap();
    let out = env.mozart(&["instruments", "check", "titled"]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("titled 1.0 \\x1b]0;PWNED\\x07"),
        "{}",
        text.escape_debug()
    );
    assert!(!text.contains('\u{1b}'), "{}", text.escape_debug());
}
