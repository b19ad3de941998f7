//! Git worktree isolation for a job (or for one sheet of it): score.md §3.14,
//! execution.md §9.5.
//!
//! Every git operation runs the real `git` through `std::process::Command`, so these functions
//! block for a few tens of milliseconds (longer when setup commands run): call them from
//! `tokio::task::spawn_blocking`.
//!
//! Intended call sites (for the job manager):
//! - **Before the first sheet is dispatched** (submit / resume, after the checkpoint is loaded
//!   or created): `prepare(&WorktreeRequest::for_job(&config, &job_id)
//!   .resuming(cp.worktree_path.as_deref().map(Path::new)))`. On
//!   [`Isolation::Worktree`], run every instrument with
//!   [`Worktree::working_directory`] as its working directory (the `ExecutionRequest`
//!   directory; the workspace stays where it is — outputs and validations keep using it), and
//!   call [`Isolation::record`] on the checkpoint and persist it before dispatching.
//!   [`Isolation::Fallback`] means "run in the workspace" (upstream's `fallback_on_error`);
//!   `Err` is fatal for the job (fallback disabled).
//! - **When the job reaches a terminal or paused state** (after the terminal checkpoint is
//!   durable, before hooks fire): `finish(&wt, RunOutcome::…, &config.isolation)`; on
//!   [`Cleanup::Removed`] call [`clear_checkpoint`]. After a conductor restart the handle is
//!   rebuilt with [`Worktree::from_checkpoint`].
//! - **Parallel sheets** that must not share a tree: [`WorktreeRequest::for_sheet`] gives
//!   each sheet its own worktree and branch (`{prefix}/{job_id}-sheet-{n}`); the score model
//!   has no field asking for this, so the caller decides.
//! - **Conductor start-up** (optional): [`recover_stale_locks`] on each repository used by a
//!   recovered job unlocks worktrees whose locking process is gone.
//!
//! Differences from upstream, deliberate: the worktree gets a named branch
//! `{branch_prefix}/{job_id}` (upstream creates a detached HEAD and ignores `branch_prefix`),
//! with `-2`, `-3`, … suffixes when the branch already exists from an earlier run; a
//! worktree path left by an earlier run is never deleted to make room — the new one gets the
//! same suffix; a lock whose owner process is dead is recovered instead of blocking or being
//! silently accepted; a failed or cancelled run's kept worktree is unlocked (the lock means
//! "in progress"); a paused one stays locked.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use mozart_config::model::{IsolationConfig, IsolationMode};
use mozart_config::JobConfig;
use mozart_state::CheckpointState;

/// Oldest git with `git worktree lock` (upstream's `MIN_GIT_VERSION`).
const MIN_GIT: (u32, u32) = (2, 15);

/// Branch-name collision suffixes tried after the plain name (seed 004: `-2`, `-3`, …).
const MAX_SUFFIX: u32 = 99;

/// Kept from a setup command's output for its error message.
const OUTPUT_TAIL: usize = 2000;

/// Serializes worktree creation and removal inside this process: two sheets starting at once
/// must not race on branch names or on `.git/worktrees/`.
static GIT_MUTATION: Mutex<()> = Mutex::new(());

/// Why worktree isolation could not be set up or torn down.
#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    /// The job id cannot name a directory.
    #[error("job {job_id}: invalid job id for a worktree name (must not contain '..', '/', '\\' or NUL)")]
    InvalidJobId {
        /// Job.
        job_id: String,
    },
    /// The repository directory is not inside a git work tree.
    #[error("job {job_id}: worktree isolation requires a git repository, and {repo} is not inside one: {detail}")]
    NotARepository {
        /// Job.
        job_id: String,
        /// Directory that was checked.
        repo: PathBuf,
        /// What git said.
        detail: String,
    },
    /// `git` could not be started.
    #[error("job {job_id}: cannot run git in {dir}: {source}")]
    GitSpawn {
        /// Job.
        job_id: String,
        /// Directory git was run in.
        dir: PathBuf,
        /// OS error.
        source: io::Error,
    },
    /// A git command exited non-zero.
    #[error("job {job_id}: `git {args}` failed in {dir}: {stderr}")]
    Git {
        /// Job.
        job_id: String,
        /// Arguments, space-joined.
        args: String,
        /// Directory git was run in.
        dir: PathBuf,
        /// Its stderr.
        stderr: String,
    },
    /// The installed git predates worktree locking.
    #[error("job {job_id}: git {found} is too old; worktree isolation needs git 2.15 or newer")]
    GitTooOld {
        /// Job.
        job_id: String,
        /// Version text git printed.
        found: String,
    },
    /// `source_branch` does not name a commit.
    #[error("job {job_id}: isolation.source_branch '{reference}' does not name a commit in {repo}: {stderr}")]
    BadSourceRef {
        /// Job.
        job_id: String,
        /// The ref.
        reference: String,
        /// Repository.
        repo: PathBuf,
        /// What git said.
        stderr: String,
    },
    /// Tracked files have uncommitted changes (per-sheet worktrees would miss them).
    #[error("job {job_id}: the git repository {repo} has uncommitted changes ({files}); commit or stash them first: every task's worktree starts from a commit")]
    Dirty {
        /// Job.
        job_id: String,
        /// Repository root.
        repo: PathBuf,
        /// The first changed files, as `git status --porcelain` lists them.
        files: String,
    },
    /// Every candidate branch or path name is taken.
    #[error(
        "job {job_id}: no free worktree name for '{name}' (tried suffixes -2 … -{MAX_SUFFIX})"
    )]
    NoFreeName {
        /// Job.
        job_id: String,
        /// The base name.
        name: String,
    },
    /// Another live process holds the worktree's lock.
    #[error("job {job_id}: worktree {path} is locked by running process {pid} ({reason}); stop that run first")]
    Busy {
        /// Job.
        job_id: String,
        /// Worktree.
        path: PathBuf,
        /// Lock owner.
        pid: u32,
        /// Lock reason.
        reason: String,
    },
    /// The worktree is locked by something other than Mozart.
    #[error("job {job_id}: worktree {path} is locked ({reason}) and not by Mozart; unlock it with `git worktree unlock`")]
    ForeignLock {
        /// Job.
        job_id: String,
        /// Worktree.
        path: PathBuf,
        /// Lock reason.
        reason: String,
    },
    /// A file-system step failed.
    #[error("job {job_id}: cannot {action} {path}: {source}")]
    Io {
        /// Job.
        job_id: String,
        /// What was being done.
        action: &'static str,
        /// Path involved.
        path: PathBuf,
        /// OS error.
        source: io::Error,
    },
    /// A `copy_files` entry escapes the repository.
    #[error("job {job_id}: file to copy into the worktree '{file}' must be a relative path inside the repository")]
    BadCopyPath {
        /// Job.
        job_id: String,
        /// The entry.
        file: String,
    },
    /// A setup command failed or timed out.
    #[error("job {job_id}: worktree setup command `{command}` {how} in {path}: {output}")]
    SetupFailed {
        /// Job.
        job_id: String,
        /// The command.
        command: String,
        /// `exited with status N` / `timed out after Ns` / `was killed by a signal`.
        how: String,
        /// Worktree.
        path: PathBuf,
        /// Tail of its stdout+stderr.
        output: String,
    },
}

