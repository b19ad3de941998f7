//! Every process an attempt started, wherever it went (issue 21: no process outlives its
//! sheet).
//!
//! An instrument's process group holds what it forks, until one of those processes leaves
//! it: `setsid cmd &` starts a new session, a double fork `( (cmd &) & )` or `nohup cmd &`
//! leaves a process whose parent is gone. Signalling the group misses the first; once their
//! parents exit, all of them used to be re-parented to init, out of the conductor's sight.
//!
//! Two things find them:
//!
//! - **The conductor is a child subreaper** (`prctl(PR_SET_CHILD_SUBREAPER)`, set at daemon
//!   start by [`crate::subreaper::install`]): a process whose parent dies is re-parented to
//!   the conductor instead of init, so every process an instrument ever started stays a
//!   descendant of the conductor (which reaps them when they end).
//! - **Every attempt's processes carry its tag**: the instrument is spawned with
//!   `MOZART_ATTEMPT=<tag>` ([`ATTEMPT_VAR`]) in its environment, which its descendants
//!   inherit. A process the conductor adopted is attributed to an attempt by its tag
//!   (`/proc/<pid>/environ`).
//!
//! An attempt's processes are then: each *direct* child of this process whose environment
//! holds the attempt's tag (the instrument itself while it runs, and every adopted orphan of
//! the attempt), with everything below it. Only this process's descendants are ever
//! considered, so a process elsewhere on the machine that copies the variable is never
//! touched (architecture invariant 5: never signal processes the conductor did not start),
//! and a process is signalled only while it still has the start time it was found with (a
//! reused pid is left alone).
//!
//! Not covered: a descendant that leaves the attempt's tree *and* drops the tag (`env -i`,
//! or a program that overwrites its environment block for its process title) before the
//! attempt ends; a process that runs as another user (a setuid program; its environment
//! cannot be read, nor can it be signalled); a process started through another service
//! (`systemd-run`, `at`, `ssh host`), which is not a descendant; and everything outside the
//! conductor's process tree when the conductor itself is killed with SIGKILL (the watchdog
//! then ends the attempts' process groups, not escaped processes). A cgroup per attempt would
//! close the first gap, but needs a delegated cgroup v2 subtree that most conductors (a user
//! session, a container) do not have, and placing a child into it before it runs needs
//! `clone3(CLONE_INTO_CGROUP)` or a pre-exec hook.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::{getpgrp, Pid};

/// The variable holding an attempt's tag in its instrument's environment.
pub const ATTEMPT_VAR: &str = "MOZART_ATTEMPT";

/// Pause between looks while waiting for an attempt's processes to end.
const POLL: Duration = Duration::from_millis(25);

/// Rounds of SIGKILL for processes that keep forking after the grace period.
const KILL_ROUNDS: u32 = 40;

/// The tag of one attempt: unique within this process for its life.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttemptTag(String);

impl AttemptTag {
    /// A fresh tag (`<pid>.<counter>`).
    pub fn new() -> AttemptTag {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        AttemptTag(format!("{}.{}", me(), NEXT.fetch_add(1, Ordering::Relaxed)))
    }

    /// The value of [`ATTEMPT_VAR`].
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for AttemptTag {
    fn default() -> Self {
        AttemptTag::new()
    }
}

/// One process as `/proc/<pid>/stat` shows it (a zombie's entry keeps all of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub pid: i32,
    pub zombie: bool,
    pub pgid: i32,
    pub sid: i32,
    /// Start time in clock ticks since boot (field 22): with the pid, names one process.
    pub start: u64,
}

