//! Instrument process groups left behind by a conductor that was killed (conductor.md §15).
//!
//! While an attempt runs, its process group id and the leader's start time are kept in a
//! small file under `$MOZART_HOME/inflight/`. A conductor that dies with SIGKILL cannot clean
//! up, so on the next start [`reap_leftovers`] ends every group still recorded there — before
//! any job resumes, so an attempt never runs twice side by side in one workspace. The start
//! time guards against signalling an unrelated process that reused the pid (architecture
//! invariant 5: never signal processes the conductor did not start).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::killpg;
use nix::unistd::Pid;

use mozart_backends::descendants::{end_leftovers, Leftover};

/// The journal file inside the in-flight directory.
pub(crate) const JOURNAL: &str = "journal";

/// The file naming the conductor that keeps the journal (`<pid> <start ticks>`), from its
/// start until it stops cleanly. Found by the next start, it says the conductor died with
/// attempts it may not have recorded: an attempt is spawned a moment before its group can
/// be journaled, and a `kill -9` in that moment left it running beside its own re-run.
/// Every attempt's processes carry a tag made of the conductor's pid, which finds them.
pub(crate) const OWNER: &str = "owner";

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
        self.ensure_file(&mut state)?;
        drop(state);
        if let Some(ticks) = mozart_backends::descendants::own_start_ticks() {
            let text = format!("{} {ticks}\n", std::process::id());
            let file = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(self.dir.join(OWNER));
            file.and_then(|mut f| f.write_all(text.as_bytes()))?;
        }
        Ok(())
    }

    /// The conductor stops cleanly, its attempts ended: the next start has nothing of it to
    /// look for.
    pub(crate) fn close(&self) {
        let _ = std::fs::remove_file(self.dir.join(OWNER));
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
        tag: Option<&str>,
        deadline: f64,
    ) -> Option<InflightRecord> {
        let job_text: String = job
            .chars()
            .map(|c| if c.is_control() { '_' } else { c })
            .collect();
        let mut state = super::lock(&self.state);
        // The attempt's tag (`t`) names its processes once the leader is gone.
        let tag = tag.filter(|t| !t.is_empty() && !t.contains(char::is_whitespace));
        let tag_line = tag.map(|t| format!("t {pgid} {t}\n")).unwrap_or_default();
        let line = format!("+ {pgid} {ticks} {sheet} {job_text}\n{tag_line}@ {pgid} {deadline}\n");
        if let Err(e) = self.append(&mut state, &line) {
            tracing::warn!(job, sheet, error = %e, "cannot record the instrument's process group");
            return None;
        }
        state.live.insert(pgid, (job.to_string(), sheet));
        Some(InflightRecord {
            inflight: Arc::clone(self),
            pgid,
            leftover: Leftover {
                pgid,
                ticks,
                tag: tag.map(str::to_string),
            },
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

/// A recorded in-flight attempt; dropping it forgets the record once nothing of the
/// attempt runs any more. An attempt that ended normally is gone by then; a cancelled or
/// interrupted one is still being ended (SIGTERM, the kill grace, SIGKILL, from the
/// backend's own thread): its record stays until its group and tagged processes are gone,
/// so a conductor killed meanwhile leaves it to the watchdog and the next start.
#[derive(Debug)]
pub(crate) struct InflightRecord {
    inflight: Arc<Inflight>,
    pgid: u32,
    leftover: Leftover,
}

/// How long a record outlives its dropped attempt at most while the attempt's processes
/// are being ended (the kill grace and SIGKILL rounds take far less).
const FORGET_WAIT: Duration = Duration::from_secs(120);

impl Drop for InflightRecord {
    fn drop(&mut self) {
        // Fast path (every sheet): the group is empty, one signal-0 tells.
        let group_live = i32::try_from(self.pgid).is_ok_and(group_alive);
        if !group_live || !self.leftover.alive() {
            self.inflight.forget(self.pgid);
            return;
        }
        let inflight = Arc::clone(&self.inflight);
        let pgid = self.pgid;
        let leftover = self.leftover.clone();
        let spawned = std::thread::Builder::new()
            .name("mozart-inflight".into())
            .spawn(move || {
                let until = Instant::now() + FORGET_WAIT;
                while Instant::now() < until && leftover.alive() {
                    std::thread::sleep(Duration::from_millis(100));
                }
                inflight.forget(pgid);
            });
        if spawned.is_err() {
            self.inflight.forget(self.pgid);
        }
    }
}

/// A group the journal says is running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// Start time of the group's leader (`/proc/<pid>/stat` field 22).
    pub ticks: u64,
    pub sheet: u32,
    pub job: String,
    /// The attempt's tag (`t pgid tag`), when the journal has it.
    pub tag: Option<String>,
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
                    let tag = None;
                    live.insert(
                        pgid,
                        Recorded {
                            ticks,
                            sheet,
                            job,
                            tag,
                        },
                    );
                }
            }
            (Some("t"), Some(pgid)) => {
                if let (Some(r), Some(tag)) = (live.get_mut(&pgid), f.next()) {
                    r.tag = Some(tag.to_string());
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
/// running.
fn leftovers(dir: &Path) -> Vec<Leftover> {
    let mut live: HashMap<u32, Leftover> = HashMap::new();
    let mut owner: Option<(u32, u64)> = None;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        if path.file_name().is_some_and(|n| n == OWNER) {
            let mut f = text.split_whitespace();
            owner = f
                .next()
                .and_then(|p| p.parse::<u32>().ok())
                .zip(f.next().and_then(|t| t.parse::<u64>().ok()));
        } else if path.file_name().is_some_and(|n| n == JOURNAL) {
            live.extend(replay_journal(&text).into_iter().map(|(pgid, r)| {
                let (ticks, tag) = (r.ticks, r.tag);
                (pgid, Leftover { pgid, ticks, tag })
            }));
        } else {
            // `<job>.<sheet>.<pgid>` holding "pgid ticks" (conductors before the journal).
            let mut f = text.split_whitespace();
            if let (Some(pgid), Some(ticks)) = (
                f.next().and_then(|p| p.parse::<u32>().ok()),
                f.next().and_then(|s| s.parse::<u64>().ok()),
            ) {
                let tag = None;
                live.insert(pgid, Leftover { pgid, ticks, tag });
            }
        }
    }
    let mut all: Vec<Leftover> = live.into_values().collect();
    // Whatever else the dead conductor's attempts left, known by their tags alone.
    if let Some((pid, ticks)) = owner {
        let tags: HashSet<Option<String>> = all.iter().map(|l| l.tag.clone()).collect();
        all.extend(
            mozart_backends::descendants::conductor_leftovers(pid, ticks)
                .into_iter()
                .filter(|l| !tags.contains(&l.tag)),
        );
    }
    all
}

/// End what is left of every recorded attempt: its group — verified by its leader's start
/// time or, once the leader is gone, by a member carrying the attempt's tag — and its
/// tagged processes: SIGTERM, up to `grace`, then SIGKILL. Returns how many attempts had
/// anything left.
pub(crate) fn reap_leftovers(dir: &Path, grace: Duration) -> usize {
    let leftovers = leftovers(dir);
    let n = end_leftovers(&leftovers, grace);
    if n > 0 {
        tracing::info!(
            groups = n,
            "reaped instrument process groups left by a previous conductor"
        );
    }
    n
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

    fn ticks(pid: u32) -> u64 {
        mozart_conductor::watchdog::start_ticks(pid).unwrap()
    }

    /// Whether `pid` is gone (or a zombie nobody reaped yet).
    fn gone(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true)
    }

    fn wait_gone(pid: u32, within: Duration) -> bool {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if gone(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        gone(pid)
    }

    #[test]
    fn groups_still_in_the_journal_are_reaped_and_stale_records_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let inflight = Inflight::new(dir.path().to_path_buf());
        let mut running = sleeper();
        let mut ended = sleeper();
        let mut reused = sleeper();
        let (a, b, c) = (running.id(), ended.id(), reused.id());
        let rec_a = inflight
            .record("job x", 3, a, ticks(a), Some("1.1"), 1e12)
            .expect("recorded");
        let rec_b = inflight
            .record("job y", 1, b, ticks(b), None, 1e12)
            .expect("recorded");
        // A group whose id was taken over (another start time, no member with the tag).
        let rec_c = inflight
            .record("job z", 1, c, ticks(c) + 1, Some("1.3"), 1e12)
            .expect("recorded");
        let journal = std::fs::read_to_string(dir.path().join(JOURNAL)).unwrap();
        assert!(journal.contains(&format!("\n+ {a} ")), "{journal}");
        assert!(journal.contains(" 3 job x\n"), "{journal}");
        assert!(journal.contains(&format!("\nt {a} 1.1\n")), "{journal}");
        // Its attempt ended normally: the record goes with it.
        ended.kill().unwrap();
        ended.wait().unwrap();
        drop(rec_b);
        // As if the conductor died without cleaning up.
        std::mem::forget(rec_a);
        std::mem::forget(rec_c);
        // A record of an older conductor whose process is gone (pid reuse guard: wrong
        // start time).
        std::fs::write(dir.path().join("old.1.1"), "1 12345\n").unwrap();
        assert_eq!(reap_leftovers(dir.path(), Duration::from_secs(2)), 1);
        assert!(!running.wait().unwrap().success(), "the sleeper was killed");
        assert!(
            reused.try_wait().unwrap().is_none(),
            "a group that is not the recorded one is left alone"
        );
        let _ = reused.kill();
        let _ = reused.wait();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "records consumed"
        );
    }

    /// A group whose leader is gone: a shell that died of SIGTERM while its child, which
    /// ignores SIGTERM, sleeps on (the `shell` instrument's driver under `cancel`). Its
    /// pid is spawned with `tag` and its child's pid is returned.
    fn leaderless_group(tag: &str) -> u32 {
        use std::io::BufRead as _;
        let mut leader = std::process::Command::new("sh")
            // The child prints its pid once it ignores SIGTERM.
            .args([
                "-c",
                "sh -c 'trap \"\" TERM; echo $$; exec sleep 30' & wait",
            ])
            .env(mozart_backends::descendants::ATTEMPT_VAR, tag)
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(leader.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let child: u32 = line.trim().parse().unwrap();
        // The shell dies of SIGTERM; the child ignores it.
        nix::sys::signal::killpg(
            Pid::from_raw(i32::try_from(leader.id()).unwrap()),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        leader.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(!gone(child), "the child ignores SIGTERM");
        child
    }

    #[test]
    fn a_group_whose_leader_died_is_reaped_when_a_member_carries_the_attempts_tag() {
        let dir = tempfile::tempdir().unwrap();
        let inflight = Inflight::new(dir.path().to_path_buf());
        let tag = format!("{}.reaper-test-a", std::process::id());
        let ours = leaderless_group(&tag);
        let pgid_of = |pid: u32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let rest = stat.rsplit_once(')').unwrap().1.to_string();
            rest.split_whitespace()
                .nth(2)
                .unwrap()
                .parse::<u32>()
                .unwrap()
        };
        let g = pgid_of(ours);
        // The leader's start time as recorded: at or before its child's.
        let t = ticks(ours);
        std::mem::forget(inflight.record("job", 1, g, t, Some(&tag), 1e12).unwrap());
        // Another leaderless group whose members carry another tag: not ours.
        let other = leaderless_group(&format!("{}.reaper-test-b", std::process::id()));
        let og = pgid_of(other);
        std::mem::forget(
            inflight
                .record("job", 2, og, ticks(other), Some("x.1"), 1e12)
                .unwrap(),
        );
        assert_eq!(reap_leftovers(dir.path(), Duration::from_millis(300)), 1);
        assert!(
            wait_gone(ours, Duration::from_secs(5)),
            "the child was ended"
        );
        assert!(!gone(other), "a group without the tag is left alone");
        let _ = nix::sys::signal::kill(
            Pid::from_raw(i32::try_from(other).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        );
    }

    /// A conductor killed in the moment between spawning an attempt and journaling its
    /// group: the journal does not name it, but the owner file does, and the attempt's tag
    /// (`<conductor pid>.<n>`) finds its processes. A process carrying a live conductor's
    /// tag is left alone.
    #[test]
    fn an_attempt_the_dead_conductor_never_journaled_is_found_by_its_tag() {
        let dir = tempfile::tempdir().unwrap();
        // A pid no process has now: the dead conductor's.
        let mut gone_one = std::process::Command::new("true").spawn().unwrap();
        let dead = gone_one.id();
        gone_one.wait().unwrap();
        let since = ticks(std::process::id());
        let spawn_tagged = |tag: String| {
            std::process::Command::new("sh")
                .args(["-c", "exec sleep 30"])
                .env(mozart_backends::descendants::ATTEMPT_VAR, tag)
                .process_group(0)
                .spawn()
                .unwrap()
        };
        let mut orphan = spawn_tagged(format!("{dead}.7"));
        // Tagged by a conductor that still runs (this test's own pid stands for it).
        let mut live_ones = spawn_tagged(format!("{}.7", std::process::id()));
        // Only an empty journal (nothing recorded) and the owner file.
        std::fs::write(dir.path().join(JOURNAL), "").unwrap();
        std::fs::write(dir.path().join(OWNER), format!("{dead} {since}\n")).unwrap();
        assert_eq!(reap_leftovers(dir.path(), Duration::from_millis(300)), 1);
        assert!(!orphan.wait().unwrap().success(), "the orphan was ended");
        assert!(
            live_ones.try_wait().unwrap().is_none(),
            "a live conductor's attempt is left alone"
        );
        let _ = live_ones.kill();
        let _ = live_ones.wait();
        // Without the owner file (a clean stop), nothing is looked for.
        let mut kept = spawn_tagged(format!("{dead}.8"));
        std::fs::write(dir.path().join(JOURNAL), "").unwrap();
        assert_eq!(reap_leftovers(dir.path(), Duration::from_millis(300)), 0);
        assert!(kept.try_wait().unwrap().is_none(), "nothing was looked for");
        let _ = kept.kill();
        let _ = kept.wait();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// The owner file is written when the journal opens and removed at a clean stop.
    #[test]
    fn the_owner_file_names_this_conductor_until_it_closes() {
        let dir = tempfile::tempdir().unwrap();
        let inflight = Inflight::new(dir.path().to_path_buf());
        inflight.open().unwrap();
        let text = std::fs::read_to_string(dir.path().join(OWNER)).unwrap();
        assert_eq!(
            text,
            format!("{} {}\n", std::process::id(), ticks(std::process::id()))
        );
        inflight.close();
        assert!(!dir.path().join(OWNER).exists());
    }

    /// A record outlives its dropped attempt while the attempt's group is still being
    /// ended (a cancel's SIGTERM, grace, SIGKILL): a conductor killed meanwhile leaves it to
    /// the watchdog and the next start. It goes once the group is empty.
    #[test]
    fn a_dropped_record_stays_in_the_journal_until_its_group_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let inflight = Inflight::new(dir.path().to_path_buf());
        let mut child = sleeper();
        let pid = child.id();
        let record = inflight
            .record("job", 1, pid, ticks(pid), None, 1e12)
            .unwrap();
        drop(record);
        let journal = dir.path().join(JOURNAL);
        let text = std::fs::read_to_string(&journal).unwrap();
        assert!(text.contains(&format!("+ {pid} ")), "{text}");
        assert!(!text.contains(&format!("- {pid}")), "{text}");
        child.kill().unwrap();
        child.wait().unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while std::fs::metadata(&journal).unwrap().len() > 0 {
            assert!(Instant::now() < until, "the record was never forgotten");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[test]
    fn the_journal_empties_when_nothing_runs() {
        let dir = tempfile::tempdir().unwrap();
        let inflight = Inflight::new(dir.path().to_path_buf());
        let me = std::process::id();
        let r1 = inflight
            .record("j", 1, me, 7, None, 1e12)
            .expect("recorded");
        let r2 = inflight
            .record("j", 2, me + 1, 8, None, 1e12)
            .expect("recorded");
        let journal = dir.path().join(JOURNAL);
        drop(r1);
        assert!(std::fs::metadata(&journal).unwrap().len() > 0);
        drop(r2);
        assert_eq!(std::fs::metadata(&journal).unwrap().len(), 0);
    }
}
