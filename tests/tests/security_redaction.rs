//! Credentials an instrument prints (an `sk-ant-…` API key, a GitHub token, a URL with a
//! password) never reach the registry — attempt history, sheet error messages, output
//! tails — nor `mozart status` (human and `--json`) nor the conductor log
//! (execution.md §9.13 credential redaction).

use crate::support;

use mozart_tests::{stdout, TestEnv};
use support::*;

const ANTHROPIC: &str = "sk-ant-api03-Zx9QwErTyUiOpAsDfGhJkLzXcVbNm1234567890abcdefGHIJ-_kl";
const GITHUB: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789AB";
const URL_PASSWORD: &str = "hunter2secretpw";

fn secrets() -> [&'static str; 3] {
    [ANTHROPIC, GITHUB, URL_PASSWORD]
}

/// The secret as a shell word that prints it, without the secret appearing literally in
/// the score (the score text is stored as the job's config snapshot, and these tests are
/// about what the *instrument* prints).
fn split(secret: &str) -> String {
    let (a, b) = secret.split_at(secret.len() / 2);
    format!("{a}\"\"{b}")
}

/// Every (table, column, row excerpt) of the registry whose text holds `needle`.
fn registry_hits(db: &std::path::Path, needle: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut hits = Vec::new();
    for table in tables {
        let mut stmt = conn.prepare(&format!("SELECT * FROM \"{table}\"")).unwrap();
        let names: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            for (i, name) in names.iter().enumerate() {
                let text = match row.get_ref(i).unwrap() {
                    rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                        String::from_utf8_lossy(t).into_owned()
                    }
                    _ => continue,
                };
                if text.contains(needle) {
                    hits.push(format!("{table}.{name}"));
                }
            }
        }
    }
    hits
}

/// Raw bytes of the registry files (main DB and WAL): nothing may be written there even
/// transiently, since freed pages keep old text.
fn raw_hits(home: &std::path::Path, needle: &str) -> Vec<String> {
    ["registry.db", "registry.db-wal"]
        .iter()
        .filter(|f| {
            std::fs::read(home.join(f))
                .map(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
                .unwrap_or(false)
        })
        .map(|f| f.to_string())
        .collect()
}

#[test]
fn credentials_printed_by_an_instrument_are_redacted_everywhere() {
    let env = TestEnv::new();
    let ws = env.work.join("leaky-ws");
    let yaml = format!(
        r#"name: leaky
workspace: {ws}
instrument: shell
pause_between_sheets_seconds: 0
retry:
  max_retries: 1
  base_delay_seconds: 0.1
  jitter: false
sheet:
  size: 1
  total_items: 2
prompt:
  template: |
    RUN: echo "using key {a} and {g}"
    RUN: echo "fetching https://deploy:{u}@example.com/repo.git" >&2
    RUN: echo "error: auth failed for {a}" >&2
    {{% if sheet_num == 1 %}}RUN: exit 3{{% endif %}}
    RUN: touch "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
  - type: command_succeeds
    command: 'echo "validator saw {a}"; echo "{g}" >&2; test -f out-{{sheet_num}}.txt'
"#,
        ws = ws.display(),
        a = split(ANTHROPIC),
        g = split(GITHUB),
        u = split(URL_PASSWORD),
    );
    let score = env.write_score("leaky", &yaml);
    for secret in secrets() {
        assert!(
            !yaml.contains(secret),
            "the score itself must not hold {secret}"
        );
    }
    env.start_conductor();
    assert_eq!(submit(&env, &score)["status"], "accepted");
    let doc = wait_all_terminal(&env, &["leaky".to_string()], 60).remove(0);
    // Sheet 1 failed (its error text held the key), sheet 2 passed (its output did).
    assert_eq!(sheet(&doc, 1)["status"], "failed", "{doc:#}");

    let human = env.mozart(&["status", "leaky"]);
    let json = env.mozart(&["status", "leaky", "--json"]);
    let errors = env.mozart(&["errors", "leaky"]);
    let db = env.home.join("registry.db");
    let mut leaks = Vec::new();
    for secret in secrets() {
        for hit in registry_hits(&db, secret) {
            leaks.push(format!("registry {hit}: {secret}"));
        }
        for file in raw_hits(&env.home, secret) {
            leaks.push(format!("raw bytes of {file}: {secret}"));
        }
        for (what, out) in [
            ("status", &human),
            ("status --json", &json),
            ("errors", &errors),
        ] {
            let text = format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr));
            if text.contains(secret) {
                leaks.push(format!("mozart {what}: {secret}"));
            }
        }
        if env.log().contains(secret) {
            leaks.push(format!("conductor log: {secret}"));
        }
    }
    assert!(leaks.is_empty(), "credentials leaked: {leaks:#?}");
    // Redaction replaced the secret, it did not drop the whole message.
    let all_text = format!("{}{}", stdout(&json), stdout(&errors));
    assert!(
        registry_hits(&db, "[REDACTED_ANTHROPIC_KEY]").len()
            + usize::from(all_text.contains("[REDACTED_ANTHROPIC_KEY]"))
            > 0,
        "no redaction marker anywhere: the failure text was lost\n{}",
        stdout(&json)
    );
}

