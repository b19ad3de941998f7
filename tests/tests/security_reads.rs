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

/// Output of `cmd`, which must end within a generous minute (a reader that waits on a FIFO
/// never does): killed and failed otherwise.
fn ends(mut cmd: std::process::Command, what: &str) -> Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..600 {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("{what} did not end: it waits on the FIFO in the log's place");
}

/// In a workspace another user can write, they replace `logs` with a link to a directory
/// of theirs holding `sheet-01.stdout.log` = "FAKE: all tests passed", and put
/// `hooks/leak.log`, a link to a file only root can read. `mozart logs --sheet 1` showed the
/// fake line as the sheet's output and `diagnose --include-logs` inlined both (the secret
/// into a report made for sharing). Now neither is read: each says the file is not shown
/// and why, and `logs` shows the output the registry kept. A FIFO in a log's place (an
/// instrument can make one) hung `mozart logs`; now it is refused at once.
#[test]
fn workspace_logs_are_not_read_through_links_fifos_or_others_files() {
    let Some(intruder) = mozart_tests::users::intruder() else {
        return;
    };
    let env = TestEnv::new();
    env.start_conductor();
    let ws = reachable(&env).join("race");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    let secret = env.work.join("secret.txt");
    std::fs::write(&secret, "root-only-secret-value\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let score = env.write_score(
        "race",
        &format!(
            "name: race\nworkspace: {}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
             prompt:\n  template: \"RUN: echo real-output\"\n",
            ws.display()
        ),
    );
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    env.wait_completed("race");
    let out = intruder
        .command("sh")
        .arg("-c")
        .arg(format!(
            "cd {ws} && mv logs old && mkdir fake hooks && \
             echo 'FAKE: all tests passed' > fake/sheet-01.stdout.log && ln -s fake logs && \
             ln -s {secret} hooks/leak.log",
            ws = ws.display(),
            secret = secret.display()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ends(env.command(&["logs", "race", "--sheet", "1"]), "logs");
    let text = stdout(&out);
    assert!(!text.contains("FAKE"), "the fake log was shown: {text}");
    assert!(
        text.contains("real-output")
            && text.contains("sheet-01.stdout.log is not shown")
            && text.contains("symbolic link"),
        "{text}"
    );
    let out = ends(
        env.command(&["diagnose", "race", "--include-logs"]),
        "diagnose",
    );
    let text = stdout(&out);
    assert!(
        !text.contains("root-only-secret-value") && !text.contains("FAKE"),
        "diagnose inlined what it should not: {text}"
    );
    assert!(
        text.contains("leak.log is not shown") && text.contains("mozart-intruder"),
        "{text}"
    );
    // A FIFO in the place of a log of the owner's own workspace.
    let own = env.work.join("own");
    let score = env.write_score(
        "own",
        &format!(
            "name: own\nworkspace: {}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
             prompt:\n  template: \"RUN: echo own-output\"\n",
            own.display()
        ),
    );
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    env.wait_completed("own");
    let fifo = own.join("logs/sheet-01.stdout.log");
    let _ = std::fs::remove_file(&fifo);
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let out = ends(env.command(&["logs", "own", "--sheet", "1"]), "logs");
    let text = stdout(&out);
    assert!(
        text.contains("own-output") && text.contains("not a regular file"),
        "{text}"
    );
    let out = ends(
        env.command(&["diagnose", "own", "--include-logs"]),
        "diagnose",
    );
    assert!(
        stdout(&out).contains("not a regular file"),
        "{}",
        stdout(&out)
    );
}

/// A sheet runs `sleep` under a name holding a window-title escape and a screen clear:
/// `mozart top` wrote them raw from the process's command line. Now they are written out.
#[test]
fn top_shows_an_instruments_process_names_escaped() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let env = TestEnv::new();
    env.start_conductor();
    let name = r#""$(printf 'x\033]0;PWNTITLE\007\033[2J')""#;
    let score = env.write_score(
        "topesc",
        &format!(
            "name: topesc\nworkspace: {}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
             prompt:\n  template: |\n    RUN: ln -sf /bin/sleep {name}; ./{name} 30\n",
            env.work.join("topesc-ws").display()
        ),
    );
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    let mut child = env
        .command(&["top", "-i", "0.2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let reader = BufReader::new(child.stdout.take().unwrap());
    // Frames every 0.2 s: the process shows within the first thousands of lines.
    let line = reader
        .lines()
        .take(20_000)
        .map_while(Result::ok)
        // The sleep's own line, not its shell's (whose command line spells the printf).
        .find(|l| l.contains("PWNTITLE") && !l.contains("printf"));
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = env.mozart(&["cancel", "topesc"]);
    let line = line.expect("the sheet's process never showed in mozart top");
    assert!(
        !line.contains('\u{1b}'),
        "top wrote an escape raw: {line:?}"
    );
    assert!(line.contains("\\x1b]0;PWNTITLE\\x07"), "{line}");
}

/// A score's key `"\e]0;SCOREPWN\a"` and `instrument: "\e]0;INSTPWN\a"`: `validate`,
/// `run -n` and `run` printed `Unknown field '<ESC>]0;SCOREPWN<BEL>'` and the instrument raw
/// (retitling the terminal). Now both are written out.
#[test]
fn a_scores_unknown_keys_and_instrument_are_shown_escaped() {
    let env = TestEnv::new();
    env.start_conductor();
    let field = env.write_score(
        "field",
        "name: field\n\"\\e]0;SCOREPWN\\a\": 1\nworkspace: ws\ninstrument: shell\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: \"hi\"\n",
    );
    let inst = env.write_score(
        "inst",
        "name: inst\nworkspace: ws\ninstrument: \"\\e]0;INSTPWN\\a\"\n\
         sheet: {size: 1, total_items: 1}\nprompt:\n  template: \"hi\"\n",
    );
    for (score, marker) in [(&field, "SCOREPWN"), (&inst, "INSTPWN")] {
        for args in [&["validate"][..], &["run", "-n"], &["run"]] {
            let mut args = args.to_vec();
            args.push(score.to_str().unwrap());
            let out = env.mozart(&args);
            let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
            assert!(
                !text.contains('\u{1b}') && !text.contains('\u{7}'),
                "{args:?} wrote an escape raw: {text:?}"
            );
            assert!(
                text.contains(&format!("\\x1b]0;{marker}\\x07")),
                "{args:?} did not name it: {text}"
            );
        }
    }
}

/// A `./.mozart/instruments/shell.yaml` that does not load: `validate` said the instrument
/// was unknown, that the conductor refuses the score until the profile loads, and to restart
/// it so that it reads the file — but `run` completed with the built-in `shell`, and the
/// conductor never reads that directory. Now validate says the built-in plays, and what to
/// do to play one's own; the job runs on the built-in, as said.
#[test]
fn a_broken_project_profile_shadowing_a_built_in_is_said_truly() {
    let env = TestEnv::new();
    env.start_conductor();
    let dir = env.work.join(".mozart/instruments");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("shell.yaml"),
        "name: shell\nkind: cli\nbogus: 1\ncli:\n  command:\n    executable: sh\n",
    )
    .unwrap();
    let score = env.write_score(
        "v8",
        "name: v8\nworkspace: ws\ninstrument: shell\nsheet: {size: 1, total_items: 1}\n\
         prompt:\n  template: \"RUN: echo hi\"\n",
    );
    let out = env.mozart(&["validate", score.to_str().unwrap()]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(
        !text.contains("Unknown score-level instrument")
            && !text.contains("refuses a score playing")
            && !text.contains("so the conductor reads it"),
        "{text}"
    );
    assert!(
        text.contains("Instrument 'shell' plays the built-in 'shell'")
            && text.contains("the conductor does not read ./.mozart/instruments/"),
        "{text}"
    );
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    env.wait_completed("v8");
}
