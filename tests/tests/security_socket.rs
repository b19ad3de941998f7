//! The client trusts only its own conductor (issue 21, architecture invariant 6), with real
//! other local users: `mozart-intruder` squats or answers on sockets, `mozart-victim` is the
//! unprivileged owner who runs `mozart` with no `MOZART_SOCKET` / `XDG_RUNTIME_DIR`, so its
//! socket falls back to `/tmp/mozart-<uid>/mozart.sock`.
//!
//! Only the victim's fallback directory is used (never root's `/tmp/mozart-0`); the tests
//! that use it take [`FALLBACK`] and remove the directory before and after.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mozart_tests::users::{intruder, victim, LocalUser};
use mozart_tests::{bin_dir, mozart_bin, sleepy_shell_score, stdout};

/// Serializes the tests that use the victim's `/tmp/mozart-<uid>` directory.
static FALLBACK: Mutex<()> = Mutex::new(());

fn text(out: &Output) -> String {
    format!("{}{}", stdout(out), String::from_utf8_lossy(&out.stderr))
}

/// `/tmp/mozart-<uid>` of a user, removed when created and when dropped.
struct FallbackDir(PathBuf);

impl FallbackDir {
    fn of(user: &LocalUser) -> FallbackDir {
        let dir = PathBuf::from(format!("/tmp/mozart-{}", user.uid));
        let _ = std::fs::remove_dir_all(&dir);
        FallbackDir(dir)
    }
}

impl Drop for FallbackDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A temporary directory under /tmp owned by `user` (mode 0700), for its Mozart home,
/// scores and records.
fn owned_dir(user: &LocalUser) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("mzs")
        .tempdir_in("/tmp")
        .unwrap();
    std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid)).unwrap();
    dir
}

/// Write `content` to `path` as a file of `user`.
fn write_as(user: &LocalUser, path: &Path, content: &str) {
    std::fs::write(path, content).unwrap();
    std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid)).unwrap();
}

/// `mozart <args>` as `user` with `home` as its Mozart home and no socket settings (the
/// fallback applies), plus `env`.
fn mozart_as(user: &LocalUser, home: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = user.command(mozart_bin());
    cmd.args(args).env("MOZART_HOME", home);
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd.stdin(Stdio::null()).output().unwrap()
}

/// A process killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `mozart-rogue listen` as `user`: a fake conductor on `socket` recording to `record`;
/// returns once it listens.
fn rogue_listener(user: &LocalUser, socket: &Path, record: &Path, dir_mode: &str) -> Running {
    let mut child = user
        .command(bin_dir().join("mozart-rogue"))
        .arg("listen")
        .arg(socket)
        .arg(record)
        .arg(dir_mode)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let out = child.stdout.take().unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).unwrap();
    assert_eq!(
        line.trim(),
        "listening",
        "mozart-rogue did not start: {line}"
    );
    Running(child)
}

/// The lines the rogue listener recorded (`CONNECT` per connection, then each request).
fn recorded(record: &Path) -> Vec<String> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Stop the conductor whose Mozart home is `home` (as `user`), and make sure it is gone.
fn stop_conductor(user: &LocalUser, home: &Path, env: &[(&str, &Path)]) {
    let _ = mozart_as(user, home, &["stop"], env);
    if let Ok(pid) = std::fs::read_to_string(home.join("conductor.pid")) {
        let pid = pid.trim().to_string();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && Path::new(&format!("/proc/{pid}")).exists() {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill").args(["-KILL", &pid]).output();
    }
}

fn label(user: &LocalUser) -> String {
    format!("{} (uid {})", user.name, user.uid)
}

/// The intruder creates the victim's fallback directory first (mode 0777) and poses as a
/// conductor in it: the victim's `run` and `status` are refused before connecting, naming
/// the intruder and the fix, and the intruder's program sees nothing at all. With only an
/// empty directory of the intruder's (0700), the victim's `start` names its owner instead
/// of "exited during startup".
#[test]
fn a_squatted_fallback_directory_receives_nothing_and_is_named() {
    let (Some(victim), Some(intruder)) = (victim(), intruder()) else {
        return;
    };
    let _serial = FALLBACK.lock().unwrap_or_else(|e| e.into_inner());
    let fallback = FallbackDir::of(&victim);
    let spy = owned_dir(&intruder);
    let record = spy.path().join("record");
    let rogue = rogue_listener(&intruder, &fallback.0.join("mozart.sock"), &record, "777");

    let home = owned_dir(&victim);
    let score = home.path().join("secret-plan.yaml");
    write_as(&victim, &score, &sleepy_shell_score("secret-plan", 1, 0.0));
    let fallback_shown = fallback.0.display().to_string();
    for args in [
        vec!["run", score.to_str().unwrap()],
        vec!["status"],
        vec!["start"],
    ] {
        let out = mozart_as(&victim, home.path(), &args, &[]);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "mozart {args:?}: {said}");
        for needle in [
            label(&intruder).as_str(),
            fallback_shown.as_str(),
            "MOZART_SOCKET",
            "nothing was sent",
        ] {
            assert!(
                said.contains(needle),
                "mozart {args:?} lacks {needle:?}: {said}"
            );
        }
    }
    assert_eq!(
        recorded(&record),
        Vec::<String>::new(),
        "the intruder's program heard from the victim"
    );
    drop(rogue);

    // Just the directory, private to the intruder: nothing to connect to, start must say why.
    let _ = std::fs::remove_dir_all(&fallback.0);
    let made = intruder
        .command("mkdir")
        .args(["-m", "700"])
        .arg(&fallback.0)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made));
    let out = mozart_as(&victim, home.path(), &["start"], &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&label(&intruder)) && said.contains(&fallback_shown),
        "start does not name the directory's owner: {said}"
    );
    assert!(!said.contains("exited during startup"), "{said}");
    stop_conductor(&victim, home.path(), &[]);
}