/// The text of a small `/proc` file. `std::fs::read_to_string` first asks the file's size
/// (`statx`) and position (`lseek`) to size its buffer — a `/proc` file reports 0 — so each
/// look cost two syscalls more than the open, reads and close it needs; the conductor reads
/// a dozen of these per finished sheet (every thread's `children`, the `stat` of each child).
///
/// The files read here (`stat`, `children`) are sequence files: a read fills the caller's
/// buffer record by record and stops early only at the end of the file or when the
/// kernel's own buffer (a page, at least 4 KiB) cannot take the next record (a pid, a
/// `stat` line: far less than [`SHORT_READ`] bytes). So a read that returns less than
/// [`SHORT_READ`] bytes into a larger buffer has reached the end: the read that would
/// return 0 is not made (one system call less per file, two per attempt's end).
fn read_proc(path: impl AsRef<std::path::Path>) -> Option<String> {
    use std::io::Read as _;
    // The read buffer is the thread's own, zeroed once: a fresh 7 KiB array per read was
    // zeroed on every look (a few looks a sheet; issue 24).
    thread_local! {
        static CHUNK: std::cell::RefCell<Box<[u8]>> =
            std::cell::RefCell::new(vec![0u8; 2 * SHORT_READ].into_boxed_slice());
    }
    let mut file = std::fs::File::open(path).ok()?;
    let mut buf = Vec::new();
    CHUNK.with(|chunk| {
        let mut chunk = chunk.try_borrow_mut().ok()?;
        loop {
            match file.read(&mut chunk[..]) {
                Ok(0) => break,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if n < SHORT_READ {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        Some(())
    })?;
    String::from_utf8(buf).ok()
}

/// A read of a `/proc` sequence file shorter than this reached the end ([`read_proc`]): a
/// page's worth, less room for the longest record that would not fit.
const SHORT_READ: usize = 4096 - 512;

pub(crate) fn read_stat(pid: i32) -> Option<Stat> {
    let text = read_proc(format!("/proc/{pid}/stat"))?;
    let rest = text.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let _ppid = fields.next()?;
    let pgid = fields.next()?.parse().ok()?;
    let sid = fields.next()?.parse().ok()?;
    let start = fields.nth(15)?.parse().ok()?;
    Some(Stat {
        pid,
        zombie: matches!(state, "Z" | "X"),
        pgid,
        sid,
        start,
    })
}

/// Whether `/proc/<pid>/task/<tid>/children` exists here (`CONFIG_PROC_CHILDREN`).
fn children_files() -> bool {
    static HAVE: std::sync::LazyLock<bool> =
        std::sync::LazyLock::new(|| std::path::Path::new("/proc/thread-self/children").exists());
    *HAVE
}

/// The pids listed in one thread's `children` file (`None` when it cannot be read: the
/// thread is gone).
fn thread_children(pid: i32, tid: i32, out: &mut Vec<i32>) -> Option<()> {
    let text = read_proc(format!("/proc/{pid}/task/{tid}/children"))?;
    out.extend(
        text.split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok()),
    );
    Some(())
}

/// Who is whose child: read per process from `/proc/<pid>/task/*/children` when the kernel
/// offers it (a few small files), else from one pass over every `/proc/<pid>/stat`.
pub(crate) enum Tree {
    Files,
    Scanned(HashMap<i32, Vec<i32>>),
}

impl Tree {
    pub(crate) fn new() -> Tree {
        if children_files() {
            return Tree::Files;
        }
        let mut map: HashMap<i32, Vec<i32>> = HashMap::new();
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for entry in dir.flatten() {
                let Some(pid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<i32>().ok())
                else {
                    continue;
                };
                let Some(text) = read_proc(format!("/proc/{pid}/stat")) else {
                    continue;
                };
                let ppid = text
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
                if let Some(ppid) = ppid {
                    map.entry(ppid).or_default().push(pid);
                }
            }
        }
        Tree::Scanned(map)
    }

    pub(crate) fn children(&self, pid: i32) -> Vec<i32> {
        match self {
            Tree::Scanned(map) => map.get(&pid).cloned().unwrap_or_default(),
            Tree::Files => {
                // A child belongs to the thread that forked it (or to another thread of the
                // process once that one ended): every thread's list counts.
                let mut out = Vec::new();
                let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                    return out;
                };
                for task in tasks.flatten() {
                    if let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) {
                        let _ = thread_children(pid, tid, &mut out);
                    }
                }
                out
            }
        }
    }

    /// This process's direct children that can belong to an attempt whose instrument the
    /// thread `spawner` spawned, reading the `children` files of that thread and of the
    /// main thread only (instead of one per thread of the conductor, a dozen, on every
    /// attempt's end). `None` when that is not enough to know: no `children` files, or
    /// the spawner thread has ended (its children went to another thread).
    ///
    /// Why two threads suffice: a process is a child of the thread that forked it — the
    /// instrument, of `spawner`; a child the instrument forks with `CLONE_PARENT`, of
    /// `spawner` too. A process whose parent dies is handed to the subreaper's first live
    /// thread, the main one (kernel ≥ 4.1, `find_alive_thread`; before, to the subreaper
    /// thread in its ancestry: `spawner`); so are the children of a thread that ends.
    /// Every process of the attempt that is our direct child is therefore on one of the
    /// two lists, as long as both threads live (the main thread lives as long as the
    /// process).
    fn attempt_children(spawner: i32) -> Option<Vec<i32>> {
        if !children_files() {
            return None;
        }
        let me = me();
        let mut out = Vec::new();
        thread_children(me, spawner, &mut out)?;
        if spawner != me {
            thread_children(me, me, &mut out)?;
        }
        Some(out)
    }
}