/// Checks made when a job with per-sheet worktrees is submitted, before any agent runs
/// (docs/mochi.md): `repo_dir` is inside a git repository, its tracked files have no
/// uncommitted changes (new worktrees start from a commit, so those changes would be
/// silently missing), and `source_ref` names a commit. Returns the repository root.
pub fn preflight(
    job_id: &str,
    repo_dir: &Path,
    source_ref: Option<&str>,
) -> Result<PathBuf, IsolationError> {
    let probe = Git::new(repo_dir, job_id);
    let toplevel = repository_root(&probe, job_id, repo_dir)?;
    let root = PathBuf::from(toplevel);
    let git = Git::new(&root, job_id);
    git.check_version()?;
    let dirty = git.capture(["status", "--porcelain", "--untracked-files=no"])?;
    if !dirty.trim().is_empty() {
        let files: Vec<&str> = dirty.lines().take(10).collect();
        return Err(IsolationError::Dirty {
            job_id: job_id.into(),
            repo: root,
            files: files.join(", "),
        });
    }
    let source_ref = source_ref.unwrap_or("HEAD");
    if let Err(e) = git.capture(["rev-parse", "--verify", &format!("{source_ref}^{{commit}}")]) {
        let stderr = match e {
            IsolationError::Git { stderr, .. } => stderr,
            other => other.to_string(),
        };
        return Err(IsolationError::BadSourceRef {
            job_id: job_id.into(),
            reference: source_ref.into(),
            repo: root,
            stderr,
        });
    }
    Ok(root)
}

/// The top of the git repository holding `repo_dir`, or why it is not a repository.
fn repository_root(
    probe: &Git<'_>,
    job_id: &str,
    repo_dir: &Path,
) -> Result<String, IsolationError> {
    probe
        .capture(["rev-parse", "--show-toplevel"])
        .map_err(|e| match e {
            IsolationError::Git { stderr, .. } => IsolationError::NotARepository {
                job_id: job_id.into(),
                repo: repo_dir.to_path_buf(),
                detail: stderr,
            },
            IsolationError::GitSpawn { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                IsolationError::NotARepository {
                    job_id: job_id.into(),
                    repo: repo_dir.to_path_buf(),
                    detail: "the directory (or git itself) does not exist".into(),
                }
            }
            other => other,
        })
}

/// Which run a worktree belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorktreeScope {
    /// One worktree shared by every sheet of the job (upstream's behaviour).
    Job,
    /// A worktree of its own for one sheet (for sheets running in parallel).
    Sheet(u32),
}

/// Extra preparation of a new worktree. The score model has no fields for these yet, so
/// the caller supplies them (empty = nothing to do).
#[derive(Debug, Clone, PartialEq)]
pub struct WorktreeSetup {
    /// Paths relative to the repository root (typically git-ignored files such as `.env`)
    /// copied from the main checkout into a new worktree; directories are copied whole;
    /// missing ones are skipped; files the checkout already created are never overwritten.
    pub copy_files: Vec<String>,
    /// Shell commands (`bash -c`) run in a new worktree, in order, after the copies. Each sees
    /// `MOZART_JOB_ID`, `MOZART_WORKTREE` and `MOZART_REPO` (the main checkout).
    pub commands: Vec<String>,
    /// Per-command time limit; the command's process group is killed when it is exceeded.
    pub command_timeout: Duration,
}

impl WorktreeSetup {
    /// The score's `isolation.copy_files`, `setup_commands` and `setup_timeout_seconds`
    /// (default 300 s).
    pub fn from_config(iso: &IsolationConfig) -> Self {
        WorktreeSetup {
            copy_files: iso.copy_files.clone(),
            commands: iso.setup_commands.clone(),
            command_timeout: Duration::from_secs_f64(
                iso.setup_timeout_seconds
                    .unwrap_or(300.0)
                    .clamp(1.0, 86_400.0),
            ),
        }
    }
}

impl Default for WorktreeSetup {
    fn default() -> Self {
        WorktreeSetup {
            copy_files: Vec::new(),
            commands: Vec::new(),
            command_timeout: Duration::from_secs(600),
        }
    }
}

/// Everything [`prepare`] needs.
#[derive(Debug, Clone)]
pub struct WorktreeRequest<'a> {
    /// Conductor job id (names the directory and branch).
    pub job_id: &'a str,
    /// Job-wide or per-sheet.
    pub scope: WorktreeScope,
    /// The score's `isolation` section.
    pub config: &'a IsolationConfig,
    /// Directory inside the repository to isolate: `backend.working_directory`, else the
    /// workspace (§9.5).
    pub repo_dir: PathBuf,
    /// The job's workspace (default base `<workspace>/.worktrees`; a relative
    /// `worktree_base` is taken relative to it).
    pub workspace: PathBuf,
    /// The worktree an earlier run of this job recorded (checkpoint `worktree_path`): reused
    /// when it still exists, after recovering a stale lock.
    pub resume_path: Option<PathBuf>,
    /// Copies and commands for a newly created worktree.
    pub setup: WorktreeSetup,
    /// Branch name (before collision suffixes) instead of `{branch_prefix}/{name}`; a
    /// task's branch (docs/mochi.md).
    pub branch: Option<String>,
    /// The worktree an earlier run recorded for this scope (the sheet manifest): reused when
    /// git still has it (set up again when the crash came before its set-up finished), else
    /// its branch is checked out again at the same place — never a `-2` twin.
    pub recorded: Option<Recorded>,
    /// Called with the chosen path and branch just before `git worktree add`, so the caller
    /// can record them durably first (the sheet worktree manifest).
    pub journal: Option<Journal>,
}

/// A worktree about to be created: where, on which branch, from which commit (short).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    /// Worktree root.
    pub path: PathBuf,
    /// Its branch.
    pub branch: String,
    /// Short commit it is created from.
    pub base_commit: String,
}

/// A worktree an earlier run recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Where and on which branch.
    pub intent: Intent,
    /// Recorded before `git worktree add` and not known to have finished its set-up.
    pub creating: bool,
}

/// The function a [`Journal`] calls.
pub type JournalFn = dyn Fn(&Intent) -> io::Result<()> + Send + Sync;

/// Records an [`Intent`] durably before git acts on it.
#[derive(Clone)]
pub struct Journal(pub std::sync::Arc<JournalFn>);

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Journal(..)")
    }
}

