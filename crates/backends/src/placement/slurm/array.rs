//! Job arrays (`placement.array: true`, docs/design/distributed.md "Job arrays"): the first
//! attempts of sheets dispatched together go to Slurm as one `sbatch --array`, one task per
//! sheet attempt, with the exactly-once steps of a single job done for all of them at once.
//!
//! A sheet's attempt *joins* the array being gathered for its job (sheets of a fan-out are
//! dispatched within milliseconds of each other; the array closes after a short quiet
//! spell), writes its own attempt directory inside the array's directory — its files are a
//! single job's, plus `task` (its index) —, and hands itself to the array's task, which:
//!
//! 1. records the array's name in every member's checkpoint (before `sbatch`);
//! 2. submits the array held (`--array=<tasks>`); a failed or timed-out `sbatch` is looked
//!    up by name as a single job's is, a per-user submit limit (`MaxSubmitJobs`, which
//!    counts every task) splits the array in halves down to single jobs that wait their
//!    turn;
//! 3. records each member's task id (`<array id>_<task>`) in its checkpoint;
//! 4. writes each member's `adopted` file and releases the array (one `scontrol release`).
//!
//! Each member then follows its own task exactly as a single job (its exit file, its
//! timeout, its status); a restart finds a member by its recorded task id, or by the
//! array's name and its task index.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    base_id, controller_unreachable, epoch_now, jobs_named, lock, remove_attempt_dir, safe_name,
    sbatch_args, sh_quote, slurm_command, submit_held, submit_limit, time_limit_minutes,
    write_attempt_files, CancelGuard, PlacedAttempt, PlacementSpec, ProcessSpec, RemoteAttempt,
    RemoteJournal, SlurmPlacement, Watcher, TERMINAL_STATES,
};
use crate::types::Progress;

/// An array closes when no sheet joined it for this long…
const GATHER_QUIET: Duration = Duration::from_millis(300);
/// …or this long after its first sheet joined.
const GATHER_MAX: Duration = Duration::from_secs(2);
/// Most tasks in one array (Slurm's default `MaxArraySize` is 1001: indices 0–1000).
const MAX_TASKS: u32 = 1000;

/// The arrays being gathered, one per job and state directory.
#[derive(Debug, Default)]
pub(super) struct Batches {
    open: std::sync::Mutex<HashMap<String, Gathering>>,
}

/// An array still taking members.
#[derive(Debug)]
struct Gathering {
    dir: PathBuf,
    next: u32,
    first: Instant,
    last: Instant,
    tx: tokio::sync::mpsc::UnboundedSender<Joined>,
}

/// What a member that joined tells its array: ready (its files written), or gone.
enum Joined {
    Ready(Member),
    Left,
}

/// One sheet attempt of an array, ready to be submitted.
struct Member {
    task: u32,
    sheet: u32,
    dir: PathBuf,
    cwd: PathBuf,
    journal: Option<Arc<dyn RemoteJournal>>,
    progress: Arc<Progress>,
    timeout: Duration,
    kill_grace: Duration,
    reply: tokio::sync::oneshot::Sender<Outcome>,
}

/// How the array's submission went for one member.
enum Outcome {
    /// Its task is recorded and released: follow it.
    Submitted(RemoteAttempt),
    /// Submit it as a job of its own (alone in its array, or split off by a submit limit).
    Alone,
    /// Nothing runs it: why.
    Failed(String),
}

/// A member's place in an array; tells the array if the member leaves before it is ready.
struct Ticket {
    task: u32,
    dir: PathBuf,
    tx: Option<tokio::sync::mpsc::UnboundedSender<Joined>>,
}

impl Ticket {
    fn ready(mut self, member: Member) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Joined::Ready(member));
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Joined::Left);
        }
    }
}

/// What the array's task needs of its placement.
struct Ctx {
    spec: PlacementSpec,
    poll: Duration,
    watcher: Arc<Watcher>,
    job_id: String,
    dir: PathBuf,
}

