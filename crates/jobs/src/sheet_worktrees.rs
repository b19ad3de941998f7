//! Ours: a git worktree per sheet (`isolation.scope: sheet`, docs/mochi.md) and the manifest
//! that remembers them.
//!
//! Each sheet of such a job gets its own worktree and branch (a task's branch when the sheet
//! plays a task) the first time it is dispatched, so sheets running side by side never share
//! a working tree. The manifest, `<worktree base>/<job_id>.manifest.json`, is written as soon
//! as a worktree exists (before any agent runs in it): after a crash, the restarted conductor
//! reuses each recorded worktree instead of creating a `-2` twin, and the job's end removes or
//! unlocks every worktree the manifest still lists (MOCHI's `.mochi_manifest.json`).
//!
//! Blocking (git, file writes): call from `spawn_blocking`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mozart_config::model::IsolationScope;
use mozart_config::JobConfig;
use serde::{Deserialize, Serialize};

use crate::isolation::{self, Cleanup, Isolation, RunOutcome, Worktree, WorktreeRequest};

/// Serializes manifest read-modify-writes inside this process.
static MANIFEST: Mutex<()> = Mutex::new(());

/// One recorded worktree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// Worktree root.
    pub path: PathBuf,
    /// Its branch.
    pub branch: String,
    /// The task's slug, when the sheet plays a task.
    #[serde(default)]
    pub slug: Option<String>,
    /// `creating` from just before `git worktree add` until its copies and setup commands
    /// finished; `active` while the sheet runs; `kept` once the job ended and the tree stayed.
    pub status: String,
    /// The commit the worktree was created from: what the reviewer's list of changed files
    /// compares against, also after a restart reuses the worktree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_commit: Option<String>,
}

/// The manifest file: sheet number → worktree.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Owning job.
    pub job_id: String,
    /// Recorded worktrees.
    pub sheets: BTreeMap<u32, ManifestEntry>,
}

/// Whether the score asks for a worktree per sheet.
pub fn per_sheet(job: &JobConfig) -> bool {
    job.isolation.enabled
        && job.isolation.mode == mozart_config::model::IsolationMode::Worktree
        && job.isolation.scope == IsolationScope::Sheet
}

/// The directory inside the repository the sheets isolate: `tasks.repository`, else
/// `backend.working_directory`, else the workspace.
pub fn repo_dir(job: &JobConfig) -> PathBuf {
    job.tasks
        .as_ref()
        .and_then(|t| t.repository.clone())
        .or_else(|| job.backend.working_directory.clone())
        .unwrap_or_else(|| job.workspace.clone())
}

/// Where the job's manifest lives.
pub fn manifest_path(job: &JobConfig, job_id: &str) -> PathBuf {
    WorktreeRequest::for_job(job, job_id)
        .base()
        .join(format!("{job_id}.manifest.json"))
}

/// Read the manifest (empty when missing or unreadable).
pub fn load(path: &Path) -> Manifest {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn update(path: &Path, job_id: &str, f: impl FnOnce(&mut Manifest)) -> Result<(), String> {
    let _guard = MANIFEST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut m = load(path);
    m.job_id = job_id.to_string();
    f(&mut m);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let bytes = serde_json::to_vec_pretty(&m).map_err(|e| e.to_string())?;
    mozart_state::atomic_write(path, &bytes)
        .map_err(|e| format!("cannot write the worktree manifest {}: {e}", path.display()))
}

/// Why `mozart run` refuses a job with per-sheet worktrees before any agent runs. Its text
/// is the cause and [`PreflightError::fix`] what to do: the conductor's refusal says both
/// ([`PreflightError::refusal`]), and `mozart validate` reports the same two (V219), so a
/// score that passes validate is not refused here.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// The repository directory is not inside a git repository (or git is not installed).
    #[error("{repo} is not inside a git repository ({detail})")]
    NotARepository {
        /// The directory the sheets isolate.
        repo: PathBuf,
        /// What git said.
        detail: String,
    },
    /// Tracked files have uncommitted changes, which the worktrees would silently miss.
    #[error("the git repository {repo} has uncommitted changes ({files}), which no task's worktree would have: each starts from a commit")]
    Dirty {
        /// Repository root.
        repo: PathBuf,
        /// The first changed files, as `git status --porcelain` lists them.
        files: String,
    },
    /// No `source_branch` and a HEAD that names no commit (a repository without commits).
    #[error("the git repository {repo} has no commit for the worktrees to start from (its HEAD names none)")]
    NoCommit {
        /// Repository root.
        repo: PathBuf,
    },
    /// `isolation.source_branch` names no commit.
    #[error("isolation.source_branch '{reference}' does not name a commit in {repo}: {stderr}")]
    BadSourceBranch {
        /// The ref.
        reference: String,
        /// Repository root.
        repo: PathBuf,
        /// What git said.
        stderr: String,
    },
    /// `dispatch: pr` pushes to a remote the repository does not have.
    #[error("tasks.dispatch is `pr`, but the repository {repo} has no remote '{remote}' (`git remote get-url {remote}` failed)")]
    NoRemote {
        /// Repository root.
        repo: PathBuf,
        /// `tasks.remote`.
        remote: String,
    },
    /// `dispatch: pr` runs `gh`, which is not on the `PATH` looked in.
    #[error("tasks.dispatch is `pr`, but the GitHub CLI `gh` is not on the conductor's PATH")]
    NoGh,
    /// git itself failed: not runnable, too old, or a command of the check failed.
    #[error(transparent)]
    Git(isolation::IsolationError),
}