impl<'a> WorktreeRequest<'a> {
    /// A job-wide request built from the score (repository = `backend.working_directory`
    /// or the workspace).
    pub fn for_job(job: &'a JobConfig, job_id: &'a str) -> Self {
        WorktreeRequest {
            job_id,
            scope: WorktreeScope::Job,
            config: &job.isolation,
            repo_dir: job
                .backend
                .working_directory
                .clone()
                .unwrap_or_else(|| job.workspace.clone()),
            workspace: job.workspace.clone(),
            resume_path: None,
            setup: WorktreeSetup::default(),
            branch: None,
            recorded: None,
            journal: None,
        }
    }

    /// The same for one sheet's own worktree.
    pub fn for_sheet(job: &'a JobConfig, job_id: &'a str, sheet: u32) -> Self {
        WorktreeRequest {
            scope: WorktreeScope::Sheet(sheet),
            ..Self::for_job(job, job_id)
        }
    }

    /// Reuse the worktree a previous run recorded, if it still exists.
    pub fn resuming(mut self, path: Option<&Path>) -> Self {
        self.resume_path = path.map(Path::to_path_buf);
        self
    }

    /// Copy files and run commands in a new worktree.
    pub fn with_setup(mut self, setup: WorktreeSetup) -> Self {
        self.setup = setup;
        self
    }

    /// Name the branch (a `-2`, `-3`, … suffix is still added when it exists).
    pub fn with_branch(mut self, branch: Option<String>) -> Self {
        self.branch = branch;
        self
    }

    /// Directory name under the worktree base, and branch name without suffix.
    pub(crate) fn names(&self) -> (String, String) {
        let name = match self.scope {
            WorktreeScope::Job => self.job_id.to_string(),
            WorktreeScope::Sheet(n) => format!("{}-sheet-{n}", self.job_id),
        };
        let branch = self
            .branch
            .clone()
            .unwrap_or_else(|| format!("{}/{}", self.config.branch_prefix, name));
        (name, branch)
    }

    /// `worktree_base`, or `<workspace>/.worktrees` (score.md §3.14).
    pub fn base(&self) -> PathBuf {
        match &self.config.worktree_base {
            Some(b) if b.is_absolute() => b.clone(),
            Some(b) => self.workspace.join(b),
            None => self.workspace.join(".worktrees"),
        }
    }
}

/// A worktree a job runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// Owning job.
    pub job_id: String,
    /// Root of the worktree.
    pub path: PathBuf,
    /// Where the instrument runs: the worktree path plus the repository-relative location
    /// of the requested directory (so a score in a sub-directory keeps its layout).
    pub working_directory: PathBuf,
    /// Branch checked out in the worktree (`(detached)` for a detached HEAD).
    pub branch: String,
    /// Short commit the worktree was created from (HEAD at reuse time when reused).
    pub base_commit: String,
    /// Whether Mozart holds the worktree's lock.
    pub locked: bool,
    /// Whether an existing worktree was reused instead of created.
    pub reused: bool,
    /// Root of the main checkout.
    pub repo_root: PathBuf,
}

impl Worktree {
    /// Where the instrument should run.
    pub fn working_directory(&self) -> &Path {
        &self.working_directory
    }

    /// Rebuild the handle from a checkpoint (after a conductor restart), if it records a
    /// worktree. The repository is found from the worktree itself when it still exists.
    pub fn from_checkpoint(cp: &CheckpointState) -> Option<Worktree> {
        let path = PathBuf::from(cp.worktree_path.as_deref()?);
        let repo_root = main_checkout_of(&path, &cp.job_id).unwrap_or_else(|| path.clone());
        Some(Worktree {
            job_id: cp.job_id.clone(),
            working_directory: path.clone(),
            path,
            branch: cp
                .worktree_branch
                .clone()
                .unwrap_or_else(|| "(detached)".into()),
            base_commit: cp.worktree_base_commit.clone().unwrap_or_default(),
            locked: cp.worktree_locked,
            reused: true,
            repo_root,
        })
    }
}

/// The isolation a job runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolation {
    /// `isolation.enabled` is false or the mode is `none`: run in the workspace.
    Disabled,
    /// Set up failed and `fallback_on_error` allowed running in the workspace instead.
    Fallback {
        /// Why isolation was given up (logged and shown to the user).
        reason: String,
    },
    /// Run in this worktree.
    Worktree(Worktree),
}

impl Isolation {
    /// The instrument's working directory, when isolated.
    pub fn working_directory(&self) -> Option<&Path> {
        match self {
            Isolation::Worktree(wt) => Some(wt.working_directory()),
            _ => None,
        }
    }

    /// Record the outcome in the checkpoint's isolation fields (upstream's field meanings).
    pub fn record(&self, cp: &mut CheckpointState) {
        use mozart_state::checkpoint::IsolationMode as Recorded;
        match self {
            Isolation::Disabled => {}
            Isolation::Fallback { .. } => {
                cp.isolation_fallback_used = true;
                cp.isolation_mode = Some(Recorded::None);
            }
            Isolation::Worktree(wt) => {
                cp.worktree_path = Some(wt.path.to_string_lossy().into_owned());
                cp.worktree_branch = Some(wt.branch.clone());
                cp.worktree_locked = wt.locked;
                // A reused worktree keeps the commit it was first created from.
                if !(wt.reused && cp.worktree_base_commit.is_some()) {
                    cp.worktree_base_commit = Some(wt.base_commit.clone());
                }
                cp.isolation_mode = Some(Recorded::Worktree);
            }
        }
    }
}

/// Forget a removed worktree in the checkpoint (the branch name goes too; the branch
/// itself stays in the repository for review).
pub fn clear_checkpoint(cp: &mut CheckpointState) {
    cp.worktree_path = None;
    cp.worktree_branch = None;
    cp.worktree_locked = false;
    cp.worktree_base_commit = None;
}

/// How a run ended, for [`finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// Every sheet completed.
    Completed,
    /// The job failed.
    Failed,
    /// The user cancelled it.
    Cancelled,
    /// Paused (by the user, a cost limit or shutdown): it will resume in the same tree.
    Paused,
}

/// What [`finish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleanup {
    /// The worktree is gone (its branch is kept).
    Removed,
    /// The worktree stays, for resume or inspection.
    Kept {
        /// Whether it is still locked (only a paused run keeps its lock).
        locked: bool,
    },
}

/// Set up isolation for a run: reuse the recorded worktree, or create one on a fresh
/// branch from `source_branch` (or HEAD), lock it, copy files and run setup commands.
/// Falls back to [`Isolation::Fallback`] instead of failing when `fallback_on_error`.
pub fn prepare(req: &WorktreeRequest<'_>) -> Result<Isolation, IsolationError> {
    if !req.config.enabled || req.config.mode == IsolationMode::None {
        return Ok(Isolation::Disabled);
    }
    match prepare_worktree(req) {
        Ok(wt) => Ok(Isolation::Worktree(wt)),
        // A bad job id is a bug in the caller, never something to paper over.
        Err(e @ IsolationError::InvalidJobId { .. }) => Err(e),
        Err(e) if req.config.fallback_on_error => {
            tracing::warn!(job_id = req.job_id, error = %e, "isolation.fallback_to_workspace");
            Ok(Isolation::Fallback {
                reason: e.to_string(),
            })
        }
        Err(e) => Err(e),
    }
}