impl SlurmPlacement {
    /// Submit this first attempt as a task of the array gathered for its job; as a job of
    /// its own when it ends up alone (or a submit limit splits it off).
    pub(super) async fn submit_in_array(
        &self,
        req: &PlacedAttempt<'_>,
        spec: &ProcessSpec,
        guard: &mut CancelGuard,
    ) -> Result<RemoteAttempt, String> {
        let (cwd, base) = self.attempt_places(req, spec);
        let ticket = self.join(req.job_id, &base);
        let task = ticket.task;
        let dir = ticket.dir.join(super::attempt_dir_name(req));
        guard.dir = Some(dir.clone());
        let keep_inputs = self.spec.requeue_on_preemption.unwrap_or(false);
        let written = write_attempt_files(&base, &dir, &cwd, spec, keep_inputs)
            .and_then(|()| write_task(&dir, ticket.task));
        if let Err(e) = written {
            guard.dir = None;
            drop(ticket);
            remove_attempt_dir(&dir).await;
            return Err(format!(
                "cannot prepare the Slurm job in {}: {e}",
                dir.display()
            ));
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        ticket.ready(Member {
            task,
            sheet: req.sheet_num,
            dir: dir.clone(),
            cwd: cwd.clone(),
            journal: req.remote.cloned(),
            progress: Arc::clone(req.progress),
            timeout: spec.timeout,
            kill_grace: spec.kill_grace,
            reply,
        });
        match answer.await {
            Ok(Outcome::Submitted(attempt)) => {
                guard.attempt = Some(attempt.clone());
                guard.recorded = req.remote.is_some();
                Ok(attempt)
            }
            Ok(Outcome::Alone) => {
                // A job of its own: its directory is a single job's (no task index).
                let _ = std::fs::remove_file(dir.join("task"));
                let submitted = self
                    .submit_files(req, spec, guard, &cwd, &base, dir.clone())
                    .await;
                if submitted.is_err() {
                    guard.dir = None;
                    remove_attempt_dir(&dir).await;
                }
                submitted
            }
            Ok(Outcome::Failed(message)) => {
                guard.dir = None;
                remove_attempt_dir(&dir).await;
                Err(message)
            }
            Err(_) => {
                guard.dir = None;
                remove_attempt_dir(&dir).await;
                Err("the Slurm array submission ended without an answer".into())
            }
        }
    }

    /// Join the array gathered for `job_id` under `base` (a new one when none is open or
    /// the open one is full).
    fn join(&self, job_id: &str, base: &Path) -> Ticket {
        let key = format!("{job_id}\0{}", base.display());
        let now = Instant::now();
        let mut open = lock(&self.arrays.open);
        let full = open.get(&key).is_some_and(|g| g.next >= MAX_TASKS);
        if full {
            open.remove(&key);
        }
        let gathering = open.entry(key.clone()).or_insert_with(|| {
            let dir = base.join(safe_name(job_id)).join(format!(
                "array-{}-{:04x}",
                (epoch_now() * 1000.0) as u64,
                std::process::id() & 0xffff
            ));
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let ctx = Ctx {
                spec: self.spec.clone(),
                poll: self.poll,
                watcher: Arc::clone(&self.watcher),
                job_id: job_id.to_string(),
                dir: dir.clone(),
            };
            tokio::spawn(gather(Arc::clone(&self.arrays), key.clone(), rx, ctx));
            Gathering {
                dir,
                next: 0,
                first: now,
                last: now,
                tx,
            }
        });
        let task = gathering.next;
        gathering.next += 1;
        gathering.last = now;
        Ticket {
            task,
            dir: gathering.dir.clone(),
            tx: Some(gathering.tx.clone()),
        }
    }
}

fn write_task(dir: &Path, task: u32) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dir.join("task"))?;
    writeln!(f, "{task}")?;
    // The array's output path names the task (`<array dir>/<task>/slurm.out`): a link
    // to the member's own directory.
    let link = dir
        .parent()
        .map(|p| p.join(task.to_string()))
        .ok_or_else(|| std::io::Error::other("an attempt directory without a parent"))?;
    let target = dir
        .file_name()
        .ok_or_else(|| std::io::Error::other("an attempt directory without a name"))?;
    std::os::unix::fs::symlink(target, link)
}

