//! conductor.yaml settings as the user changes them (`mozart config …`) while a conductor
//! runs or not, through the real binary, a real socket and a real conductor.

use std::process::{Output, Stdio};

use mozart_tests::{sleepy_shell_score, stdout, TestEnv};

use crate::harness::poll;

/// `mozart ARGS` without `$MOZART_SOCKET`: the socket comes from conductor.yaml's
/// `socket.path` (or what a running conductor recorded), as for a user who never set it.
fn no_env_socket(env: &TestEnv, args: &[&str]) -> Output {
    env.command(args)
        .env_remove("MOZART_SOCKET")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn both(out: &Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

/// `config set socket.path` on a running conductor: it keeps its socket until a restart,
/// every command still finds it there, and `restart` without `--yes` (no terminal) refuses
/// while a job runs; the restart then moves it to the new socket.
#[test]
fn a_changed_socket_path_keeps_the_running_conductor_found_until_restart() {
    let env = TestEnv::new();
    let first = env.root().join("first.sock");
    let second = env.root().join("second.sock");
    std::fs::write(
        env.home.join("conductor.yaml"),
        format!("socket:\n  path: {}\n", first.display()),
    )
    .unwrap();
    let out = no_env_socket(&env, &["start"]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let out = no_env_socket(
        &env,
        &["config", "set", "socket.path", second.to_str().unwrap()],
    );
    let text = both(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("keeps its current value until 'mozart restart'"),
        "{text}"
    );
    assert!(!text.contains("when the conductor starts"), "{text}");
    let out = no_env_socket(&env, &["conductor-status"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("Socket: {}", first.display())),
        "{text}"
    );
    let out = no_env_socket(&env, &["start"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("already running"), "{text}");
    assert!(
        text.contains(&format!("Socket: {}", first.display())),
        "{text}"
    );
    // A job running: restart without a terminal and without --yes refuses.
    let score = env.write_score("long", &sleepy_shell_score("long", 1, 60.0));
    let out = no_env_socket(&env, &["run", score.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    poll(&env, 30.0, "the job to run", || {
        let out = no_env_socket(&env, &["status", "long", "--json"]);
        (stdout(&out).contains("\"running\"")).then_some(())
    });
    let pid = env.conductor_pid().unwrap();
    let out = no_env_socket(&env, &["restart"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("mozart restart --yes"), "{text}");
    assert!(
        mozart_tests::alive(pid),
        "the conductor was stopped: {text}"
    );
    let out = no_env_socket(&env, &["cancel", "long"]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let out = no_env_socket(&env, &["wait", "long", "--timeout", "60"]);
    assert_eq!(out.status.code(), Some(3), "{}", both(&out));
    let out = no_env_socket(&env, &["restart"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("Socket: {}", second.display())),
        "{text}"
    );
    let out = no_env_socket(&env, &["stop"]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
}

/// A `log_file` or `socket.path` the conductor could not use is refused by `config set` and
/// `config check` (naming the key and the file), and `restart` refuses it before it stops
/// the running conductor, which keeps running.
#[test]
fn paths_start_would_refuse_are_refused_before_anything_stops() {
    let env = TestEnv::new();
    let file = env.home.join("conductor.yaml");
    let shown = file.display().to_string();
    let out = env.mozart(&["config", "set", "log_file", "/proc/nope/c.log"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("log_file") && text.contains(&shown), "{text}");
    assert!(text.contains("/proc/nope"), "{text}");
    let long = format!("/tmp/{}/m.sock", "d".repeat(110));
    let out = env.mozart(&["config", "set", "socket.path", &long]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("socket.path") && text.contains("107"),
        "{text}"
    );
    let out = env.mozart(&["config", "set", "socket.path", "/proc/nope/m.sock"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("socket.path") && text.contains(&shown),
        "{text}"
    );
    std::fs::write(&file, "log_file: /proc/nope/c.log\n").unwrap();
    let out = env.mozart(&["config", "check"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(!text.contains("Valid config"), "{text}");
    assert!(text.contains("log_file") && text.contains(&shown), "{text}");
    // restart with the conductor running: refused before the stop.
    std::fs::remove_file(&file).unwrap();
    env.start_conductor();
    let pid = env.conductor_pid().unwrap();
    std::fs::write(&file, "log_file: /proc/nope/c.log\n").unwrap();
    let out = env.mozart(&["restart", "--yes"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("log_file") && text.contains(&shown), "{text}");
    assert!(!text.contains("stopped"), "{text}");
    assert!(
        mozart_tests::alive(pid),
        "the conductor was stopped: {text}"
    );
    assert_eq!(env.mozart(&["conductor-status"]).status.code(), Some(0));
    std::fs::remove_file(&file).unwrap();
    assert_eq!(env.stop_conductor().status.code(), Some(0));
}

/// `config set` run several times at once keeps every value set (each said "Set …").
#[test]
fn concurrent_config_sets_each_keep_their_value() {
    let env = TestEnv::new();
    for round in 0..3 {
        let keys = [
            ("max_concurrent_jobs", format!("{}", 11 + round)),
            ("job_timeout_seconds", format!("{}", 900 + round)),
            ("shutdown_timeout_seconds", format!("{}", 70 + round)),
            (
                "log_level",
                ["debug", "warning", "error"][round].to_string(),
            ),
            ("max_concurrent_sheets", format!("{}", 20 + round)),
            ("monitor_interval_seconds", format!("{}", 30 + round)),
        ];
        let children: Vec<_> = keys
            .iter()
            .map(|(k, v)| {
                env.command(&["config", "set", k, v])
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
        let text = std::fs::read_to_string(env.home.join("conductor.yaml")).unwrap();
        for (k, v) in &keys {
            assert!(
                text.contains(&format!("{k}: {v}\n")),
                "round {round}: {k} = {v} lost:\n{text}"
            );
        }
    }
}

/// `config set` on a Mozart home that does not exist yet makes it private (0700) and the
/// file 0600, keeps the file 0600 when it was made readable, and does not print a token back.
#[test]
fn config_set_keeps_the_home_and_the_file_private() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let home = env.root().join("fresh-home");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let set = |key: &str, value: &str| {
        let out = env
            .command(&["config", "set", key, value])
            .env("MOZART_HOME", &home)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", both(&out));
        both(&out)
    };
    let secret = "s3cret-token-0123456789abcdef";
    let text = set("dashboard.token", secret);
    assert!(!text.contains(secret), "the token was printed: {text}");
    assert!(text.contains("dashboard.token = (hidden)"), "{text}");
    let file = home.join("conductor.yaml");
    assert_eq!(mode(&home), 0o700, "the Mozart home");
    assert_eq!(mode(&file), 0o600, "conductor.yaml");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    set("max_concurrent_jobs", "4");
    assert_eq!(mode(&file), 0o600, "conductor.yaml after a set");
    assert!(std::fs::read_to_string(&file).unwrap().contains(secret));
}

/// `stop` (and `restart`) go by the running conductor's `shutdown_timeout_seconds`, not the
/// home file's: started with `-c alt.yaml` (120 s) while the home file says 10 s, the
/// refusal without `--yes` names 120 s.
#[test]
fn stop_goes_by_the_running_conductors_shutdown_timeout() {
    let env = TestEnv::new();
    std::fs::write(
        env.home.join("conductor.yaml"),
        "shutdown_timeout_seconds: 10\n",
    )
    .unwrap();
    let alt = env.work.join("alt.yaml");
    std::fs::write(&alt, "shutdown_timeout_seconds: 120\n").unwrap();
    let out = env.mozart(&["start", "-c", alt.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let score = env.write_score("long", &sleepy_shell_score("long", 1, 60.0));
    let out = env.mozart(&["run", score.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    poll(&env, 30.0, "the job to run", || {
        let out = env.mozart(&["status", "long", "--json"]);
        (stdout(&out).contains("\"running\"")).then_some(())
    });
    for command in ["stop", "restart"] {
        let out = env
            .command(&[command])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = both(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains("up to 120s (shutdown_timeout_seconds)"),
            "{text}"
        );
    }
    assert_eq!(env.mozart(&["cancel", "long"]).status.code(), Some(0));
    let out = env.mozart(&["wait", "long", "--timeout", "60"]);
    assert_eq!(out.status.code(), Some(3), "{}", both(&out));
    assert_eq!(env.stop_conductor().status.code(), Some(0));
}

/// A wrong key or value on the `config set` command line is named as the command line's,
/// not the file's ("Correct it in the file"), with the range the key really takes; a
/// misspelt `config show --section` is an error listing the sections; a bad
/// `$MOZART_LOG_LEVEL` is named.
#[test]
fn command_line_mistakes_are_named_as_such() {
    let env = TestEnv::new();
    let file = env.home.join("conductor.yaml");
    std::fs::write(
        &file,
        "# mine\nlog_level: info\n\n\nmax_concurrent_jobs: 4\n",
    )
    .unwrap();
    let before = std::fs::read_to_string(&file).unwrap();
    let cases = [
        (
            &["nosuch.key", "1"][..],
            &["Unknown key 'nosuch.key'", "is unchanged"][..],
        ),
        (
            &["max_concurrent_jobz", "1"],
            &["Unknown key", "Did you mean 'max_concurrent_jobs'?"],
        ),
        (
            &["max_concurrent_jobs", "abc"],
            &["Cannot set max_concurrent_jobs to 'abc'", "from 1 to 50"],
        ),
        (
            &["max_concurrent_jobs", "lots"],
            &["must be a whole number from 1 to 50"],
        ),
    ];
    for (args, wanted) in cases {
        let mut full = vec!["config", "set"];
        full.extend_from_slice(args);
        let out = env.mozart(&full);
        let text = both(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        for w in wanted {
            assert!(text.contains(w), "{args:?}: {w:?} missing:\n{text}");
        }
        for wrong in ["Correct it in the file", "line ", "4294967295"] {
            assert!(!text.contains(wrong), "{args:?}: says {wrong:?}:\n{text}");
        }
        assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    }
    let out = env.mozart(&["config", "show", "-s", "learnin"]);
    let text = both(&out);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("No section or key 'learnin'"), "{text}");
    assert!(text.contains("learning"), "{text}");
    let out = env
        .command(&["status"])
        .env("MOZART_LOG_LEVEL", "verbose")
        .output()
        .unwrap();
    let text = both(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("MOZART_LOG_LEVEL=verbose"), "{text}");
}

/// `doctor` with a conductor.yaml `mozart start` refuses is not "ready" (the file is named
/// as an error), and each `Warning:` line it printed about a profile counts as a warning.
#[test]
fn doctor_counts_an_invalid_config_and_every_profile_warning() {
    let env = TestEnv::new();
    let profiles = env.home.join("instruments");
    std::fs::create_dir_all(&profiles).unwrap();
    for i in 1..=3 {
        std::fs::write(
            profiles.join(format!("bad{i}.yaml")),
            format!("name: bad{i}\nkind: [\n"),
        )
        .unwrap();
    }
    let out = env.mozart(&["doctor"]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    let warned = said.lines().filter(|l| l.starts_with("Warning:")).count();
    assert_eq!(warned, 3, "{said}");
    let text = stdout(&out);
    // The cost-limit line, the conductor not running, and the three profiles.
    assert!(text.contains("5 warnings. Mozart is ready."), "{text}");
    std::fs::write(env.home.join("conductor.yaml"), "max_concurrent_jobs: 99\n").unwrap();
    let out = env.mozart(&["doctor"]);
    let text = stdout(&out);
    assert!(text.contains("Mozart is not ready."), "{text}");
    assert!(!text.contains("Mozart is ready."), "{text}");
    assert!(text.contains("✗ Conductor config"), "{text}");
    assert!(text.contains("max_concurrent_jobs"), "{text}");
    let out = env.mozart(&["doctor", "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc["conductor_config"]["status"], "error", "{doc:#}");
    assert_eq!(doc["errors_count"], 1, "{doc:#}");
}

/// Bare `mozart instruments` runs `list` (cli.md §6.3), bare `mozart config` prints the
/// group's help (§6.2); both exit 0.
#[test]
fn bare_groups_list_or_help_and_succeed() {
    let env = TestEnv::new();
    let out = env.mozart(&["instruments"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(stdout(&out), stdout(&env.mozart(&["instruments", "list"])));
    assert!(text.contains("claude_cli"), "{text}");
    let out = env.mozart(&["config"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Usage: mozart config"), "{text}");
    assert!(text.contains("set") && text.contains("check"), "{text}");
}

/// `config show` lists only values the running conductor really uses as `live`: the
/// `dashboard.*` set after its start are the file's (and said to wait for a restart), a
/// resolved `socket.path` under `$MOZART_SOCKET` is not "pending", and a conductor started
/// with `-c alt.yaml` is compared with alt.yaml (what its reload reads), not the home file.
#[test]
fn config_show_says_only_what_is_in_force() {
    let env = TestEnv::new();
    std::fs::write(env.home.join("conductor.yaml"), "max_concurrent_jobs: 7\n").unwrap();
    let alt = env.work.join("alt.yaml");
    std::fs::write(&alt, "max_concurrent_jobs: 3\n").unwrap();
    let out = env.mozart(&["start", "-c", alt.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let show = |args: &[&str]| -> serde_json::Value {
        let mut full = vec!["config", "show", "--json"];
        full.extend_from_slice(args);
        let out = env.mozart(&full);
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", both(&out)))
    };
    let item = |doc: &serde_json::Value, key: &str| -> serde_json::Value {
        doc["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["key"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("no {key} in {doc:#}"))
    };
    let doc = show(&["--all"]);
    let jobs = item(&doc, "max_concurrent_jobs");
    assert_eq!(jobs["value"], 3, "{jobs}");
    assert!(
        jobs.get("file_value").is_none(),
        "compared with the home file: {jobs}"
    );
    let socket = item(&doc, "socket.path");
    assert!(socket.get("file_value").is_none(), "{socket}");
    // A dashboard value set in the file the conductor reads, after its start.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let out = env.mozart(&[
        "config",
        "set",
        "-c",
        alt.to_str().unwrap(),
        "dashboard.port",
        "18765",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let out = env.mozart(&["config", "set", "dashboard.enabled", "true"]);
    let text = both(&out);
    assert!(
        text.contains(&format!("reads {}, not this file", alt.display())),
        "{text}"
    );
    let doc = show(&["--section", "dashboard"]);
    let port = item(&doc, "dashboard.port");
    assert_eq!(port["value"], 18765, "{port}");
    assert_ne!(port["source"], "live", "{port}");
    assert!(
        port["note"]
            .as_str()
            .unwrap_or("")
            .contains("until mozart restart"),
        "{port}"
    );
    let text = stdout(&env.mozart(&["config", "show", "-s", "dashboard"]));
    assert!(text.contains("until 'mozart restart'"), "{text}");
    assert_eq!(env.stop_conductor().status.code(), Some(0));
}

/// With `log_file` set, a clone writes its own `logs/clone-NAME.log` (conductor.md's clone
/// table), not production's log, and `mozart --conductor-clone=NAME logs` reads it.
#[test]
fn a_clone_writes_its_own_log_even_with_log_file_set() {
    let env = TestEnv::new();
    let prod_log = env.root().join("prod.log");
    std::fs::write(
        env.home.join("conductor.yaml"),
        format!("log_file: {}\n", prod_log.display()),
    )
    .unwrap();
    let clone_log = env.home.join("logs/clone-t.log");
    let out = env.mozart(&["--conductor-clone=t", "start"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("Log: {}", clone_log.display())),
        "{text}"
    );
    poll(&env, 30.0, "the clone's log", || {
        std::fs::read_to_string(&clone_log)
            .ok()
            .filter(|t| t.contains("daemon.started"))
    });
    assert!(!prod_log.exists(), "the clone wrote production's log");
    let out = env.mozart(&["--conductor-clone=t", "logs", "-n", "50"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("daemon.started"), "{text}");
    let out = env.mozart(&["--conductor-clone=t", "stop"]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    // Without the clone running, logs still read the clone's own log.
    let out = env.mozart(&["--conductor-clone=t", "logs", "-n", "50"]);
    let text = both(&out);
    assert!(text.contains("daemon.stopped"), "{text}");
}

/// Upstream's bounds: `profiler.interval_seconds` below 1 (which was accepted, "Applied",
/// while 1 s was used), `observer.watch_interval_seconds` 0 and `profiler.jsonl_max_bytes`
/// 1 are refused by `config set` and `config check`, naming the key and the bound.
#[test]
fn values_upstream_refuses_are_refused() {
    let env = TestEnv::new();
    let file = env.home.join("conductor.yaml");
    for (key, value, bound) in [
        ("profiler.interval_seconds", "0.3", "at least 1"),
        ("observer.watch_interval_seconds", "0", "at least 0.5"),
        ("profiler.jsonl_max_bytes", "1", "at least 1048576"),
    ] {
        let out = env.mozart(&["config", "set", key, value]);
        let text = both(&out);
        assert_eq!(out.status.code(), Some(1), "{key}: {text}");
        assert!(text.contains(key) && text.contains(bound), "{key}: {text}");
        let (section, field) = key.split_once('.').unwrap();
        std::fs::write(&file, format!("{section}:\n  {field}: {value}\n")).unwrap();
        let out = env.mozart(&["config", "check"]);
        let text = both(&out);
        assert_eq!(out.status.code(), Some(1), "{key}: {text}");
        assert!(text.contains(key) && text.contains(bound), "{key}: {text}");
        std::fs::remove_file(&file).unwrap();
    }
    let out = env.mozart(&["config", "set", "profiler.interval_seconds", "1.5"]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
}

/// `socket.backlog` is not used (1024 clients are served at once, so idle clients cannot
/// lock the CLI out): `config show` and `config set` say so instead of "restart".
#[test]
fn socket_backlog_is_said_to_be_unused() {
    let env = TestEnv::new();
    let out = env.mozart(&["config", "show", "--json", "-s", "socket"]);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let backlog = doc["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "socket.backlog")
        .cloned()
        .unwrap();
    assert_eq!(backlog["takes_effect"], "not used", "{backlog}");
    assert!(
        backlog["note"].as_str().unwrap_or("").contains("1024"),
        "{backlog}"
    );
    let out = env.mozart(&["config", "set", "socket.backlog", "5"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("does not use socket.backlog"), "{text}");
}

/// `config set` of one key reloads the whole file, as upstream's SIGHUP does: a value the
/// conductor was started with on the command line (`-l error`) goes back to the file's,
/// and the output says so instead of leaving it silent.
#[test]
fn config_set_says_which_start_overrides_the_reload_replaced() {
    let env = TestEnv::new();
    let out = env.mozart(&["start", "-l", "error"]);
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    let out = env.mozart(&["config", "set", "max_concurrent_jobs", "4"]);
    let text = both(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Applied to the running conductor"), "{text}");
    assert!(text.contains("log_level: error → info"), "{text}");
    assert!(!text.contains("max_concurrent_jobs:"), "{text}");
    assert_eq!(env.stop_conductor().status.code(), Some(0));
}

/// A relative `log_file` is beside conductor.yaml: the conductor writes it there whatever
/// directory `mozart start` ran in, and `mozart logs` from another directory reads it.
#[test]
fn a_relative_log_file_is_found_from_any_directory() {
    let env = TestEnv::new();
    std::fs::write(env.home.join("conductor.yaml"), "log_file: rel/c.log\n").unwrap();
    env.start_conductor();
    let log = env.home.join("rel/c.log");
    poll(&env, 30.0, "the relative log beside conductor.yaml", || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|t| t.contains("daemon.started"))
    });
    let out = env
        .command(&["logs", "-n", "20"])
        .current_dir(env.root())
        .output()
        .unwrap();
    let text = both(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("daemon.started"), "{text}");
    assert_eq!(env.stop_conductor().status.code(), Some(0));
}

/// An instrument profile's `success_exit_codes` outside 0-255 (which no exit status can
/// match) is refused, naming the field, instead of loading silently.
#[test]
fn success_exit_codes_outside_exit_statuses_are_refused() {
    let env = TestEnv::new();
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("odd.yaml"),
        "name: odd\ndisplay_name: Odd\nkind: cli\ncli:\n  command:\n    executable: claude\n  output:\n    format: text\n  errors:\n    success_exit_codes: [-1, 999]\n",
    )
    .unwrap();
    let out = env.mozart(&["instruments", "list"]);
    let said = both(&out);
    assert!(
        said.contains("cli.errors.success_exit_codes[0]") && said.contains("0 to 255"),
        "{said}"
    );
    assert!(
        !stdout(&out).contains("odd "),
        "the profile was listed: {said}"
    );
}

/// An instrument program that is there but not executable is said to be so (with the fix),
/// not "not found".
#[test]
fn a_non_executable_instrument_program_is_named_as_such() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let program = env.bin.join("aider");
    std::fs::write(&program, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = env.mozart(&["instruments", "list"]);
    let text = stdout(&out);
    let row = text.lines().find(|l| l.starts_with("aider ")).unwrap_or("");
    assert!(row.contains("not executable"), "{text}");
    let out = env.mozart(&["instruments", "check", "aider"]);
    let text = both(&out);
    assert!(text.contains("not executable"), "{text}");
    assert!(
        text.contains(&format!("chmod +x {}", program.display())),
        "{text}"
    );
    let out = env.mozart(&["doctor"]);
    let text = stdout(&out);
    assert!(text.contains("is not executable"), "{text}");
}

/// `job_timeout_seconds` keeps counting across a restart: a running job's run goes on with
/// the time it has had (each `mozart restart` gave it the whole limit again, so 4 × 25 s
/// sheets completed under a 60 s limit). The registry keeps when the run got its slot; a
/// run past its limit when the conductor starts again ends at once.
#[test]
fn a_restart_keeps_the_job_timeout_counting() {
    let env = TestEnv::new();
    std::fs::write(env.home.join("conductor.yaml"), "job_timeout_seconds: 60\n").unwrap();
    env.start_conductor();
    let ws = env.work.join("held-ws");
    let score = env.write_score(
        "held",
        &format!(
            "name: held\nworkspace: {}\ninstrument: shell\nsheet: {{size: 1, total_items: 2}}\n\
             prompt:\n  template: |\n    RUN: while [ ! -f \"{{{{ workspace }}}}/go\" ]; do sleep 0.1; done\n",
            ws.display()
        ),
    );
    crate::harness::run(&env, &score, &[]);
    crate::harness::wait_status(&env, "held", 30.0, |d| {
        crate::harness::sheet(d, 1)["status"] == "in_progress"
    });
    let db = rusqlite::Connection::open(env.home.join("registry.db")).unwrap();
    let options = || -> serde_json::Value {
        let text: String = db
            .query_row(
                "SELECT options_json FROM jobs WHERE job_id = 'held'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        serde_json::from_str(&text).unwrap()
    };
    let mut kept = options();
    let started = kept["timeout_clock_started_at"]
        .as_f64()
        .unwrap_or_else(|| panic!("the run's start is kept: {kept:#}"));
    crate::support::kill9_conductor(&env);
    // As if the run had got its slot two minutes before.
    kept["timeout_clock_started_at"] = serde_json::json!(started - 120.0);
    db.execute(
        "UPDATE jobs SET options_json = ?1 WHERE job_id = 'held'",
        [kept.to_string()],
    )
    .unwrap();
    env.start_conductor();
    let doc = crate::harness::wait_terminal(&env, "held", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("Job exceeded timeout of 60s (ran for 1"),
        "{doc:#}"
    );
}
