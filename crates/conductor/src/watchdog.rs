//! The watchdog: a small companion process that outlives the conductor and ends instrument
//! process groups the conductor can no longer end itself (issue #4: no instrument may run
//! longer than its own timeout, even after `kill -9` of the conductor).
//!
//! The conductor starts one watchdog (`mozart __watchdog`) and tells it, over the watchdog's
//! stdin, which groups are running and until when: `track <pgid> <start_ticks> <deadline>` and
//! `untrack <pgid>`. The watchdog ends a group whose deadline passed, and when its stdin
//! closes — the conductor exited or was killed — it ends every group still tracked. A group
//! is only signalled while its leader still has the recorded start time, so a reused pid is
//! never touched (architecture invariant 5).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// Grace between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(3);

/// Start time of a process (field 22 of `/proc/<pid>/stat`, clock ticks since boot).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// End the groups (SIGTERM, grace, SIGKILL) whose leaders still have their start time.
fn end_groups(groups: &[(u32, u64)]) {
    let ours: Vec<i32> = groups
        .iter()
        .filter(|(pgid, ticks)| start_ticks(*pgid) == Some(*ticks))
        .filter_map(|(pgid, _)| i32::try_from(*pgid).ok())
        .collect();
    for g in &ours {
        let _ = killpg(Pid::from_raw(*g), Signal::SIGTERM);
    }
    let deadline = Instant::now() + GRACE;
    let alive = |g: &i32| killpg(Pid::from_raw(*g), None).is_ok();
    while Instant::now() < deadline && ours.iter().any(alive) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for g in ours.iter().filter(|g| alive(g)) {
        let _ = killpg(Pid::from_raw(*g), Signal::SIGKILL);
    }
}

/// The watchdog process's main loop; returns its exit code.
pub fn run() -> i32 {
    let (tx, rx) = channel::<Option<String>>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            match line {
                Ok(l) => {
                    if tx.send(Some(l)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(None);
    });
    // pgid → (start ticks, deadline epoch)
    let mut tracked: HashMap<u32, (u64, f64)> = HashMap::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(Some(line)) => {
                let mut f = line.split_whitespace();
                match (f.next(), f.next().and_then(|p| p.parse::<u32>().ok())) {
                    (Some("track"), Some(pgid)) => {
                        let ticks = f.next().and_then(|t| t.parse().ok());
                        let deadline = f.next().and_then(|d| d.parse().ok());
                        if let (Some(ticks), Some(deadline)) = (ticks, deadline) {
                            tracked.insert(pgid, (ticks, deadline));
                        }
                    }
                    (Some("untrack"), Some(pgid)) => {
                        tracked.remove(&pgid);
                    }
                    _ => {}
                }
            }
            // The conductor is gone: nothing supervises these groups any more.
            Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                let all: Vec<(u32, u64)> = tracked.iter().map(|(p, (t, _))| (*p, *t)).collect();
                end_groups(&all);
                return 0;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        let now = mozart_ipc::time::epoch_now();
        let due: Vec<(u32, u64)> = tracked
            .iter()
            .filter(|(_, (_, deadline))| *deadline <= now)
            .map(|(p, (t, _))| (*p, *t))
            .collect();
        if !due.is_empty() {
            for (p, _) in &due {
                tracked.remove(p);
            }
            end_groups(&due);
        }
    }
}

/// The conductor's handle on its watchdog.
#[derive(Debug)]
pub struct Watchdog {
    stdin: Mutex<ChildStdin>,
    _child: Child,
}

impl Watchdog {
    /// Start `<current exe> __watchdog` in its own process group (so a Ctrl-C aimed at a
    /// foreground conductor does not stop it first).
    pub fn spawn() -> std::io::Result<Watchdog> {
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .arg("__watchdog")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("watchdog has no stdin"))?;
        Ok(Watchdog {
            stdin: Mutex::new(stdin),
            _child: child,
        })
    }

    fn send(&self, line: &str) {
        let mut stdin = match self.stdin.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Err(e) = stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
        {
            tracing::warn!(error = %e, "watchdog unreachable");
        }
    }

    /// Supervise group `pgid` until `deadline` (epoch seconds).
    pub fn track(&self, pgid: u32, deadline: f64) {
        if let Some(ticks) = start_ticks(pgid) {
            self.track_started(pgid, ticks, deadline);
        }
    }

    /// [`Watchdog::track`] for a group whose leader's start time is already known.
    pub fn track_started(&self, pgid: u32, ticks: u64, deadline: f64) {
        self.send(&format!("track {pgid} {ticks} {deadline}\n"));
    }

    /// Stop supervising group `pgid` (it ended, or the conductor ended it).
    pub fn untrack(&self, pgid: u32) {
        self.send(&format!("untrack {pgid}\n"));
    }
}