/// The array's task: wait until it closes, take its members, submit them.
async fn gather(
    batches: Arc<Batches>,
    key: String,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Joined>,
    ctx: Ctx,
) {
    let joined = loop {
        let wake = {
            let mut open = lock(&batches.open);
            let Some(g) = open.get(&key).filter(|g| g.dir == ctx.dir) else {
                // Closed because it was full: no one joins it any more.
                break None;
            };
            let close_at = (g.last + GATHER_QUIET).min(g.first + GATHER_MAX);
            if Instant::now() >= close_at {
                let n = g.next;
                open.remove(&key);
                break Some(n);
            }
            close_at
        };
        tokio::time::sleep_until(tokio::time::Instant::from_std(wake)).await;
    };
    let joined = joined.unwrap_or(MAX_TASKS);
    let mut members = Vec::new();
    for _ in 0..joined {
        match rx.recv().await {
            Some(Joined::Ready(m)) => members.push(m),
            Some(Joined::Left) => {}
            None => break,
        }
    }
    members.sort_by_key(|m| m.task);
    // Nothing is left in the array's directory but the members' links once it is submitted
    // (each member's directory goes when its result is recorded, and takes its link with
    // it) — however the submission ends: a conductor stopping during the array's sbatch
    // drops this task.
    let _script = ScriptGuard(ctx.dir.join("run.sh"));
    submit_group(&ctx, members).await;
}

/// Removes the array's script (slurmctld keeps its own copy of a submitted one) when the
/// array's task ends or is dropped.
struct ScriptGuard(PathBuf);

impl Drop for ScriptGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        // The array's directory too, when no task's directory is in it.
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Submit `members` as one array; a group of one goes as a job of its own.
fn submit_group<'a>(
    ctx: &'a Ctx,
    members: Vec<Member>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
    Box::pin(async move {
        if members.len() <= 1 {
            alone(members);
            return;
        }
        let tasks: Vec<u32> = members.iter().map(|m| m.task).collect();
        let name = array_name(&ctx.job_id, members[0].sheet, &ctx.dir, &tasks);
        let submitted_at = epoch_now();
        // 1. The name in every member's checkpoint before sbatch.
        let pending = attempts_of(&members, &name, submitted_at, |_| String::new());
        let (members, _) = record_all(members, pending, "").await;
        if members.len() <= 1 {
            alone(members);
            return;
        }
        ctx.watcher.unclaim(&name);
        // 2. One held submission for all of them.
        let Some((members, array_id)) = submit_held_array(ctx, members, &name).await else {
            return;
        };
        // 3. Each member's task id in its checkpoint before anything runs.
        let task_id = |m: &Member| format!("{array_id}_{}", m.task);
        let attempts = attempts_of(&members, &name, submitted_at, task_id);
        let (members, failed) = record_all(members, attempts, &array_id).await;
        for id in failed {
            let _ = slurm_command("scancel", &[&id]).await;
        }
        // 4. Adopted files, duplicates cancelled, one release.
        write_adopted(&members, &array_id);
        ctx.watcher.claim(&name, &array_id);
        cancel_duplicates(&name, &array_id).await;
        let Some(members) = release(ctx, members, &array_id).await else {
            return;
        };
        tracing::debug!(job_id = %ctx.job_id, slurm_array = %array_id, tasks = members.len(), "submitted to Slurm as one array");
        let attempts = attempts_of(&members, &name, submitted_at, task_id);
        hand_over(members, attempts).await;
    })
}

/// Tell each of `members` to go as a job of its own.
fn alone(members: Vec<Member>) {
    for m in members {
        let _ = m.reply.send(Outcome::Alone);
    }
}

/// The attempt each of `members` records: the array's name, and its Slurm id by `remote_id`
/// (empty before sbatch answered).
fn attempts_of(
    members: &[Member],
    name: &str,
    submitted_at: f64,
    remote_id: impl Fn(&Member) -> String,
) -> Vec<RemoteAttempt> {
    members
        .iter()
        .map(|m| RemoteAttempt {
            placement: "slurm".into(),
            remote_id: remote_id(m),
            name: name.to_string(),
            dir: m.dir.clone(),
            submitted_at,
        })
        .collect()
}

