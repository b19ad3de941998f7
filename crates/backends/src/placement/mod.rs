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
use crate::types::ExecutionRequest;

/// Which placement (`placement.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementKind {
    /// A child process of the conductor, on this machine.
    #[default]
    Local,
    /// A Slurm batch job (`sbatch`), followed with `scontrol`.
    Slurm,
    /// A Kubernetes Job: designed (docs/design/distributed.md), not implemented.
    Kubernetes,
}

impl PlacementKind {
    /// The YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PlacementKind::Local => "local",
            PlacementKind::Slurm => "slurm",
            PlacementKind::Kubernetes => "kubernetes",
        }
    }
}

/// `placement:` of a score, of one of its instruments, or of an instrument profile.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementSpec {
    /// `local` (default), `slurm` or `kubernetes`.
    #[serde(rename = "type", default)]
    pub kind: PlacementKind,
    /// Slurm partition (`sbatch --partition`); the cluster's default when absent.
    #[serde(default)]
    pub partition: Option<String>,
    /// Slurm account (`sbatch --account`).
    #[serde(default)]
    pub account: Option<String>,
    /// Slurm quality of service (`sbatch --qos`).
    #[serde(default)]
    pub qos: Option<String>,
    /// More `sbatch` arguments, passed as given (e.g. `["--mem=4G", "--gres=gpu:1"]`).
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// Directory on the shared filesystem for each attempt's wrapper script and output
    /// files; default `<working dir>/.mozart-slurm`.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// How often a running remote attempt is looked at, in seconds (default 0.5).
    #[serde(default)]
    pub poll_interval_seconds: Option<f64>,
}

impl PlacementSpec {
    /// Check the rules serde cannot express; the message starts with the field's name.
    pub fn validate(&self) -> Result<(), String> {
        match self.kind {
            PlacementKind::Kubernetes => {
                return Err("type: 'kubernetes' is designed (docs/design/distributed.md) but not implemented yet; use 'local' or 'slurm'".into())
            }
            PlacementKind::Local => {
                let slurm_only = [
                    ("partition", self.partition.is_some()),
                    ("account", self.account.is_some()),
                    ("qos", self.qos.is_some()),
                    ("extra_args", !self.extra_args.is_empty()),
                    ("state_dir", self.state_dir.is_some()),
                    ("poll_interval_seconds", self.poll_interval_seconds.is_some()),
                ];
                if let Some((field, _)) = slurm_only.iter().find(|(_, set)| *set) {
                    return Err(format!(
                        "{field}: only used by 'type: slurm' (this placement is local)"
                    ));
                }
            }
            PlacementKind::Slurm => {}
        }
        if let Some(p) = self.poll_interval_seconds {
            if !(0.05..=60.0).contains(&p) {
                return Err("poll_interval_seconds: must be between 0.05 and 60".into());
            }
        }
        for (field, value) in [
            ("partition", &self.partition),
            ("account", &self.account),
            ("qos", &self.qos),
        ] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return Err(format!("{field}: must not be empty"));
            }
        }
        if let Some((i, _)) = self
            .extra_args
            .iter()
            .enumerate()
            .find(|(_, a)| !a.starts_with('-'))
        {
            return Err(format!(
                "extra_args[{i}]: each entry is one sbatch option starting with '-' (e.g. '--mem=4G')"
            ));
        }
        Ok(())
    }
}

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

/// Run `spec` where `req.placement` says; the drop-in replacement for
/// [`run_process`] in the CLI backends.
pub async fn run(
    req: &ExecutionRequest,
    spec: ProcessSpec,
    sink: Option<Box<dyn LineSink>>,
) -> (ProcessOutcome, Option<Box<dyn LineSink>>) {
    match &req.placement {
        Placement::Local => run_process(spec, Arc::clone(&req.progress), sink).await,
        Placement::Slurm(slurm) => slurm.run(req, spec, sink).await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<PlacementSpec, String> {
        let spec: PlacementSpec = serde_yaml::from_str(yaml).map_err(|e| e.to_string())?;
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
    }
}