/// An instrument's output is shown to the terminal, never obeyed: the window-title (OSC 0)
/// and clipboard (OSC 52) sequences, a screen clear and a carriage return it prints come out
/// of `logs --sheet`, `errors`, `status`, `diagnose` and `history` written out as `\x1b…`,
/// `\x0d` — while Mozart's own colours still work.
#[test]
fn escape_sequences_an_instrument_prints_are_shown_not_obeyed() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: esc\nworkspace: ./esc-ws\ninstrument: shell\n\
                retry: {max_retries: 1}\nsheet: {size: 1, total_items: 1}\nprompt:\n  template: |\n    \
                RUN: printf 'before\\033]0;PWNED-TITLE\\007\\033[2J\\033]52;c;cm0gLXJmIH4K\\007\\rFAKE: all good\\n'; \
                printf 'err\\033]0;PWNED-TITLE\\007\\n' >&2; exit 1\n";
    let path = env.write_score("esc", yaml);
    let out = env.mozart(&["run", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert_eq!(env.mozart(&["wait", "esc"]).status.code(), Some(1));
    for args in [
        vec!["logs", "esc", "--sheet", "1"],
        vec!["errors", "esc", "-V"],
        vec!["status", "esc"],
        vec!["diagnose", "esc"],
        vec!["history", "esc"],
        vec!["logs", "esc"],
    ] {
        let out = env.mozart(&args);
        let text = stdout(&out);
        for raw in ["\u{1b}]", "\u{1b}[2J", "\u{7}", "\r"] {
            assert!(
                !text.contains(raw),
                "mozart {args:?} passed {raw:?} through:\n{}",
                text.escape_debug()
            );
        }
    }
    let text = stdout(&env.mozart(&["logs", "esc", "--sheet", "1"]));
    assert!(
        text.contains("\\x1b]0;PWNED-TITLE\\x07"),
        "{}",
        text.escape_debug()
    );
    assert!(
        text.contains("\\x0dFAKE: all good"),
        "{}",
        text.escape_debug()
    );
}

/// The two commands people run most say why a sheet failed with what its instrument
/// printed: `mozart run` (its early-failure report) and `mozart wait` showed it raw — a
/// clipboard write (OSC 52), a DCS, a conceal that hid everything after it. Written out
/// now; so is a score's own name in `validate` and `run -n`.
#[test]
fn run_wait_and_validate_show_escapes_not_obey_them() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: esc3\nworkspace: ./esc3-ws\ninstrument: shell\n\
                sheet: {size: 1, total_items: 1}\nprompt:\n  template: |\n    \
                RUN: printf 'err \\033]52;c;cGF5bG9hZA==\\007 \\033P+q\\033\\\\ \\033[8mhidden\\n' >&2; exit 3\n";
    let path = env.write_score("esc3", yaml);
    let run = env.mozart(&["run", path.to_str().unwrap()]);
    let waited = env.mozart(&["wait", "esc3"]);
    assert_eq!(waited.status.code(), Some(1), "{}", stdout(&waited));
    for (what, out) in [("run", &run), ("wait", &waited)] {
        let text = stdout(out);
        assert!(
            text.contains("err "),
            "{what} says why: {}",
            text.escape_debug()
        );
        for raw in ["\u{1b}]", "\u{1b}P", "\u{1b}[8m", "\u{7}"] {
            assert!(
                !text.contains(raw),
                "mozart {what} passed {raw:?} through:\n{}",
                text.escape_debug()
            );
        }
    }
    assert!(
        stdout(&waited).contains("\\x1b]52;c;"),
        "{}",
        stdout(&waited).escape_debug()
    );
    let named = env.write_score(
        "named",
        "name: \"named\\e]0;PWNED\\a\"\ndescription: \"d \\e[2J\"\nworkspace: ./named-ws\ninstrument: shell\nsheet: {size: 1, total_items: 1}\nprompt:\n  template: \"RUN: true\"\n",
    );
    for args in [vec!["validate"], vec!["run", "-n"]] {
        let mut args = args.clone();
        args.insert(1, named.to_str().unwrap());
        let out = env.mozart(&args);
        let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        assert!(
            text.contains("named\\x1b]0;PWNED"),
            "{args:?}: {}",
            text.escape_debug()
        );
        assert!(
            !text.contains('\u{1b}'),
            "{args:?}: {}",
            text.escape_debug()
        );
    }
}