/// The attempt tag in `pid`'s environment, if any.
fn environ_tag(pid: i32) -> Option<AttemptTag> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{ATTEMPT_VAR}=").into_bytes();
    env.split(|b| *b == 0)
        .find_map(|e| e.strip_prefix(prefix.as_slice()))
        .map(|v| AttemptTag(String::from_utf8_lossy(v).into_owned()))
}

/// What is known of one of our direct children: its start time and its attempt tag.
#[derive(Debug, Clone)]
struct Known {
    start: u64,
    tag: Option<AttemptTag>,
    /// An instrument this process spawned, not reaped yet ([`note_spawned`]).
    spawned: bool,
}

/// Our direct children's tags, by pid. Reading another process's environment (its memory)
/// is the dearest part of a look at the process tree, and a child's tag does not change, so
/// each child is read once and later looks cost one `children` file per thread. A pid is
/// forgotten by the first look that does not list it — every child that ends sends a
/// SIGCHLD after which the subreaper looks, long before its pid could be handed out again.
/// A child without a tag is remembered only once it is a second old: a child just forked
/// still has the conductor's environment until its `exec`.
fn known() -> MutexGuard<'static, HashMap<i32, Known>> {
    static KNOWN: std::sync::LazyLock<Mutex<HashMap<i32, Known>>> =
        std::sync::LazyLock::new(Mutex::default);
    KNOWN.lock().unwrap_or_else(|p| p.into_inner())
}

/// The start time and attempt tag of our direct child `pid` (`None` when it is gone).
pub(crate) fn child_tag(pid: i32) -> Option<(u64, Option<AttemptTag>)> {
    if let Some(k) = known().get(&pid) {
        return Some((k.start, k.tag.clone()));
    }
    let stat = read_stat(pid)?;
    if stat.zombie {
        return Some((stat.start, None));
    }
    let tag = environ_tag(pid);
    let settled = || {
        let per_second = nanos_per_tick().map(|n| 1_000_000_000 / n.max(1));
        match (boot_ticks_now(), per_second) {
            (Some(now), Some(hz)) => now.saturating_sub(stat.start) > hz,
            _ => false,
        }
    };
    if tag.is_some() || settled() {
        let known_child = Known {
            start: stat.start,
            tag: tag.clone(),
            spawned: false,
        };
        known().insert(pid, known_child);
    }
    Some((stat.start, tag))
}

/// Forget what was known of processes that are no longer our children. A spawned
/// instrument is forgotten by its [`Spawned`] instead: a list read while it was being
/// spawned may not hold it yet.
pub(crate) fn forget_children_except(children: &[i32]) {
    let mut known = known();
    if !known.is_empty() {
        let current: HashSet<i32> = children.iter().copied().collect();
        known.retain(|pid, k| k.spawned || current.contains(pid));
    }
}

/// Whether our direct child `pid` is an instrument this process spawned and has not reaped
/// yet: never an adopted process, so the subreaper need not look at it.
pub(crate) fn spawned_child(pid: i32) -> bool {
    known().get(&pid).is_some_and(|k| k.spawned)
}

/// An instrument just spawned (pid, start time, attempt tag), known as our child until
/// dropped — drop it as soon as the instrument is reaped (or abandoned to the runtime's
/// reaper): while the pid is unreaped no other process can have it, so what is noted
/// stays true.
/// Every look at the process tree (each attempt's end, each SIGCHLD) then knows the
/// in-flight instruments without reading their `/proc` files — a zombie's `stat`, or the
/// environment of a child that has not `exec`d yet (the conductor's own, read in full),
/// on every look.
#[derive(Debug)]
pub(crate) struct Spawned {
    pid: i32,
    tag: AttemptTag,
}

