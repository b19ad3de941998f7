//! Black-box tests of `mozart validate` and `mozart run --dry-run` over the fixture scores in
//! `tests/fixtures/scores/` (score.md §1, §6; cli.md §3.1, §3.6).

use std::path::PathBuf;

use mozart_tests::{stdout, TestEnv};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/scores")
        .join(name)
}

/// Copy a fixture into the test's scratch directory so relative workspaces land there.
fn stage(env: &TestEnv, name: &str) -> String {
    let text = std::fs::read(fixture(name)).unwrap();
    std::fs::write(env.work.join(name), text).unwrap();
    name.to_string()
}

#[test]
fn validate_exit_codes_messages_and_field_paths() {
    // (fixture, exit code, substrings the output must contain)
    let cases: &[(&str, i32, &[&str])] = &[
        ("valid-fanout.yaml", 0, &["✓ Configuration valid: fixture-fanout", "Sheets: 5"]),
        (
            "typo-field.yaml",
            2,
            &[
                "Schema validation failed: 1 error in the score\ninsturment\n  Extra inputs are not permitted",
                "in typo-field.yaml, line 4",
                "Unknown field 'insturment' — did you mean 'instrument'?",
            ],
        ),
        (
            "nested-unknown.yaml",
            2,
            &["sheet.bogus_key\n  Extra inputs are not permitted", "line 5"],
        ),
        ("name-int.yaml", 2, &["name\n  Input should be a valid string", "line 1"]),
        (
            "range-error.yaml",
            2,
            &["retry\n  base_delay_seconds (100.0) must not exceed max_delay_seconds (10.0)"],
        ),
        (
            "cycle.yaml",
            2,
            &["sheet\n  Circular dependency detected: 2 -> 3 -> 2"],
        ),
        (
            "fanout-bad-size.yaml",
            2,
            &["fan_out requires size=1, got size=2."],
        ),
        (
            "prompt-string.yaml",
            2,
            &[
                "Input should be a mapping (`key: value` lines), not a single value",
                "The 'prompt' field must be a mapping, not a string.",
            ],
        ),
        ("list-root.yaml", 2, &["Score must be a YAML mapping (key-value pairs), got: list"]),
        ("empty.yaml", 2, &["got: empty file"]),
        (
            "bad-yaml.yaml",
            2,
            &["YAML syntax error:", "in \"bad-yaml.yaml\", line", "Check for indentation issues"],
        ),
        ("binary.yaml", 2, &["Cannot read score file binary.yaml: it is not UTF-8 text"]),
        (
            "yes-no.yaml",
            0,
            &[
                "[V204] Line 6: Claude CLI backend without skip_permissions",
                "Validation: PASSED (with warnings)",
            ],
        ),
        ("dup-keys.yaml", 0, &["Validating fixture-dup..."]),
    ];
    let env = TestEnv::new();
    for (name, code, needles) in cases {
        let file = stage(&env, name);
        let out = env.mozart(&["validate", &file]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(*code), "{name}: {text}");
        for needle in *needles {
            assert!(
                text.contains(needle),
                "{name}: missing {needle:?} in\n{text}"
            );
        }
    }
}

#[test]
fn validate_json_reports_issues_and_full_preview() {
    let env = TestEnv::new();
    let file = stage(&env, "yes-no.yaml");
    let out = env.mozart(&["validate", "--json", &file]);
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = doc["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["check_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["V204", "V205", "V209"]);
    assert_eq!(doc["rendering"]["total_sheets"], 2);
    let sheets = doc["rendering"]["sheets"].as_array().unwrap();
    assert_eq!(sheets.len(), 2);
    assert_eq!(sheets[1]["prompt_snippet"], "2");
    let ws = env
        .work
        .join("ws-yes")
        .canonicalize()
        .unwrap_or(env.work.join("ws-yes"));
    let expanded = sheets[1]["validations"][0]["expanded_path"]
        .as_str()
        .unwrap();
    assert!(
        expanded.ends_with("ws-yes/a"),
        "{expanded} vs {}",
        ws.display()
    );

    let file = stage(&env, "typo-field.yaml");
    let out = env.mozart(&["validate", "--json", &file]);
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["success"], false);
    assert!(doc["message"]
        .as_str()
        .unwrap()
        .contains("[type=extra_forbidden, input_value='claude-code', input_type=str]"));
}

