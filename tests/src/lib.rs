//! Shared helpers for black-box tests: [`TestEnv`] runs the real `mozart` binary against a
//! real conductor on a temporary socket and Mozart home, with the stand-in AI CLI on `PATH`.

pub mod mochi;
pub mod mock_api;
pub mod real_cli;
pub mod users;
pub mod web;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Directory holding the binaries of this test run (`target/<profile>`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // Integration tests run from target/<profile>/deps/<name>-<hash>.
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// The `mozart` binary under test (`$MOZART_BIN` overrides).
pub fn mozart_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("MOZART_BIN") {
        return PathBuf::from(bin);
    }
    let dir = bin_dir();
    let own = dir.join("mozart-under-test");
    if own.exists() {
        own
    } else {
        dir.join("mozart")
    }
}

/// The stand-in AI CLI binary.
pub fn standin_bin() -> PathBuf {
    bin_dir().join("mozart-standin")
}

/// An isolated Mozart environment: temporary home, socket, workspace root and `PATH`.
#[derive(Debug)]
pub struct TestEnv {
    root: tempfile::TempDir,
    /// `MOZART_HOME`.
    pub home: PathBuf,
    /// `MOZART_SOCKET` (short enough for `sun_path`).
    pub socket: PathBuf,
    /// Directory with `claude`, `gemini`, `codex` → the stand-in.
    pub bin: PathBuf,
    /// A scratch directory for scores and workspaces.
    pub work: PathBuf,
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv {
    /// Create the directories and the stand-in symlinks.
    ///
    /// # Panics
    /// If the temporary directory cannot be set up.
    #[allow(clippy::expect_used)]
    pub fn new() -> TestEnv {
        // /tmp, not $TMPDIR: socket paths must stay under 108 bytes.
        let root = tempfile::Builder::new()
            .prefix("mz")
            .tempdir_in("/tmp")
            .expect("create temp dir");
        let home = root.path().join("home");
        let bin = root.path().join("bin");
        let work = root.path().join("work");
        for dir in [&home, &bin, &work] {
            std::fs::create_dir_all(dir).expect("create test dirs");
        }
        for name in ["claude", "gemini", "codex"] {
            let _ = std::os::unix::fs::symlink(standin_bin(), bin.join(name));
        }
        TestEnv {
            socket: root.path().join("m.sock"),
            home,
            bin,
            work,
            root,
        }
    }

    /// The temporary root.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// A `mozart` command with this environment (home, socket, PATH).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(mozart_bin());
        cmd.args(args)
            .current_dir(&self.work)
            .env("MOZART_HOME", &self.home)
            .env("MOZART_SOCKET", &self.socket)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("NOTIFY_SOCKET")
            .env("PATH", self.path_var());
        cmd
    }

    fn path_var(&self) -> std::ffi::OsString {
        let mut paths = vec![self.bin.clone()];
        if let Some(old) = std::env::var_os("PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        std::env::join_paths(paths).unwrap_or_default()
    }

    /// Run `mozart <args>` to completion.
    ///
    /// # Panics
    /// If the binary cannot be run.
    #[allow(clippy::expect_used)]
    pub fn mozart(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run mozart")
    }

    /// `mozart start` (background); panics with the output unless it succeeds.
    ///
    /// # Panics
    /// If the conductor does not start.
    pub fn start_conductor(&self) -> Output {
        let out = self.mozart(&["start"]);
        assert!(
            out.status.success(),
            "mozart start failed: {}\n{}\nlog:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        out
    }

    /// `mozart wait JOB`; panics with its output and the conductor's log unless the job
    /// completed (exit 0).
    ///
    /// # Panics
    /// If the job did not complete.
    pub fn wait_completed(&self, job: &str) {
        let out = self.mozart(&["wait", job]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}\n{}",
            stdout(&out),
            self.log()
        );
    }

    /// `mozart stop`.
    pub fn stop_conductor(&self) -> Output {
        self.mozart(&["stop"])
    }

    /// The production conductor's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.join("logs/conductor.log")).unwrap_or_default()
    }

