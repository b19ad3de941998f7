//! `workspace_lifecycle.archive_on_fresh` on real directories (execution.md §9.12).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use mozart_config::model::{ArchiveNaming, WorkspaceLifecycleConfig};
use mozart_jobs::workspace::{archive_workspace, on_fresh_start};

fn config() -> WorkspaceLifecycleConfig {
    WorkspaceLifecycleConfig {
        archive_on_fresh: true,
        ..WorkspaceLifecycleConfig::default()
    }
}

/// A workspace after a run: outputs, a sub-directory, and the files Mozart keeps.
fn used_workspace() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("reports")).unwrap();
    std::fs::create_dir_all(ws.join(".worktrees/job")).unwrap();
    std::fs::write(ws.join("result.md"), "old result").unwrap();
    std::fs::write(ws.join("reports/r1.txt"), "r1").unwrap();
    std::fs::write(ws.join(".iteration"), "3\n").unwrap();
    std::fs::write(ws.join(".mozart-state.json"), "{}").unwrap();
    std::fs::write(ws.join(".coverage"), "c").unwrap();
    (tmp, ws)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn fresh_start_moves_stale_outputs_into_an_iteration_archive() {
    let (_tmp, ws) = used_workspace();
    let fresh = on_fresh_start("job", &ws, &config());
    let archive = fresh.archived.unwrap();
    assert_eq!(archive, ws.join("archive/iteration-3"));
    assert_eq!(fresh.warning, None);
    assert_eq!(names(&archive), ["reports", "result.md"]);
    assert_eq!(
        std::fs::read_to_string(archive.join("reports/r1.txt")).unwrap(),
        "r1"
    );
    // What the next iteration needs stays put: a validation cannot pass on old output.
    assert_eq!(
        names(&ws),
        [
            ".coverage",
            ".iteration",
            ".mozart-state.json",
            ".worktrees",
            "archive"
        ]
    );
    assert!(!ws.join("result.md").exists());
}

#[test]
fn archive_on_fresh_off_leaves_the_workspace_alone() {
    let (_tmp, ws) = used_workspace();
    let fresh = on_fresh_start("job", &ws, &WorkspaceLifecycleConfig::default());
    assert_eq!(fresh.archived, None);
    assert!(ws.join("result.md").exists());
    assert!(!ws.join("archive").exists());
}

#[test]
fn timestamp_naming_and_a_missing_iteration_file_use_utc_time() {
    let (_tmp, ws) = used_workspace();
    let cfg = WorkspaceLifecycleConfig {
        archive_naming: ArchiveNaming::Timestamp,
        ..config()
    };
    let archive = archive_workspace(&ws, &cfg).unwrap().unwrap();
    let name = archive.file_name().unwrap().to_string_lossy().into_owned();
    let (prefix, rest) = name.split_at("archive-".len());
    assert_eq!(prefix, "archive-");
    let bytes = rest.as_bytes();
    assert_eq!(bytes.len(), 15, "{name}");
    assert_eq!(bytes[8], b'-');
    assert!(rest
        .chars()
        .filter(|c| *c != '-')
        .all(|c| c.is_ascii_digit()));

    // A corrupt `.iteration` falls back to the timestamp too.
    std::fs::write(ws.join("out.txt"), "x").unwrap();
    std::fs::write(ws.join(".iteration"), "three").unwrap();
    let archive = archive_workspace(&ws, &config()).unwrap().unwrap();
    assert!(archive
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("archive-"));
}

#[test]
fn name_collisions_get_numbered_suffixes() {
    let (_tmp, ws) = used_workspace();
    let first = archive_workspace(&ws, &config()).unwrap().unwrap();
    std::fs::write(ws.join("result.md"), "second").unwrap();
    let second = archive_workspace(&ws, &config()).unwrap().unwrap();
    std::fs::write(ws.join("result.md"), "third").unwrap();
    let third = archive_workspace(&ws, &config()).unwrap().unwrap();
    assert_eq!(first, ws.join("archive/iteration-3"));
    assert_eq!(second, ws.join("archive/iteration-3-1"));
    assert_eq!(third, ws.join("archive/iteration-3-2"));
    assert_eq!(
        std::fs::read_to_string(second.join("result.md")).unwrap(),
        "second"
    );
}

#[test]
fn nothing_to_archive_makes_no_archive() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join(".iteration"), "1").unwrap();
    assert_eq!(archive_workspace(tmp.path(), &config()).unwrap(), None);
    assert!(!tmp.path().join("archive").exists());
    assert_eq!(
        archive_workspace(&tmp.path().join("missing"), &config()).unwrap(),
        None
    );
}

#[test]
fn max_archives_keeps_only_the_newest() {
    let (_tmp, ws) = used_workspace();
    let cfg = WorkspaceLifecycleConfig {
        max_archives: 2,
        ..config()
    };
    let mut made = Vec::new();
    for i in 1..=4 {
        std::fs::write(ws.join(".iteration"), i.to_string()).unwrap();
        std::fs::write(ws.join("result.md"), format!("run {i}")).unwrap();
        made.push(archive_workspace(&ws, &cfg).unwrap().unwrap());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(names(&ws.join("archive")), ["iteration-3", "iteration-4"]);
    assert!(!made[0].exists() && !made[1].exists());
}

#[test]
fn the_archive_never_swallows_itself_when_patterns_omit_it() {
    let (_tmp, ws) = used_workspace();
    let cfg = WorkspaceLifecycleConfig {
        preserve_patterns: vec![".iteration".into()],
        archive_dir: "old-runs".into(),
        ..config()
    };
    let archive = archive_workspace(&ws, &cfg).unwrap().unwrap();
    assert_eq!(archive, ws.join("old-runs/iteration-3"));
    assert_eq!(
        names(&archive),
        [".coverage", ".mozart-state.json", "reports", "result.md"]
    );
    assert_eq!(names(&ws), [".iteration", ".worktrees", "old-runs"]);
}

#[test]
fn preserve_patterns_use_fnmatch_on_top_level_names() {
    let (_tmp, ws) = used_workspace();
    std::fs::write(ws.join("keep-me.log"), "k").unwrap();
    std::fs::create_dir_all(ws.join("cache/deep")).unwrap();
    let mut cfg = config();
    cfg.preserve_patterns
        .extend(["*.log".to_string(), "cache/**".to_string()]);
    let archive = archive_workspace(&ws, &cfg).unwrap().unwrap();
    assert_eq!(names(&archive), ["reports", "result.md"]);
    assert!(ws.join("keep-me.log").exists() && ws.join("cache/deep").exists());
}

/// Rotation removes only archives Mozart made: a directory of the user's own in the archive
/// directory, whatever its age, is kept.
#[test]
fn rotation_keeps_what_mozart_did_not_make() {
    let (_tmp, ws) = used_workspace();
    std::fs::create_dir_all(ws.join("archive/my-notes")).unwrap();
    std::fs::write(ws.join("archive/my-notes/n.txt"), "mine").unwrap();
    let cfg = WorkspaceLifecycleConfig {
        max_archives: 1,
        ..config()
    };
    for i in 1..=2 {
        std::fs::write(ws.join(".iteration"), i.to_string()).unwrap();
        std::fs::write(ws.join("result.md"), format!("run {i}")).unwrap();
        archive_workspace(&ws, &cfg).unwrap().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(names(&ws.join("archive")), ["iteration-2", "my-notes"]);
}
