//! Instrument process groups left behind by a conductor that was killed (conductor.md §15).
//!
//! While an attempt runs, its process group id and the leader's start time are kept in a
//! small file under `$MOZART_HOME/inflight/`. A conductor that dies with SIGKILL cannot clean
//! up, so on the next start [`reap_leftovers`] ends every group still recorded there — before
//! any job resumes, so an attempt never runs twice side by side in one workspace. The start
//! time guards against signalling an unrelated process that reused the pid (architecture
//! invariant 5: never signal processes the conductor did not start).

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use mozart_conductor::watchdog::start_ticks;

/// The journal file inside the in-flight directory.
pub(crate) const JOURNAL: &str = "journal";

fn group_alive(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None).is_ok()
}

/// The running instrument groups of this conductor, kept in memory and in an append-only
/// journal (`+ pgid ticks sheet job` and `@ pgid deadline` in one write when a group
/// starts, `- pgid` when it ends, emptied whenever nothing runs; a fresh start of the file
/// is headed `= <generation>`): one `write` per event instead of a file created and removed
/// per attempt. The watchdog follows the same file (`mozart_conductor::watchdog`), so an
/// attempt sends it nothing.
#[derive(Debug)]
pub(crate) struct Inflight {
    dir: PathBuf,
    state: Mutex<JournalState>,
}

#[derive(Debug, Default)]
struct JournalState {
    file: Option<File>,
    live: HashMap<u32, (String, u32)>,
    /// The file is empty: the next write starts with a new generation line.
    fresh: bool,
    /// Emptyings so far (part of the generation line).
    generation: u64,
}

impl Inflight {
    /// The journal in `dir` (created on first use).
    pub(crate) fn new(dir: PathBuf) -> Arc<Inflight> {
        Arc::new(Inflight {
            dir,
            state: Mutex::default(),
        })
    }

    /// The journal's path.
    pub(crate) fn path(&self) -> PathBuf {
        self.dir.join(JOURNAL)
    }

    /// Create the journal now (after the start's reaping consumed an earlier one), so the
    /// watchdog can follow it before the first group starts.
    pub(crate) fn open(&self) -> std::io::Result<()> {
        let mut state = super::lock(&self.state);
        self.ensure_file(&mut state)
    }

    /// Record the process group `pgid` (leader start time `ticks`) of `job`'s `sheet`, which
    /// the watchdog ends past `deadline` (epoch seconds). Best effort: a failure only means
    /// the group is not reaped after a crash; its own deadline still ends it.
    pub(crate) fn record(
        self: &Arc<Self>,
        job: &str,
        sheet: u32,
        pgid: u32,
        ticks: u64,
        deadline: f64,
    ) -> Option<InflightRecord> {
        let job_text: String = job
            .chars()
            .map(|c| if c.is_control() { '_' } else { c })
            .collect();
        let mut state = super::lock(&self.state);
        let line = format!("+ {pgid} {ticks} {sheet} {job_text}\n@ {pgid} {deadline}\n");
        if let Err(e) = self.append(&mut state, &line) {
            tracing::warn!(job, sheet, error = %e, "cannot record the instrument's process group");
            return None;
        }
        state.live.insert(pgid, (job.to_string(), sheet));
        Some(InflightRecord {
            inflight: Arc::clone(self),
            pgid,
        })
    }

    fn ensure_file(&self, state: &mut JournalState) -> std::io::Result<()> {
        if state.file.is_none() {
            std::fs::create_dir_all(&self.dir)?;
            // Private like everything in the Mozart home: it names jobs and their groups.
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(self.path())?;
            state.fresh = file.metadata()?.len() == 0;
            state.file = Some(file);
        }
        Ok(())
    }

    fn append(&self, state: &mut JournalState, line: &str) -> std::io::Result<()> {
        self.ensure_file(state)?;
        let header = state.fresh.then(|| {
            state.generation += 1;
            format!("= {} {}\n", std::process::id(), state.generation)
        });
        let Some(f) = state.file.as_mut() else {
            return Ok(());
        };
        match header {
            Some(header) => f.write_all(format!("{header}{line}").as_bytes())?,
            None => f.write_all(line.as_bytes())?,
        }
        state.fresh = false;
        Ok(())
    }

    fn forget(&self, pgid: u32) {
        let mut state = super::lock(&self.state);
        if state.live.remove(&pgid).is_none() {
            return;
        }
        let result = if state.live.is_empty() {
            // Nothing runs: start the journal over (appends continue at the new end).
            let emptied = state.file.as_ref().map(|f| f.set_len(0));
            if let Some(Ok(())) = emptied {
                state.fresh = true;
            }
            emptied.unwrap_or(Ok(()))
        } else {
            self.append(&mut state, &format!("- {pgid}\n"))
        };
        if let Err(e) = result {
            tracing::warn!(pgid, error = %e, "cannot update the in-flight journal");
        }
    }
}

