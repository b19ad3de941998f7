//! The watchdog: a small companion process that outlives the conductor and ends instrument
//! process groups the conductor can no longer end itself (issue #4: no instrument may run
//! longer than its own timeout, even after `kill -9` of the conductor).
//!
//! The conductor starts one watchdog (`mozart __watchdog`), which learns which groups are
//! running and until when from the conductor's in-flight journal (the file the next
//! conductor start reaps from, followed every half second: no message, no wake-up per
//! attempt), and, for a group the conductor could not write there, from its stdin: `track
//! <pgid> <start_ticks> <deadline>` and `untrack <pgid>`. The watchdog ends a group whose
//! deadline passed, and when its stdin closes — the conductor exited or was killed — it
//! ends every group still tracked or listed. A group is only signalled while its leader
//! still has the recorded start time or — its leader gone (a shell ended by SIGTERM while a
//! child that ignores it runs on) — while a member carries the attempt's tag, which a group
//! that took the id over later cannot; so a reused pid is never touched (architecture
//! invariant 5).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::Mutex;
use std::time::Duration;

use mozart_backends::descendants::{end_leftovers, Leftover};

/// Grace between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(3);

/// Start time of a process (field 22 of `/proc/<pid>/stat`, clock ticks since boot).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// End what is left of the attempts (SIGTERM, grace, SIGKILL): each group verified by its
/// leader's start time or a member carrying the attempt's tag, and its tagged processes.
fn end_groups(groups: &[Leftover]) {
    end_leftovers(groups, GRACE);
}

/// The variable naming the in-flight journal the watchdog follows.
pub const JOURNAL_VAR: &str = "MOZART_WATCHDOG_JOURNAL";

/// How often the watchdog looks at the journal and the deadlines.
const POLL: Duration = Duration::from_millis(500);

/// One group the watchdog follows.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    /// Start time of the group's leader.
    ticks: u64,
    /// Deadline (epoch seconds; infinite until the journal gives one).
    deadline: f64,
    /// The attempt's tag, which each of its processes carries.
    tag: Option<String>,
}

impl Entry {
    fn leftover(&self, pgid: u32) -> Leftover {
        Leftover {
            pgid,
            ticks: self.ticks,
            tag: self.tag.clone(),
        }
    }
}

/// pgid → what is known of the group.
type Tracked = HashMap<u32, Entry>;

/// The conductor's in-flight journal as the watchdog follows it: the groups it says are
/// running. The conductor appends `+ pgid ticks sheet job`, `t pgid tag` (the attempt's
/// tag) and `@ pgid deadline` when a group starts (one write) and `- pgid` when it ends; it empties the file when nothing
/// runs, and the first line it writes to an empty file is `= <generation>`, new at each
/// emptying — so a file emptied and filled again between two looks is told apart from one
/// that only grew.
struct Follower {
    path: std::path::PathBuf,
    file: Option<(std::fs::File, (u64, u64))>,
    generation: Vec<u8>,
    offset: u64,
    tracked: Tracked,
}

impl Follower {
    fn new(path: std::path::PathBuf) -> Follower {
        Follower {
            path,
            file: None,
            generation: Vec::new(),
            offset: 0,
            tracked: HashMap::new(),
        }
    }

    fn reset(&mut self) {
        self.generation.clear();
        self.offset = 0;
        self.tracked.clear();
    }

