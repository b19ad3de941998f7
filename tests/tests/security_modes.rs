//! The conductor's files are private (architecture invariant 6): socket 0600 in a 0700
//! directory, a fresh Mozart home 0700 with nothing in it readable by others, and a peer
//! with another uid is refused even when the file modes would let it connect.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use mozart_tests::{stdout, TestEnv};

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Every file and directory under `root` that group or others may read, write or enter.
fn loose_entries(root: &Path) -> Vec<String> {
    let mut loose = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                continue;
            }
            let m = meta.permissions().mode() & 0o777;
            if m & 0o077 != 0 {
                loose.push(format!("{} {:o}", path.display(), m));
            }
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    loose
}

#[test]
fn the_socket_is_0600_in_a_0700_directory_the_conductor_made() {
    let env = TestEnv::new();
    // Let the conductor create both the home and the socket directory itself.
    let home = env.root().join("fresh-home");
    let socket = env.root().join("sockdir/m.sock");
    let start = |args: &[&str]| {
        env.command(args)
            .env("MOZART_HOME", &home)
            .env("MOZART_SOCKET", &socket)
            .output()
            .unwrap()
    };
    let out = start(&["start"]);
    assert!(out.status.success(), "{}", stdout(&out));
    // Give it some work so the registry, logs and learning store all exist.
    let (score, _) = support::shell_score(&env, "private", support::Shape::Sequential(1), 0.0);
    let out = start(&["run", score.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", stdout(&out));
    // Done once the job is: its records, logs and learning outcome are written by then.
    let out = start(&["wait", "private"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    assert_eq!(mode(&socket), 0o600, "socket");
    assert_eq!(mode(socket.parent().unwrap()), 0o700, "socket directory");
    let _ = start(&["stop"]);
}

/// The registry keeps prompts, instrument output and error text (redaction only catches
/// known credential shapes), so the home it lives in should be as private as the socket.
#[test]
fn a_fresh_mozart_home_is_private() {
    let env = TestEnv::new();
    let home = env.root().join("fresh-home");
    let out = env
        .command(&["start"])
        .env("MOZART_HOME", &home)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let home_mode = mode(&home);
    let loose = loose_entries(&home);
    let _ = env.command(&["stop"]).env("MOZART_HOME", &home).output();
    assert_eq!(home_mode, 0o700, "Mozart home");
    assert!(
        loose.is_empty(),
        "readable by others in the Mozart home: {loose:#?}"
    );
}

/// Another user who can write the socket directory can unlink the socket and put their own
/// in its place, so a world-writable directory must be tightened (or refused).
#[test]
fn a_loose_existing_socket_directory_is_not_trusted() {
    let env = TestEnv::new();
    let dir = env.root().join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = dir.join("m.sock");
    let out = env
        .command(&["start"])
        .env("MOZART_SOCKET", &socket)
        .output()
        .unwrap();
    if out.status.success() {
        // Accepted only after making the directory private again.
        assert_eq!(
            mode(&dir),
            0o700,
            "conductor serves from a world-writable directory"
        );
        assert_eq!(mode(&socket), 0o600);
        let _ = env
            .command(&["stop"])
            .env("MOZART_SOCKET", &socket)
            .output();
    } else {
        eprintln!("refused: {}", stdout(&out));
    }
}

/// Needs root (to act as `nobody`) and `setpriv`; says so and passes otherwise.
#[test]
fn a_peer_with_another_uid_is_refused_even_if_modes_allow_it() {
    let env = TestEnv::new();
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !is_root || Command::new("setpriv").arg("--version").output().is_err() {
        mozart_tests::users::missing("root and setpriv", "run the tests as root");
        return;
    }
    env.start_conductor();
    // Open the path up completely so only the peer-credential check stands in the way.
    for p in [env.root(), env.socket.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    // A raw request: `mozart` itself, run as uid 65534, would refuse root's socket in a
    // directory everyone can write before connecting (security_socket.rs), and the
    // conductor's own check is what this test is about.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(mozart_tests::bin_dir().join("mozart-rogue"))
        .arg("call")
        .arg(&env.socket)
        .arg("daemon.status")
        .output()
        .unwrap();
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    std::fs::set_permissions(env.root(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(
        !text.contains("\"result\""),
        "uid 65534 was served by root's conductor: {text}"
    );
    assert!(
        env.log().contains("peer_refused") || text.contains("permission denied"),
        "refusal not reported: {text}\nlog:\n{}",
        env.log()
    );
}

/// A workspace others can write (a shared `/tmp` directory): the intruder makes its `logs`
/// a symbolic link to a directory of root's, or a directory of its own. Root's job runs and
/// completes, but its sheet logs are written through neither — the link's target keeps its
/// mode (it was made 0700 and filled) and the intruder's directory gets no log to read or
/// replace.
#[test]
fn sheet_logs_are_not_written_through_another_users_link_or_into_their_directory() {
    let Some(intruder) = mozart_tests::users::intruder() else {
        return;
    };
    let env = TestEnv::new();
    env.start_conductor();
    let shared = env.work.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(&env.work, std::fs::Permissions::from_mode(0o755)).unwrap();
    let target = env.work.join("roots-dir");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_intruder = |script: &str| {
        let out = intruder
            .command("sh")
            .arg("-c")
            .arg(script)
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {}", stdout(&out));
    };
    let link_ws = shared.join("linked");
    let theirs_ws = shared.join("theirs");
    as_intruder(&format!(
        "mkdir -m 777 {l} {t} {t}/logs && chmod 777 {t}/logs && ln -s {target} {l}/logs",
        l = link_ws.display(),
        t = theirs_ws.display(),
        target = target.display()
    ));
    for (name, ws) in [("linked", &link_ws), ("theirs", &theirs_ws)] {
        let yaml = format!(
            "name: {name}\nworkspace: {}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
             prompt:\n  template: \"RUN: echo secret-output-{name}\"\n",
            ws.display()
        );
        let path = env.write_score(name, &yaml);
        let out = env.mozart(&["run", path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stdout(&out));
        let out = env.mozart(&["wait", name]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stdout(&out));
    }
    assert_eq!(mode(&target), 0o755, "the link's target was made private");
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "logs were written through the link"
    );
    let written: Vec<_> = std::fs::read_dir(theirs_ws.join("logs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        written.is_empty(),
        "logs written into the intruder's directory: {written:?}"
    );
}