fn prepare_worktree(req: &WorktreeRequest<'_>) -> Result<Worktree, IsolationError> {
    let job_id = req.job_id;
    if job_id.is_empty() || job_id.contains("..") || job_id.contains(['/', '\\', '\0']) {
        return Err(IsolationError::InvalidJobId {
            job_id: job_id.to_string(),
        });
    }
    let probe = Git::new(&req.repo_dir, job_id);
    let toplevel = probe
        .capture(["rev-parse", "--show-toplevel"])
        .map_err(|e| not_a_repo(e, req))?;
    let prefix = probe
        .capture(["rev-parse", "--show-prefix"])
        .map_err(|e| not_a_repo(e, req))?;
    let repo_root = PathBuf::from(toplevel);
    let git = Git::new(&repo_root, job_id);
    git.check_version()?;

    let (name, branch) = req.names();
    let base = req.base();
    let guard = GIT_MUTATION
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);

    if let Some(previous) = &req.resume_path {
        if let Some(wt) = try_reuse(&git, previous, &prefix, req.config.lock_during_execution)? {
            if !req.recorded.as_ref().is_some_and(|r| r.creating) {
                return Ok(wt);
            }
            // Created, but the run that created it may have died before its copies and
            // setup commands finished: do them again (copies never overwrite).
            drop(guard);
            return populate(&wt, &req.setup).map(|()| wt);
        }
    }
    std::fs::create_dir_all(&base).map_err(|source| IsolationError::Io {
        job_id: job_id.into(),
        action: "create the worktree base directory",
        path: base.clone(),
        source,
    })?;
    let NewTree {
        path,
        branch,
        base_commit,
        add_args,
        reattached,
    } = new_tree(&git, req, &repo_root, &base, &name, &branch)?;
    if let Some(journal) = &req.journal {
        let intent = Intent {
            path: path.clone(),
            branch: branch.clone(),
            base_commit: base_commit.clone(),
        };
        (journal.0)(&intent).map_err(|source| IsolationError::Io {
            job_id: job_id.into(),
            action: "record the new worktree before creating it",
            path: path.clone(),
            source,
        })?;
    }
    git.run_ok(
        [OsStr::new("worktree"), OsStr::new("add")]
            .into_iter()
            .chain(add_args.iter().map(|a| a.as_os_str())),
    )?;
    let mut wt = Worktree {
        job_id: job_id.into(),
        working_directory: path.join(&prefix),
        path,
        branch,
        base_commit,
        locked: false,
        reused: false,
        repo_root: repo_root.clone(),
    };
    if let Err(e) = register(&git, &mut wt, req) {
        rollback(&git, &wt, !reattached);
        return Err(e);
    }
    // Copies and setup commands can take minutes; other sheets may create their trees
    // meanwhile (this one is already registered, so its names are taken).
    drop(guard);
    if let Err(e) = populate(&wt, &req.setup) {
        let _guard = GIT_MUTATION
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rollback(&git, &wt, !reattached);
        return Err(e);
    }
    tracing::info!(job_id, path = %wt.path.display(), branch = %wt.branch, commit = %wt.base_commit, "isolation.worktree_created");
    Ok(wt)
}

/// The worktree `git worktree add` is to create: where, on which branch from which commit,
/// and whether it re-attaches a recorded branch.
struct NewTree {
    path: PathBuf,
    branch: String,
    base_commit: String,
    add_args: Vec<std::ffi::OsString>,
    reattached: bool,
}

/// The recorded branch of a tree that is gone (removed after its work was delivered, or
/// half-made by a crash) is checked out again at the same place: its work continues there,
/// never on a `-2` twin. Otherwise a free path and branch from the job's names.
fn new_tree(
    git: &Git<'_>,
    req: &WorktreeRequest<'_>,
    repo_root: &Path,
    base: &Path,
    name: &str,
    branch: &str,
) -> Result<NewTree, IsolationError> {
    if let Some(rec) = reattachable(git, req.recorded.as_ref())? {
        let base_commit = if rec.intent.base_commit.is_empty() {
            git.capture(["rev-parse", "--short", &rec.intent.branch])?
        } else {
            rec.intent.base_commit.clone()
        };
        let add_args = vec![
            rec.intent.path.clone().into_os_string(),
            rec.intent.branch.clone().into(),
        ];
        return Ok(NewTree {
            path: rec.intent.path.clone(),
            branch: rec.intent.branch.clone(),
            base_commit,
            add_args,
            reattached: true,
        });
    }
    let entries = list_worktrees_with(git)?;
    let (path, branch) = free_names(git, &entries, base, name, branch)?;
    let commit = source_commit(git, req, repo_root)?;
    let base_commit = git.capture(["rev-parse", "--short", &commit])?;
    let add_args = vec![
        "-b".into(),
        branch.clone().into(),
        path.clone().into_os_string(),
        commit.into(),
    ];
    Ok(NewTree {
        path,
        branch,
        base_commit,
        add_args,
        reattached: false,
    })
}

fn not_a_repo(e: IsolationError, req: &WorktreeRequest<'_>) -> IsolationError {
    match e {
        IsolationError::Git { stderr, .. } => IsolationError::NotARepository {
            job_id: req.job_id.into(),
            repo: req.repo_dir.clone(),
            detail: stderr,
        },
        IsolationError::GitSpawn { source, .. } if source.kind() == io::ErrorKind::NotFound => {
            IsolationError::NotARepository {
                job_id: req.job_id.into(),
                repo: req.repo_dir.clone(),
                detail: "the directory (or git itself) does not exist".into(),
            }
        }
        other => other,
    }
}

/// Lock, make the working directory, hide the base from the main checkout's `git status`.
fn register(
    git: &Git<'_>,
    wt: &mut Worktree,
    req: &WorktreeRequest<'_>,
) -> Result<(), IsolationError> {
    if req.config.lock_during_execution {
        lock(git, &wt.path)?;
        wt.locked = true;
    }
    // A workspace that is untracked in the repository has no counterpart in a fresh
    // checkout; the instrument still needs its directory.
    std::fs::create_dir_all(&wt.working_directory).map_err(|source| IsolationError::Io {
        job_id: wt.job_id.clone(),
        action: "create the working directory in the worktree",
        path: wt.working_directory.clone(),
        source,
    })?;
    exclude_base_from_checkout(git, &wt.repo_root, &req.base());
    Ok(())
}

/// Copy the listed files from the main checkout, then run the setup commands.
fn populate(wt: &Worktree, setup: &WorktreeSetup) -> Result<(), IsolationError> {
    copy_files(wt, &setup.copy_files)?;
    for command in &setup.commands {
        run_setup_command(wt, command, setup.command_timeout)?;
    }
    Ok(())
}

