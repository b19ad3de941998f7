//! Files Mozart writes or reads in a workspace another local user can write
//! (docs/security.md "Files"): what is there, or swapped in while a job runs — a symbolic
//! link, another user's directory, a FIFO — never has Mozart write through it, delete
//! through it, or wait on it.

use crate::harness;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use mozart_tests::{stdout, TestEnv};

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The sheet's `logs` directory is checked when its attempt starts; while the sheet runs, it
/// is swapped for a link to a directory whose `sheet-01.stdout.log` links to a file of the
/// owner's (what another user who can write the workspace can do). The owner's file keeps
/// its text and its mode, and the output goes to the directory that was checked.
#[test]
fn a_logs_directory_swapped_for_a_link_while_the_sheet_runs_gets_nothing_through_it() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("swap-ws");
    let victim = env.work.join("victim.conf");
    std::fs::write(&victim, "precious = true\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let w = ws.display();
    // The sheet says when it runs, waits for the swap, and prints after the log-free window
    // (a second), so its output goes to a log file.
    let yaml = format!(
        "name: swap\nworkspace: {w}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
         prompt:\n  template: \"RUN: touch {w}/started; while [ ! -e {w}/go ]; do sleep 0.1; done; \
         sleep 2; echo INSTRUMENT OUTPUT\"\n"
    );
    let score = env.write_score("swap", &yaml);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    harness::poll(&env, 60.0, "the sheet to start", || {
        ws.join("started").exists().then_some(())
    });
    std::fs::rename(ws.join("logs"), ws.join("logs.real")).unwrap();
    std::fs::create_dir(ws.join("evil")).unwrap();
    std::os::unix::fs::symlink(&victim, ws.join("evil/sheet-01.stdout.log")).unwrap();
    std::os::unix::fs::symlink(ws.join("evil"), ws.join("logs")).unwrap();
    std::fs::write(ws.join("go"), "").unwrap();
    env.wait_completed("swap");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious = true\n",
        "the sheet's output was written through the link"
    );
    assert_eq!(mode(&victim), 0o644, "the link's target was made private");
    let log = ws.join("logs.real/sheet-01.stdout.log");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    assert!(
        text.starts_with("INSTRUMENT OUTPUT\n"),
        "the output is not in the directory that was checked: {text:?}"
    );
    assert_eq!(mode(&log), 0o600);
}

/// The instrument leaves a FIFO where a `content_contains` validation reads: the check fails
/// at once, saying what is there, instead of waiting for a writer for ever (the job stayed
/// running, and the conductor could not stop).
#[test]
fn a_fifo_where_a_validation_reads_fails_the_check_instead_of_hanging() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: fifo\nworkspace: ./fifo-ws\ninstrument: shell\nretry: {max_retries: 0}\n\
                sheet: {size: 1, total_items: 1}\n\
                prompt: {template: \"RUN: mkfifo {{ workspace }}/result.txt\"}\n\
                validations:\n  - type: content_contains\n    path: \"{workspace}/result.txt\"\n    pattern: DONE\n";
    let score = env.write_score("fifo", yaml);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    let doc = harness::wait_terminal(&env, "fifo", 60.0);
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let out = env.mozart(&["errors", "fifo"]);
    let text = stdout(&out);
    assert!(
        text.contains("result.txt is not a regular file (a FIFO)"),
        "the reason is not given: {text}"
    );
    let out = env.mozart(&["stop"]);
    assert!(out.status.success(), "{}", stdout(&out));
}

