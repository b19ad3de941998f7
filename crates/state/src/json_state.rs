//! The JSON state file for scores with `state_backend: json` (execution.md §8.5):
//! `{workspace}/{safe_id}.json`, pretty-printed, replaced atomically on every save.

use std::path::{Path, PathBuf};

use crate::atomic::atomic_write;
use crate::checkpoint::{CheckpointState, ZOMBIE_ON_LOAD_TRIGGER};
use crate::error::{Result, StateError};

/// Job id with every character that is not alphanumeric, `-` or `_` replaced by `_`
/// (execution.md §8.5, conductor.md §11.1).
pub fn safe_id(job_id: &str) -> String {
    job_id
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Where the JSON state file of `job_id` lives in `workspace`.
pub fn state_file_path(workspace: &Path, job_id: &str) -> PathBuf {
    workspace.join(format!("{}.json", safe_id(job_id)))
}

/// Writes the checkpoint atomically: a reader or a crash sees the old or the new file,
/// never a truncated one. The caller stamps `updated_at` (mutators already do).
pub fn save(path: &Path, state: &CheckpointState) -> Result<()> {
    let text = state
        .to_json_pretty()
        .map_err(|source| StateError::Encode {
            job_id: state.job_id.clone(),
            what: "checkpoint",
            source,
        })?;
    atomic_write(path, text.as_bytes())
}

/// Reads a checkpoint; `Ok(None)` when the file does not exist, `CorruptStateFile` when it
/// does not parse or violates the model.
pub fn load(path: &Path) -> Result<Option<CheckpointState>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StateError::Io {
                action: "reading",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    CheckpointState::from_json(&text)
        .map(Some)
        .map_err(|reason| StateError::CorruptStateFile {
            path: path.to_path_buf(),
            reason,
        })
}

/// Like [`load`], then converts a stale running state (dead pid) to paused in memory
/// without saving, as upstream's JSON backend does (execution.md §8.4).
pub fn load_recovering_zombie(path: &Path) -> Result<Option<CheckpointState>> {
    let mut state = load(path)?;
    if let Some(s) = state.as_mut() {
        s.recover_if_zombie(ZOMBIE_ON_LOAD_TRIGGER);
    }
    Ok(state)
}

/// Reads only the top-level `"status"` of a state file, tolerating any other damage —
/// restart recovery uses it to tell paused orphans from failed ones (conductor.md §11.1).
pub fn peek_status(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("status")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::JobStatus;

    #[test]
    fn safe_id_replaces_unsafe_chars() {
        assert_eq!(safe_id("my job/v1.2"), "my_job_v1_2");
        assert_eq!(safe_id("ok-id_9"), "ok-id_9");
        assert_eq!(
            state_file_path(Path::new("/ws"), "a.b"),
            PathBuf::from("/ws/a_b.json")
        );
    }

    #[test]
    fn round_trip_and_missing_and_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = state_file_path(dir.path(), "job");
        assert!(load(&path).unwrap().is_none());
        let mut cp = CheckpointState::new("job", "Job", 2);
        cp.mark_sheet_started(1);
        save(&path, &cp).unwrap();
        assert_eq!(load(&path).unwrap(), Some(cp));
        assert_eq!(peek_status(&path).as_deref(), Some("running"));
        std::fs::write(&path, b"{\"job_id\": \"job\", \"job_na").unwrap();
        let err = load(&path).unwrap_err();
        assert!(matches!(err, StateError::CorruptStateFile { .. }), "{err}");
        assert!(err.to_string().contains("job.json"));
    }

    #[test]
    fn zombie_recovered_on_load_without_saving() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("z.json");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let mut cp = CheckpointState::new("z", "Z", 1);
        cp.status = JobStatus::Running;
        cp.pid = Some(dead);
        save(&path, &cp).unwrap();
        let loaded = load_recovering_zombie(&path).unwrap().unwrap();
        assert_eq!(loaded.status, JobStatus::Paused);
        assert_eq!(peek_status(&path).as_deref(), Some("running"));
    }
}
