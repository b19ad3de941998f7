//! Instrument process groups left behind by a conductor that was killed (conductor.md §15).
//!
//! While an attempt runs, its process group id and the leader's start time are kept in a
//! small file under `$MOZART_HOME/inflight/`. A conductor that dies with SIGKILL cannot clean
//! up, so on the next start [`reap_leftovers`] ends every group still recorded there — before
//! any job resumes, so an attempt never runs twice side by side in one workspace. The start
//! time guards against signalling an unrelated process that reused the pid (architecture
//! invariant 5: never signal processes the conductor did not start).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::watchdog::start_ticks;

fn group_alive(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None).is_ok()
}

/// A recorded in-flight attempt; dropping it forgets the record (the attempt ended, or its
/// musician was cancelled, which kills the group itself).
#[derive(Debug)]
pub(crate) struct InflightRecord {
    path: PathBuf,
}

impl Drop for InflightRecord {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Record the process group `pgid` of `job`'s `sheet` (best effort: a failure only means the
/// group is not reaped after a crash; its own deadline still ends it).
pub(crate) fn record(dir: &Path, job: &str, sheet: u32, pgid: u32) -> Option<InflightRecord> {
    let started = start_ticks(pgid)?;
    let safe: String = job
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.join(format!("{safe}.{sheet}.{pgid}"));
    if let Err(e) = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, format!("{pgid} {started}\n")))
    {
        tracing::warn!(job, sheet, error = %e, "cannot record the instrument's process group");
        return None;
    }
    Some(InflightRecord { path })
}

/// End every recorded group that is still running: SIGTERM, up to `grace`, then SIGKILL.
/// Returns how many groups were signalled.
pub(crate) fn reap_leftovers(dir: &Path, grace: Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut live = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        let mut fields = text.split_whitespace();
        let (Some(pgid), Some(started)) = (
            fields.next().and_then(|p| p.parse::<u32>().ok()),
            fields.next().and_then(|s| s.parse::<u64>().ok()),
        ) else {
            continue;
        };
        // Same pid, same start time: the group we started, still there.
        if start_ticks(pgid) == Some(started) {
            if let Ok(raw) = i32::try_from(pgid) {
                let _ = killpg(Pid::from_raw(raw), Signal::SIGTERM);
                live.push(raw);
            }
        }
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && live.iter().any(|g| group_alive(*g)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for g in &live {
        if group_alive(*g) {
            let _ = killpg(Pid::from_raw(*g), Signal::SIGKILL);
        }
    }
    if !live.is_empty() {
        tracing::info!(
            groups = live.len(),
            "reaped instrument process groups left by a previous conductor"
        );
    }
    live.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn a_recorded_group_is_reaped_and_a_stale_record_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        let rec = record(dir.path(), "job/x", 3, pid).expect("recorded");
        std::mem::forget(rec); // as if the conductor died without cleaning up
                               // A record of a process that no longer exists (pid reuse guard: wrong start time).
        std::fs::write(dir.path().join("old.1.1"), "1 12345\n").unwrap();
        assert_eq!(reap_leftovers(dir.path(), Duration::from_secs(2)), 1);
        let status = child.wait().unwrap();
        assert!(!status.success(), "the sleeper was killed");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "records consumed"
        );
    }

    #[test]
    fn dropping_the_record_forgets_it() {
        let dir = tempfile::tempdir().unwrap();
        let rec = record(dir.path(), "j", 1, std::process::id()).expect("recorded");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        drop(rec);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