/// Note the instrument `pid` (started at `start` ticks) that this process spawned for the
/// attempt `tag`.
pub(crate) fn note_spawned(pid: i32, start: u64, tag: &AttemptTag) -> Spawned {
    known().insert(
        pid,
        Known {
            start,
            tag: Some(tag.clone()),
            spawned: true,
        },
    );
    Spawned {
        pid,
        tag: tag.clone(),
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let mut known = known();
        if known
            .get(&self.pid)
            .is_some_and(|k| k.spawned && k.tag.as_ref() == Some(&self.tag))
        {
            known.remove(&self.pid);
        }
    }
}

/// This process's id.
pub(crate) fn me() -> i32 {
    // Asked twice per attempt's end, and `getpid` is a system call; the conductor never
    // forks without `exec`, so its id does not change under it.
    static ME: std::sync::LazyLock<i32> =
        std::sync::LazyLock::new(|| i32::try_from(std::process::id()).unwrap_or(0));
    *ME
}

/// Direct children of ours that an attempt's processes left to us (their parent died; we
/// are the subreaper): (pid, start time). The subreaper reaps them once they end, since
/// nothing else waits for them; a child we spawned ourselves is never in here.
pub(crate) fn adopted() -> MutexGuard<'static, HashSet<(i32, u64)>> {
    static ADOPTED: std::sync::LazyLock<Mutex<HashSet<(i32, u64)>>> =
        std::sync::LazyLock::new(Mutex::default);
    ADOPTED.lock().unwrap_or_else(|p| p.into_inner())
}

/// The root (instrument) pid of the registered attempt `tag`: `Some(None)` when registered
/// without one, `None` when not registered.
pub(crate) fn registered_root(tag: &AttemptTag) -> Option<Option<i32>> {
    live().get(tag).copied()
}

/// The live processes of the attempt tagged `tag` (instrument pid `root`, spawned by our
/// thread `spawner` when known): every direct child of this process whose environment
/// holds the tag, and everything below those (zombies left out: they are dead). A tagged
/// direct child other than `root` was adopted: it is noted for the subreaper.
fn find(tag: &AttemptTag, root: Option<i32>, spawner: Option<i32>) -> Vec<Stat> {
    let me = me();
    let tree = Tree::new();
    let children = match spawner.and_then(Tree::attempt_children) {
        Some(children) => children,
        None => {
            // Every thread's list: the whole set of our children, so what is known of
            // processes no longer among them can go.
            let children = tree.children(me);
            forget_children_except(&children);
            children
        }
    };
    let mut stack = Vec::new();
    for &pid in &children {
        let Some((start, child)) = child_tag(pid).filter(|_| pid > 1) else {
            continue;
        };
        if child.as_ref() == Some(tag) {
            if Some(pid) != root {
                adopted().insert((pid, start));
            }
            stack.push(pid);
        }
    }
    let mut seen = HashSet::new();
    let mut found = Vec::new();
    while let Some(pid) = stack.pop() {
        if pid <= 1 || pid == me || !seen.insert(pid) {
            continue;
        }
        let Some(stat) = read_stat(pid) else { continue };
        if !stat.zombie {
            found.push(stat);
        }
        stack.extend(tree.children(pid));
    }
    found
}

/// Signal `stat`'s process if it is still the one that was found (same start time, alive).
fn signal_same(stat: &Stat, sig: Signal) {
    if read_stat(stat.pid).is_some_and(|now| now.start == stat.start && !now.zombie) {
        let _ = kill(Pid::from_raw(stat.pid), sig);
    }
}

/// The attempts whose processes may still run, for [`end_all`] (conductor shutdown).
fn live() -> MutexGuard<'static, HashMap<AttemptTag, Option<i32>>> {
    static LIVE: std::sync::LazyLock<Mutex<HashMap<AttemptTag, Option<i32>>>> =
        std::sync::LazyLock::new(Mutex::default);
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// How many registered attempts each owner (a job) has: what a new run of the job waits
/// to see at zero, so that a cancelled attempt still in its SIGTERM grace never runs beside
/// the same sheet run again.
fn owners() -> MutexGuard<'static, HashMap<String, usize>> {
    static OWNERS: std::sync::LazyLock<Mutex<HashMap<String, usize>>> =
        std::sync::LazyLock::new(Mutex::default);
    OWNERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The attempts of `owner` (a job id, [`crate::process::ProcessSpec::owner`]) whose