/// The socket file and its directory are the victim's, but the process listening on it is
/// the intruder's (a socket swapped in): the peer check refuses it after connecting and
/// before sending anything.
#[test]
fn a_socket_served_by_another_user_is_refused_before_anything_is_sent() {
    let (Some(victim), Some(intruder)) = (victim(), intruder()) else {
        return;
    };
    let spy = owned_dir(&intruder);
    let record = spy.path().join("record");
    let rogue_socket = spy.path().join("r.sock");
    let _rogue = rogue_listener(&intruder, &rogue_socket, &record, "755");
    let private = owned_dir(&victim);
    let socket = private.path().join("m.sock");
    // Only root could arrange this, which is the point: the file checks all pass.
    std::os::unix::fs::chown(&rogue_socket, Some(victim.uid), Some(victim.gid)).unwrap();
    std::fs::rename(&rogue_socket, &socket).unwrap();

    let home = private.path().join("home");
    let out = mozart_as(&victim, &home, &["status"], &[("MOZART_SOCKET", &socket)]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("runs as {}", label(&intruder)))
            && said.contains("PID")
            && said.contains("nothing was sent"),
        "peer not named: {said}"
    );
    let requests: Vec<String> = recorded(&record)
        .into_iter()
        .filter(|l| l != "CONNECT")
        .collect();
    assert!(
        requests.is_empty(),
        "the victim sent requests to the intruder: {requests:?}"
    );
}

/// The victim's conductor, its socket opened up to everyone (0666 in a 0755 directory):
/// the intruder's raw request is refused by the conductor, which says whose it is, and the
/// intruder's own `mozart status` refuses the victim's socket before connecting.
#[test]
fn the_conductor_refuses_another_user_and_says_whose_it_is() {
    let (Some(victim), Some(intruder)) = (victim(), intruder()) else {
        return;
    };
    let dir = owned_dir(&victim);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("m.sock");
    let home = dir.path().join("home");
    let env = [("MOZART_SOCKET", socket.as_path())];
    let out = mozart_as(&victim, &home, &["start"], &env);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();

    let raw = intruder
        .command(bin_dir().join("mozart-rogue"))
        .arg("call")
        .arg(&socket)
        .arg("daemon.health")
        .output()
        .unwrap();
    let answer = text(&raw);
    let intruder_home = owned_dir(&intruder);
    let own_cli = mozart_as(&intruder, intruder_home.path(), &["status"], &env);
    let log = std::fs::read_to_string(home.join("logs/conductor.log")).unwrap_or_default();
    stop_conductor(&victim, &home, &env);

    assert!(
        !answer.contains("\"result\""),
        "the intruder was served: {answer}"
    );
    assert!(
        answer.contains("permission denied")
            && answer.contains(&label(&victim))
            && answer.contains(&label(&intruder)),
        "refusal does not say whose conductor it is: {answer}"
    );
    assert!(log.contains("peer_refused"), "{log}");
    let said = text(&own_cli);
    assert_eq!(own_cli.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("belongs to {}", label(&victim))) && said.contains("Refusing"),
        "{said}"
    );
}