/// A FIFO at `.iteration` with `archive_naming: iteration`: the fresh run archives under a
/// timestamp name and runs, and the conductor keeps answering (it froze, reading the FIFO).
#[test]
fn a_fifo_at_iteration_does_not_freeze_the_conductor() {
    let env = TestEnv::new();
    env.start_conductor();
    let yaml = "name: iter\nworkspace: ./iter-ws\ninstrument: shell\n\
                sheet: {size: 1, total_items: 1}\n\
                workspace_lifecycle: {archive_on_fresh: true, archive_naming: iteration}\n\
                prompt: {template: \"RUN: echo run > {{ workspace }}/out.txt\"}\n";
    let score = env.write_score("iter", yaml);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    env.wait_completed("iter");
    let ws = env.work.join("iter-ws");
    nix::unistd::mkfifo(
        &ws.join(".iteration"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let out = env.mozart(&["run", score.to_str().unwrap(), "--fresh"]);
    assert!(out.status.success(), "{}", stdout(&out));
    env.wait_completed("iter");
    let archives: Vec<String> = std::fs::read_dir(ws.join("archive"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        archives.len() == 1 && archives[0].starts_with("archive-"),
        "archived under {archives:?}"
    );
}

/// The text of an MCP reply.
fn mcp_text(reply: &serde_json::Value) -> String {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// MCP `run` with an inline score, in a directory holding a link named `<name>.yaml` to a
/// file of the owner's: refused, naming the link, and the link's target keeps its text
/// (it was overwritten with the score).
#[test]
fn an_inline_mcp_score_is_not_written_through_a_link() {
    let env = TestEnv::new();
    let dir = env.work.join("shared");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = env.work.join("victim.conf");
    std::fs::write(&victim, "precious = true\n").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("mcpjob.yaml")).unwrap();
    let score = mozart_tests::sleepy_shell_score("mcpjob", 1, 0.1);
    let replies = mozart_tests::web::mcp_calls(
        &env,
        &[
            serde_json::json!({"name": "run", "arguments": {"yaml": score, "directory": dir.to_str().unwrap()}}),
        ],
    );
    assert_eq!(replies[0]["result"]["isError"], true, "{}", replies[0]);
    let text = mcp_text(&replies[0]);
    assert!(
        text.contains(&format!(
            "{} is a symbolic link",
            dir.join("mcpjob.yaml").display()
        )),
        "the refusal does not name the link: {text}"
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious = true\n",
        "the score was written through the link"
    );
}

/// MCP `run` with an inline score in a directory another user made writable by everyone:
/// refused, naming the directory and its owner, and nothing is written there (the owner
/// could replace the score between its validation and the conductor reading it).
#[test]
fn an_inline_mcp_score_is_not_saved_in_another_users_directory() {
    let Some(intruder) = mozart_tests::users::intruder() else {
        return;
    };
    let env = TestEnv::new();
    std::fs::set_permissions(env.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&env.work, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let dir = env.work.join("theirs");
    let out = intruder
        .command("mkdir")
        .arg("-m")
        .arg("777")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
    let score = mozart_tests::sleepy_shell_score("mcpjob", 1, 0.1);
    let replies = mozart_tests::web::mcp_calls(
        &env,
        &[
            serde_json::json!({"name": "run", "arguments": {"yaml": score, "directory": dir.to_str().unwrap()}}),
        ],
    );
    assert_eq!(replies[0]["result"]["isError"], true, "{}", replies[0]);
    let text = mcp_text(&replies[0]);
    assert!(
        text.contains(&format!("{} belongs to mozart-intruder", dir.display())),
        "the refusal does not name the directory and its owner: {text}"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "written there");
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A nightly score archiving on fresh runs, keeping 3 archives, in `ws`.
fn nightly_score(env: &TestEnv, ws: &Path) -> std::path::PathBuf {
    let yaml = format!(
        "name: nightly\nworkspace: {}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
         workspace_lifecycle: {{archive_on_fresh: true, archive_dir: archive, max_archives: 3}}\n\
         prompt: {{template: \"RUN: echo new > {{{{ workspace }}}}/out.txt\"}}\n",
        ws.display()
    );
    env.write_score("nightly", &yaml)
}

/// The workspace's `archive` is a link to a directory of the owner's holding four
/// directories: `run --fresh` is refused, naming the link, and nothing is moved into the
/// link's target nor deleted from it (rotation deleted the owner's directories there).
#[test]
fn archiving_refuses_an_archive_directory_that_is_a_link() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("nightly-ws");
    let owned = env.work.join("owned");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("out.txt"), "old\n").unwrap();
    for i in 1..=4 {
        std::fs::create_dir_all(owned.join(format!("precious-{i}"))).unwrap();
        std::fs::write(owned.join(format!("precious-{i}/data")), "keep").unwrap();
    }
    std::os::unix::fs::symlink(&owned, ws.join("archive")).unwrap();
    let score = nightly_score(&env, &ws);
    let out = env.mozart(&["run", score.to_str().unwrap(), "--fresh"]);
    let text = stdout(&out);
    assert!(!out.status.success(), "the run was accepted: {text}");
    assert!(
        text.contains(&format!(
            "{} is a symbolic link",
            ws.join("archive").display()
        )),
        "the refusal does not name the link: {text}"
    );
    assert_eq!(
        names(&owned),
        ["precious-1", "precious-2", "precious-3", "precious-4"],
        "the link's target was changed"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("out.txt")).unwrap(),
        "old\n"
    );
}

/// Another user's `archive` directory in a workspace others can write (made by them):
/// `run --fresh` is refused, naming the directory and whose it is, and nothing is moved.
#[test]
fn archiving_refuses_another_users_archive_directory() {
    let Some(intruder) = mozart_tests::users::intruder() else {
        return;
    };
    let env = TestEnv::new();
    env.start_conductor();
    std::fs::set_permissions(env.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&env.work, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let theirs = env.work.join("theirs-ws");
    let script = format!("mkdir -m 777 {t} {t}/archive", t = theirs.display());
    let out = intruder
        .command("sh")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {}", stdout(&out));
    std::fs::write(theirs.join("out.txt"), "old\n").unwrap();
    let score = nightly_score(&env, &theirs);
    let out = env.mozart(&["run", score.to_str().unwrap(), "--fresh"]);
    let text = stdout(&out);
    assert!(!out.status.success(), "the run was accepted: {text}");
    let named = format!(
        "{} belongs to mozart-intruder",
        theirs.join("archive").display()
    );
    assert!(
        text.contains(&named),
        "the refusal does not say {named:?}: {text}"
    );
    assert_eq!(names(&theirs.join("archive")), Vec::<String>::new());
    assert_eq!(
        std::fs::read_to_string(theirs.join("out.txt")).unwrap(),
        "old\n"
    );
}

/// A concert's log is a FIFO, then a link to a file of the owner's (what another user who
/// can write the workspace can put there): the job completes each time, and nothing is
/// appended through the link (the log line was appended to the owner's file).
#[test]
fn a_concert_log_that_is_a_fifo_or_a_link_is_not_written() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("concert-ws");
    std::fs::create_dir_all(&ws).unwrap();
    let log = ws.join("concert.log");
    let victim = env.work.join("victim.conf");
    std::fs::write(&victim, "precious = true\n").unwrap();
    let yaml = format!(
        "name: concerted\nworkspace: {w}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
         prompt: {{template: \"RUN: true\"}}\n\
         on_success:\n  - type: run_command\n    command: \"true\"\n\
         concert:\n  enabled: true\n  concert_log_path: {l}\n",
        w = ws.display(),
        l = log.display()
    );
    let score = env.write_score("concerted", &yaml);
    nix::unistd::mkfifo(&log, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    let doc = harness::wait_terminal(&env, "concerted", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    std::fs::remove_file(&log).unwrap();
    std::os::unix::fs::symlink(&victim, &log).unwrap();
    let out = env.mozart(&["run", score.to_str().unwrap(), "--fresh"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let doc = harness::wait_terminal(&env, "concerted", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious = true\n",
        "the concert log was appended through the link"
    );
}

/// Everything a command printed, stdout and stderr.
fn printed(out: &std::process::Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

/// A shell score writing `out.txt` in `ws`.
fn writing_score(env: &TestEnv, name: &str, ws: &Path) -> std::path::PathBuf {
    let yaml = format!(
        "name: {name}\nworkspace: {}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
         prompt: {{template: \"RUN: echo written > {{{{ workspace }}}}/out.txt\"}}\n",
        ws.display()
    );
    env.write_score(name, &yaml)
}

/// The score's workspace is in a shared sticky directory (`/tmp/shared/ws`); after the score
/// was validated, another local user makes that path a symbolic link to a private directory
/// of the owner's (`~/.ssh`). `validate`, `run`, `run --workspace` and a raw `job.submit`
/// naming the link are refused, naming the link, its owner and its target and saying what
/// to do; nothing is written or made through the link (also one to a directory not there
/// yet), and the owner's directory is unchanged. The owner's own link in the same shared
/// directory, given instead, is followed: the job runs in its target.
#[test]
fn a_workspace_that_is_another_users_link_is_refused_and_nothing_goes_through_it() {
    let Some(intruder) = mozart_tests::users::intruder() else {
        return;
    };
    let env = TestEnv::new();
    env.start_conductor();
    std::fs::set_permissions(env.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&env.work, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let keys = env.root().join("victim-ssh");
    std::fs::create_dir(&keys).unwrap();
    std::fs::write(keys.join("authorized_keys"), "ssh-ed25519 AAAA mine\n").unwrap();
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o700)).unwrap();
    let shared = env.work.join("ws");
    let score = writing_score(&env, "shared", &shared);
    let score = score.to_str().unwrap();
    let out = env.mozart(&["validate", score]);
    assert!(out.status.success(), "{}", printed(&out));

    let plant = |target: &Path, link: &Path| {
        let out = intruder
            .command("ln")
            .arg("-s")
            .arg(target)
            .arg(link)
            .output()
            .unwrap();
        assert!(out.status.success(), "ln -s: {}", printed(&out));
    };
    plant(&keys, &shared);
    let named = format!(
        "{} is a symbolic link of mozart-intruder (uid {}), to {}",
        shared.display(),
        intruder.uid,
        keys.display()
    );
    let check = |what: &str, out: &std::process::Output| {
        let text = printed(out);
        assert!(!out.status.success(), "{what} was accepted: {text}");
        assert!(
            text.contains(&named),
            "{what}: the refusal does not say {named:?}: {text}"
        );
        assert!(
            text.contains("Give the real path, not the link")
                && text.contains("or use a path of your own"),
            "{what}: the refusal does not say what to do: {text}"
        );
    };
    check("validate", &env.mozart(&["validate", score]));
    check("run", &env.mozart(&["run", score]));
    let own_ws = env.work.join("mine");
    let own = writing_score(&env, "own", &own_ws);
    let own = own.to_str().unwrap();
    let link = shared.to_str().unwrap();
    check(
        "run --workspace",
        &env.mozart(&["run", own, "--workspace", link]),
    );
    // A client (or a link planted after the submitter looked) hands the conductor the
    // link as the workspace.
    let resp = env.raw_call(
        "job.submit",
        serde_json::json!({"config_path": own, "workspace": link, "fresh": false}),
    );
    assert_eq!(resp["result"]["status"], "rejected", "{resp}");
    let message = resp["result"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&named), "job.submit: {message}");

    // A link to a directory of the owner's not there yet: nothing is made through it.
    let planted = keys.join("planted");
    let dangling = env.work.join("ws-new");
    plant(&planted, &dangling);
    let out = env.mozart(&["run", own, "--workspace", dangling.to_str().unwrap()]);
    assert!(!out.status.success(), "accepted: {}", printed(&out));
    assert!(
        printed(&out).contains(&format!(
            "{} is a symbolic link of mozart-intruder",
            dangling.display()
        )),
        "{}",
        printed(&out)
    );

    assert_eq!(
        names(&keys),
        ["authorized_keys"],
        "written through the link"
    );
    assert_eq!(
        std::fs::read_to_string(keys.join("authorized_keys")).unwrap(),
        "ssh-ed25519 AAAA mine\n"
    );
    assert_eq!(mode(&keys), 0o700);
    assert_eq!(std::fs::read_link(&shared).unwrap(), keys);

    // The owner's own link in the same shared directory leads where they chose.
    let real = env.root().join("real-ws");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, &own_ws).unwrap();
    let out = env.mozart(&["run", own]);
    assert!(out.status.success(), "{}", printed(&out));
    env.wait_completed("own");
    assert_eq!(
        std::fs::read_to_string(real.join("out.txt")).unwrap(),
        "written\n"
    );
}