/// processes may still run: started and not yet ended, or ending (a cancelled attempt
/// between its SIGTERM and the end of its clean-up).
pub fn attempts_alive(owner: &str) -> usize {
    owners().get(owner).copied().unwrap_or(0)
}

/// An attempt registered for [`end_all`] until dropped (its clean-up is over).
#[derive(Debug)]
pub(crate) struct Registered(AttemptTag, Option<String>);

/// Register the attempt `tag` (process group `pgid`, of `owner`) as possibly running.
pub(crate) fn register(tag: &AttemptTag, pgid: Option<i32>, owner: Option<String>) -> Registered {
    live().insert(tag.clone(), pgid);
    if let Some(owner) = &owner {
        let mut owners = owners();
        match owners.get_mut(owner) {
            Some(n) => *n += 1,
            None => {
                owners.insert(owner.clone(), 1);
            }
        }
    }
    Registered(tag.clone(), owner)
}

impl Drop for Registered {
    fn drop(&mut self) {
        live().remove(&self.0);
        if let Some(owner) = &self.1 {
            let mut owners = owners();
            if let Some(n) = owners.get_mut(owner) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    owners.remove(owner);
                }
            }
        }
    }
}

/// The clean-up of one attempt: its process group and the processes carrying its tag.
#[derive(Debug)]
pub(crate) struct Cleanup {
    pgid: Option<i32>,
    tag: Option<AttemptTag>,
    /// The thread of ours that spawned the instrument, when known ([`Tree::attempt_children`]).
    spawner: Option<i32>,
    group_termed: bool,
    termed: HashSet<(i32, u64)>,
}

impl Cleanup {
    /// The clean-up of group `pgid` (when > 1) and of the processes tagged `tag`.
    pub(crate) fn new(pgid: Option<i32>, tag: Option<AttemptTag>) -> Cleanup {
        Cleanup {
            pgid: pgid.filter(|g| *g > 1),
            tag,
            spawner: None,
            group_termed: false,
            termed: HashSet::new(),
        }
    }

    /// The same clean-up, knowing the thread of ours that spawned the instrument (its looks
    /// at the process tree then read two threads' lists of children, not every thread's).
    pub(crate) fn spawned_by(mut self, spawner: Option<i32>) -> Cleanup {
        self.spawner = spawner;
        self
    }

    fn remaining(&self) -> (bool, Vec<Stat>) {
        let group = self.pgid.is_some_and(|g| signal_group(g, None));
        let procs = self
            .tag
            .as_ref()
            .map(|t| find(t, self.pgid, self.spawner))
            .unwrap_or_default();
        (group, procs)
    }

    /// Nothing of the attempt is left (a group of zombies still counts as left).
    pub(crate) fn gone(&self) -> bool {
        // A live group already answers no: the look at the process tree (a dozen `/proc`
        // files) is for when the group is gone, on this poll or a later one.
        if self.pgid.is_some_and(|g| signal_group(g, None)) {
            return false;
        }
        self.tag
            .as_ref()
            .is_none_or(|t| find(t, self.pgid, self.spawner).is_empty())
    }

    /// SIGTERM to the group (once) and to every tagged process not sent one yet; whether
    /// anything is left.
    pub(crate) fn term(&mut self) -> bool {
        let (group, procs) = self.remaining();
        if group && !self.group_termed {
            if let Some(g) = self.pgid {
                signal_group(g, Some(Signal::SIGTERM));
            }
            self.group_termed = true;
        }
        for p in &procs {
            if self.termed.insert((p.pid, p.start)) {
                if self.termed.len() == 1 {
                    tracing::info!(
                        attempt = self.tag.as_ref().map(AttemptTag::as_str),
                        pid = p.pid,
                        "ending processes the instrument left outside its process group"
                    );
                }
                signal_same(p, Signal::SIGTERM);
            }
        }
        group || !procs.is_empty()
    }

    /// SIGKILL to the group and every tagged process; whether anything was left.
    pub(crate) fn kill(&mut self) -> bool {
        let (group, procs) = self.remaining();
        if group {
            if let Some(g) = self.pgid {
                signal_group(g, Some(Signal::SIGKILL));
            }
        }
        for p in &procs {
            signal_same(p, Signal::SIGKILL);
        }
        group || !procs.is_empty()
    }

