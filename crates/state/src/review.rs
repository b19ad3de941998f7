//! Ours: the checkpointed state of a sheet's worker + reviewer loop (docs/mochi.md).

use serde::{Deserialize, Serialize};

/// Where a reviewed sheet's loop stands. Written after every reviewer verdict, so a
/// restarted conductor resumes at the same iteration with the same feedback.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewState {
    /// Worker iterations the reviewer has judged so far.
    #[serde(default)]
    pub iteration: u32,
    /// Last verdict: `DONE` or `RETRY`.
    #[serde(default)]
    pub verdict: Option<String>,
    /// The reviewer's last feedback (empty after `DONE`).
    #[serde(default)]
    pub feedback: Option<String>,
    /// Every verdict, oldest first.
    #[serde(default)]
    pub history: Vec<ReviewVerdict>,
    /// The task's branch, when the sheet runs in its own worktree.
    #[serde(default)]
    pub branch: Option<String>,
    /// Where the result went (a PR URL, a file), once dispatched.
    #[serde(default)]
    pub dispatched: Option<String>,
    /// Iterations that belong to earlier runs: `mozart resume` of a failed sheet gives its
    /// loop a fresh `max_iterations` budget from here.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub budget_from: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One reviewer verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewVerdict {
    /// Worker iteration judged (1-based).
    pub iteration: u32,
    /// `DONE` or `RETRY`.
    pub verdict: String,
    /// Feedback for the worker (empty after `DONE`).
    #[serde(default)]
    pub feedback: String,
}