/// The fallback directory works for its owner: start creates it 0700, a score runs to the
/// end, status shows it; and root may drive the victim's conductor on purpose
/// (`MOZART_SOCKET` naming it), which the conductor serves.
#[test]
fn the_fallback_directory_serves_its_owner_and_root() {
    let Some(victim) = victim() else {
        return;
    };
    let _serial = FALLBACK.lock().unwrap_or_else(|e| e.into_inner());
    let fallback = FallbackDir::of(&victim);
    let socket = fallback.0.join("mozart.sock");
    let home = owned_dir(&victim);
    let out = mozart_as(&victim, home.path(), &["start"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains(&socket.display().to_string()),
        "{}",
        text(&out)
    );
    let meta = std::fs::metadata(&fallback.0).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        victim.uid,
        "owner of {}",
        fallback.0.display()
    );
    assert_eq!(meta.permissions().mode() & 0o7777, 0o700);

    let score = home.path().join("chores.yaml");
    write_as(&victim, &score, &sleepy_shell_score("chores", 2, 0.0));
    let run = mozart_as(&victim, home.path(), &["run", score.to_str().unwrap()], &[]);
    let waited = mozart_as(&victim, home.path(), &["wait", "chores"], &[]);
    let status = mozart_as(&victim, home.path(), &["status", "chores"], &[]);
    let root_home = tempfile::tempdir().unwrap();
    let as_root = Command::new(mozart_bin())
        .arg("status")
        .env("MOZART_SOCKET", &socket)
        .env("MOZART_HOME", root_home.path())
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    stop_conductor(&victim, home.path(), &[]);

    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited));
    assert!(
        stdout(&status).to_lowercase().contains("completed"),
        "{}",
        text(&status)
    );
    assert!(
        home.path().join("chores-ws/out-2.txt").exists(),
        "the score's work is missing"
    );
    assert_eq!(as_root.status.code(), Some(0), "{}", text(&as_root));
    assert!(stdout(&as_root).contains("chores"), "{}", text(&as_root));
}

/// A conductor that fails while starting in the background: `mozart start` prints its
/// error (here: the socket directory cannot be created) instead of only "exited during
/// startup".
#[test]
fn start_reports_why_the_conductor_did_not_start() {
    let env = mozart_tests::TestEnv::new();
    let blocker = env.root().join("blocker");
    std::fs::write(&blocker, "a file where the socket directory should be").unwrap();
    let out = env
        .command(&["start"])
        .env("MOZART_SOCKET", blocker.join("m.sock"))
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("socket directory")
            && said.contains("blocker")
            && said.to_lowercase().contains("not a directory"),
        "the real cause is missing: {said}"
    );
    assert!(!said.contains("exited during startup"), "{said}");
}

/// A Mozart home another user made first (they can, in `/tmp`) is refused: the home
/// itself, an instrument profile or a log file of theirs in a home of ours — their
/// `instruments/shell.yaml` would otherwise run as us, their `conductor.log` receive our log.
/// Nothing is started and nothing in the home is changed.
#[test]
fn a_mozart_home_with_another_users_files_is_refused() {
    let (Some(victim), Some(intruder)) = (victim(), intruder()) else {
        return;
    };
    let sockets = owned_dir(&victim);
    let socket = sockets.path().join("mz.sock");
    // The intruder's home, open to all.
    let theirs = owned_dir(&intruder);
    std::fs::set_permissions(theirs.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = mozart_as(
        &victim,
        theirs.path(),
        &["start"],
        &[("MOZART_SOCKET", &socket)],
    );
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&label(&intruder)) && said.contains("(the Mozart home)"),
        "{said}"
    );
    // A home of the victim's, left open, where the intruder planted a file.
    for planted in ["instruments/shell.yaml", "logs/conductor.log"] {
        let home = owned_dir(&victim);
        let dir = home.path().join(planted).parent().unwrap().to_path_buf();
        std::fs::create_dir_all(&dir).unwrap();
        for d in [home.path(), dir.as_path()] {
            std::os::unix::fs::chown(d, Some(victim.uid), Some(victim.gid)).unwrap();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        write_as(&intruder, &home.path().join(planted), "name: shell\n");
        let out = mozart_as(
            &victim,
            home.path(),
            &["start"],
            &[("MOZART_SOCKET", &socket)],
        );
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "{planted}: {said}");
        assert!(
            said.contains(&label(&intruder)) && said.contains(planted),
            "{planted}: {said}"
        );
        assert!(!socket.exists(), "{planted}: a conductor started");
        assert!(
            !home.path().join("logs/conductor.log").exists() || planted.starts_with("logs"),
            "{planted}: a log was written in the refused home"
        );
    }
}

/// The victim's fallback socket directory is a symbolic link the intruder made, to a
/// directory of the victim's: `start` refuses it (naming the link and its maker) instead of
/// following it and making the target private.
#[test]
fn a_fallback_directory_that_is_another_users_link_is_refused_not_followed() {
    let (Some(victim), Some(intruder)) = (victim(), intruder()) else {
        return;
    };
    let _serial = FALLBACK.lock().unwrap_or_else(|e| e.into_inner());
    let fallback = FallbackDir::of(&victim);
    let target = owned_dir(&victim);
    std::fs::set_permissions(target.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let linked = intruder
        .command("ln")
        .arg("-s")
        .arg(target.path())
        .arg(&fallback.0)
        .output()
        .unwrap();
    assert!(linked.status.success(), "{}", text(&linked));
    let home = owned_dir(&victim);
    let out = mozart_as(&victim, home.path(), &["start"], &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&label(&intruder)) && said.contains(&fallback.0.display().to_string()),
        "{said}"
    );
    let mode = std::fs::metadata(target.path())
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o755, "the link's target was made private");
    stop_conductor(&victim, home.path(), &[]);
    // The link goes (FallbackDir removes a directory, not a link).
    let _ = std::fs::remove_file(&fallback.0);
}
