//! The systemd user unit (`contrib/systemd/mozart.service`), run the way systemd runs it: no
//! login shell, only the unit's own `Environment=` and `EnvironmentFile=` (issue 23).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mozart_tests::{mozart_bin, stdout};

fn unit_text() -> String {
    let unit = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../contrib/systemd/mozart.service");
    std::fs::read_to_string(unit).unwrap()
}

/// The `[Service]` environment systemd gives the conductor, with `%h` = `home`: the
/// `Environment=` assignments, then the `EnvironmentFile=` files that exist.
fn unit_environment(home: &Path) -> Vec<(String, String)> {
    let h = home.to_str().unwrap();
    let mut vars = Vec::new();
    let mut in_service = false;
    for line in unit_text().lines().map(str::trim) {
        if line.starts_with('[') {
            in_service = line == "[Service]";
            continue;
        }
        if !in_service {
            continue;
        }
        if let Some(assignments) = line.strip_prefix("Environment=") {
            for kv in assignments.split_whitespace() {
                let (k, v) = kv.split_once('=').unwrap();
                vars.push((k.to_string(), v.replace("%h", h)));
            }
        } else if let Some(file) = line.strip_prefix("EnvironmentFile=") {
            let optional = file.starts_with('-');
            let path = file.trim_start_matches('-').replace("%h", h);
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    for l in text
                        .lines()
                        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                    {
                        let (k, v) = l.split_once('=').unwrap();
                        vars.push((k.trim().to_string(), v.trim().to_string()));
                    }
                }
                Err(_) => assert!(optional, "EnvironmentFile {path} is required but missing"),
            }
        }
    }
    vars
}

#[test]
fn the_unit_has_no_documentation_link_to_a_file_nothing_installs() {
    for line in unit_text().lines() {
        assert!(
            !line.starts_with("Documentation=file:"),
            "{line}: no install step puts a file there"
        );
    }
}

/// A tool in `~/.local/bin` and an API key in `~/.mozart/env` reach the instrument of a
/// conductor started by the unit.
#[test]
fn instruments_under_the_unit_find_user_installed_clis_and_api_keys() {
    let root = tempfile::Builder::new()
        .prefix("mzsd")
        .tempdir_in("/tmp")
        .unwrap();
    let home = root.path().join("home");
    let runtime = root.path().join("run");
    std::fs::create_dir_all(home.join(".local/bin")).unwrap();
    std::fs::create_dir_all(home.join(".mozart")).unwrap();
    std::fs::create_dir_all(&runtime).unwrap();
    let tool = home.join(".local/bin/my-ai-tool");
    std::fs::write(
        &tool,
        "#!/bin/sh\necho \"key:${ANTHROPIC_API_KEY:+set}\" > \"$1\"\n",
    )
    .unwrap();
    Command::new("chmod")
        .arg("755")
        .arg(&tool)
        .status()
        .unwrap();
    std::fs::write(
        home.join(".mozart/env"),
        "# keys for the instruments\nANTHROPIC_API_KEY=sk-ant-from-the-env-file\n",
    )
    .unwrap();
    let mut env = unit_environment(&home);
    env.push(("HOME".into(), home.to_str().unwrap().into()));
    // What systemd's user manager sets for every user unit.
    env.push(("XDG_RUNTIME_DIR".into(), runtime.to_str().unwrap().into()));
    let mozart = |args: &[&str]| {
        let mut cmd = Command::new(mozart_bin());
        cmd.args(args)
            .env_clear()
            .envs(env.iter().cloned())
            .current_dir(&home);
        cmd
    };
    let mut conductor = mozart(&["start", "--foreground"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let socket = runtime.join("mozart/mozart.sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let ws = home.join("ws");
    let score = home.join("unit-env.yaml");
    std::fs::write(
        &score,
        format!(
            "name: unit-env\nworkspace: {}\ninstrument: shell\nsheet:\n  size: 1\n  total_items: 1\nprompt:\n  template: |\n    RUN: my-ai-tool {}/seen.txt\nvalidations:\n  - type: file_exists\n    path: \"{{workspace}}/seen.txt\"\n",
            ws.display(),
            ws.display()
        ),
    )
    .unwrap();
    let run = mozart(&["run", score.to_str().unwrap()]).output().unwrap();
    let wait = mozart(&["wait", "unit-env"]).output().unwrap();
    let seen = std::fs::read_to_string(ws.join("seen.txt")).unwrap_or_default();
    let _ = mozart(&["stop", "--yes"]).output();
    let _ = conductor.kill();
    let _ = conductor.wait();
    assert_eq!(
        wait.status.code(),
        Some(0),
        "run: {}\nwait: {}",
        stdout(&run),
        stdout(&wait)
    );
    assert_eq!(seen.trim(), "key:set", "the instrument did not get the key");
}
