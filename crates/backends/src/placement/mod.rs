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

/// `placement:` of a score, of one of its instruments, or of an instrument profile; the
/// effective placement of a sheet is these merged field by field ([`merge_layers`]).
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
    /// Wall-time limit (`sbatch --time`); default: the sheet's timeout and kill grace plus a
    /// minute.
    #[serde(default)]
    pub time: Option<String>,
    /// CPUs per task (`sbatch --cpus-per-task`).
    #[serde(default)]
    pub cpus: Option<u32>,
    /// Memory per node (`sbatch --mem`).
    #[serde(default)]
    pub memory: Option<String>,
    /// GPUs (`sbatch --gpus`).
    #[serde(default)]
    pub gpus: Option<String>,
    /// Generic resources (`sbatch --gres`).
    #[serde(default)]
    pub gres: Option<String>,
    /// Node features (`sbatch --constraint`).
    #[serde(default)]
    pub constraint: Option<String>,
    /// More `sbatch` arguments, passed as given (e.g. `["--exclusive"]`); options that
    /// break the placement's contract are refused ([`refused_sbatch_option`]).
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// Directory on the shared filesystem for each attempt's wrapper script and output
    /// files; default `<working dir>/.mozart-slurm`.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// How often a running remote attempt is looked at, in seconds (default 0.5).
    #[serde(default)]
    pub poll_interval_seconds: Option<f64>,
    /// Longest wait in the queue before the job starts, in seconds (default: no limit).
    #[serde(default)]
    pub queue_timeout_seconds: Option<f64>,
    /// How long a finished job's exit file may trail its end (default 2 s).
    #[serde(default)]
    pub exit_file_grace_seconds: Option<f64>,
    /// Let Slurm requeue a preempted job instead of failing the attempt (default false).
    #[serde(default)]
    pub requeue_on_preemption: Option<bool>,
}

pub use mozart_config::check::refused_sbatch_option;

/// Merge placement layers, least specific first (the profile's, the score's, the
/// movement's, the sheet's), each a JSON object of the fields it sets: a field a more
/// specific layer sets wins; `extra_args` are concatenated; a layer does not wipe what it
/// does not set.
pub fn merge_layers(layers: &[serde_json::Value]) -> Result<PlacementSpec, String> {
    let mut merged = serde_json::Map::new();
    for layer in layers {
        let Some(obj) = layer.as_object() else {
            continue;
        };
        for (k, v) in obj {
            if v.is_null() {
                continue;
            }
            if k == "extra_args" {
                let mut all = merged
                    .get(k)
                    .and_then(|a| a.as_array().cloned())
                    .unwrap_or_default();
                all.extend(v.as_array().cloned().unwrap_or_default());
                merged.insert(k.clone(), serde_json::Value::Array(all));
            } else {
                merged.insert(k.clone(), v.clone());
            }
        }
    }
    serde_json::from_value(serde_json::Value::Object(merged)).map_err(|e| e.to_string())
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
                    ("time", self.time.is_some()),
                    ("cpus", self.cpus.is_some()),
                    ("memory", self.memory.is_some()),
                    ("gpus", self.gpus.is_some()),
                    ("gres", self.gres.is_some()),
                    ("constraint", self.constraint.is_some()),
                    ("extra_args", !self.extra_args.is_empty()),
                    ("state_dir", self.state_dir.is_some()),
                    ("poll_interval_seconds", self.poll_interval_seconds.is_some()),
                    ("queue_timeout_seconds", self.queue_timeout_seconds.is_some()),
                    ("exit_file_grace_seconds", self.exit_file_grace_seconds.is_some()),
                    ("requeue_on_preemption", self.requeue_on_preemption.is_some()),
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
        for (field, v) in [
            ("queue_timeout_seconds", self.queue_timeout_seconds),
            ("exit_file_grace_seconds", self.exit_file_grace_seconds),
        ] {
            if v.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
                return Err(format!("{field}: must be a number of seconds, 0 or more"));
            }
        }
        if self.cpus == Some(0) {
            return Err("cpus: must be 1 or more".into());
        }
        for (field, value) in [
            ("partition", &self.partition),
            ("account", &self.account),
            ("qos", &self.qos),
            ("time", &self.time),
            ("memory", &self.memory),
            ("gpus", &self.gpus),
            ("gres", &self.gres),
            ("constraint", &self.constraint),
        ] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return Err(format!("{field}: must not be empty"));
            }
        }
        for (i, arg) in self.extra_args.iter().enumerate() {
            if !arg.starts_with('-') {
                return Err(format!(
                    "extra_args[{i}]: each entry is one sbatch option starting with '-' (e.g. '--mem=4G')"
                ));
            }
            if let Some(why) = refused_sbatch_option(arg) {
                return Err(format!(
                    "extra_args[{i}]: '{arg}' is not allowed here: {why}"
                ));
            }
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
        let v = |y: &str| {
            serde_json::to_value(serde_yaml::from_str::<serde_yaml::Value>(y).unwrap()).unwrap()
        };
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