/// The commit a new worktree starts from: `source_branch`, else HEAD.
fn source_commit(
    git: &Git<'_>,
    req: &WorktreeRequest<'_>,
    repo_root: &Path,
) -> Result<String, IsolationError> {
    let source_ref = req.config.source_branch.as_deref().unwrap_or("HEAD");
    git.capture(["rev-parse", "--verify", &format!("{source_ref}^{{commit}}")])
        .map_err(|e| match e {
            IsolationError::Git { stderr, .. } => IsolationError::BadSourceRef {
                job_id: req.job_id.into(),
                reference: source_ref.into(),
                repo: repo_root.to_path_buf(),
                stderr,
            },
            other => other,
        })
}

/// Undo a half-made worktree so a failed set-up leaves nothing behind (its branch too when
/// it was made for this tree and holds no work yet).
fn rollback(git: &Git<'_>, wt: &Worktree, delete_branch: bool) {
    let _ = git.run(
        ["worktree", "unlock"]
            .map(OsStr::new)
            .into_iter()
            .chain([wt.path.as_os_str()]),
    );
    let removed = git.run(
        ["worktree", "remove", "--force"]
            .map(OsStr::new)
            .into_iter()
            .chain([wt.path.as_os_str()]),
    );
    if !matches!(removed, Ok(ref o) if o.status.success()) {
        let _ = std::fs::remove_dir_all(&wt.path);
        let _ = git.run(["worktree", "prune"]);
    }
    if delete_branch {
        let _ = git.run(["branch", "-D", wt.branch.as_str()]);
    }
}

/// The recorded tree when it can be checked out again at its place on its own branch: git
/// no longer lists it, its branch exists and is checked out nowhere, and its directory is
/// free (what a crash left of a tree being created is cleared first).
fn reattachable<'r>(
    git: &Git<'_>,
    recorded: Option<&'r Recorded>,
) -> Result<Option<&'r Recorded>, IsolationError> {
    let Some(rec) = recorded else {
        return Ok(None);
    };
    let intent = &rec.intent;
    let entries = list_worktrees_with(git)?;
    if entries.iter().any(|e| same_path(&e.path, &intent.path)) {
        return Ok(None);
    }
    if intent.path.exists() {
        if !rec.creating {
            // Not ours to delete: someone else's directory now, or a tree git forgot.
            return Ok(None);
        }
        std::fs::remove_dir_all(&intent.path).map_err(|source| IsolationError::Io {
            job_id: git.job_id.into(),
            action: "remove a half-created worktree",
            path: intent.path.clone(),
            source,
        })?;
        tracing::info!(job_id = git.job_id, path = %intent.path.display(), "isolation.unfinished_worktree_cleared");
    }
    git.run_ok(["worktree", "prune"])?;
    let checked_out = entries
        .iter()
        .any(|e| e.branch.as_deref() == Some(intent.branch.as_str()));
    if checked_out || !branch_exists(git, &intent.branch)? {
        return Ok(None);
    }
    Ok(Some(rec))
}

/// Reuse a recorded worktree if it is still a worktree of this repository.
fn try_reuse(
    git: &Git<'_>,
    previous: &Path,
    prefix: &str,
    want_lock: bool,
) -> Result<Option<Worktree>, IsolationError> {
    let entries = list_worktrees_with(git)?;
    let Some(entry) = entries.iter().find(|e| same_path(&e.path, previous)) else {
        tracing::warn!(job_id = git.job_id, path = %previous.display(), "isolation.previous_worktree_missing");
        return Ok(None);
    };
    if !entry.path.exists() {
        // Registered but deleted by hand: clear its metadata and start over.
        recover_missing(git, entry)?;
        return Ok(None);
    }
    let mut locked = false;
    if let Some(reason) = &entry.lock_reason {
        match lock_owner(reason) {
            LockOwner::Us => locked = true,
            LockOwner::Dead(pid) => {
                tracing::warn!(job_id = git.job_id, path = %entry.path.display(), pid, "isolation.stale_lock_recovered");
                unlock(git, &entry.path)?;
            }
            LockOwner::Live(pid) => {
                return Err(IsolationError::Busy {
                    job_id: git.job_id.into(),
                    path: entry.path.clone(),
                    pid,
                    reason: reason.clone(),
                })
            }
            LockOwner::Foreign => {
                return Err(IsolationError::ForeignLock {
                    job_id: git.job_id.into(),
                    path: entry.path.clone(),
                    reason: reason.clone(),
                })
            }
        }
    }
    let mut wt = Worktree {
        job_id: git.job_id.into(),
        working_directory: entry.path.join(prefix),
        path: entry.path.clone(),
        branch: entry.branch.clone().unwrap_or_else(|| "(detached)".into()),
        base_commit: Git::new(&entry.path, git.job_id).capture(["rev-parse", "--short", "HEAD"])?,
        locked,
        reused: true,
        repo_root: git.dir.to_path_buf(),
    };
    if want_lock && !wt.locked {
        lock(git, &wt.path)?;
        wt.locked = true;
    }
    tracing::info!(job_id = git.job_id, path = %wt.path.display(), "isolation.worktree_reused");
    Ok(Some(wt))
}

/// Pick the first `name`/`branch` pair (plain, then `-2`, `-3`, …) whose branch does not
/// exist and whose directory is free. A registered worktree whose directory was deleted and
/// whose lock is stale is pruned on the way, so it does not block its own name.
fn free_names(
    git: &Git<'_>,
    entries: &[WorktreeEntry],
    base: &Path,
    name: &str,
    branch: &str,
) -> Result<(PathBuf, String), IsolationError> {
    for n in 1..=MAX_SUFFIX {
        let suffix = if n == 1 {
            String::new()
        } else {
            format!("-{n}")
        };
        let path = base.join(format!("{name}{suffix}"));
        let candidate = format!("{branch}{suffix}");
        if let Some(entry) = entries.iter().find(|e| same_path(&e.path, &path)) {
            if entry.path.exists() || !recover_missing(git, entry)? {
                // Leave an earlier run's kept worktree alone; a dead owner's lock is dropped
                // so the user can remove it.
                if let Some(LockOwner::Dead(pid)) = entry.lock_reason.as_deref().map(lock_owner) {
                    tracing::warn!(job_id = git.job_id, path = %entry.path.display(), pid, "isolation.stale_lock_recovered");
                    unlock(git, &entry.path)?;
                }
                continue;
            }
        }
        if path.exists() || branch_exists(git, &candidate)? {
            continue;
        }
        return Ok((path, candidate));
    }
    Err(IsolationError::NoFreeName {
        job_id: git.job_id.into(),
        name: name.into(),
    })
}

/// One worktree to plan with [`plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRequest {
    /// Directory name under `base` (before collision suffixes).
    pub name: String,
    /// Branch name (before collision suffixes).
    pub branch: String,
    /// A worktree an earlier run recorded (the manifest): reused when it is still there.
    pub resume_path: Option<PathBuf>,
}

