//! What the Slurm placement tests share: a real single-node Slurm (tests/slurm/setup.sh),
//! an `sh -c` instrument, a journal in memory, and `squeue` checks.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mozart_backends::placement::{Placement, PlacementSpec, RemoteAttempt, RemoteJournal};
use mozart_backends::{ExecutionRequest, InstrumentProfile, ProfileBackend};

pub fn slurm_up() -> bool {
    let out = std::process::Command::new("sinfo")
        .args(["-h", "-o", "%T"])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            if ["idle", "mixed", "allocated"]
                .iter()
                .any(|s| text.contains(s))
            {
                return true;
            }
            eprintln!(
                "SKIPPED: Slurm node not idle ({}); run tests/slurm/setup.sh",
                text.trim()
            );
            false
        }
        _ => {
            eprintln!(
                "SKIPPED: Slurm is not running here (no sinfo answer); run tests/slurm/setup.sh"
            );
            false
        }
    }
}

pub fn backend() -> ProfileBackend {
    let yaml = "name: sh\ndisplay_name: sh\nkind: cli\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n";
    ProfileBackend::new(Arc::new(
        InstrumentProfile::from_yaml(yaml, "test").unwrap(),
    ))
    .unwrap()
}

pub fn placement() -> Placement {
    let spec: PlacementSpec =
        mozart_yaml::from_str("type: slurm\npoll_interval_seconds: 0.2\n").unwrap();
    Placement::from_spec(&spec).unwrap()
}

/// The checkpoint's record of the attempt's Slurm job, in memory. `record_delay` makes its
/// durable write slow (a slow disk): the record is visible at once, the write returns later.
#[derive(Debug, Default)]
pub struct MemJournal {
    slot: Mutex<Option<RemoteAttempt>>,
    record_delay: Duration,
}

impl MemJournal {
    pub fn slow(record_delay: Duration) -> Self {
        Self {
            record_delay,
            ..Self::default()
        }
    }
}

impl RemoteJournal for MemJournal {
    fn recorded(&self) -> Option<RemoteAttempt> {
        self.slot.lock().unwrap().clone()
    }
    fn record(&self, attempt: &RemoteAttempt) -> Result<(), String> {
        *self.slot.lock().unwrap() = Some(attempt.clone());
        std::thread::sleep(self.record_delay);
        Ok(())
    }
    fn forget(&self, remote_id: &str) {
        let mut slot = self.slot.lock().unwrap();
        if slot.as_ref().is_some_and(|a| a.remote_id == remote_id) {
            *slot = None;
        }
    }
}

pub fn request(prompt: &str, dir: &std::path::Path, timeout: Duration) -> ExecutionRequest {
    let mut req = ExecutionRequest::new(prompt, dir, timeout);
    req.job_id = "slurm-backend-test".into();
    req.sheet_num = 1;
    req.attempt = 1;
    req.kill_grace = Duration::from_secs(1);
    req.placement = placement();
    req
}

pub fn squeue_has(id: &str) -> bool {
    let out = std::process::Command::new("squeue")
        .args(["-h", "-o", "%i", "-j", id])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == id)
}

pub async fn wait_recorded(journal: &MemJournal) -> RemoteAttempt {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        // The name is recorded first (before sbatch), the id once sbatch answered.
        if let Some(a) = journal.recorded().filter(|a| !a.remote_id.is_empty()) {
            return a;
        }
        assert!(Instant::now() < until, "the job was never recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until Slurm's queue no longer lists the job (cancelled and gone).
pub async fn wait_gone_from_queue(id: &str, within: Duration, what: &str) {
    let until = Instant::now() + within;
    while squeue_has(id) {
        assert!(Instant::now() < until, "job {id} still in squeue: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