/// A recorded in-flight attempt; dropping it forgets the record (the attempt ended, or its
/// musician was cancelled, which kills the group itself).
#[derive(Debug)]
pub(crate) struct InflightRecord {
    inflight: Arc<Inflight>,
    pgid: u32,
}

impl Drop for InflightRecord {
    fn drop(&mut self) {
        self.inflight.forget(self.pgid);
    }
}

/// A group the journal says is running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// Start time of the group's leader (`/proc/<pid>/stat` field 22).
    pub ticks: u64,
    pub sheet: u32,
    pub job: String,
}

/// The groups still running at the end of a journal's text: `+ pgid ticks sheet job` adds
/// one, `- pgid` removes it; anything else (a generation line, a deadline) is skipped.
pub(crate) fn replay_journal(text: &str) -> HashMap<u32, Recorded> {
    let mut live = HashMap::new();
    for line in text.lines() {
        let mut f = line.splitn(5, ' ');
        match (f.next(), f.next().and_then(|p| p.parse::<u32>().ok())) {
            (Some("+"), Some(pgid)) => {
                let ticks = f.next().and_then(|t| t.parse().ok());
                let sheet = f.next().and_then(|s| s.parse().ok());
                if let (Some(ticks), Some(sheet), Some(job)) = (ticks, sheet, f.next()) {
                    let job = job.to_string();
                    live.insert(pgid, Recorded { ticks, sheet, job });
                }
            }
            (Some("-"), Some(pgid)) => {
                live.remove(&pgid);
            }
            _ => {}
        }
    }
    live
}

/// Groups a journal (or a per-attempt record file of an older conductor) says were still
/// running: (pgid, leader start ticks).
fn leftovers(dir: &Path) -> Vec<(u32, u64)> {
    let mut live: HashMap<u32, u64> = HashMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        if path.file_name().is_some_and(|n| n == JOURNAL) {
            live.extend(
                replay_journal(&text)
                    .into_iter()
                    .map(|(pgid, r)| (pgid, r.ticks)),
            );
        } else {
            // `<job>.<sheet>.<pgid>` holding "pgid ticks" (conductors before the journal).
            let mut f = text.split_whitespace();
            if let (Some(pgid), Some(ticks)) = (
                f.next().and_then(|p| p.parse::<u32>().ok()),
                f.next().and_then(|s| s.parse::<u64>().ok()),
            ) {
                live.insert(pgid, ticks);
            }
        }
    }
    live.into_iter().collect()
}

/// End every recorded group that is still running: SIGTERM, up to `grace`, then SIGKILL.
/// Returns how many groups were signalled.
pub(crate) fn reap_leftovers(dir: &Path, grace: Duration) -> usize {
    let mut live = Vec::new();
    for (pgid, started) in leftovers(dir) {
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
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap()
    }

    #[test]
    fn groups_still_in_the_journal_are_reaped_and_stale_records_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let inflight = Inflight::new(dir.path().to_path_buf());
        let mut running = sleeper();
        let mut ended = sleeper();
        let (a, b) = (running.id(), ended.id());
        let rec_a = inflight
            .record("job x", 3, a, start_ticks(a).unwrap(), 1e12)
            .expect("recorded");
        let rec_b = inflight
            .record("job y", 1, b, start_ticks(b).unwrap(), 1e12)
            .expect("recorded");
        let journal = std::fs::read_to_string(dir.path().join(JOURNAL)).unwrap();
        assert!(journal.contains(&format!("\n+ {a} ")), "{journal}");
        assert!(journal.contains(" 3 job x\n"), "{journal}");
        drop(rec_b); // its attempt ended normally
        std::mem::forget(rec_a); // as if the conductor died without cleaning up
                                 // A record of an older conductor whose process is gone (pid reuse guard: wrong
                                 // start time).
        std::fs::write(dir.path().join("old.1.1"), "1 12345\n").unwrap();
        assert_eq!(reap_leftovers(dir.path(), Duration::from_secs(2)), 1);
        assert!(!running.wait().unwrap().success(), "the sleeper was killed");
        assert!(
            ended.try_wait().unwrap().is_none(),
            "a group whose attempt ended is left alone"
        );
        let _ = ended.kill();
        let _ = ended.wait();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "records consumed"
        );
    }

    #[test]
    fn the_journal_empties_when_nothing_runs() {
        let dir = tempfile::tempdir().unwrap();
        let inflight = Inflight::new(dir.path().to_path_buf());
        let me = std::process::id();
        let r1 = inflight.record("j", 1, me, 7, 1e12).expect("recorded");
        let r2 = inflight.record("j", 2, me + 1, 8, 1e12).expect("recorded");
        let journal = dir.path().join(JOURNAL);
        drop(r1);
        assert!(std::fs::metadata(&journal).unwrap().len() > 0);
        drop(r2);
        assert_eq!(std::fs::metadata(&journal).unwrap().len(), 0);
    }
}
