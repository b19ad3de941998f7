//! An attempt abandoned while `sbatch` runs (a cancel at that very moment) leaves no held
//! job in the queue. A slow `sbatch` (a wrapper on PATH that submits, notes the id, then
//! dawdles) makes the moment wide enough to hit. Its own test binary: it changes PATH.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod slurm;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mozart_backends::placement::RemoteJournal;
use mozart_backends::Backend;
use slurm::{backend, request, slurm_up, wait_gone_from_queue, MemJournal};

#[test]
fn an_attempt_dropped_while_sbatch_runs_leaves_no_held_job() {
    if !slurm_up() {
        return;
    }
    let real = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v sbatch"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bin = tempfile::tempdir().unwrap();
    let id_file = bin.path().join("id");
    let wrapper = bin.path().join("sbatch");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nout=$('{}' \"$@\") || exit $?\necho \"$out\" > '{}'\nsleep 3\necho \"$out\"\n",
            real.trim(),
            id_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Before the runtime and any other thread of this binary exist.
    std::env::set_var("PATH", path);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let journal = Arc::new(MemJournal::default());
        let mut req = request("sleep 60", dir.path(), Duration::from_secs(120));
        req.remote = Some(journal.clone());
        let b = backend();
        let mut exec = b.execute(req);
        let until = Instant::now() + Duration::from_secs(30);
        let id = loop {
            tokio::select! {
                _ = &mut exec => panic!("finished early"),
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
            if let Ok(text) = std::fs::read_to_string(&id_file) {
                if !text.trim().is_empty() {
                    break text
                        .trim()
                        .split(';')
                        .next()
                        .unwrap_or_default()
                        .to_string();
                }
            }
            assert!(Instant::now() < until, "sbatch never submitted");
        };
        // sbatch has submitted the held job but not yet answered.
        drop(exec);
        // Only the name was recorded (before sbatch): the id never reached the journal.
        assert!(journal.recorded().is_none_or(|r| r.remote_id.is_empty()));
        let what = "held after its attempt was dropped during sbatch";
        wait_gone_from_queue(&id, Duration::from_secs(30), what).await;
    });
}