    /// Take what the journal says now. With `reopen`, a journal replaced at its path (a new
    /// conductor's, after the next start consumed this one's) is followed instead; without
    /// it (the conductor is gone) only the file already open is read.
    fn poll(&mut self, reopen: bool) {
        use std::os::unix::fs::{FileExt, MetadataExt};
        if reopen {
            // A journal gone from its path is still followed through the open file (nothing
            // removes it while its conductor lives); another file there is a new journal.
            let at_path = std::fs::metadata(&self.path)
                .ok()
                .map(|m| (m.dev(), m.ino()));
            if at_path.is_some() && at_path != self.file.as_ref().map(|(_, id)| *id) {
                self.reset();
                self.file =
                    at_path.and_then(|id| std::fs::File::open(&self.path).ok().map(|f| (f, id)));
            }
        }
        let Some((file, _)) = &self.file else { return };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            return;
        };
        let mut head = [0u8; 64];
        let n = file.read_at(&mut head, 0).unwrap_or(0);
        let generation = head[..n]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(&head[..0], |end| &head[..end]);
        if generation != self.generation.as_slice() || len < self.offset {
            self.generation = generation.to_vec();
            self.offset = 0;
            self.tracked.clear();
        }
        if len <= self.offset {
            return;
        }
        let mut buf = vec![0u8; usize::try_from(len - self.offset).unwrap_or(0)];
        let Ok(read) = file.read_at(&mut buf, self.offset) else {
            return;
        };
        buf.truncate(read);
        // Complete lines only: a line being written is taken at the next look.
        let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        self.offset += end as u64 + 1;
        for line in buf[..end].split(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(line);
            let mut f = line.split(' ');
            match (f.next(), f.next().and_then(|p| p.parse::<u32>().ok())) {
                (Some("+"), Some(pgid)) => {
                    if let Some(ticks) = f.next().and_then(|t| t.parse().ok()) {
                        let (deadline, tag) = (f64::INFINITY, None);
                        let entry = Entry {
                            ticks,
                            deadline,
                            tag,
                        };
                        self.tracked.insert(pgid, entry);
                    }
                }
                (Some("t"), Some(pgid)) => {
                    if let (Some(entry), Some(tag)) = (self.tracked.get_mut(&pgid), f.next()) {
                        entry.tag = Some(tag.to_string());
                    }
                }
                (Some("@"), Some(pgid)) => {
                    let deadline = f.next().and_then(|d| d.parse::<f64>().ok());
                    if let (Some(entry), Some(deadline)) = (self.tracked.get_mut(&pgid), deadline) {
                        entry.deadline = deadline;
                    }
                }
                (Some("-"), Some(pgid)) => {
                    self.tracked.remove(&pgid);
                }
                _ => {}
            }
        }
    }
}