/// Where a planned worktree will be (see [`plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWorktree {
    /// Its root.
    pub path: PathBuf,
    /// Its branch, with the suffix a taken name gets.
    pub branch: String,
    /// An earlier run's worktree, reused as it is.
    pub reused: bool,
}

/// The worktrees [`prepare`] would use for `wanted`, created in that order under `base` in
/// the repository containing `repo_dir`, without changing anything (no prune, no unlock):
/// what `mozart run --dry-run` shows. The names are picked as [`prepare`] picks them — the
/// first of plain, `-2`, `-3`, … whose branch does not exist and whose directory is free —
/// and an earlier request's pick counts as taken for the later ones.
pub fn plan(
    job_id: &str,
    repo_dir: &Path,
    base: &Path,
    wanted: &[PlanRequest],
) -> Result<Vec<PlannedWorktree>, IsolationError> {
    // A workspace that does not exist yet is created before `prepare` runs: its repository
    // is the one of its nearest existing parent.
    let existing = repo_dir
        .ancestors()
        .find(|d| d.is_dir())
        .unwrap_or(repo_dir);
    let probe = Git::new(existing, job_id);
    let toplevel = repository_root(&probe, job_id, repo_dir)?;
    let root = PathBuf::from(toplevel);
    let git = Git::new(&root, job_id);
    let entries = list_worktrees_with(&git)?;
    // One `for-each-ref` instead of a `show-ref` per candidate: a fan-out can plan hundreds.
    let mut branches: std::collections::HashSet<String> = git
        .capture(["for-each-ref", "--format=%(refname)", "refs/heads"])?
        .lines()
        .filter_map(|l| l.strip_prefix("refs/heads/"))
        .map(str::to_string)
        .collect();
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut out = Vec::with_capacity(wanted.len());
    'requests: for w in wanted {
        if let Some(previous) = &w.resume_path {
            if let Some(e) = entries
                .iter()
                .find(|e| same_path(&e.path, previous) && e.path.exists())
            {
                out.push(PlannedWorktree {
                    path: e.path.clone(),
                    branch: e.branch.clone().unwrap_or_else(|| "(detached)".into()),
                    reused: true,
                });
                continue;
            }
        }
        for n in 1..=MAX_SUFFIX {
            let suffix = if n == 1 {
                String::new()
            } else {
                format!("-{n}")
            };
            let path = base.join(format!("{}{suffix}", w.name));
            let branch = format!("{}{suffix}", w.branch);
            // A registered worktree blocks its name unless `prepare` would prune it (its
            // directory is gone and no live or foreign lock holds it).
            let registered = entries.iter().any(|e| {
                same_path(&e.path, &path)
                    && (e.path.exists()
                        || matches!(
                            e.lock_reason.as_deref().map(lock_owner),
                            Some(LockOwner::Live(_) | LockOwner::Foreign)
                        ))
            });
            if registered || path.exists() || paths.contains(&path) || branches.contains(&branch) {
                continue;
            }
            paths.push(path.clone());
            branches.insert(branch.clone());
            out.push(PlannedWorktree {
                path,
                branch,
                reused: false,
            });
            continue 'requests;
        }
        return Err(IsolationError::NoFreeName {
            job_id: job_id.into(),
            name: w.name.clone(),
        });
    }
    Ok(out)
}

/// Prune a registered worktree whose directory is gone, unless a live process locked it.
/// Returns whether its name is free again.
fn recover_missing(git: &Git<'_>, entry: &WorktreeEntry) -> Result<bool, IsolationError> {
    match entry.lock_reason.as_deref().map(lock_owner) {
        Some(LockOwner::Live(_)) | Some(LockOwner::Foreign) => return Ok(false),
        Some(LockOwner::Dead(_)) | Some(LockOwner::Us) => unlock(git, &entry.path)?,
        None => {}
    }
    git.run_ok(["worktree", "prune"])?;
    Ok(true)
}

fn branch_exists(git: &Git<'_>, branch: &str) -> Result<bool, IsolationError> {
    let out = git.run([
        "show-ref",
        "--verify",
        "--quiet",
        &format!("refs/heads/{branch}"),
    ])?;
    Ok(out.status.success())
}

/// The reason Mozart writes into a worktree lock; the pid lets a later run tell a crashed
/// owner from a live one.
fn lock_reason(job_id: &str) -> String {
    format!(
        "Mozart job {job_id} in progress (pid={})",
        std::process::id()
    )
}

fn lock(git: &Git<'_>, path: &Path) -> Result<(), IsolationError> {
    git.run_ok([
        OsStr::new("worktree"),
        OsStr::new("lock"),
        OsStr::new("--reason"),
        OsStr::new(&lock_reason(git.job_id)),
        path.as_os_str(),
    ])
}

fn unlock(git: &Git<'_>, path: &Path) -> Result<(), IsolationError> {
    let out = git.run(
        ["worktree", "unlock"]
            .map(OsStr::new)
            .into_iter()
            .chain([path.as_os_str()]),
    )?;
    // Unlocking an unlocked tree is not an error for us.
    if out.status.success() || String::from_utf8_lossy(&out.stderr).contains("not locked") {
        Ok(())
    } else {
        Err(git.failure(&["worktree", "unlock", &path.to_string_lossy()], &out))
    }
}

/// Who holds a lock, judged from its reason text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LockOwner {
    /// This process.
    Us,
    /// A Mozart process that is still running.
    Live(u32),
    /// A Mozart process that is gone (crash, kill -9): the lock is stale.
    Dead(u32),
    /// Not a Mozart lock (no `pid=`).
    Foreign,
}

fn lock_owner(reason: &str) -> LockOwner {
    let Some(pid) = lock_pid(reason) else {
        return LockOwner::Foreign;
    };
    if pid == std::process::id() {
        LockOwner::Us
    } else if mozart_conductor::instance::pid_running(pid) {
        LockOwner::Live(pid)
    } else {
        LockOwner::Dead(pid)
    }
}