impl PreflightError {
    /// What to do about it, as one sentence.
    pub fn fix(&self) -> String {
        match self {
            PreflightError::NotARepository { repo, .. } => format!(
                "Run it on a git repository: make {} one (git init), or set tasks.repository to one; or set isolation.enabled: false to run without worktrees",
                repo.display()
            ),
            PreflightError::Dirty { .. } => {
                "Commit or stash them first (untracked files do not count)".into()
            }
            PreflightError::NoCommit { repo, .. } => format!(
                "Make a first commit in {} (git add, git commit), or set isolation.source_branch to a commit",
                repo.display()
            ),
            PreflightError::BadSourceBranch { .. } => {
                "Set isolation.source_branch to a branch, tag or commit of the repository (git branch lists its branches), or remove it to start from HEAD".into()
            }
            PreflightError::NoRemote { remote, .. } => format!(
                "Add it (git remote add {remote} URL), or set tasks.remote to one of the repository's remotes (git remote lists them)"
            ),
            PreflightError::NoGh => {
                "Install it (https://cli.github.com) and run `gh auth login`, or choose another tasks.dispatch".into()
            }
            PreflightError::Git(isolation::IsolationError::GitTooOld { .. }) => {
                "Install git 2.15 or newer on the conductor's PATH, or set isolation.enabled: false to run without worktrees".into()
            }
            PreflightError::Git(_) => {
                "Fix what git says, or set isolation.enabled: false to run without worktrees"
                    .into()
            }
        }
    }

    /// The cause and the fix, as the conductor's refusal of the job says them.
    pub fn refusal(&self) -> String {
        format!("{self}. {}", self.fix())
    }
}

/// Up-front checks for a job with per-sheet worktrees (see [`isolation::preflight`]); with
/// `dispatch: pr`, also that the remote exists and `gh` can be run (on this process's
/// `PATH`).
pub fn preflight(job: &JobConfig, job_id: &str) -> Result<(), PreflightError> {
    preflight_on(job, job_id, None)
}

