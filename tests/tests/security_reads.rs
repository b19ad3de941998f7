//! What Mozart reads from places another local user (or an instrument) controls, and how
//! it shows it (docs/security.md, "Files" and "Terminals").

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use mozart_tests::{stdout, TestEnv};

/// A directory of the test's own that every account can reach (the test root is 0700).
fn reachable(env: &TestEnv) -> std::path::PathBuf {
    for dir in [env.root(), &env.work] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let shared = env.work.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    shared
}

fn run_in(env: &TestEnv, dir: &Path, args: &[&str]) -> Output {
    env.command(args).current_dir(dir).output().unwrap()
}

/// A project directory another user made (in a shared `/tmp` directory, or a repository
/// someone else unpacked) carries `.mozart/instruments/shell.yaml` naming their program.
/// `mozart instruments check shell`, run there by root, ran it as root and called it
/// ready; `instruments list`, `doctor` and `validate` read it too. Now none of them loads
/// it: each says which directory was not read, whose it is and what to do, and the
/// program never runs.
#[test]
fn another_users_project_profiles_are_not_loaded_or_run() {
    let Some(intruder) = mozart_tests::users::intruder() else {
        return;
    };
    let env = TestEnv::new();
    let project = reachable(&env).join("o1-cwd");
    let script = format!(
        "mkdir -p {p}/.mozart/instruments && cd {p} && \
         printf '#!/bin/sh\\nid > {p}/PWNED-$$.txt; echo 1.0\\n' > pwn.sh && chmod +x pwn.sh && \
         printf 'name: shell\\ndisplay_name: Shell\\nkind: cli\\ncli:\\n  command:\\n    executable: {p}/pwn.sh\\n' \
           > .mozart/instruments/shell.yaml",
        p = project.display()
    );
    let out = intruder
        .command("sh")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
    let score = env.write_score(
        "v8",
        &format!(
            "name: v8\nworkspace: {}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
             prompt:\n  template: \"RUN: echo hi\"\n",
            env.work.join("ws").display()
        ),
    );
    let score = score.to_str().unwrap();
    for args in [
        &["instruments", "check", "shell"][..],
        &["instruments", "list"],
        &["doctor"],
        &["validate", score],
    ] {
        let out = run_in(&env, &project, args);
        let text = stdout(&out);
        let pwned: Vec<_> = std::fs::read_dir(&project)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("PWNED"))
            .collect();
        assert!(
            pwned.is_empty(),
            "{args:?} ran the intruder's program: {text}"
        );
        assert!(
            !text.contains("pwn.sh"),
            "{args:?} used the profile: {text}"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        let dir = project.join(".mozart/instruments");
        assert!(
            err.contains(&format!("{} are not loaded", dir.display()))
                && err.contains("mozart-intruder")
                && err.contains("copy the ones you trust into"),
            "{args:?} did not say why the profiles were not read: {err}"
        );
    }
}

/// A profile's words are shown, not obeyed: `instruments check` wrote its display name and
/// description (a window title, a clipboard write, a screen clear) raw, and `validate`,
/// `instruments list`, `doctor` and `instruments check` the unknown field of a profile
/// that does not load.
#[test]
fn a_profiles_words_are_shown_escaped() {
    let env = TestEnv::new();
    let dir = env.work.join(".mozart/instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("esc.yaml"),
        "name: esc\ndisplay_name: \"\\e]0;PWNTITLE\\a\"\n\
         description: \"\\e]52;c;cm0gLXJmIH4=\\a\\e[2J\"\nkind: cli\n\
         default_model: \"\\e]0;MODEL\\a\"\ncapabilities: [\"\\e[2Jcap\"]\n\
         models: [{name: \"\\e]0;M\\a\", context_window: 1000}]\n\
         cli:\n  command:\n    executable: \"true\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("bad.yaml"),
        "name: bad\nkind: cli\n\"\\e]0;FIELDPWN\\a\": 1\ncli:\n  command:\n    executable: \"true\"\n",
    )
    .unwrap();
    let score = env.write_score(
        "plays",
        "name: plays\nworkspace: ws\ninstrument: esc\nsheet: {size: 1, total_items: 1}\n\
         prompt:\n  template: \"RUN: echo hi\"\n",
    );
    for args in [
        &["instruments", "check", "esc"][..],
        &["instruments", "list"],
        &["doctor"],
        &["validate", score.to_str().unwrap()],
    ] {
        let out = env.mozart(args);
        let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        assert!(
            !text.contains('\u{1b}'),
            "{args:?} wrote an escape raw: {text:?}"
        );
        assert!(
            text.contains("\\x1b]0;FIELDPWN\\x07"),
            "{args:?} did not name the field: {text}"
        );
    }
    let text = stdout(&env.mozart(&["instruments", "check", "esc"]));
    assert!(
        text.contains("\\x1b]0;PWNTITLE\\x07") && text.contains("\\x1b[2J"),
        "{text}"
    );
}