fn lock_pid(reason: &str) -> Option<u32> {
    let (_, rest) = reason.split_once("pid=")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Tear down or keep a run's worktree (execution.md §9.5): removed when the run completed
/// and `cleanup_on_success`, or failed and `cleanup_on_failure`; never when paused. A kept
/// worktree is unlocked unless the run is paused. The branch is always kept.
pub fn finish(
    wt: &Worktree,
    outcome: RunOutcome,
    config: &IsolationConfig,
) -> Result<Cleanup, IsolationError> {
    let remove = match outcome {
        RunOutcome::Completed => config.cleanup_on_success,
        RunOutcome::Failed => config.cleanup_on_failure,
        RunOutcome::Cancelled | RunOutcome::Paused => false,
    };
    let git = Git::new(&wt.repo_root, &wt.job_id);
    let _guard = GIT_MUTATION
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !wt.path.exists() {
        // Deleted behind our back: only git's bookkeeping can be left, and only when the
        // main checkout is still known.
        if wt.repo_root != wt.path && wt.repo_root.is_dir() {
            let _ = unlock(&git, &wt.path);
            let _ = git.run(["worktree", "prune"]);
        }
        return Ok(Cleanup::Removed);
    }
    if !remove {
        if outcome == RunOutcome::Paused {
            return Ok(Cleanup::Kept { locked: wt.locked });
        }
        unlock(&git, &wt.path)?;
        tracing::info!(job_id = %wt.job_id, path = %wt.path.display(), ?outcome, "isolation.worktree_kept");
        return Ok(Cleanup::Kept { locked: false });
    }
    remove_worktree(&git, &wt.path)?;
    tracing::info!(job_id = %wt.job_id, path = %wt.path.display(), "isolation.worktree_removed");
    Ok(Cleanup::Removed)
}

/// Unlock and remove a worktree; if git refuses, delete the directory and prune.
fn remove_worktree(git: &Git<'_>, path: &Path) -> Result<(), IsolationError> {
    unlock(git, path)?;
    if path.exists() {
        let out = git.run(
            ["worktree", "remove", "--force"]
                .map(OsStr::new)
                .into_iter()
                .chain([path.as_os_str()]),
        )?;
        if out.status.success() {
            return Ok(());
        }
        tracing::warn!(job_id = git.job_id, path = %path.display(), stderr = %String::from_utf8_lossy(&out.stderr).trim(), "isolation.git_remove_failed_deleting");
        std::fs::remove_dir_all(path).map_err(|source| IsolationError::Io {
            job_id: git.job_id.into(),
            action: "remove the worktree",
            path: path.to_path_buf(),
            source,
        })?;
    }
    git.run_ok(["worktree", "prune"])
}

/// Unlock every worktree of the repository containing `repo_dir` whose Mozart lock names a
/// process that is no longer running (a conductor killed mid-run), and prune entries whose
/// directory is gone. Returns the worktrees recovered.
pub fn recover_stale_locks(repo_dir: &Path) -> Result<Vec<PathBuf>, IsolationError> {
    let git = Git::new(repo_dir, "-");
    let _guard = GIT_MUTATION
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut recovered = Vec::new();
    for entry in list_worktrees_with(&git)? {
        if let Some(LockOwner::Dead(pid)) = entry.lock_reason.as_deref().map(lock_owner) {
            tracing::warn!(path = %entry.path.display(), pid, "isolation.stale_lock_recovered");
            unlock(&git, &entry.path)?;
            recovered.push(entry.path);
        }
    }
    git.run_ok(["worktree", "prune"])?;
    Ok(recovered)
}

/// One entry of `git worktree list --porcelain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreeEntry {
    /// Worktree root.
    pub path: PathBuf,
    /// Checked-out commit.
    pub head: Option<String>,
    /// Branch name without `refs/heads/`; `None` when detached.
    pub branch: Option<String>,
    /// Lock reason (`Some("")` when locked without one).
    pub lock_reason: Option<String>,
}

/// The worktrees of the repository containing `repo_dir` (the main checkout first).
pub fn list_worktrees(repo_dir: &Path) -> Result<Vec<WorktreeEntry>, IsolationError> {
    list_worktrees_with(&Git::new(repo_dir, "-"))
}

fn list_worktrees_with(git: &Git<'_>) -> Result<Vec<WorktreeEntry>, IsolationError> {
    let text = git.capture(["worktree", "list", "--porcelain"])?;
    Ok(parse_porcelain(&text))
}

fn parse_porcelain(text: &str) -> Vec<WorktreeEntry> {
    let mut entries: Vec<WorktreeEntry> = Vec::new();
    for line in text.lines() {
        if let Some(path) = line.strip_prefix("worktree ") {
            entries.push(WorktreeEntry {
                path: PathBuf::from(path),
                head: None,
                branch: None,
                lock_reason: None,
            });
            continue;
        }
        let Some(entry) = entries.last_mut() else {
            continue;
        };
        if let Some(head) = line.strip_prefix("HEAD ") {
            entry.head = Some(head.into());
        } else if let Some(branch) = line.strip_prefix("branch ") {
            entry.branch = Some(branch.trim_start_matches("refs/heads/").into());
        } else if line == "locked" {
            entry.lock_reason = Some(String::new());
        } else if let Some(reason) = line.strip_prefix("locked ") {
            entry.lock_reason = Some(reason.into());
        }
    }
    entries
}

fn same_path(a: &Path, b: &Path) -> bool {
    if a == b {
        return true;
    }
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// The main checkout of the repository a worktree belongs to.
/// The main checkout of the repository a worktree belongs to, if it still exists.
pub fn main_checkout(path: &Path, job_id: &str) -> Option<PathBuf> {
    main_checkout_of(path, job_id)
}

fn main_checkout_of(path: &Path, job_id: &str) -> Option<PathBuf> {
    let common = Git::new(path, job_id)
        .capture(["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .ok()?;
    Path::new(&common).parent().map(Path::to_path_buf)
}

/// Add the worktree base to the repository's `info/exclude` when it lies inside the main
/// checkout, so the nested worktrees never show up (or get committed) there.
fn exclude_base_from_checkout(git: &Git<'_>, repo_root: &Path, base: &Path) {
    let base = base.canonicalize().unwrap_or_else(|_| base.to_path_buf());
    let root = repo_root
        .canonicalize()
        .unwrap_or_else(|_| repo_root.to_path_buf());
    let Ok(rel) = base.strip_prefix(&root) else {
        return;
    };
    if rel.as_os_str().is_empty() {
        return;
    }
    let Ok(exclude) = git.capture([
        "rev-parse",
        "--path-format=absolute",
        "--git-path",
        "info/exclude",
    ]) else {
        return;
    };
    let line = format!("/{}/", rel.to_string_lossy());
    let current = std::fs::read_to_string(&exclude).unwrap_or_default();
    if current.lines().any(|l| l == line) {
        return;
    }
    let mut text = current;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&line);
    text.push('\n');
    if let Some(dir) = Path::new(&exclude).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = std::fs::write(&exclude, text) {
        tracing::warn!(path = %exclude, error = %e, "isolation.exclude_write_failed");
    }
}

fn copy_files(wt: &Worktree, files: &[String]) -> Result<(), IsolationError> {
    for file in files {
        let rel = Path::new(file);
        let inside = !file.is_empty()
            && rel
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !inside {
            return Err(IsolationError::BadCopyPath {
                job_id: wt.job_id.clone(),
                file: file.clone(),
            });
        }
        let from = wt.repo_root.join(rel);
        if !from.exists() {
            tracing::info!(job_id = %wt.job_id, file, "isolation.copy_file_missing");
            continue;
        }
        copy_tree(&from, &wt.path.join(rel)).map_err(|(path, source)| IsolationError::Io {
            job_id: wt.job_id.clone(),
            action: "copy into the worktree",
            path,
            source,
        })?;
    }
    Ok(())
}

/// Copy a file or directory without overwriting anything already there.
fn copy_tree(from: &Path, to: &Path) -> Result<(), (PathBuf, io::Error)> {
    let meta = std::fs::metadata(from).map_err(|e| (from.to_path_buf(), e))?;
    if meta.is_dir() {
        std::fs::create_dir_all(to).map_err(|e| (to.to_path_buf(), e))?;
        let entries = std::fs::read_dir(from).map_err(|e| (from.to_path_buf(), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| (from.to_path_buf(), e))?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    if to.exists() {
        return Ok(());
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| (parent.to_path_buf(), e))?;
    }
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| (to.to_path_buf(), e))
}

fn run_setup_command(wt: &Worktree, command: &str, limit: Duration) -> Result<(), IsolationError> {
    use std::os::unix::process::CommandExt;
    let failed = |how: String, output: String| IsolationError::SetupFailed {
        job_id: wt.job_id.clone(),
        command: command.into(),
        how,
        path: wt.path.clone(),
        output,
    };
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(command)
        .current_dir(&wt.working_directory)
        .env("MOZART_JOB_ID", &wt.job_id)
        .env("MOZART_WORKTREE", &wt.path)
        .env("MOZART_REPO", &wt.repo_root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Architecture invariant 5: every child in its own process group.
        .process_group(0)
        .spawn()
        .map_err(|e| failed("could not start".into(), e.to_string()))?;
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|mut stream| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = stream.read_to_end(&mut buf);
            buf
        })
    })
    .collect();
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() >= limit => {
                kill_group(child.id());
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(failed("could not be waited for".into(), e.to_string())),
        }
    };
    let mut output = Vec::new();
    for reader in readers {
        output.extend(reader.join().unwrap_or_default());
    }
    let output = tail(&String::from_utf8_lossy(&output), OUTPUT_TAIL);
    match status {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(failed(
            match s.code() {
                Some(code) => format!("exited with status {code}"),
                None => "was killed by a signal".into(),
            },
            output,
        )),
        None => Err(failed(
            format!("timed out after {}s", limit.as_secs_f64()),
            output,
        )),
    }
}

