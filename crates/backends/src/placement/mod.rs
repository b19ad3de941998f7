//! Where an attempt's instrument process runs (docs/design/distributed.md).
//!
//! A *placement* sits under the CLI backends, at the one point where they start a process
//! ([`run`], called instead of [`crate::process::run_process`]): the backend builds the
//! same command line, environment and stdin whatever the placement, and parses the same
//! output afterwards. `local` (the default) spawns the process here, in its own process
//! group; `slurm` submits it as a Slurm batch job and follows it; `kubernetes` is designed
//! but not implemented (rejected when a score or profile asks for it).
//!
//! A remote attempt outlives its conductor: its remote id is handed to a [`RemoteJournal`]
//! (the sheet's checkpoint) before the job is released to run, so a restarted conductor
//! re-attaches to it instead of running the sheet again.

pub mod slurm;

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::process::{run_process, LineSink, ProcessOutcome, ProcessSpec};
use crate::types::Progress;

pub use crate::types::placement::{
    merge_layers, refused_sbatch_option, PlacementKind, PlacementSpec,
};

/// A placement ready to run attempts: built once per job and instrument, cheap to clone.
#[derive(Debug, Clone, Default)]
pub enum Placement {
    /// Spawn here (the default).
    #[default]
    Local,
    /// Submit to Slurm.
    Slurm(Arc<slurm::SlurmPlacement>),
}

impl Placement {
    /// The placement a validated spec describes.
    pub fn from_spec(spec: &PlacementSpec) -> Result<Placement, String> {
        spec.validate()?;
        Ok(match spec.kind {
            PlacementKind::Local => Placement::Local,
            PlacementKind::Slurm => Placement::Slurm(Arc::new(slurm::SlurmPlacement::new(spec))),
            PlacementKind::Kubernetes => unreachable_kubernetes(),
        })
    }

    /// `local`, `slurm`, …
    pub fn kind(&self) -> PlacementKind {
        match self {
            Placement::Local => PlacementKind::Local,
            Placement::Slurm(_) => PlacementKind::Slurm,
        }
    }
}

fn unreachable_kubernetes() -> Placement {
    // `validate` rejects kubernetes before this point; stay local rather than panic.
    Placement::Local
}

/// A remote attempt as recorded in the sheet's checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteAttempt {
    /// Placement kind that started it (`slurm`).
    pub placement: String,
    /// The scheduler's id (Slurm job id); empty while the submission is in flight (the
    /// job, if `sbatch` created one, is then found by `name`).
    pub remote_id: String,
    /// The scheduler's job name, unique to the job, sheet and attempt.
    #[serde(default)]
    pub name: String,
    /// The attempt's directory of wrapper, output and exit files.
    pub dir: PathBuf,
    /// When it was submitted (Unix epoch seconds).
    pub submitted_at: f64,
}

/// Where remote attempts of one sheet are recorded durably (the sheet's checkpoint).
pub trait RemoteJournal: Send + Sync + std::fmt::Debug {
    /// The attempt a previous conductor started for this sheet and whose result was never
    /// recorded: re-attach to it instead of submitting a new one.
    fn recorded(&self) -> Option<RemoteAttempt>;
    /// Record a submitted attempt; it is released to run only after this returns `Ok`.
    fn record(&self, attempt: &RemoteAttempt) -> Result<(), String>;
    /// Forget the attempt `remote_id` (it was cancelled, or never started).
    fn forget(&self, remote_id: &str);
}

