//! Which conductor a command talks to: under `--conductor-clone` every command the CLI
//! suggests names the clone.

use mozart_tests::{alive, sleepy_shell_score, stdout, TestEnv};

use crate::harness::poll;

/// All a command printed, stdout then stderr.
fn text(out: &std::process::Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
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