fn kill_group(pid: u32) {
    use nix::sys::signal::{killpg, Signal};
    if let Ok(raw) = i32::try_from(pid) {
        let _ = killpg(nix::unistd::Pid::from_raw(raw), Signal::SIGKILL);
    }
}

fn tail(s: &str, max: usize) -> String {
    let s = s.trim();
    let count = s.chars().count();
    if count <= max {
        return s.to_string();
    }
    s.chars().skip(count - max).collect()
}

/// `git -C <dir> …` with the caller's job for error context.
struct Git<'a> {
    dir: &'a Path,
    job_id: &'a str,
}

impl<'a> Git<'a> {
    fn new(dir: &'a Path, job_id: &'a str) -> Self {
        Git { dir, job_id }
    }

    fn run<I, S>(&self, args: I) -> Result<std::process::Output, IsolationError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(self.dir);
        cmd.args(args);
        // A caller running inside a git hook must not redirect us to its repository.
        for var in [
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_COMMON_DIR",
        ] {
            cmd.env_remove(var);
        }
        cmd.stdin(Stdio::null())
            .output()
            .map_err(|source| IsolationError::GitSpawn {
                job_id: self.job_id.into(),
                dir: self.dir.to_path_buf(),
                source,
            })
    }

    fn failure(&self, args: &[&str], out: &std::process::Output) -> IsolationError {
        IsolationError::Git {
            job_id: self.job_id.into(),
            args: args.join(" "),
            dir: self.dir.to_path_buf(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }
    }

    fn run_ok<I, S>(&self, args: I) -> Result<(), IsolationError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.capture(args).map(|_| ())
    }

    /// Run and return trimmed stdout, or the failure with stderr.
    fn capture<I, S>(&self, args: I) -> Result<String, IsolationError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let out = self.run(&args)?;
        if !out.status.success() {
            let shown: Vec<String> = args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let shown: Vec<&str> = shown.iter().map(String::as_str).collect();
            return Err(self.failure(&shown, &out));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Refuse gits older than 2.15 (checked once per process).
    fn check_version(&self) -> Result<(), IsolationError> {
        static VERSION: OnceLock<String> = OnceLock::new();
        let text = match VERSION.get() {
            Some(v) => v.clone(),
            None => {
                let v = self.capture(["--version"])?;
                VERSION.get_or_init(|| v).clone()
            }
        };
        let number = text.split_whitespace().nth(2).unwrap_or("");
        let mut parts = number.split('.').map(|p| {
            p.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<u32>()
        });
        match (parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor))) if (major, minor) < MIN_GIT => {
                Err(IsolationError::GitTooOld {
                    job_id: self.job_id.into(),
                    found: number.into(),
                })
            }
            // An unparsable version is given the benefit of the doubt, as upstream does.
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn porcelain_entries_with_locks_and_detached_heads() {
        let text = "worktree /r\nHEAD abc\nbranch refs/heads/main\n\n\
                    worktree /r/.worktrees/j\nHEAD def\nbranch refs/heads/mozart/j\nlocked Mozart job j in progress (pid=42)\n\n\
                    worktree /x\nHEAD 123\ndetached\nlocked\n";
        let e = parse_porcelain(text);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].branch.as_deref(), Some("main"));
        assert_eq!(e[1].branch.as_deref(), Some("mozart/j"));
        assert_eq!(lock_pid(e[1].lock_reason.as_deref().unwrap()), Some(42));
        assert_eq!(e[2].branch, None);
        assert_eq!(e[2].lock_reason.as_deref(), Some(""));
        assert_eq!(lock_owner(""), LockOwner::Foreign);
    }

    #[test]
    fn own_pid_is_ours() {
        assert_eq!(lock_owner(&lock_reason("j")), LockOwner::Us);
    }

    #[test]
    fn names_per_scope_do_not_nest_refs() {
        let cfg = IsolationConfig::default();
        let mut req = WorktreeRequest {
            job_id: "job",
            scope: WorktreeScope::Job,
            config: &cfg,
            repo_dir: "/r".into(),
            workspace: "/w".into(),
            resume_path: None,
            setup: WorktreeSetup::default(),
            branch: None,
            recorded: None,
            journal: None,
        };
        assert_eq!(req.names(), ("job".into(), "mozart/job".into()));
        assert_eq!(req.base(), PathBuf::from("/w/.worktrees"));
        req.scope = WorktreeScope::Sheet(3);
        // `mozart/job/…` would collide with the ref `mozart/job` itself.
        assert_eq!(
            req.names(),
            ("job-sheet-3".into(), "mozart/job-sheet-3".into())
        );
        // A task names its branch; the directory stays per sheet.
        req.branch = Some("mochi/fix-it".into());
        assert_eq!(req.names(), ("job-sheet-3".into(), "mochi/fix-it".into()));
    }
}