    /// Wait up to `limit` for everything to end by itself; whether it did.
    pub(crate) async fn wait_gone(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.gone() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// SIGTERM, up to `grace` for everything to end, then SIGKILL until nothing is left.
    /// Returns whether SIGKILL was needed (something outlived the grace).
    pub(crate) async fn terminate(&mut self, grace: Duration) -> bool {
        if !self.term() {
            return false;
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
            if !self.term() {
                return false;
            }
        }
        for round in 0..KILL_ROUNDS {
            if !self.kill() {
                return round > 0;
            }
            tokio::time::sleep(POLL).await;
        }
        self.report_survivors();
        true
    }

    /// [`Cleanup::terminate`] for a thread of its own (no runtime needed).
    pub(crate) fn terminate_blocking(&mut self, grace: Duration) {
        terminate_all_blocking(std::slice::from_mut(self), grace);
    }

    fn report_survivors(&self) {
        let (group, procs) = self.remaining();
        if group || !procs.is_empty() {
            tracing::warn!(
                pgid = self.pgid,
                attempt = self.tag.as_ref().map(AttemptTag::as_str),
                left = procs.len(),
                "instrument processes still present after SIGKILL (zombies not reaped yet, or a process forking faster than it is killed)"
            );
        }
    }
}

/// SIGTERM to every clean-up's processes, up to `grace` for them all, then SIGKILL.
fn terminate_all_blocking(cleanups: &mut [Cleanup], grace: Duration) {
    let mut any = false;
    for c in cleanups.iter_mut() {
        any |= c.term();
    }
    if !any {
        return;
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        std::thread::sleep(POLL);
        let mut left = false;
        for c in cleanups.iter_mut() {
            left |= c.term();
        }
        if !left {
            return;
        }
    }
    for _ in 0..KILL_ROUNDS {
        let mut left = false;
        for c in cleanups.iter_mut() {
            left |= c.kill();
        }
        if !left {
            return;
        }
        std::thread::sleep(POLL);
    }
    for c in cleanups.iter() {
        c.report_survivors();
    }
}

/// End every attempt still registered — its process group and every process carrying its
/// tag: SIGTERM, up to `grace`, SIGKILL. For the conductor's last moments (`mozart stop`,
/// SIGTERM), after the running sheets had their chance to finish. Returns how many attempts
/// had anything left.
pub fn end_all(grace: Duration) -> usize {
    let attempts: Vec<(AttemptTag, Option<i32>)> =
        live().iter().map(|(t, g)| (t.clone(), *g)).collect();
    let mut cleanups: Vec<Cleanup> = attempts
        .into_iter()
        .map(|(tag, pgid)| Cleanup::new(pgid, Some(tag)))
        .filter(|c| !c.gone())
        .collect();
    let n = cleanups.len();
    if n > 0 {
        tracing::info!(
            attempts = n,
            "conductor stopping: ending the processes of attempts still running"
        );
        terminate_all_blocking(&mut cleanups, grace);
    }
    n
}

/// Signal a process group, refusing group ids that would hit unrelated processes: ≤ 1
/// (`kill(-1)` semantics) or our own group (instruments.md §2.2 `_safe_killpg`).
/// Returns whether the group still existed.
pub fn signal_group(pgid: i32, signal: Option<Signal>) -> bool {
    if pgid <= 1 || pgid == getpgrp().as_raw() {
        tracing::warn!(pgid, "refusing to signal process group");
        return false;
    }
    match signal {
        Some(sig) => killpg(Pid::from_raw(pgid), sig).is_ok(),
        None => killpg(Pid::from_raw(pgid), None).is_ok(),
    }
}

/// Whether any process of the group is still alive (or an unreaped zombie).
pub fn group_alive(pgid: i32) -> bool {
    signal_group(pgid, None)
}

/// Nanoseconds per clock tick (`sysconf(_SC_CLK_TCK)`), when a tick is a whole number of
/// nanoseconds (the kernel then reports start times as boot-time nanoseconds divided by it).
pub(crate) fn nanos_per_tick() -> Option<u64> {
    static NANOS: std::sync::LazyLock<Option<u64>> = std::sync::LazyLock::new(|| {
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
        let hz = u64::try_from(hz).ok().filter(|&hz| hz > 0)?;
        (1_000_000_000 % hz == 0).then(|| 1_000_000_000 / hz)
    });
    *NANOS
}

/// The boot-time clock (`CLOCK_BOOTTIME`, the clock of `/proc/<pid>/stat` field 22) now,
/// in clock ticks.
pub(crate) fn boot_ticks_now() -> Option<u64> {
    let per_tick = nanos_per_tick()?;
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    let secs = u64::try_from(now.tv_sec()).ok()?;
    let nanos = u64::try_from(now.tv_nsec()).ok()?;
    Some((secs * 1_000_000_000 + nanos) / per_tick)
}

/// A process group a conductor recorded as running (its in-flight journal, the watchdog's
/// list): group id, the leader's start time, and the attempt's tag when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub pgid: u32,
    /// Start time of the group's leader (`/proc/<pid>/stat` field 22).
    pub ticks: u64,
    /// The attempt's tag ([`ATTEMPT_VAR`]), which every process it started carries.
    pub tag: Option<String>,
}