/// [`preflight`], looking for `gh` on `path` instead of this process's `PATH` when given:
/// `mozart validate` looks where the running conductor will.
pub fn preflight_on(
    job: &JobConfig,
    job_id: &str,
    path: Option<&std::ffi::OsStr>,
) -> Result<(), PreflightError> {
    let source_branch = job.isolation.source_branch.as_deref();
    let root =
        isolation::preflight(job_id, &repo_dir(job), source_branch).map_err(|e| match e {
            isolation::IsolationError::NotARepository { repo, detail, .. } => {
                PreflightError::NotARepository {
                    repo,
                    detail: detail.trim().to_string(),
                }
            }
            isolation::IsolationError::Dirty { repo, files, .. } => {
                PreflightError::Dirty { repo, files }
            }
            isolation::IsolationError::BadSourceRef { repo, .. } if source_branch.is_none() => {
                PreflightError::NoCommit { repo }
            }
            isolation::IsolationError::BadSourceRef {
                reference,
                repo,
                stderr,
                ..
            } => PreflightError::BadSourceBranch {
                reference,
                repo,
                stderr: stderr.trim().to_string(),
            },
            other => PreflightError::Git(other),
        })?;
    let Some(tasks) = job
        .tasks
        .as_ref()
        .filter(|t| t.dispatch == mozart_config::tasks::DispatchMode::Pr)
    else {
        return Ok(());
    };
    let remote = std::process::Command::new("git")
        .args(["remote", "get-url", &tasks.remote])
        .current_dir(&root)
        .output()
        .map_err(|source| {
            PreflightError::Git(isolation::IsolationError::GitSpawn {
                job_id: job_id.into(),
                dir: root.clone(),
                source,
            })
        })?;
    if !remote.status.success() {
        return Err(PreflightError::NoRemote {
            repo: root,
            remote: tasks.remote.clone(),
        });
    }
    let mut gh = std::process::Command::new("gh");
    gh.arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if let Some(path) = path {
        // (A PATH set on the command is the one the program is looked up on.)
        gh.env("PATH", path);
    }
    match gh.status() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(PreflightError::NoGh),
        _ => Ok(()),
    }
}

/// The worktree of `sheet`: the one the manifest records (reused, lock recovered), or a new
/// one on the sheet's branch (`branch`, else `{prefix}/{job_id}-sheet-{n}`), recorded in the
/// manifest before it is returned. Never falls back to a shared directory.
pub fn prepare(
    job: &JobConfig,
    job_id: &str,
    sheet: u32,
    branch: Option<String>,
    slug: Option<String>,
) -> Result<Worktree, String> {
    let manifest = manifest_path(job, job_id);
    let recorded = load(&manifest).sheets.get(&sheet).cloned();
    let previous = recorded.as_ref().map(|e| e.path.clone());
    let mut cfg = job.isolation.clone();
    cfg.fallback_on_error = false;
    let setup = isolation::WorktreeSetup::from_config(&job.isolation);
    let mut req = WorktreeRequest::for_sheet(job, job_id, sheet)
        .resuming(previous.as_deref())
        .with_setup(setup)
        .with_branch(branch);
    req.config = &cfg;
    req.repo_dir = repo_dir(job);
    // A crash between `git worktree add` and the end of its set-up leaves a `creating`
    // entry: the next run finishes that tree (or clears its leftovers) instead of making a
    // `-2` twin.
    req.recorded = recorded.as_ref().map(|e| isolation::Recorded {
        intent: isolation::Intent {
            path: e.path.clone(),
            branch: e.branch.clone(),
            base_commit: e.base_commit.clone().unwrap_or_default(),
        },
        creating: e.status == "creating",
    });
    let journal_path = manifest.clone();
    let journal_job = job_id.to_string();
    let journal_slug = slug.clone();
    req.journal = Some(isolation::Journal(std::sync::Arc::new(move |intent| {
        update(&journal_path, &journal_job, |m| {
            m.sheets.insert(
                sheet,
                ManifestEntry {
                    path: intent.path.clone(),
                    branch: intent.branch.clone(),
                    slug: journal_slug.clone(),
                    status: "creating".into(),
                    base_commit: Some(intent.base_commit.clone()).filter(|b| !b.is_empty()),
                },
            );
        })
        .map_err(std::io::Error::other)
    })));
    let mut wt = match isolation::prepare(&req) {
        Ok(Isolation::Worktree(wt)) => wt,
        Ok(Isolation::Disabled) => return Err("worktree isolation is disabled".into()),
        Ok(Isolation::Fallback { reason }) => return Err(reason),
        Err(e) => return Err(e.to_string()),
    };
    // A reused tree (only ever the recorded one) reports its HEAD as base; the commit it
    // was created from is in the manifest.
    if let Some(base) = recorded.filter(|_| wt.reused).and_then(|e| e.base_commit) {
        wt.base_commit = base;
    }
    update(&manifest, job_id, |m| {
        m.sheets.insert(
            sheet,
            ManifestEntry {
                path: wt.path.clone(),
                branch: wt.branch.clone(),
                slug,
                status: "active".into(),
                base_commit: Some(wt.base_commit.clone()).filter(|b| !b.is_empty()),
            },
        );
    })?;
    Ok(wt)
}