#[test]
fn missing_file_is_a_usage_error() {
    let env = TestEnv::new();
    let out = env.mozart(&["validate", "nope.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Invalid value for 'config_file': path 'nope.yaml' does not exist."));
    let out = env.mozart(&["run", "nope.yaml", "--dry-run"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn dry_run_shows_plan_and_json_without_a_conductor() {
    let env = TestEnv::new();
    let file = stage(&env, "valid-fanout.yaml");
    let out = env.mozart(&["run", &file, "--dry-run"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Dry run - not executing"));
    assert!(text.contains("Sheet 5 depends on: 2, 3, 4"), "{text}");
    assert!(text.contains("Sheets: 5 (1 items each)"));
    let out = env.mozart(&["run", &file, "--dry-run", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["dry_run"], true);
    assert_eq!(doc["job_name"], "fixture-fanout");
    assert_eq!(doc["total_sheets"], 5);
    assert!(doc["workspace"].as_str().unwrap().ends_with("ws-fanout"));

    let file = stage(&env, "cycle.yaml");
    let out = env.mozart(&["run", &file, "--dry-run", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["error"]
        .as_str()
        .unwrap()
        .contains("Circular dependency detected"));

    let out = env.mozart(&["run", &file, "--dry-run", "--start-sheet", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = env.mozart(&["run", "valid-fanout.yaml", "--dry-run", "--escalation"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn hostile_input_fails_fast_with_a_clear_error() {
    let env = TestEnv::new();
    // Alias bomb: 10^9 nodes if expanded.
    let mut bomb =
        String::from("name: x\nsheet: {size: 1, total_items: 1}\nprompt: {template: hi}\n");
    bomb.push_str("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    env.write_score("bomb", &bomb);
    let out = env.mozart(&["validate", "bomb.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).contains("alias expansion limit"));
    // Oversized document.
    let big = format!("name: x\n# {}\n", "y".repeat(9 * 1024 * 1024));
    env.write_score("big", &big);
    let out = env.mozart(&["validate", "big.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).contains("scores are limited to"));
}

#[test]
fn a_score_planning_no_sheet_is_refused_with_v010_naming_the_fields() {
    let env = TestEnv::new();
    let path = env.write_score(
        "nosheets",
        "name: nosheets\nworkspace: ./ws\nsheet: {size: 2, total_items: 3, start_item: 9}\nprompt: {template: hi}\n",
    );
    let p = path.to_str().unwrap();
    let out = env.mozart(&["validate", p]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for needle in [
        "V010",
        "sheet.start_item (9)",
        "sheet.total_items (3)",
        "sheet.size 2",
    ] {
        assert!(text.contains(needle), "missing {needle}: {text}");
    }
    let out = env.mozart(&["run", p, "--dry-run"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("[V010]"), "{text}");
}

/// Issue 23: a prompt that compiles but cannot render is an error (V011), naming the sheet
/// and the variable; a loop too large for a prompt is refused in bounded time.
#[test]
fn a_prompt_that_cannot_render_fails_validation_naming_sheet_and_variable() {
    let env = TestEnv::new();
    let cases = [
        (
            "undefined-var",
            "RUN: echo {{ sheet_num }} {{ nonexistent_var }}",
            "The prompt cannot be rendered for sheet 1: undefined variable 'nonexistent_var' (line 1)",
        ),
        (
            "range-bomb",
            "RUN: echo {% for i in range(99999) %}{% for j in range(99999) %}x{% endfor %}{% endfor %}",
            "The prompt cannot be rendered for sheet 1: the template takes more than",
        ),
    ];
    for (name, template, expected) in cases {
        let score = format!(
            "name: {name}\nworkspace: ./ws-{name}\ninstrument: shell\nsheet:\n  size: 1\n  total_items: 3\nprompt:\n  template: |\n    {template}\n"
        );
        let path = env.write_score(&format!("{name}.yaml"), &score);
        let out = env.mozart(&["validate", path.to_str().unwrap()]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{name}: {text}");
        assert!(
            text.contains("[V011]") && text.contains(expected),
            "{name}: {text}"
        );
        assert!(text.contains("Validation: FAILED"), "{name}: {text}");
        assert!(!text.contains("PASSED"), "{name}: {text}");

        let json = env.mozart(&["validate", "--json", path.to_str().unwrap()]);
        assert_eq!(json.status.code(), Some(1), "{name} --json");
        let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(doc["valid"], false, "{name}: {doc}");
        assert!(
            doc["issues"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["check_id"] == "V011" && i["severity"] == "error"),
            "{name}: {doc}"
        );
    }
}

/// What an earlier sheet prints is known only when the score runs: a template reading
/// `previous_outputs[1]` with `auto_capture_stdout` set renders then, so validate passes it
/// (it called it V011, "fails with E301 when the score runs", though the run completes).
#[test]
fn a_template_reading_an_earlier_sheets_output_passes_validation() {
    let env = TestEnv::new();
    let path = env.write_score(
        "cs.yaml",
        r#"name: cs
workspace: ./cs-ws
instrument: shell
cross_sheet: {auto_capture_stdout: true}
sheet: {size: 1, total_items: 2}
prompt:
  template: |
    {% if sheet_num == 1 %}RUN: echo HELLO{% else %}RUN: echo "got {{ previous_outputs[1] | replace('\n', ' ') }}"{% endif %}
"#,
    );
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("V011"), "{text}");
    // Reading a sheet outside the lookback window is still a mistake validate names.
    let bad = env.write_score(
        "cs-bad.yaml",
        r#"name: cs-bad
workspace: ./cs-bad-ws
instrument: shell
cross_sheet: {auto_capture_stdout: true}
sheet: {size: 1, total_items: 2}
prompt:
  template: "RUN: echo {{ previous_outputs[5] }}"
"#,
    );
    let out = env.mozart(&["validate", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("[V011]"), "{}", stdout(&out));
}

/// A `content_regex` the check's engine cannot run (look-around, a back-reference) passed
/// validate and run, then failed every attempt ("look-around … is not supported"): it is
/// refused before anything runs, saying what to write instead. Python's `\Z` is read as
/// the end of the text, as Python reads it.
#[test]
fn a_content_regex_the_check_cannot_run_is_refused_before_the_run() {
    let env = TestEnv::new();
    let score = |name: &str, pattern: &str| {
        env.write_score(
            &format!("{name}.yaml"),
            &format!(
                r#"name: {name}
workspace: ./{name}-ws
instrument: shell
sheet: {{size: 1, total_items: 1}}
prompt:
  template: "RUN: printf 'verdict: pass\\naa\\n' > {{{{ workspace }}}}/x"
validations:
  - type: content_regex
    path: "{{workspace}}/x"
    pattern: '{pattern}'
"#
            ),
        )
    };
    for (name, pattern, says) in [
        ("ahead", "^verdict: (?=pass)", "look-around"),
        ("backref", "(a)\\1", "back-references"),
    ] {
        let path = score(name, pattern);
        let out = env.mozart(&["validate", path.to_str().unwrap()]);
        let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        assert_ne!(out.status.code(), Some(0), "{name}: {text}");
        assert!(
            text.contains(says) && text.contains("instead") && text.contains("validations.0"),
            "{name}: {text}"
        );
        let out = env.mozart(&["run", path.to_str().unwrap()]);
        let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        assert_ne!(out.status.code(), Some(0), "{name}: {text}");
        assert!(text.contains(says), "{name}: {text}");
    }
    // `\Z` runs: the sheet's file ends in "aa" and a newline, and the check finds them.
    let path = score("end", "aa\\n\\Z");
    env.start_conductor();
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    env.wait_completed("end");
}

/// `instrument_config.timeout_seconds` that is not a positive number ("3", soon, -5, 0) was
/// dropped: the sheet ran with no timeout at all. It is refused, the field and line named.
#[test]
fn an_instrument_timeout_that_is_not_a_positive_number_is_refused() {
    let env = TestEnv::new();
    for (name, value, says) in [
        ("quoted", "\"3\"", "got '3' (a string)"),
        ("word", "soon", "got 'soon' (a string)"),
        ("negative", "-5", "got -5"),
        ("zero", "0", "got 0"),
    ] {
        let path = env.write_score(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\nworkspace: ./{name}-ws\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\ninstrument_config: {{timeout_seconds: {value}}}\nprompt: {{template: \"RUN: true\"}}\n"
            ),
        );
        for cmd in ["validate", "run"] {
            let out = env.mozart(&[cmd, path.to_str().unwrap()]);
            let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
            assert_ne!(out.status.code(), Some(0), "{name} {cmd}: {text}");
            assert!(
                text.contains("instrument_config.timeout_seconds")
                    && text.contains(says)
                    && text.contains("line 5"),
                "{name} {cmd}: {text}"
            );
        }
    }
}

/// A `skip_when` that does not parse passed validate and run; its sheet ran, and the log
/// said "at 18446744073709551615". It is refused before the run, naming the sheet, the line,
/// the expression and the column where it goes wrong.
#[test]
fn a_skip_when_that_does_not_parse_is_refused_naming_where() {
    let env = TestEnv::new();
    let path = env.write_score(
        "skip2.yaml",
        r#"name: skip2
workspace: ./skip2-ws
instrument: shell
sheet:
  size: 1
  total_items: 3
  skip_when:
    2: "sheets[1].status = 'completed'"
    3: "sheets[1].status == 'completed' and"
prompt: {template: "RUN: true"}
"#,
    );
    for cmd in ["validate", "run"] {
        let out = env.mozart(&[cmd, path.to_str().unwrap()]);
        let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        assert_ne!(out.status.code(), Some(0), "{cmd}: {text}");
        for says in [
            "sheet.skip_when.2",
            "the skip_when of sheet 2 cannot be parsed at column 18: '=' is not a comparison: write '=='",
            "line 8",
            "the skip_when of sheet 3 cannot be parsed at column 36: unexpected end of expression: \"sheets[1].status == 'completed' and\"",
            "line 9",
        ] {
            assert!(text.contains(says), "{cmd}: {says}\n{text}");
        }
    }
}

/// Lines named by validate are the lines of the fault: V201 said "Line 6" (the first line
/// with the text anywhere) for a path on line 9, V208 the top-level `workspace:` for a
/// variable, a dependency or fan_out out of range and a movement 0 the first line of their
/// section, and a tab on line 2 "line 1, column 7".
#[test]
fn validate_names_the_line_of_the_fault() {
    let env = TestEnv::new();
    let cases: &[(&str, &str, &str)] = &[
        (
            "v201",
            "name: v201\nworkspace: ./ws\ninstrument: shell\nretry: {max_retries: 1}\nsheet: {size: 1, total_items: 1}\nprompt: {template: \"RUN: touch {{ workspace }}/x\"}\nvalidations:\n  - type: file_exists\n    path: \"{{ workspace }}/x\"\n",
            "[V201] Line 9:",
        ),
        (
            "v208",
            "name: v208\nworkspace: ./ws\ninstrument: shell\nsheet: {size: 1, total_items: 1}\nprompt:\n  template: \"RUN: true\"\n  variables:\n    x: 1\n    workspace: /tmp/elsewhere\n",
            "[V208] Line 9:",
        ),
        (
            "dep",
            "name: dep\nworkspace: ./ws\ninstrument: shell\nsheet:\n  size: 1\n  total_items: 3\n  dependencies:\n    2: [1]\n    3: [7]\nprompt: {template: \"RUN: true\"}\n",
            "in dep.yaml, line 9",
        ),
        (
            "fo",
            "name: fo\nworkspace: ./ws\ninstrument: shell\nsheet:\n  size: 1\n  total_items: 3\n  fan_out:\n    5: 2\nprompt: {template: \"RUN: true\"}\n",
            "in fo.yaml, line 8",
        ),
        (
            "mv",
            "name: mv\nworkspace: ./ws\ninstrument: shell\nsheet: {size: 1, total_items: 2}\nprompt: {template: \"RUN: true\"}\nmovements:\n  1:\n    instrument: shell\n  0:\n    instrument: shell\n",
            "in mv.yaml, line 9",
        ),
        (
            "tab",
            "name: tab\n\tworkspace: ./ws\ninstrument: shell\n",
            "tab.yaml\", line 2, column 1",
        ),
    ];
    for (name, yaml, says) in cases {
        std::fs::write(env.work.join(format!("{name}.yaml")), yaml).unwrap();
        let out = env.mozart(&["validate", &format!("{name}.yaml")]);
        let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        assert!(text.contains(says), "{name}: wanted {says:?}\n{text}");
    }
}

/// Issue 23: hints lead somewhere — no Python words, no link to a guide that does not
/// exist, and no "minimum sections" hint for a score whose sections are all there.
#[test]
fn validate_hints_lead_somewhere() {
    let env = TestEnv::new();
    let cycle = stage(&env, "cycle.yaml");
    let out = env.mozart(&["validate", &cycle]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("Circular dependency detected"), "{text}");
    assert!(!text.contains("at minimum"), "{text}");
    // A field missing inside a section that is there: the hint names what the section
    // lacks, not sections the score already has.
    let partial = env.write_score(
        "partial.yaml",
        "name: partial\nsheet: {size: 1}\nprompt: {template: hi}\n",
    );
    let out = env.mozart(&["validate", partial.to_str().unwrap()]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("sheet.total_items"), "{text}");
    assert!(!text.contains("at minimum"), "{text}");
    assert!(text.contains("total_items and size"), "{text}");
    let typo = stage(&env, "typo-field.yaml");
    let valid = stage(&env, "valid-fanout.yaml");
    for score in [&cycle, &typo, &valid] {
        let out = env.mozart(&["validate", score]);
        let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        for python in ["Pydantic", "JobConfig", "score-writing-guide"] {
            assert!(!text.contains(python), "{score}: {python} in {text}");
        }
        for doc in text.split_whitespace().filter(|w| w.starts_with("docs/")) {
            let doc = doc.trim_end_matches(|c: char| !c.is_alphanumeric());
            let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(doc);
            assert!(
                path.exists(),
                "{score}: the hint names {doc}, which does not exist"
            );
        }
    }
}

/// Issue 23: an unknown instrument is upstream's warning (V210, exit 0: a profile can still be
/// added before the run), and it names the instrument the user most likely meant.
#[test]
fn an_unknown_instrument_gets_a_did_you_mean() {
    let env = TestEnv::new();
    let path = env.write_score(
        "typo-instrument.yaml",
        "name: typo-instrument\nworkspace: ./ws\ninstrument: claude_cl\nsheet:\n  size: 1\n  total_items: 1\nprompt:\n  template: hi\n",
    );
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("[V210]"), "{text}");
    assert!(text.contains("Did you mean 'claude_cli'?"), "{text}");
}

/// V214 (ours): an unknown `{placeholder}` in a validation path passes upstream's validate and
/// then fails the run with `File not found: …/{sheetnum}.txt`; validate warns, with the closest
/// known name.
#[test]
fn an_unknown_placeholder_in_a_validation_path_is_a_warning_with_a_did_you_mean() {
    let env = TestEnv::new();
    let path = env.write_score(
        "typo-placeholder.yaml",
        "name: typo-placeholder\nworkspace: ./ws\nsheet: {size: 1, total_items: 2}\nprompt: {template: hi}\nvalidations:\n  - type: file_exists\n    path: \"{workspace}/{sheetnum}.txt\"\n",
    );
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("[V214]"), "{text}");
    assert!(
        text.contains("Validation rule 1 path uses unknown placeholder '{sheetnum}'"),
        "{text}"
    );
    assert!(text.contains("Did you mean {sheet_num}?"), "{text}");
}

/// V215 (ours): a condition Mozart cannot read counts as true for every sheet; validate warns,
/// naming the rule and the unknown variable with its closest match.
#[test]
fn an_unreadable_condition_is_a_warning_naming_the_variable() {
    let env = TestEnv::new();
    let path = env.write_score(
        "typo-condition.yaml",
        "name: typo-condition\nworkspace: ./ws\nsheet: {size: 1, total_items: 2}\nprompt: {template: hi}\nvalidations:\n  - type: file_exists\n    path: \"{workspace}/a.txt\"\n    condition: \"sheet_nmu == 1\"\n  - type: file_exists\n    path: \"{workspace}/b.txt\"\n    condition: \"movement = 1 or movement == 2\"\n",
    );
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Validation rule 1 condition names unknown variable 'sheet_nmu'"),
        "{text}"
    );
    assert!(text.contains("Did you mean sheet_num?"), "{text}");
    assert!(
        text.contains(
            "Validation rule 2 condition part 'movement = 1 or movement == 2' cannot be read"
        ),
        "{text}"
    );
}

/// A chained score that is not there is said at validate (V216, a warning), not hours later
/// when the job has run to its end and the chain fails; a chained score found beside the
/// score, or named with a placeholder only known at the job's end, is not warned about.
#[test]
fn a_missing_chained_score_is_warned_about_at_validate() {
    let env = TestEnv::new();
    let score = |name: &str, job_path: &str| {
        format!(
            "name: {name}\nworkspace: ./ws-{name}\ninstrument: shell\nsheet:\n  size: 1\n  total_items: 1\nprompt:\n  template: \"RUN: true\"\non_success:\n  - type: run_job\n    job_path: \"{job_path}\"\n"
        )
    };
    let path = env.write_score("chain.yaml", &score("chain", "next-typo.yaml"));
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = stdout(&out);
    // A warning: the score stays valid.
    assert_eq!(out.status.code(), Some(0), "{text}");
    let beside = env.work.join("next-typo.yaml");
    assert!(
        text.contains("[V216]")
            && text.contains(&format!(
                "Score chained by on_success hook 1 not found: {}",
                beside.display()
            )),
        "{text}"
    );
    let json = env.mozart(&["validate", "--json", path.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let v216: Vec<_> = doc["issues"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["check_id"] == "V216")
        .collect();
    assert_eq!(v216.len(), 1, "{doc}");
    assert_eq!(v216[0]["severity"], "warning", "{doc}");

    // Found beside the score, or known only at the job's end: nothing said.
    std::fs::write(env.work.join("next.yaml"), score("next", "chain.yaml")).unwrap();
    for (name, job_path) in [("found", "next.yaml"), ("later", "{workspace}/next.yaml")] {
        let path = env.write_score(&format!("{name}.yaml"), &score(name, job_path));
        let out = env.mozart(&["validate", path.to_str().unwrap()]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{name}: {text}");
        assert!(!text.contains("V216"), "{name}: {text}");
    }
}

/// The preview shows each sheet's validations as the run applies them: `{movement}`,
/// `{voice}`, `{voice_count}` and `{total_movements}` expanded, and a condition on
/// `movement` or `voice` marking the sheets it leaves out (upstream's preview knew only the
/// old names: it printed `{voice}` as written and showed such a rule applying everywhere).
#[test]
fn the_preview_expands_movement_and_voice_and_applies_their_conditions() {
    let env = TestEnv::new();
    let path = env.write_score(
        "voices.yaml",
        "name: voices\nworkspace: ./ws\ninstrument: shell\nsheet: {size: 1, total_items: 2, fan_out: {2: 2}}\nprompt: {template: \"RUN: true\"}\nvalidations:\n  - type: file_modified\n    path: \"{workspace}/m{movement}-v{voice}-of{voice_count}-{total_movements}.md\"\n  - type: file_modified\n    path: \"{workspace}/review.md\"\n    condition: \"movement >= 2 and voice == 2\"\n",
    );
    let out = env.mozart(&["validate", "-v", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let ws = env.work.join("ws");
    let ws = ws.display();
    let for_sheet = |n: u32| -> String {
        let start = format!("Validations (expanded for sheet {n}):");
        let from = text
            .find(&start)
            .unwrap_or_else(|| panic!("{start} in {text}"));
        text[from..]
            .lines()
            .skip(1)
            .take(2)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let sheet1 = for_sheet(1);
    assert!(sheet1.contains(&format!("{ws}/m1-v1-of1-2.md")), "{sheet1}");
    assert!(
        sheet1.contains("(not applicable: movement >= 2 and voice == 2)"),
        "{sheet1}"
    );
    let sheet3 = for_sheet(3);
    assert!(sheet3.contains(&format!("{ws}/m2-v2-of2-2.md")), "{sheet3}");
    assert!(!sheet3.contains("not applicable"), "{sheet3}");
}

/// A field missing deep inside `sheet` (a prelude item's `as`) is named, and the hint does
/// not send the user to `total_items` and `size`, which the score has.
#[test]
fn a_missing_field_inside_sheet_gets_no_hint_about_total_items_and_size() {
    let env = TestEnv::new();
    let path = env.write_score(
        "prelude-as.yaml",
        "name: prelude-as\nworkspace: ./ws\ninstrument: shell\nsheet:\n  size: 1\n  total_items: 1\n  prelude: [{file: notes.md}]\nprompt: {template: \"RUN: true\"}\n",
    );
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("sheet.prelude.0.as"), "{text}");
    assert!(text.contains("Field required"), "{text}");
    assert!(!text.contains("total_items and size"), "{text}");

    // A missing size is still pointed at.
    let path = env.write_score(
        "no-size.yaml",
        "name: no-size\nworkspace: ./ws\ninstrument: shell\nsheet: {total_items: 1}\nprompt: {template: \"RUN: true\"}\n",
    );
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("Give the 'sheet' section both total_items and size."),
        "{text}"
    );
}

/// The variables the guide lists for templates (docs/scores.md "Prompt templates") are not
/// "undefined" to V101: `injected_context`, `injected_skills`, `injected_tools` (the prelude
/// and cadenza files) and `skipped_upstream` render at run time (upstream's V101 flagged them).
#[test]
fn v101_knows_the_injected_and_skipped_upstream_variables() {
    let env = TestEnv::new();
    let path = env.write_score(
        "injected.yaml",
        "name: injected\nworkspace: ./ws\ninstrument: shell\nsheet: {size: 1, total_items: 1}\nprompt:\n  template: \"RUN: true {{ injected_context }} {{ injected_skills }} {{ injected_tools }} {{ skipped_upstream }} {{ previous_outputs }}\"\nvalidations: [{type: file_modified, path: \"{workspace}/x\"}]\n",
    );
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("[V101]"), "{text}");
    assert!(!text.contains("Undefined variable"), "{text}");
}

/// A profile found only in `./.mozart/instruments/` is one the conductor does not read
/// (docs/instruments.md): validate says so, where it used to pass the score whose every
/// sheet then failed with `unknown instrument`.
#[test]
fn an_instrument_only_in_the_current_directorys_profiles_is_a_warning() {
    let env = TestEnv::new();
    let venue = env.work.join(".mozart/instruments");
    std::fs::create_dir_all(&venue).expect("venue dir");
    std::fs::write(
        venue.join("local-agent.yaml"),
        "name: local-agent\ndisplay_name: Local agent\nkind: cli\ncli:\n  command: {executable: sh}\n",
    )
    .expect("write profile");
    let path = env.write_score(
        "venue.yaml",
        "name: venue\nworkspace: ./ws\ninstrument: local-agent\nsheet: {size: 1, total_items: 1}\nprompt: {template: hi}\nvalidations: [{type: command_succeeds, command: \"true\"}]\n",
    );
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("[V213]"), "{text}");
    assert!(
        text.contains("'local-agent' is defined only in ./.mozart/instruments/"),
        "{text}"
    );
    assert!(text.contains("instruments/local-agent.yaml"), "{text}");
}

/// V213 looks through an `instruments:` alias as the conductor does (score.md §3.5 step 5):
/// the profile an alias plays is the one that must be found, where an alias used to pass
/// unchecked (and an alias named after a profile was checked as that profile). A fallback is
/// looked up by its own name (aliases are not followed), so a fallback naming an alias fails.
#[test]
fn v213_looks_through_instrument_aliases_as_the_conductor_does() {
    let env = TestEnv::new();
    let venue = env.work.join(".mozart/instruments");
    std::fs::create_dir_all(&venue).expect("venue dir");
    std::fs::write(
        venue.join("local-agent.yaml"),
        "name: local-agent\ndisplay_name: Local agent\nkind: cli\ncli:\n  command: {executable: sh}\n",
    )
    .expect("write profile");
    let profiles = env.home.join("instruments");
    std::fs::create_dir_all(&profiles).expect("profiles dir");
    std::fs::write(
        profiles.join("ghost.yaml"),
        "name: ghost\ndisplay_name: Ghost\nkind: cli\ncli:\n  command: {executable: mozart-no-such-program-alias}\n",
    )
    .expect("write profile");
    let path = env.write_score(
        "aliases.yaml",
        "name: aliases\nworkspace: ./ws\ninstrument: shell\n\
         instruments:\n  shell: {profile: ghost}\n  fast: {profile: local-agent}\n  quick: {profile: no-such-profile}\n\
         instrument_fallbacks: [fast]\n\
         movements:\n  2: {instrument: fast}\n\
         sheet: {size: 1, total_items: 3, per_sheet_instruments: {3: quick}}\n\
         prompt: {template: hi}\nvalidations: [{type: command_succeeds, command: \"true\"}]\n",
    );
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for expected in [
        "[V213] Instrument 'ghost' (through alias 'shell') runs `mozart-no-such-program-alias`",
        "mozart instruments check ghost",
        "[V213] Instrument 'local-agent' (through alias 'fast') is defined only in ./.mozart/instruments/",
        "[V213] Instrument alias 'quick' plays 'no-such-profile', which is not a known instrument",
        "[V213] Fallback instrument 'fast' is an instruments: alias",
        "Name the profile itself in the fallback list: 'local-agent'",
    ] {
        assert!(text.contains(expected), "{expected}\n{text}");
    }
    assert_eq!(text.matches("[V213]").count(), 4, "{text}");
    assert!(
        !text.contains("[V210]") && !text.contains("[V211]"),
        "{text}"
    );
}

/// A score playing an instrument whose profile file does not load (a typo'd field; a file
/// whose `name:` differs from its file name) gets V210 with the profile's own fault — the
/// conductor refuses it — where validate said PASSED without a word.
#[test]
fn v210_names_a_profile_that_does_not_load() {
    let env = TestEnv::new();
    let profiles = env.home.join("instruments");
    std::fs::create_dir_all(&profiles).expect("profiles dir");
    std::fs::write(
        profiles.join("stemx.yaml"),
        "name: innername\ndisplay_name: T\nkind: cli\ncli:\n  command:\n    executabel: okagent\n",
    )
    .expect("write profile");
    let path = env.write_score(
        "plays-broken.yaml",
        "name: plays-broken\nworkspace: ./ws\ninstrument: innername\n\
         sheet: {size: 1, total_items: 1}\nprompt: {template: hi}\n",
    );
    let out = env.mozart(&["validate", path.to_str().unwrap()]);
    let text = stdout(&out);
    assert!(
        text.contains("[V210]")
            && text.contains("'innername': its profile does not load")
            && text.contains("stemx.yaml: line 6")
            && text.contains("executabel"),
        "{text}"
    );
}