/// Every process `/proc` lists now.
fn all_processes() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter_map(read_stat)
        .collect()
}

impl Leftover {
    /// What of this attempt is still running, verified, never on the strength of a number
    /// alone: whether its group may be signalled as a whole — its leader still has the
    /// recorded start time, or (the leader is gone) a live member carries the attempt's
    /// tag, which a group that took the id over later cannot — and its tagged processes
    /// outside the group (each named by pid and start time).
    fn remaining(&self, procs: &[Stat]) -> (Option<i32>, Vec<Stat>) {
        let tag = self.tag.as_deref();
        let tagged = |p: &Stat| tag.is_some_and(|t| environ_tag(p.pid).is_some_and(|e| e.0 == t));
        // No group (`pgid` 0: an attempt known by its tag alone, [`conductor_leftovers`]):
        // only its tagged processes.
        let pgid = i32::try_from(self.pgid).ok().filter(|g| *g > 1);
        if pgid.is_none() && tag.is_none() {
            return (None, Vec::new());
        }
        let group = pgid.filter(|&pgid| {
            let leader_ours =
                read_stat(pgid).is_some_and(|s| s.start == self.ticks && s.pgid == pgid);
            leader_ours
                || procs
                    .iter()
                    .any(|p| p.pgid == pgid && !p.zombie && p.start >= self.ticks && tagged(p))
        });
        let outside = procs
            .iter()
            .filter(|p| {
                let in_group = group == Some(p.pgid);
                !p.zombie && !in_group && p.start >= self.ticks && tagged(p)
            })
            .copied()
            .collect();
        (group, outside)
    }

    /// Whether anything of this attempt is still alive (a live group member or tagged process).
    pub fn alive(&self) -> bool {
        let procs = all_processes();
        let (group, outside) = self.remaining(&procs);
        let group_live = group.is_some_and(|g| procs.iter().any(|p| p.pgid == g && !p.zombie));
        group_live || !outside.is_empty()
    }
}

/// The attempts a conductor that died without ending them (process `pid`, started at
/// `since` in clock ticks since boot) may have left running, found by their tags alone:
/// every tag is `<pid>.<n>` ([`AttemptTag::new`]), so a process of ours started since then
/// that carries such a tag is one of its attempts' — including one spawned in the moment
/// before the conductor could record its group, which the in-flight journal cannot name.
/// Nothing is returned while a process `pid` other than this one runs: its tags are its own
/// (it is that conductor still, or another that took the id over).
pub fn conductor_leftovers(pid: u32, since: u64) -> Vec<Leftover> {
    let Ok(pid_i) = i32::try_from(pid) else {
        return Vec::new();
    };
    if pid_i <= 1 || (pid_i != me() && read_stat(pid_i).is_some_and(|s| !s.zombie)) {
        return Vec::new();
    }
    let prefix = format!("{pid}.");
    let mut tags = HashSet::new();
    for p in all_processes() {
        if p.zombie || p.start < since || p.pid == me() {
            continue;
        }
        if let Some(tag) = environ_tag(p.pid).filter(|t| t.0.starts_with(&prefix)) {
            tags.insert(tag.0);
        }
    }
    tags.into_iter()
        .map(|tag| Leftover {
            pgid: 0,
            ticks: since,
            tag: Some(tag),
        })
        .collect()
}

/// This process's start time in clock ticks since boot (`/proc/self/stat` field 22).
pub fn own_start_ticks() -> Option<u64> {
    read_stat(me()).map(|s| s.start)
}