/// Write the array's script and submit it held, named `name`: the members and the array's
/// id, or `None` when the members were told otherwise (failed, or submitted in halves).
async fn submit_held_array(
    ctx: &Ctx,
    members: Vec<Member>,
    name: &str,
) -> Option<(Vec<Member>, String)> {
    let tasks: Vec<u32> = members.iter().map(|m| m.task).collect();
    let script = match write_array_script(&ctx.dir) {
        Ok(s) => s,
        Err(e) => {
            fail_all(
                members,
                format!("cannot write the Slurm array's script: {e}"),
            );
            return None;
        }
    };
    let minutes = members
        .iter()
        .map(|m| time_limit_minutes(m.timeout, m.kill_grace))
        .max()
        .unwrap_or(1);
    let mut args = sbatch_args(
        &ctx.spec,
        name,
        &ctx.dir.join("%a").join("slurm.out"),
        &members[0].cwd,
        minutes,
    );
    args.push(format!("--array={}", task_list(&tasks)));
    args.push(script.display().to_string());
    let array_id = loop {
        let e = match submit_held(args.clone()).await {
            Ok(id) => break id,
            Err(e) => e,
        };
        // As for a single job: sbatch may have created the array anyway.
        match find_array(ctx, &members, name).await {
            Ok(Some(id)) => break id,
            Ok(None) if submit_limit(&e) => {
                // Every task counts against the per-user submit limit: halves fit where the
                // whole did not; a single sheet waits its turn.
                tracing::info!(job_id = %ctx.job_id, tasks = members.len(), error = %e,
                    "Slurm's submit limit refuses the array; submitting it in halves");
                forget_all(&members, "");
                let mut first = members;
                let second = first.split_off(first.len() / 2);
                submit_group(ctx, first).await;
                submit_group(ctx, second).await;
                return None;
            }
            Ok(None) if controller_unreachable(&e) => {
                if let Err(why) = wait(ctx, &members, &e).await {
                    forget_all(&members, "");
                    fail_all(members, why);
                    return None;
                }
            }
            Ok(None) => {
                forget_all(&members, "");
                fail_all(members, super::refusal(&e, &ctx.spec));
                return None;
            }
            Err(why) => {
                // The name stays recorded: a later look (a restart) finds it.
                fail_all(members, why);
                return None;
            }
        }
    };
    let _ = std::fs::remove_file(&script);
    Some((members, array_id))
}

/// Each member's `adopted` file: its task's id, for a restart to find it.
fn write_adopted(members: &[Member], array_id: &str) {
    for m in members {
        let id = format!("{array_id}_{}", m.task);
        let tmp = m.dir.join("adopted.tmp");
        let written = std::fs::write(&tmp, format!("{id}\n"))
            .and_then(|()| std::fs::rename(&tmp, m.dir.join("adopted")));
        if let Err(e) = written {
            tracing::warn!(slurm_job = %id, error = %e, "cannot write the adopted file of an array task");
        }
    }
}

/// Cancel every live job named `name` but the array `array_id` (a submission sbatch made
/// though it answered with an error).
async fn cancel_duplicates(name: &str, array_id: &str) {
    let Ok(jobs) = jobs_named(name).await else {
        return;
    };
    for (id, state) in jobs {
        if base_id(&id) != array_id && !TERMINAL_STATES.contains(&state.as_str()) {
            tracing::info!(slurm_job = %id, name = %name, "cancelling a duplicate Slurm array");
            let _ = slurm_command("scancel", &[&id]).await;
        }
    }
}

/// Release the held array: the members, or `None` when it could not be released (the
/// array is cancelled and the members are failed).
async fn release(ctx: &Ctx, members: Vec<Member>, array_id: &str) -> Option<Vec<Member>> {
    loop {
        let why = match slurm_command("scontrol", &["release", array_id]).await {
            Ok(_) => {
                for m in &members {
                    super::mark_released(&m.dir);
                }
                return Some(members);
            }
            Err(e) if controller_unreachable(&e) => match wait(ctx, &members, &e).await {
                Ok(()) => continue,
                Err(why) => why,
            },
            Err(e) => format!("cannot release Slurm array {array_id}: {e}"),
        };
        let _ = slurm_command("scancel", &[array_id]).await;
        forget_tasks(&members, array_id);
        fail_all(members, why);
        return None;
    }
}

/// Hand each member its submitted attempt (`attempts[i]` is `members[i]`'s); a member whose
/// attempt was abandoned meanwhile has its task cancelled.
async fn hand_over(members: Vec<Member>, attempts: Vec<RemoteAttempt>) {
    for (m, attempt) in members.into_iter().zip(attempts) {
        let id = attempt.remote_id.clone();
        if m.reply.send(Outcome::Submitted(attempt)).is_err() {
            // Its attempt was abandoned (cancel) while the array was submitted: its task
            // must not run for no one.
            tracing::info!(slurm_job = %id, "array task of an abandoned attempt: cancelling it");
            let _ = slurm_command("scancel", &[&id]).await;
            if let Some(j) = &m.journal {
                j.forget(&id);
            }
            remove_attempt_dir(&m.dir).await;
        }
    }
}

