//! Black-box tests of what the CLI's messages say: hints that name the actual Mozart home,
//! counts that agree in number, the dashboard keys of `mozart config`, and `validate`'s
//! reports of duplicate keys and of every unknown field.

use mozart_tests::{stdout, TestEnv};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn instruments_check_hint_names_the_actual_mozart_home() {
    let env = TestEnv::new();
    let out = env.mozart(&["instruments", "check", "no-such-instrument"]);
    assert_eq!(out.status.code(), Some(1));
    let text = format!("{}{}", stdout(&out), stderr(&out));
    let want = format!("Add profiles to {}/instruments/", env.home.display());
    assert!(text.contains(&want), "no {want:?} in:\n{text}");
    assert!(
        !text.contains("~/.mozart"),
        "a hint names ~/.mozart:\n{text}"
    );
}

#[test]
fn config_init_and_show_include_the_dashboard_keys() {
    let env = TestEnv::new();
    let out = env.mozart(&["config", "init"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let written = std::fs::read_to_string(env.home.join("conductor.yaml")).unwrap();
    assert!(
        written.contains("dashboard:\n  enabled: false\n  host: 127.0.0.1\n  port: 8000\n"),
        "no dashboard defaults in:\n{written}"
    );
    // What init writes loads back.
    let out = env.mozart(&["config", "check"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );

    let out = env.mozart(&["config", "show", "--all"]);
    let text = stdout(&out);
    for key in [
        "dashboard.enabled",
        "dashboard.host",
        "dashboard.port",
        "dashboard.token",
    ] {
        assert!(text.contains(key), "config show --all lacks {key}:\n{text}");
    }

    // A token set is honoured, and shown hidden.
    let secret = "s3cret-token-0123456789";
    let out = env.mozart(&["config", "set", "dashboard.token", secret]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let out = env.mozart(&["config", "show", "--section", "dashboard", "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let settings = doc["settings"].as_array().unwrap();
    let value = |k: &str| {
        settings
            .iter()
            .find(|s| s["key"] == k)
            .map(|s| (s["value"].clone(), s["source"].clone()))
    };
    assert_eq!(value("dashboard.port"), Some((8000.into(), "file".into())));
    assert_eq!(
        value("dashboard.token"),
        Some(("(hidden)".into(), "file".into()))
    );
    assert!(!stdout(&out).contains(secret));
}

#[test]
fn validate_warns_of_a_key_given_twice_naming_both_lines() {
    let env = TestEnv::new();
    let score = env.write_score(
        "dupes.yaml",
        "name: dupes\n\
         sheet: {size: 1, total_items: 1}\n\
         prompt:\n  template: first\n\
         retry:\n  max_retries: 2\n  max_retries: 5\n\
         prompt:\n  template: second\n",
    );
    let out = env.mozart(&["validate", score.to_str().unwrap()]);
    let err = stderr(&out);
    // Upstream (PyYAML) keeps the last value silently: the score stays valid, with warnings.
    assert_eq!(out.status.code(), Some(0), "{}{err}", stdout(&out));
    assert!(
        err.contains(
            "warning: duplicate key 'retry.max_retries' on lines 6 and 7: only the last value (line 7) is used"
        ),
        "{err}"
    );
    assert!(
        err.contains("warning: duplicate key 'prompt' on lines 3 and 8"),
        "{err}"
    );
}

#[test]
fn validate_reports_every_unknown_field_at_once_with_lines_and_hints() {
    let env = TestEnv::new();
    let score = env.write_score(
        "many.yaml",
        "name: many\n\
         insturment: claude-code\n\
         sheet: {size: 1, total_items: 1, total_itmes: 2}\n\
         prompt: {template: hi}\n\
         retry:\n  max_retry: 3\n\
         validations:\n  - {type: command_succeeds, command: \"true\", bogus: 1}\n",
    );
    assert!(score.exists());
    let out = env.mozart(&["validate", "many.yaml"]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("Schema validation failed: 4 errors in the score"),
        "{text}"
    );
    for (field, line, hint) in [
        ("insturment", 2, "did you mean 'instrument'?"),
        ("sheet.total_itmes", 3, "did you mean 'sheet.total_items'?"),
        ("retry.max_retry", 6, "did you mean 'retry.max_retries'?"),
        ("validations.0.bogus", 8, "this is not a valid score field."),
    ] {
        let error = format!("{field}\n  Extra inputs are not permitted");
        assert!(text.contains(&error), "no {error:?} in:\n{text}");
        let at = format!("in many.yaml, line {line}");
        assert!(text.contains(&at), "no {at:?} in:\n{text}");
        let hint = format!("Unknown field '{field}' — {hint}");
        assert!(text.contains(&hint), "no {hint:?} in:\n{text}");
    }

    // Unknown fields after another error are reported with it, and so are its hints.
    env.write_score(
        "mixed.yaml",
        "name: mixed\n\
         sheet: {size: 1, total_items: 1}\n\
         prompt: just text\n\
         bogus: 1\n",
    );
    let out = env.mozart(&["validate", "mixed.yaml"]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("Schema validation failed: 2 errors in the score\nprompt\n"),
        "{text}"
    );
    assert!(
        text.contains("\nbogus\n  Extra inputs are not permitted"),
        "{text}"
    );
    assert!(text.contains("in mixed.yaml, line 4"), "{text}");
    assert!(text.contains("Unknown field 'bogus'"), "{text}");
    assert!(
        text.contains("The 'prompt' field must be a mapping, not a string."),
        "{text}"
    );
}

#[test]
fn counts_of_one_read_in_the_singular() {
    let env = TestEnv::new();
    env.start_conductor();
    let score = env.write_score("one", &mozart_tests::sleepy_shell_score("one", 1, 0.0));
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    env.wait_completed("one");

    let text = stdout(&env.mozart(&["list", "--all"]));
    assert!(text.ends_with("\n1 score\n"), "{text}");
    let text = stdout(&env.mozart(&["list", "--all", "--offset", "5"]));
    assert!(text.contains("(1 score in all)"), "{text}");
    let out = env.mozart(&["logs", "one", "--sheet", "2"]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("(it has 1 sheet)"), "{text}");
    let out = env.mozart(&["clear", "--yes", "--score", "one"]);
    assert_eq!(stdout(&out), "Cleared 1 score.\n");
    env.stop_conductor();
}

#[test]
fn an_untrusted_socket_hint_names_a_socket_in_the_actual_mozart_home() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let loose = env.root().join("loose");
    std::fs::create_dir(&loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = env
        .command(&["list"])
        .env("MOZART_SOCKET", loose.join("m.sock"))
        .output()
        .unwrap();
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert_ne!(out.status.code(), Some(0), "{text}");
    let want = format!("MOZART_SOCKET={}/mozart.sock", env.home.display());
    assert!(text.contains(&want), "no {want:?} in:\n{text}");
    assert!(!text.contains("$HOME/.mozart"), "{text}");
}

/// A broken profile in the Mozart home: `instruments list` printed its warning twice (a raw
/// `WARN mozart_backends::registry …` log line, then `Warning: …`) and `validate` only the
/// raw log line, twice. Each now says it once, the same way.
#[test]
fn a_broken_instrument_profile_is_warned_about_once_by_list_and_validate() {
    let env = TestEnv::new();
    let dir = env.home.join("instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("broken.yaml"), "name: broken\nkind: cli\n").unwrap();
    let score = env.write_score(
        "plain",
        "name: plain\nworkspace: ./plain-ws\ninstrument: shell\nsheet: {size: 1, total_items: 1}\n\
         prompt: {template: \"RUN: true\"}\n",
    );
    let runs = [
        env.mozart(&["instruments", "list"]),
        env.mozart(&["validate", score.to_str().unwrap()]),
        env.mozart(&["validate", score.to_str().unwrap(), "--json"]),
    ];
    for out in &runs {
        let err = stderr(out);
        let lines: Vec<&str> = err.lines().filter(|l| l.contains("broken.yaml")).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(
            lines[0].starts_with("Warning: invalid instrument profile ")
                && lines[0].contains("Correct the profile"),
            "{err}"
        );
    }
}