/// End what is left of attempts a conductor recorded ([`Leftover`]) — after a crash, by the
/// next start or the watchdog: SIGTERM to each verified group and tagged process, up to
/// `grace`, then SIGKILL until nothing is left. A group whose leader already died (a shell
/// killed by SIGTERM while its child ignores it) is still ended, once a member proves it is
/// the attempt's. Returns how many attempts had anything to end.
pub fn end_leftovers(leftovers: &[Leftover], grace: Duration) -> usize {
    let signal = |sig: Option<Signal>| -> usize {
        let procs = all_processes();
        let mut n = 0;
        for l in leftovers {
            let (group, outside) = l.remaining(&procs);
            let group_live = group.is_some_and(|g| procs.iter().any(|p| p.pgid == g && !p.zombie));
            if group_live {
                if let (Some(g), Some(sig)) = (group, sig) {
                    signal_group(g, Some(sig));
                }
            }
            if let Some(sig) = sig {
                for p in &outside {
                    signal_same(p, sig);
                }
            }
            if group_live || !outside.is_empty() {
                n += 1;
            }
        }
        n
    };
    let ended = signal(Some(Signal::SIGTERM));
    if ended == 0 {
        return 0;
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        if signal(None) == 0 {
            return ended;
        }
    }
    for _ in 0..KILL_ROUNDS {
        if signal(Some(Signal::SIGKILL)) == 0 {
            return ended;
        }
        std::thread::sleep(POLL);
    }
    ended
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    fn tagged(tag: &AttemptTag, script: &str) -> std::process::Child {
        std::process::Command::new("sh")
            .args(["-c", script])
            .env(ATTEMPT_VAR, tag.as_str())
            .process_group(0)
            .spawn()
            .unwrap()
    }

    /// A tagged child and its whole tree are found; a process that merely carries the tag
    /// but is not our child is not (it could be anyone's).
    #[test]
    fn the_attempts_tree_is_found_and_strangers_with_the_tag_are_not() {
        let tag = AttemptTag::new();
        let mut ours = tagged(&tag, "sleep 30 & sleep 30 & wait");
        // Not our descendant once `setsid -f` hands it to init (we are not a subreaper in
        // this test process): the tag alone must not make it ours.
        let marker = format!("/tmp/mozart-desc-{}", tag.as_str());
        let _ = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("setsid -f sh -c 'echo $$ > {marker}; exec sleep 30'"),
            ])
            .env(ATTEMPT_VAR, tag.as_str())
            .status()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let stranger: i32 = loop {
            if let Some(p) = std::fs::read_to_string(&marker)
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                break p;
            }
            assert!(Instant::now() < deadline, "the stranger did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = std::fs::remove_file(&marker);
        let deadline = Instant::now() + Duration::from_secs(5);
        let root = i32::try_from(ours.id()).unwrap();
        while find(&tag, Some(root), None).len() < 3 {
            assert!(
                Instant::now() < deadline,
                "found {:?}",
                find(&tag, Some(root), None)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let found: Vec<i32> = find(&tag, Some(root), None).iter().map(|s| s.pid).collect();
        assert!(found.contains(&root));
        assert!(!found.contains(&stranger), "a stranger was taken for ours");
        // The same answer from the lists of the spawning thread (this one) and the main one.
        let spawner = Some(nix::unistd::gettid().as_raw());
        let mut by_spawner: Vec<i32> = find(&tag, Some(root), spawner)
            .iter()
            .map(|s| s.pid)
            .collect();
        let mut all = found.clone();
        by_spawner.sort_unstable();
        all.sort_unstable();
        assert_eq!(
            by_spawner, all,
            "two threads' lists find what every thread's does"
        );
        assert!(
            find(&AttemptTag::new(), Some(root), None).is_empty(),
            "another tag finds nothing"
        );

        let mut cleanup = Cleanup::new(None, Some(tag.clone()));
        cleanup.terminate_blocking(Duration::from_secs(2));
        assert!(ours.wait().is_ok());
        assert!(find(&tag, Some(root), None).is_empty());
        assert!(
            read_stat(stranger).is_some_and(|s| !s.zombie),
            "the stranger was signalled"
        );
        let _ = kill(Pid::from_raw(stranger), Signal::SIGKILL);
    }
}