    /// PID in the production conductor's PID file.
    pub fn conductor_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.home.join("conductor.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Write a score file into the work directory and return its path.
    ///
    /// # Panics
    /// If the file cannot be written.
    #[allow(clippy::expect_used)]
    pub fn write_score(&self, name: &str, yaml: &str) -> PathBuf {
        let file = if name.ends_with(".yaml") || name.ends_with(".yml") {
            name.to_string()
        } else {
            format!("{name}.yaml")
        };
        let path = self.work.join(file);
        std::fs::write(&path, yaml).expect("write score");
        path
    }

    /// Stop every conductor of this environment (production and clones): SIGTERM, then
    /// SIGKILL after a grace period.
    pub fn kill_all(&self) {
        let Ok(entries) = std::fs::read_dir(&self.home) else {
            return;
        };
        let pids: Vec<u32> = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "pid"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
            .collect();
        for pid in &pids {
            signal(*pid, "TERM");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && pids.iter().any(|p| alive(*p)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        for pid in pids.iter().filter(|p| alive(**p)) {
            signal(*pid, "KILL");
        }
    }
}

impl Drop for TestEnv {
    /// Teardown: the production conductor is asked for a forced stop over its socket first
    /// (`daemon.shutdown` with `graceful: false`: its running sheets are ended, no state
    /// changes), so a test that ends with a sheet still running does not wait out the
    /// graceful stop a SIGTERM asks for (up to `shutdown_timeout_seconds`) and then the
    /// 10 s of [`TestEnv::kill_all`] before the SIGKILL. Whatever is left still goes the
    /// SIGTERM / SIGKILL way.
    fn drop(&mut self) {
        let forced = self
            .conductor_pid()
            .filter(|pid| alive(*pid))
            .filter(|_| forced_shutdown(&self.socket));
        if let Some(pid) = forced {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && alive(pid) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.kill_all();
    }
}

/// Ask the conductor on `socket` to stop at once (`daemon.shutdown`, `graceful: false`);
/// true when it said it is shutting down. Never blocks for long: a conductor that does not
/// answer within 2 s (frozen, gone, someone else's program) is left to the signals.
fn forced_shutdown(socket: &Path) -> bool {
    use std::io::{BufRead, BufReader, Write};
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(socket) else {
        return false;
    };
    let timeout = Some(Duration::from_secs(2));
    if stream.set_read_timeout(timeout).is_err() || stream.set_write_timeout(timeout).is_err() {
        return false;
    }
    let request = serde_json::json!({
        "jsonrpc": "2.0", "method": mozart_ipc::methods::DAEMON_SHUTDOWN, "params": {"graceful": false}, "id": 1
    });
    if stream.write_all(format!("{request}\n").as_bytes()).is_err() {
        return false;
    }
    let mut reply = String::new();
    if BufReader::new(stream).read_line(&mut reply).is_err() {
        return false;
    }
    serde_json::from_str::<serde_json::Value>(&reply)
        .is_ok_and(|v| v["result"]["shutting_down"] == serde_json::Value::Bool(true))
}

/// Send a signal with `kill(1)` (no libc in the test harness).
pub fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .output();
}

/// Mount a private tmpfs of `size` (`6m`) on `dir` (needs root): false, with the reason
/// reported as a missing tool (`what` it is for), when it cannot be mounted.
pub fn mount_tmpfs(dir: &std::path::Path, size: &str, what: &str) -> bool {
    let out = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0700"),
            "tmpfs",
        ])
        .arg(dir)
        .output();
    match out {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            users::missing(
                &format!(
                    "a tmpfs {what}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                "run the tests as root",
            );
            false
        }
        Err(_) => false,
    }
}

/// Write `text` to `path` as an executable (0755) script.
///
/// # Panics
/// If the file cannot be written.
pub fn write_executable(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write the script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .expect("make the script executable");
}

/// True if the process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    // A process killed with SIGKILL shows as a zombie leader while its other threads are
    // still exiting, and its file locks (the conductor's single-instance lock) go only with
    // the last thread: it is alive while any of its threads is.
    let state_live = |stat: &str| {
        stat.rsplit_once(')')
            .map(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
            .unwrap_or(false)
    };
    match std::fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(tasks) => tasks.flatten().any(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .map(|s| state_live(&s))
                .unwrap_or(false)
        }),
        Err(_) => false,
    }
}

/// `git <args>` in `dir` (with a committer identity), its stdout trimmed; panics unless it
/// succeeds.
///
/// # Panics
/// If git fails.
#[allow(clippy::expect_used)]
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Stdout of an [`Output`] as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A score of `sheets` sheets on the built-in `shell` instrument: each sleeps `sleep`
/// seconds, then writes `out-<n>.txt`, which a `file_exists` validation checks.
pub fn sleepy_shell_score(name: &str, sheets: u32, sleep: f64) -> String {
    format!(
        r#"name: {name}
workspace: ./{name}-ws
instrument: shell
pause_between_sheets_seconds: 0
sheet:
  size: 1
  total_items: {sheets}
prompt:
  template: |
    RUN: sleep {sleep}
    RUN: echo done > "{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt"
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
"#
    )
}

impl TestEnv {
    /// One JSON-RPC request on its own connection, exactly as upstream's Python client
    /// writes it (integer id, one line); the whole response object.
    ///
    /// # Panics
    /// If the conductor cannot be reached or answers something that is not JSON.
    #[allow(clippy::expect_used)]
    pub fn raw_call(&self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::{BufRead, BufReader, Write};
        let mut stream =
            std::os::unix::net::UnixStream::connect(&self.socket).expect("connect to conductor");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("set read timeout");
        let line =
            serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params, "id": 1});
        stream
            .write_all(format!("{line}\n").as_bytes())
            .expect("send request");
        let mut reply = String::new();
        BufReader::new(stream)
            .read_line(&mut reply)
            .expect("read response");
        serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{method}: {e}: {reply}"))
    }
}

/// The one test Slurm cluster, shared by every test that uses it — in this test binary and in
/// any other process on the machine (another checkout's tests, a bench): tests that only submit
/// jobs hold it shared ([`slurm_shared`]); tests that freeze or restart its controller hold it
/// alone ([`slurm_exclusive`]), so no other test sees the controller down. An advisory `flock`
/// on one file, so the lock is released when the test's process dies, however it dies.
const SLURM_CLUSTER_LOCK: &str = "/tmp/mozart-tests-slurm-cluster.lock";

/// A held share of the test cluster; dropping it lets the others in.
pub struct SlurmCluster {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

fn slurm_lock(how: nix::fcntl::FlockArg) -> SlurmCluster {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(SLURM_CLUSTER_LOCK)
        .unwrap_or_else(|e| panic!("open {SLURM_CLUSTER_LOCK}: {e}"));
    let lock = nix::fcntl::Flock::lock(file, how)
        .unwrap_or_else(|(_, e)| panic!("flock {SLURM_CLUSTER_LOCK}: {e}"));
    SlurmCluster { _lock: lock }
}

/// Use the test cluster alongside other tests (see [`SLURM_CLUSTER_LOCK`]).
pub fn slurm_shared() -> SlurmCluster {
    slurm_lock(nix::fcntl::FlockArg::LockShared)
}

/// Use the test cluster alone: its controller may be frozen or restarted.
pub fn slurm_exclusive() -> SlurmCluster {
    slurm_lock(nix::fcntl::FlockArg::LockExclusive)
}
