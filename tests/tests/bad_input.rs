//! Black-box tests of what Mozart says about a user's mistakes: each message names the file,
//! field or line and what to do, and `validate`, `run --dry-run` and `run` agree.

use mozart_tests::{stdout, TestEnv};

fn all_output(out: &std::process::Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_directory_or_a_binary_file_given_as_the_score_is_named_with_what_to_do() {
    let env = TestEnv::new();
    std::fs::create_dir(env.work.join("scores.yaml")).unwrap();
    std::fs::write(
        env.work.join("tool.yaml"),
        b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00",
    )
    .unwrap();
    let cases = [
        (
            "scores.yaml",
            "Cannot read score file scores.yaml: it is a directory",
            "not a directory (e.g. scores.yaml/score.yaml)",
        ),
        (
            "tool.yaml",
            "Cannot read score file tool.yaml: it is not UTF-8 text",
            "A score is a YAML text file",
        ),
    ];
    for (file, message, hint) in cases {
        for (args, code) in [
            (vec!["validate", file], 2),
            (vec!["run", file, "--dry-run"], 1),
        ] {
            let out = env.mozart(&args);
            let text = all_output(&out);
            assert_eq!(out.status.code(), Some(code), "{args:?}: {text}");
            assert!(
                text.contains(message),
                "{args:?}: no {message:?} in\n{text}"
            );
            assert!(text.contains(hint), "{args:?}: no {hint:?} in\n{text}");
            assert!(
                !text.contains("Check that the file exists"),
                "{args:?}: the file exists:\n{text}"
            );
        }
    }
}

#[test]
fn run_suggests_the_field_a_typo_meant_as_validate_does() {
    let env = TestEnv::new();
    env.write_score(
        "typo.yaml",
        "name: typo\ninstrument: shell\nsheet: {size: 1, total_items: 1}\n\
         prompt: {template: hi}\nretires: {max_retries: 1}\n",
    );
    for args in [
        vec!["validate", "typo.yaml"],
        vec!["run", "typo.yaml", "--dry-run"],
    ] {
        let out = env.mozart(&args);
        let text = all_output(&out);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {text}");
        assert!(text.contains("in typo.yaml, line 5"), "{args:?}: {text}");
        assert!(
            text.contains("Unknown field 'retires' — did you mean 'retry'?"),
            "{args:?}: no suggestion in\n{text}"
        );
    }
}

#[test]
fn unknown_fields_after_a_missing_field_are_listed_with_it() {
    let env = TestEnv::new();
    // `sheet.total_items` misspelt (so also missing), and a top-level typo after it.
    env.write_score(
        "typos.yaml",
        "name: t\ninstrument: shell\nsheet:\n  size: 1\n  total_item: 2\n\
         prompt:\n  template: x\nretires:\n  max_retries: 1\n",
    );
    let out = env.mozart(&["validate", "typos.yaml"]);
    let text = all_output(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("3 errors in the score"), "{text}");
    for needle in [
        "sheet.total_item\n  Extra inputs are not permitted",
        "sheet.total_items\n  Field required",
        "retires\n  Extra inputs are not permitted",
        "in typos.yaml, line 8",
        "did you mean 'retry'?",
    ] {
        assert!(text.contains(needle), "no {needle:?} in\n{text}");
    }

    // Every required section that is absent is named at once, not one per run.
    env.write_score("bare.yaml", "name: bare\n");
    let out = env.mozart(&["validate", "bare.yaml"]);
    let text = all_output(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("2 errors in the score\nsheet\n  Field required")
            && text.contains("\nprompt\n  Field required"),
        "{text}"
    );
}

#[test]
fn a_list_where_a_section_goes_is_called_a_list() {
    let env = TestEnv::new();
    env.write_score(
        "listed.yaml",
        "name: t\ninstrument: shell\nsheet:\n  - size: 1\n  - total_items: 2\n\
         prompt:\n  template: x\n",
    );
    let out = env.mozart(&["validate", "listed.yaml"]);
    let text = all_output(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("sheet\n  Input should be a mapping (`key: value` lines), not a list"),
        "{text}"
    );
    assert!(text.contains("in listed.yaml, line 4"), "{text}");
    assert!(!text.contains("single value"), "{text}");
}

#[test]
fn a_conductor_config_mistake_names_its_line_and_the_field_meant() {
    let env = TestEnv::new();
    let config = env.home.join("conductor.yaml");
    let cases = [
        (
            "log_level: info\nmax_concurrent_jobs: 0\n",
            "line 2: max_concurrent_jobs: must be from 1 to 50, not 0",
        ),
        (
            "# mine\nmax_concurent_jobs: 2\n",
            "line 2: unknown field `max_concurent_jobs` (did you mean `max_concurrent_jobs`?)",
        ),
        // A mistyped value in words, not Rust's type names (`expected u32`, `struct …`).
        (
            "max_concurrent_jobs: lots\n",
            "line 1: max_concurrent_jobs: must be a whole number from 0 to 4294967295, not the text \"lots\"",
        ),
        (
            "log_level: info\nsocket: /tmp/mozart.sock\n",
            "line 2: socket: must be a mapping (socket: with its fields on the indented lines below), not the text \"/tmp/mozart.sock\"",
        ),
        (
            "job_timeout_seconds: '600'\n",
            "line 1: job_timeout_seconds: must be a number, not the text \"600\" (without the quotes it is a number)",
        ),
    ];
    for (text, want) in cases {
        std::fs::write(&config, text).unwrap();
        for args in [vec!["start"], vec!["config", "check"]] {
            let out = env.mozart(&args);
            let said = all_output(&out);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {said}");
            assert!(said.contains(want), "{args:?}: no {want:?} in\n{said}");
            assert!(said.contains(&config.display().to_string()), "{said}");
            assert!(said.contains("Correct it in the file"), "{said}");
            assert!(
                !said.contains("expected u") && !said.contains("struct "),
                "{args:?}: Rust's words in\n{said}"
            );
        }
    }
    assert!(env.conductor_pid().is_none(), "a conductor started");
}

#[test]
fn a_file_where_the_workspace_goes_is_named_by_validate_and_run() {
    let env = TestEnv::new();
    std::fs::write(env.work.join("notes"), "a file\n").unwrap();
    let file = env.work.join("notes").canonicalize().unwrap();
    let score = |workspace: &str| {
        format!(
            "name: t\nworkspace: {workspace}\ninstrument: shell\n\
             sheet: {{size: 1, total_items: 1}}\nprompt: {{template: hi}}\n"
        )
    };
    env.write_score("under.yaml", &score("./notes/ws"));
    env.write_score("onto.yaml", &score("./notes"));
    env.start_conductor();
    for (name, what) in [
        ("under.yaml", "Workspace parent is not a directory"),
        ("onto.yaml", "Workspace is not a directory"),
    ] {
        let want = format!("{what}: {} is a file", file.display());
        let out = env.mozart(&["validate", name]);
        let text = all_output(&out);
        assert_eq!(out.status.code(), Some(1), "{name}: {text}");
        assert!(
            text.contains(&format!("[V002] Line 2: {want}")),
            "{name}: {text}"
        );
        let out = env.mozart(&["run", name]);
        let text = all_output(&out);
        assert_eq!(out.status.code(), Some(1), "{name}: {text}");
        assert!(text.contains(&want), "{name}: {text}");
        assert!(text.contains("Change the workspace path"), "{name}: {text}");
        assert!(
            text.contains("The workspace path is invalid"),
            "{name}: {text}"
        );
    }
}

#[test]
fn the_conductor_refuses_a_score_naming_an_instrument_it_does_not_have() {
    let env = TestEnv::new();
    env.write_score(
        "typo.yaml",
        "name: typo\nworkspace: ./typo-ws\ninstrument: shelll\n\
         sheet: {size: 1, total_items: 2}\nprompt: {template: \"RUN: true\"}\n",
    );
    // An alias to a misspelt profile, a movement's typo, and a fallback naming an alias.
    env.write_score(
        "many.yaml",
        "name: many\nworkspace: ./many-ws\ninstrument: quick\n\
         instruments:\n  quick: {profile: gemni-cli}\ninstrument_fallbacks: [quick]\n\
         movements:\n  2: {instrument: claude-cod}\n\
         sheet: {size: 1, total_items: 2}\nprompt: {template: \"RUN: true\"}\n",
    );
    env.start_conductor();
    // validate stays upstream's warning (V210), with its suggestion.
    let out = env.mozart(&["validate", "typo.yaml"]);
    let text = all_output(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("[V210]") && text.contains("Did you mean 'shell'?"),
        "{text}"
    );

    let profiles = env.home.join("instruments").display().to_string();
    let cases: [(&str, &[&str]); 2] = [
        (
            "typo",
            &["Unknown instrument in ", "typo.yaml: instrument: shelll (did you mean 'shell'?)"],
        ),
        (
            "many",
            &[
                "Unknown instruments in ",
                "instruments.quick.profile: gemni-cli (did you mean 'gemini-cli'?)",
                "instrument_fallbacks: quick (an instruments: alias, which a fallback does not follow",
                "movements.2.instrument: claude-cod (did you mean 'claude-code'?)",
            ],
        ),
    ];
    for (job, wants) in cases {
        let out = env.mozart(&["run", &format!("{job}.yaml")]);
        let text = all_output(&out);
        assert_eq!(out.status.code(), Some(1), "{job}: {text}");
        for want in wants {
            assert!(text.contains(want), "{job}: no {want:?} in\n{text}");
        }
        assert!(text.contains(&profiles), "{job}: no {profiles} in\n{text}");
        assert!(text.contains("mozart instruments list"), "{job}: {text}");
        // Nothing was submitted: no job, no workspace.
        let out = env.mozart(&["status", job]);
        assert_ne!(
            out.status.code(),
            Some(0),
            "{job} is a job: {}",
            all_output(&out)
        );
        assert!(
            !env.work.join(format!("{job}-ws")).exists(),
            "{job}: workspace made"
        );
    }
}

#[test]
fn a_key_given_twice_in_conductor_yaml_or_a_profile_is_a_warning_as_in_a_score() {
    let env = TestEnv::new();
    let config = env.home.join("conductor.yaml");
    std::fs::write(
        &config,
        "max_concurrent_jobs: 3\nlog_level: info\nmax_concurrent_jobs: 5\n",
    )
    .unwrap();
    let want = format!(
        "{}: warning: duplicate key 'max_concurrent_jobs' on lines 1 and 3: only the last value (line 3) is used",
        config.display()
    );
    for args in [vec!["config", "check"], vec!["start"]] {
        let out = env.mozart(&args);
        let said = all_output(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {said}");
        assert!(said.contains(&want), "{args:?}: no {want:?} in\n{said}");
        assert_eq!(said.matches("duplicate key").count(), 1, "{args:?}: {said}");
    }
    let shown: serde_json::Value =
        serde_json::from_str(&stdout(&env.mozart(&["config", "show", "--json"]))).unwrap();
    let used = shown["settings"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["key"] == "max_concurrent_jobs"))
        .map(|r| r["value"].clone());
    assert_eq!(used, Some(serde_json::json!(5)), "{shown}");

    let profiles = env.home.join("instruments");
    std::fs::create_dir_all(&profiles).unwrap();
    let profile = profiles.join("twice.yaml");
    std::fs::write(
        &profile,
        "name: twice\ndisplay_name: One\nkind: cli\ndisplay_name: Two\ncli:\n  command: {executable: sh}\n",
    )
    .unwrap();
    let out = env.mozart(&["instruments", "list"]);
    let said = all_output(&out);
    let want = format!(
        "instrument profile {}: duplicate key 'display_name' on lines 2 and 4: only the last value (line 4) is used",
        profile.display()
    );
    assert!(said.contains(&want), "no {want:?} in\n{said}");
    assert!(said.contains("twice"), "the profile still loads:\n{said}");
}

/// V213 looks on this shell's PATH when it cannot look on the conductor's, and says why: not
/// "no conductor is running" when a conductor answers on the socket but is not this Mozart
/// home's (its lock is elsewhere, so its environment is not known here).
#[test]
fn validate_says_why_it_looked_on_this_shells_path() {
    let env = TestEnv::new();
    let ghost = "name: ghost\ndisplay_name: Ghost\nkind: cli\ncli:\n  command:\n    \
                 executable: mozart-no-such-program-v213\n    prompt_flag: \"-p\"\n  output:\n    format: text\n";
    let other_home = env.root().join("other-home");
    for home in [&env.home, &other_home] {
        std::fs::create_dir_all(home.join("instruments")).unwrap();
        std::fs::write(home.join("instruments/ghost.yaml"), ghost).unwrap();
    }
    env.write_score(
        "ghostly.yaml",
        "name: ghostly\nworkspace: ./ws\ninstrument: ghost\n\
         sheet: {size: 1, total_items: 1}\nprompt: {template: hi}\n",
    );
    let validate = |home: &std::path::Path| {
        let out = env
            .command(&["validate", "ghostly.yaml"])
            .env("MOZART_HOME", home)
            .output()
            .unwrap();
        all_output(&out)
    };
    let text = validate(&other_home);
    assert!(
        text.contains("not on this shell's PATH (no conductor is running)"),
        "{text}"
    );
    env.start_conductor();
    // This home's conductor: its own PATH.
    let text = validate(&env.home);
    assert!(
        text.contains("not on the running conductor's PATH"),
        "{text}"
    );
    // Another home, the same socket: a conductor answers there, but not this home's.
    let text = validate(&other_home);
    let want = format!(
        "not on this shell's PATH (no conductor of this Mozart home is running, though a socket is at {}",
        env.socket.display()
    );
    assert!(text.contains(&want), "no {want:?} in\n{text}");
    assert!(text.contains("so this shell's was used)"), "{text}");
    assert!(!text.contains("no conductor is running"), "{text}");
}

/// `mozart run` of a score whose prompt template does not parse names the score file and
/// the line of its `template:` key (as `validate` does), and says to validate it.
#[test]
fn run_of_a_broken_template_names_the_file_and_line() {
    let env = TestEnv::new();
    env.start_conductor();
    let path = env.write_score(
        "broken",
        "name: broken\nworkspace: ./broken-ws\ninstrument: shell\nsheet: {size: 1, total_items: 1}\n\
         prompt:\n  template: |\n    Hello\n    {% if x %}\n",
    );
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    let text = all_output(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "The prompt template (prompt.template, line 6 of {}) cannot be parsed",
            path.display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Validate it with: mozart validate {}",
            path.display()
        )),
        "{text}"
    );
}