/// Set when the conductor is stopping: an abandoned remote attempt is then left running and
/// recorded (the next conductor re-attaches to it, as after a crash) instead of cancelled.
static DETACH_ON_DROP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, remote attempts whose followers are dropped keep running (conductor stop).
pub fn detach_remote_attempts() {
    DETACH_ON_DROP.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether dropped remote attempts are left running (see [`detach_remote_attempts`]).
pub fn detaching() -> bool {
    DETACH_ON_DROP.load(std::sync::atomic::Ordering::SeqCst)
}

/// The attempt a placement runs: who it is for (job, sheet, attempt), where it runs from,
/// and where it reports (progress, the remote journal). Borrowed from the instrument's
/// request.
#[derive(Debug, Clone, Copy)]
pub struct PlacedAttempt<'a> {
    /// Job the attempt belongs to.
    pub job_id: &'a str,
    /// Sheet number.
    pub sheet_num: u32,
    /// Attempt number.
    pub attempt: u32,
    /// The sheet's workspace.
    pub working_dir: &'a std::path::Path,
    /// Live progress of the attempt.
    pub progress: &'a Arc<Progress>,
    /// Where a remote placement records the attempt's remote id.
    pub remote: Option<&'a Arc<dyn RemoteJournal>>,
}

/// Run `spec` where `placement` says; the drop-in replacement for [`run_process`] in the
/// CLI backends.
pub async fn run(
    placement: &Placement,
    req: &PlacedAttempt<'_>,
    spec: ProcessSpec,
    sink: Option<Box<dyn LineSink>>,
) -> (ProcessOutcome, Option<Box<dyn LineSink>>) {
    match placement {
        Placement::Local => run_process(spec, Arc::clone(req.progress), sink).await,
        Placement::Slurm(slurm) => slurm.run(req, spec, sink).await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<PlacementSpec, String> {
        let spec: PlacementSpec = mozart_yaml::from_str(yaml).map_err(|e| e.to_string())?;
        spec.validate()?;
        Ok(spec)
    }

    #[test]
    fn specs_are_checked_field_by_field() {
        let s = parse("type: slurm\npartition: debug\nextra_args: ['--mem=1G']\n").unwrap();
        assert_eq!(s.kind, PlacementKind::Slurm);
        assert_eq!(parse("{}").unwrap().kind, PlacementKind::Local);
        assert!(parse("type: slurm\npartitoin: x\n")
            .unwrap_err()
            .contains("partitoin"));
        assert!(parse("type: kubernetes\n")
            .unwrap_err()
            .contains("not implemented"));
        assert!(parse("type: local\npartition: x\n")
            .unwrap_err()
            .starts_with("partition:"));
        assert!(parse("type: slurm\nextra_args: ['mem=1G']\n")
            .unwrap_err()
            .starts_with("extra_args[0]"));
        assert!(parse("type: slurm\npoll_interval_seconds: 0\n")
            .unwrap_err()
            .starts_with("poll_interval_seconds"));
        assert!(parse("type: nomad\n").is_err());
        assert!(parse("type: slurm\nextra_args: ['-o', 'x']\n")
            .unwrap_err()
            .contains("output"));
        assert!(parse("type: slurm\nextra_args: ['--array=1-9']\n")
            .unwrap_err()
            .starts_with("extra_args[0]"));
        assert!(parse("type: slurm\ncpus: 0\n")
            .unwrap_err()
            .starts_with("cpus"));
    }

    /// Most specific wins field by field; a layer never wipes what it does not set.
    #[test]
    fn layers_merge_field_by_field() {
        let v = |y: &str| mozart_yaml::from_str::<serde_json::Value>(y).unwrap();
        let spec = merge_layers(&[
            v("{type: slurm, partition: gpu, account: lab, extra_args: ['--exclusive']}"),
            v("{cpus: 4, partition: null}"),
            v("{partition: debug, extra_args: ['--nice=5']}"),
            v("{cpus: 1}"),
        ])
        .unwrap();
        assert_eq!(spec.kind, PlacementKind::Slurm);
        assert_eq!(spec.partition.as_deref(), Some("debug"));
        assert_eq!(spec.account.as_deref(), Some("lab"));
        assert_eq!(spec.cpus, Some(1));
        assert_eq!(spec.extra_args, vec!["--exclusive", "--nice=5"]);
    }
}