/// The groups of `tracked` whose deadline passed (taken out of it).
fn take_due(tracked: &mut Tracked, now: f64) -> Vec<Leftover> {
    let due: Vec<Leftover> = tracked
        .iter()
        .filter(|(_, e)| e.deadline <= now)
        .map(|(p, e)| e.leftover(*p))
        .collect();
    for l in &due {
        tracked.remove(&l.pgid);
    }
    due
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
    // What the journal says runs, and what the conductor told over stdin (a group it could
    // not write to the journal).
    let mut journal = std::env::var_os(JOURNAL_VAR).map(|p| Follower::new(p.into()));
    // What it lists already (a replacement's conductor has groups running): known before
    // the first look's wait, in case the conductor dies meanwhile.
    if let Some(j) = journal.as_mut() {
        j.poll(true);
    }
    let mut tracked: Tracked = HashMap::new();
    loop {
        match rx.recv_timeout(POLL) {
            Ok(Some(line)) => {
                let mut f = line.split_whitespace();
                match (f.next(), f.next().and_then(|p| p.parse::<u32>().ok())) {
                    (Some("track"), Some(pgid)) => {
                        let ticks = f.next().and_then(|t| t.parse().ok());
                        let deadline = f.next().and_then(|d| d.parse().ok());
                        let tag = f.next().map(str::to_string);
                        if let (Some(ticks), Some(deadline)) = (ticks, deadline) {
                            let entry = Entry {
                                ticks,
                                deadline,
                                tag,
                            };
                            tracked.insert(pgid, entry);
                        }
                    }
                    (Some("untrack"), Some(pgid)) => {
                        tracked.remove(&pgid);
                    }
                    _ => {}
                }
            }
            Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                // The conductor is gone: whatever its journal still lists is ended (the
                // file it wrote, not one a new conductor may have started since).
                let mut all: Vec<Leftover> = tracked.iter().map(|(p, e)| e.leftover(*p)).collect();
                if let Some(j) = journal.as_mut() {
                    j.poll(false);
                    all.extend(j.tracked.iter().map(|(p, e)| e.leftover(*p)));
                }
                end_groups(&all);
                return 0;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        let now = mozart_ipc::time::epoch_now();
        let mut due = take_due(&mut tracked, now);
        if let Some(j) = journal.as_mut() {
            j.poll(true);
            due.extend(take_due(&mut j.tracked, now));
        }
        if !due.is_empty() {
            end_groups(&due);
        }
    }
}

/// The conductor's handle on its watchdog process. The watchdog is replaced whenever it
/// ends while the conductor runs (killed by hand, OOM): a keeper thread waits for it and
/// starts another, which reads the in-flight journal from its start and is told again of
/// the groups sent over stdin — so instruments never outlive a killed conductor only
/// because its watchdog died first.
#[derive(Debug)]
pub struct Watchdog {
    inner: std::sync::Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The in-flight journal each watchdog follows.
    journal: Option<std::path::PathBuf>,
    /// The running watchdog's stdin, and what it was told that a replacement must be told
    /// again (`track` lines by pgid; whether the journal is ready).
    told: Mutex<Told>,
    /// The handle was dropped: a watchdog that ends is not replaced.
    closed: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
struct Told {
    stdin: Option<ChildStdin>,
    tracked: HashMap<u32, String>,
    journal_ready: bool,
}

/// Pause before starting a replacement after a watchdog ended, doubled while starts fail.
const RESPAWN_PAUSE: Duration = Duration::from_millis(200);

impl Watchdog {
    /// Start `<current exe> __watchdog` in its own process group (so a Ctrl-C aimed at a
    /// foreground conductor does not stop it first), following the in-flight `journal`
    /// when given (the groups it lists need no message of their own), and a thread that
    /// replaces it whenever it ends.
    pub fn spawn(journal: Option<&std::path::Path>) -> std::io::Result<Watchdog> {
        let journal = journal.map(std::path::Path::to_path_buf);
        let (child, stdin) = start(journal.as_deref())?;
        let inner = std::sync::Arc::new(Inner {
            journal,
            told: Mutex::new(Told {
                stdin: Some(stdin),
                tracked: HashMap::new(),
                journal_ready: false,
            }),
            closed: std::sync::atomic::AtomicBool::new(false),
        });
        let keeper = std::sync::Arc::clone(&inner);
        std::thread::Builder::new()
            .name("watchdog-keeper".into())
            .spawn(move || keep(&keeper, child))?;
        Ok(Watchdog { inner })
    }

    fn told(&self) -> std::sync::MutexGuard<'_, Told> {
        self.inner.told.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Supervise group `pgid` (its leader started at `ticks`) until `deadline` (epoch
    /// seconds), with the attempt's tag when known (it names the group's processes once the
    /// leader is gone).
    pub fn track_started(&self, pgid: u32, ticks: u64, tag: Option<&str>, deadline: f64) {
        let tag = tag
            .filter(|t| !t.is_empty() && !t.contains(char::is_whitespace))
            .map(|t| format!(" {t}"))
            .unwrap_or_default();
        let line = format!("track {pgid} {ticks} {deadline}{tag}\n");
        let mut told = self.told();
        send(&mut told.stdin, &line);
        told.tracked.insert(pgid, line);
    }

    /// Tell the watchdog its journal is in place: it follows it from this message on (the
    /// message comes before any group the journal lists, and before the end of stdin).
    pub fn journal_ready(&self) {
        let mut told = self.told();
        send(&mut told.stdin, "journal\n");
        told.journal_ready = true;
    }

    /// Stop supervising group `pgid` (it ended, or the conductor ended it).
    pub fn untrack(&self, pgid: u32) {
        let mut told = self.told();
        if told.tracked.remove(&pgid).is_some() {
            send(&mut told.stdin, &format!("untrack {pgid}\n"));
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // Its stdin closes: the watchdog ends what it follows and exits, and is not replaced.
        self.told().stdin = None;
    }
}

/// Start one watchdog process.
fn start(journal: Option<&std::path::Path>) -> std::io::Result<(Child, ChildStdin)> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    let mut command = Command::new(exe);
    if let Some(journal) = journal {
        command.env(JOURNAL_VAR, journal);
    }
    let mut child = command
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
    Ok((child, stdin))
}

fn send(stdin: &mut Option<ChildStdin>, line: &str) {
    let Some(pipe) = stdin.as_mut() else { return };
    if let Err(e) = pipe.write_all(line.as_bytes()).and_then(|()| pipe.flush()) {
        // It ended: the keeper starts another and tells it what this one was told.
        tracing::warn!(error = %e, "watchdog unreachable");
    }
}

/// The keeper thread: wait for the watchdog to end and, while the conductor runs, start
/// another in its place, told again of every group sent over stdin (the journal's it
/// reads itself).
fn keep(inner: &Inner, mut child: Child) {
    use std::sync::atomic::Ordering;
    loop {
        let pid = child.id();
        // An error: it is no longer our child to wait for (reaped elsewhere), so gone.
        let ended = child.wait();
        if inner.closed.load(Ordering::SeqCst) {
            return;
        }
        let how = match &ended {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        };
        tracing::warn!(pid, ended = %how, "the instrument watchdog ended; starting another");
        let mut pause = RESPAWN_PAUSE;
        let (next, stdin) = loop {
            std::thread::sleep(pause);
            if inner.closed.load(Ordering::SeqCst) {
                return;
            }
            match start(inner.journal.as_deref()) {
                Ok(started) => break started,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start another instrument watchdog; trying again");
                    pause = (pause * 2).min(Duration::from_secs(30));
                }
            }
        };
        let mut told = inner.told.lock().unwrap_or_else(|p| p.into_inner());
        if inner.closed.load(Ordering::SeqCst) {
            // Dropped meanwhile: the new one ends at once with its closed stdin.
            drop(stdin);
            drop(told);
            let mut next = next;
            let _ = next.wait();
            return;
        }
        told.stdin = Some(stdin);
        if told.journal_ready {
            send(&mut told.stdin, "journal\n");
        }
        let lines: Vec<String> = told.tracked.values().cloned().collect();
        for line in lines {
            send(&mut told.stdin, &line);
        }
        drop(told);
        tracing::info!(pid = next.id(), "instrument watchdog replaced");
        child = next;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn append(path: &std::path::Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    /// The watchdog knows what the journal lists, with each group's deadline: a journal
    /// emptied and filled again between two looks is read anew (its generation line), a
    /// line still being written waits for its end, and a journal removed from its path is
    /// still read through the open file once the conductor is gone.
    #[test]
    fn the_follower_tracks_the_journal_through_emptyings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut follower = Follower::new(path.clone());
        follower.poll(true);
        assert!(follower.tracked.is_empty(), "no journal yet");
        append(
            &path,
            "= 1 1\n+ 10 100 1 job a\n@ 10 50.5\n+ 11 110 2 job a\nt 11 7.2\n@ 11 60\n",
        );
        follower.poll(true);
        assert_eq!(
            follower.tracked.get(&10).map(|e| (e.ticks, e.deadline)),
            Some((100, 50.5))
        );
        assert_eq!(
            follower.tracked.get(&11).map(|e| (e.ticks, e.deadline)),
            Some((110, 60.0))
        );
        append(&path, "- 10\n+ 12 120 3 job b\n@ 12");
        follower.poll(true);
        assert!(!follower.tracked.contains_key(&10));
        assert_eq!(
            follower.tracked.get(&12).map(|e| (e.ticks, e.deadline)),
            Some((120, f64::INFINITY))
        );
        append(&path, " 70\n");
        follower.poll(true);
        assert_eq!(
            follower.tracked.get(&12).map(|e| (e.ticks, e.deadline)),
            Some((120, 70.0))
        );
        let due = take_due(&mut follower.tracked, 65.0);
        assert_eq!(
            due,
            vec![Leftover {
                pgid: 11,
                ticks: 110,
                tag: Some("7.2".into())
            }]
        );
        // Emptied, then filled past the old length before the next look.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        append(
            &path,
            "= 1 2\n+ 20 200 4 a job with a long name, longer than everything before it\n@ 20 80\n",
        );
        follower.poll(true);
        assert_eq!(follower.tracked.len(), 1, "{:?}", follower.tracked);
        assert_eq!(
            follower.tracked.get(&20).map(|e| (e.ticks, e.deadline)),
            Some((200, 80.0))
        );
        // A new conductor's start consumes the journal; the gone conductor's watchdog reads
        // what it had, not a file made at the same path since.
        std::fs::remove_file(&path).unwrap();
        append(&path, "= 2 1\n+ 30 300 1 other\n@ 30 90\n");
        follower.poll(false);
        assert_eq!(follower.tracked.len(), 1);
        assert!(follower.tracked.contains_key(&20));
    }
}