/// Record `attempts[i]` in `members[i]`'s checkpoint, all at once (each an fsync); the
/// members whose record failed are told so and dropped, and their task ids (`<array
/// id>_<task>`, when `array_id` is known) returned for cancelling.
async fn record_all(
    members: Vec<Member>,
    attempts: Vec<RemoteAttempt>,
    array_id: &str,
) -> (Vec<Member>, Vec<String>) {
    let mut set = tokio::task::JoinSet::new();
    for (i, (m, a)) in members.iter().zip(attempts).enumerate() {
        let journal = m.journal.clone();
        set.spawn_blocking(move || (i, journal.map_or(Ok(()), |j| j.record(&a))));
    }
    let mut errors: HashMap<usize, String> = HashMap::new();
    while let Some(done) = set.join_next().await {
        match done {
            Ok((_, Ok(()))) => {}
            Ok((i, Err(e))) => {
                errors.insert(i, e);
            }
            Err(e) => tracing::warn!(error = %e, "a record task of a Slurm array failed"),
        }
    }
    let mut kept = Vec::new();
    let mut failed = Vec::new();
    for (i, m) in members.into_iter().enumerate() {
        match errors.remove(&i) {
            None => kept.push(m),
            Some(e) => {
                let what = if array_id.is_empty() {
                    "the Slurm array's name".to_string()
                } else {
                    let id = format!("{array_id}_{}", m.task);
                    failed.push(id.clone());
                    format!("Slurm array task {id}")
                };
                let _ = m.reply.send(Outcome::Failed(format!(
                    "cannot record {what} in the checkpoint, so it does not run: {e}"
                )));
            }
        }
    }
    (kept, failed)
}

fn forget_all(members: &[Member], remote_id: &str) {
    for m in members {
        if let Some(j) = &m.journal {
            j.forget(remote_id);
        }
    }
}

fn forget_tasks(members: &[Member], array_id: &str) {
    for m in members {
        if let Some(j) = &m.journal {
            j.forget(&format!("{array_id}_{}", m.task));
        }
    }
}

fn fail_all(members: Vec<Member>, why: String) {
    for m in members {
        let _ = m.reply.send(Outcome::Failed(why.clone()));
    }
}

