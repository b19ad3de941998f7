//! `placement:` as a score, an instrument or a profile writes it (docs/design/distributed.md):
//! the kind and the Slurm fields, with the checks serde cannot express. Here, below the
//! profiles that carry it and the placements that run it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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
    /// Submit the first attempts of sheets dispatched together as one job array (default
    /// false: one job per attempt).
    #[serde(default)]
    pub array: Option<bool>,
}

/// The sbatch options a placement refuses, defined once with the score's checks.
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
                    ("array", self.array.is_some()),
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