/// The branch the manifest records for `sheet` (its worktree exists or existed), if any.
pub fn recorded_branch(job: &JobConfig, job_id: &str, sheet: u32) -> Option<String> {
    load(&manifest_path(job, job_id))
        .sheets
        .remove(&sheet)
        .map(|e| e.branch)
}

/// The worktree and branch each of `sheets` (sheet number, task branch if it plays a task)
/// will use when the job `job_id` runs, in that order: the manifest's worktree when it is
/// still there, else the first free name (`-2`, `-3`, … when taken). Changes nothing: for
/// `mozart run --dry-run` and `mozart validate`.
pub fn plan(
    job: &JobConfig,
    job_id: &str,
    sheets: &[(u32, Option<String>)],
) -> Result<Vec<isolation::PlannedWorktree>, String> {
    let manifest = load(&manifest_path(job, job_id));
    let wanted: Vec<isolation::PlanRequest> = sheets
        .iter()
        .map(|(n, branch)| {
            let (name, branch) = WorktreeRequest::for_sheet(job, job_id, *n)
                .with_branch(branch.clone())
                .names();
            isolation::PlanRequest {
                name,
                branch,
                resume_path: manifest.sheets.get(n).map(|e| e.path.clone()),
            }
        })
        .collect();
    let base = WorktreeRequest::for_job(job, job_id).base();
    isolation::plan(job_id, &repo_dir(job), &base, &wanted).map_err(|e| e.to_string())
}

/// Remove (or keep and unlock) one sheet's worktree as `outcome` and the score's cleanup
/// settings say. A removed one stays in the manifest as `removed` until the job ends: should
/// a crash keep the sheet's completion from the checkpoint, its re-run checks the same branch
/// out again at the same place instead of making a `-2` twin.
pub fn finish(
    job: &JobConfig,
    job_id: &str,
    sheet: u32,
    wt: &Worktree,
    outcome: RunOutcome,
) -> Result<Cleanup, String> {
    let cleanup = isolation::finish(wt, outcome, &job.isolation).map_err(|e| e.to_string())?;
    let manifest = manifest_path(job, job_id);
    update(&manifest, job_id, |m| {
        if let Some(e) = m.sheets.get_mut(&sheet) {
            e.status = match cleanup {
                Cleanup::Removed => "removed",
                Cleanup::Kept { .. } => "kept",
            }
            .into();
        }
    })?;
    Ok(cleanup)
}

/// At the job's end: finish every worktree the manifest still lists (sheets that did not
/// finish theirs, or whose worktrees a crash left behind). Failures are logged.
pub fn finish_all(job: &JobConfig, job_id: &str, outcome: RunOutcome) {
    let path = manifest_path(job, job_id);
    let manifest = load(&path);
    for (sheet, entry) in manifest.sheets {
        if entry.status == "removed" || (outcome != RunOutcome::Paused && entry.status == "kept") {
            continue;
        }
        let wt = Worktree {
            job_id: job_id.to_string(),
            working_directory: entry.path.clone(),
            path: entry.path.clone(),
            branch: entry.branch.clone(),
            base_commit: entry.base_commit.clone().unwrap_or_default(),
            // A lock the conductor took is ours to drop (`finish` unlocks kept trees).
            locked: true,
            reused: true,
            repo_root: isolation::main_checkout(&entry.path, job_id)
                .unwrap_or_else(|| repo_dir(job)),
        };
        if let Err(e) = finish(job, job_id, sheet, &wt, outcome) {
            tracing::warn!(job_id, sheet, error = %e, "isolation.sheet_worktree_cleanup_failed");
        }
    }
    if outcome != RunOutcome::Paused {
        // The job is over: a removed tree's branch is not checked out again by a later run.
        let forget = |m: &mut Manifest| m.sheets.retain(|_, e| e.status != "removed");
        if let Err(e) = update(&path, job_id, forget) {
            tracing::warn!(job_id, error = %e, "isolation.sheet_worktree_cleanup_failed");
        }
    }
}