/// The array sbatch created under `name` although it reported a failure: the oldest one
/// with a held task of ours. Waits while the controller cannot be asked.
async fn find_array(ctx: &Ctx, members: &[Member], name: &str) -> Result<Option<String>, String> {
    for look in 0..2 {
        if look > 0 {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let jobs = loop {
            match jobs_named(name).await {
                Ok(jobs) => break jobs,
                Err(e) => wait(ctx, members, &e).await?,
            }
        };
        let mut held: Vec<u64> = jobs
            .iter()
            .filter(|(_, state)| state == "PENDING")
            .filter_map(|(id, _)| base_id(id).parse().ok())
            .collect();
        held.sort_unstable();
        if let Some(id) = held.first() {
            return Ok(Some(id.to_string()));
        }
    }
    Ok(None)
}

/// Wait a while for the controller (or for Slurm to take more jobs), saying so in every
/// member's status; `Err` once the shortest member timeout (an hour at most) has passed.
async fn wait(ctx: &Ctx, members: &[Member], error: &str) -> Result<(), String> {
    if super::command_missing(error) {
        return Err(error.to_string());
    }
    // `mozart pause` (it asks every member of the job's array): nothing is submitted after it.
    let paused = || members.iter().all(|m| m.progress.withdraw_asked());
    if paused() {
        return Err(super::NOT_SUBMITTED.into());
    }
    let limit = members
        .iter()
        .map(|m| m.timeout)
        .min()
        .unwrap_or_default()
        .min(Duration::from_secs(3600));
    let waited = members
        .iter()
        .map(|m| m.progress.elapsed())
        .max()
        .unwrap_or_default();
    let limited = submit_limit(error);
    if waited > limit {
        return Err(if limited {
            format!(
                "Slurm's submit limit stayed reached for {}s: {error}",
                waited.as_secs()
            )
        } else {
            format!(
                "the Slurm controller did not answer for {}s: {error}",
                waited.as_secs()
            )
        });
    }
    let note = if limited {
        format!("waiting for Slurm to accept more jobs: the per-user submit limit is reached (not an attempt spent): {error}")
    } else {
        format!("waiting for the Slurm controller (not an attempt spent): {error}")
    };
    for m in members {
        m.progress
            .update_activity(|a| a.last_event = Some(note.clone()));
    }
    if limited {
        tracing::info!(job_id = %ctx.job_id, error = %error, "Slurm submit limit reached; the array waits for earlier jobs to end");
    } else {
        tracing::warn!(job_id = %ctx.job_id, error = %error, "Slurm controller unavailable; the array submission waits");
    }
    let asked = async {
        match members.first() {
            Some(m) => m.progress.withdraw_wanted().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = tokio::time::sleep(ctx.poll.max(Duration::from_secs(2))) => {}
        () = asked => {}
    }
    if paused() {
        return Err(super::NOT_SUBMITTED.into());
    }
    Ok(())
}

/// The array's script: runs the member script of its task (`<array dir>/<task>/run.sh`,
/// a link to the member's directory), telling it its id (`<array id>_<task>`), which the
/// member's `adopted` file must name.
fn write_array_script(dir: &Path) -> std::io::Result<PathBuf> {
    // `<state dir>/<job>/array-…`: its members' files made it, and its levels were checked
    // then; checked again here, as the script trusts what is in it.
    let base = dir
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| std::io::Error::other("an array directory without a state directory"))?;
    super::create_private_dir(base, dir)?;
    let path = dir.join("run.sh");
    let script = format!(
        r#"#!/bin/bash
# Written by the Mozart conductor: one task = one attempt of one sheet (docs/design/distributed.md).
t="${{SLURM_ARRAY_TASK_ID:?not an array task}}"
# The member's script is run only from a directory of this user's that no one else can write
# (another user's script there would run as you), from inside it (no rename above can swap it).
cd {dir} || exit 0
if [ "$(stat -c %u .)" != "$(id -u)" ] || [ $(( 0$(stat -c %a .) & 022 )) -ne 0 ]; then
  echo "mozart: "{dir}" is not yours alone (owner uid $(stat -c %u .), mode $(stat -c %a .)); not running anything from it" >&2
  exit 0
fi
MOZART_SLURM_ID="${{SLURM_ARRAY_JOB_ID}}_$t" exec /bin/bash "$t"/run.sh
"#,
        dir = sh_quote(&dir.to_string_lossy()),
    );
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(&path)?;
    f.write_all(script.as_bytes())?;
    Ok(path)
}

/// `0-3,5,7-9`: Slurm's `--array` list of `tasks` (sorted).
fn task_list(tasks: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < tasks.len() {
        let start = tasks[i];
        let mut end = start;
        while i + 1 < tasks.len() && tasks[i + 1] == end + 1 {
            i += 1;
            end = tasks[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

/// The array's Slurm name: the job, its first sheet and task count, and a hash of its
/// directory and tasks (unique to this submission: a split half is another name).
fn array_name(job_id: &str, first_sheet: u32, dir: &Path, tasks: &[u32]) -> String {
    let mut name = format!("mozart-{}", safe_name(job_id));
    name.truncate(80);
    let mut hash: u32 = 0x811c_9dc5;
    let text = format!("{}|{}", dir.display(), task_list(tasks));
    for b in text.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{name}-s{first_sheet}-x{}-{hash:08x}", tasks.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_lists_read_as_slurm_ranges() {
        assert_eq!(task_list(&[0, 1, 2, 3]), "0-3");
        assert_eq!(task_list(&[0, 2, 3, 5, 7, 8, 9]), "0,2-3,5,7-9");
        assert_eq!(task_list(&[4]), "4");
    }

    #[test]
    fn array_names_differ_per_split() {
        let d = Path::new("/s/j/array-1");
        let a = array_name("j", 1, d, &[0, 1, 2, 3]);
        let b = array_name("j", 1, d, &[0, 1]);
        assert_ne!(a, b);
        assert!(a.starts_with("mozart-j-s1-x4-"), "{a}");
    }
}
