//! Which conductor a command talks to: a socket named that the home's conductor does not
//! listen on is said at once (where it listens, how to reach it) by every command alike, and
//! under `--conductor-clone` every command the CLI suggests names the clone.

use mozart_tests::{alive, sleepy_shell_score, stdout, TestEnv};

use crate::harness::poll;

/// All a command printed, stdout then stderr.
fn text(out: &std::process::Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

/// `mozart start` listens on the home's socket; `$MOZART_SOCKET` (or `--socket`) naming
/// another one where nothing listens: `start` no longer says "already running" with the
/// named socket and waits 30 s for nothing, `status` no longer says "not running" while
/// `conductor-status` says "running", and `stop` with the variable no longer stops the
/// conductor it was not pointed at while `stop --socket` said "not running". Each says at
/// once that the home's conductor runs, on which socket, and how to reach it; nothing is
/// stopped; `restart` moves the conductor to the named socket.
#[test]
fn a_socket_the_running_conductor_does_not_listen_on_is_said_by_every_command() {
    let env = TestEnv::new();
    env.start_conductor();
    let pid = env.conductor_pid().expect("PID file");
    let real = env.socket.display().to_string();
    let other = env.root().join("other.sock");
    let other_text = other.display().to_string();
    let score = env.write_score("e1.yaml", &sleepy_shell_score("e1", 1, 0.1));
    let score = score.to_str().unwrap();
    let with_env = |args: &[&str]| env.command(args).env("MOZART_SOCKET", &other).output();
    for args in [
        vec!["start"],
        vec!["status"],
        vec!["conductor-status"],
        vec!["list"],
        vec!["run", score],
        vec!["stop", "--yes"],
    ] {
        let out = with_env(&args).unwrap();
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {said}");
        assert!(
            said.contains(&format!(
                "(PID {pid}) runs, listening on {real}, not on {other_text}"
            )),
            "{args:?}: {said}"
        );
        assert!(
            said.contains(&format!("export MOZART_SOCKET={real}")),
            "{args:?}: {said}"
        );
        assert!(!said.contains("did not become ready"), "{args:?}: {said}");
        assert!(alive(pid), "{args:?} stopped the conductor");
    }
    let out = with_env(&["doctor"]).unwrap();
    assert!(
        text(&out).contains(&format!("listening on {real}, not on {other_text}")),
        "{}",
        text(&out)
    );
    // `--socket` says the same as the variable.
    for args in [
        vec!["stop", "--socket", &other_text, "--yes"],
        vec!["conductor-status", "--socket", &other_text],
    ] {
        let out = env.mozart(&args);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {said}");
        assert!(
            said.contains(&format!("listening on {real}, not on {other_text}"))
                && said.contains(&format!("--socket {real}")),
            "{args:?}: {said}"
        );
        assert!(alive(pid), "{args:?} stopped the conductor");
    }
    // The job was never submitted.
    assert!(!stdout(&env.mozart(&["list", "--all"])).contains("e1"));

    // `restart` with the other socket stops the conductor where it listens and starts the
    // new one on the named socket.
    let out = with_env(&["restart", "--yes"]).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}\n{}", text(&out), env.log());
    let out = with_env(&["conductor-status"]).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stdout(&out).contains(&format!("Socket: {other_text}")),
        "{}",
        stdout(&out)
    );
    assert!(!alive(pid), "the old conductor still runs");
    let out = with_env(&["stop", "--yes"]).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// Under `--conductor-clone=NAME` the hints named production's commands: `run`'s "Monitor
/// with: mozart status …", `stop`'s "Go ahead anyway: mozart stop --yes" (which stops
/// production), pause's "To resume: mozart resume …", and `status` said "Mozart conductor
/// is not running. Start it with: mozart start" of a stopped clone while production ran.
/// Each now names the clone.
#[test]
fn every_suggested_command_names_the_clone() {
    let env = TestEnv::new();
    env.start_conductor();
    let prod = env.conductor_pid().expect("PID file");
    let clone = "--conductor-clone=h1";
    let out = env.mozart(&[clone, "start"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let score = env.write_score("c1.yaml", &sleepy_shell_score("c1", 2, 60.0));
    let out = env.mozart(&["-q", clone, "run", score.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stdout(&out).contains("Monitor with: mozart --conductor-clone=h1 status c1 --watch"),
        "{}",
        stdout(&out)
    );
    poll(&env, 60.0, "c1 running on the clone", || {
        stdout(&env.mozart(&[clone, "status", "c1", "--json"]))
            .contains("\"running\"")
            .then_some(())
    });
    // No terminal to ask on: refused, with the clone's command.
    let out = env.mozart(&[clone, "stop"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout(&out).contains("Go ahead anyway: mozart --conductor-clone=h1 stop --yes"),
        "{}",
        stdout(&out)
    );
    let out = env.mozart(&[clone, "pause", "c1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stdout(&out).contains("To resume: mozart --conductor-clone=h1 resume c1"),
        "{}",
        stdout(&out)
    );
    let out = env.mozart(&[clone, "cancel", "c1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = env.mozart(&[clone, "stop", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = env.mozart(&[clone, "status"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout(&out).contains("Clone conductor 'h1' is not running.")
            && stdout(&out).contains("Start it with: mozart --conductor-clone=h1 start"),
        "{}",
        stdout(&out)
    );
    assert!(alive(prod), "production stopped");
}
