//! `mozart doctor` (cli.md §5.6): is this machine ready to run scores? Never fails.

use mozart_backends::InstrumentKind;
use mozart_conductor::RunState;
use serde_json::{json, Value};

use super::instruments::{binary, load_registry};
use crate::conductor_client;
use crate::{CliError, Globals, OutputMode};

/// The fixed safety warning upstream prints (no conductor-wide cost limit exists).
const SAFETY_WARNING: &str = "No cost limits configured. Recommend: cost_limits.max_cost_per_job";

/// Arguments of `mozart doctor`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output as JSON.
    #[arg(id = "json", long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// Run `mozart doctor`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    let version = env!("CARGO_PKG_VERSION");
    let mut errors = 0usize;
    // A socket another user controls (issue 21) is an error, with who owns it.
    let mut refused: Option<String> = None;
    let (status, pid) = match conductor_client::paths(globals, None) {
        Ok(paths) => match conductor_client::conductor_state(&paths, OutputMode::Human) {
            Ok(RunState::Running { pid }) => ("running", pid),
            Ok(RunState::Stopped { .. }) => ("not running", None),
            Err(err) => {
                errors += 1;
                refused = Some(err.to_string());
                ("untrusted socket", None)
            }
        },
        Err(_) => ("not running", None),
    };
    let mut instruments: Vec<Value> = Vec::new();
    // Profiles that place their sheets on Slurm, with the partition each names.
    let mut placed: Vec<(String, Option<String>)> = Vec::new();
    match load_registry() {
        Ok(registry) => {
            for p in registry.profiles() {
                if let Some(spec) = p
                    .placement
                    .as_ref()
                    .filter(|s| s.kind == mozart_backends::placement::PlacementKind::Slurm)
                {
                    placed.push((p.name.clone(), spec.partition.clone()));
                }
                let (state, detail) = match p.kind {
                    InstrumentKind::Cli => match binary(p) {
                        Some(path) => ("ok", path.display().to_string()),
                        None => ("optional", "not installed".to_string()),
                    },
                    // Not "ok" just for being HTTP: a refused API, an unset key or a local
                    // server that is not running would fail every sheet.
                    InstrumentKind::Http => {
                        let r = mozart_backends::http_readiness(
                            &registry,
                            p,
                            std::time::Duration::from_millis(500),
                        );
                        let state = if r.is_ready() { "ok" } else { "optional" };
                        (state, r.describe())
                    }
                };
                instruments.push(json!({
                    "name": p.name,
                    "display_name": p.display_name,
                    "kind": p.kind.as_str(),
                    "status": state,
                    "detail": detail,
                }));
            }
        }
        Err(err) => {
            errors += 1;
            instruments.push(json!({
                "name": "instrument profiles",
                "display_name": "Instrument profiles",
                "kind": "cli",
                "status": "error",
                "detail": err.to_string(),
            }));
        }
    }
    let slurm = slurm_checks(&placed, &mut errors);
    // Every `!` line is a warning: the cost-limit one, and a conductor that is not running.
    let warnings = 1 + usize::from(status != "running" && refused.is_none());
    if args.output.is_json() {
        crate::output::print_json(&json!({
            // Upstream reports its Python version; this build has no Python, so the key
            // stays (for tools reading it) and says so.
            "python_version": Value::Null,
            "runtime": format!("rust (mozart {version})"),
            "mozart_version": version,
            "conductor": match &refused {
                // Upstream's shape, plus the reason only when there is one.
                None => json!({"status": status, "pid": pid}),
                Some(detail) => json!({"status": status, "pid": pid, "detail": detail}),
            },
            "instruments": instruments,
            "slurm": slurm,
            "safety_warnings": [SAFETY_WARNING],
            "warnings_count": warnings,
            "errors_count": errors,
        }));
        return Ok(0);
    }
    let line = |icon: &str, name: &str, detail: &str| println!("  {icon} {name:<24} {detail}");
    println!("Mozart Doctor\n");
    line("✓", "Runtime", &format!("Rust build of mozart {version}"));
    line("✓", "Mozart", version);
    let conductor = match (status, pid) {
        ("running", Some(pid)) => format!("running (pid {pid})"),
        (s, _) => s.to_string(),
    };
    line(
        match status {
            "running" => "✓",
            "untrusted socket" => "✗",
            _ => "!",
        },
        "Conductor",
        &conductor,
    );
    if let Some(detail) = &refused {
        println!("      {detail}");
    }
    println!("\nInstruments:");
    for i in &instruments {
        let icon = match i["status"].as_str() {
            Some("ok") => "✓",
            Some("optional") => "·",
            _ => "✗",
        };
        line(
            icon,
            i["name"].as_str().unwrap_or(""),
            i["detail"].as_str().unwrap_or(""),
        );
    }
    if !slurm.is_empty() {
        println!("\nSlurm placement:");
        for c in &slurm {
            let icon = match c["status"].as_str() {
                Some("ok") => "✓",
                _ => "✗",
            };
            line(
                icon,
                c["name"].as_str().unwrap_or(""),
                c["detail"].as_str().unwrap_or(""),
            );
        }
    }
    println!("\nSafety:");
    line("!", "Cost limits", SAFETY_WARNING);
    println!();
    if errors > 0 {
        println!("{errors} error(s), {warnings} warning(s). Mozart is not ready.");
    } else {
        println!("{warnings} warning(s). Mozart is ready.");
    }
    Ok(0)
}

/// Issue 25: when an instrument profile places its sheets on Slurm, ask Slurm whether it
/// answers and whether the partition the profile names exists. Each failed check is an
/// error (every sheet of that instrument would fail). Nothing is checked, and nothing
/// printed, when no profile uses Slurm.
fn slurm_checks(placed: &[(String, Option<String>)], errors: &mut usize) -> Vec<Value> {
    if placed.is_empty() {
        return Vec::new();
    }
    let Some(partitions) = mozart_config::validate::slurm_partitions() else {
        *errors += 1;
        return vec![json!({
            "name": "Slurm",
            "status": "error",
            "detail": format!(
                "`sinfo` did not answer within 10 s (Slurm not installed, or its controller \
                 is down): sheets of {} cannot be placed",
                placed.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
            ),
        })];
    };
    let mut out = vec![json!({
        "name": "Slurm",
        "status": "ok",
        "detail": format!("controller answers; partitions: {}", partitions.join(", ")),
    })];
    for (name, partition) in placed {
        let Some(partition) = partition else {
            out.push(json!({"name": name, "status": "ok",
                "detail": "the cluster's default partition"}));
            continue;
        };
        if partitions.iter().any(|p| p == partition) {
            out.push(json!({"name": name, "status": "ok",
                "detail": format!("partition '{partition}'")}));
        } else {
            *errors += 1;
            out.push(json!({"name": name, "status": "error", "detail": format!(
                "Slurm has no partition '{partition}' (sinfo lists: {}): fix placement.partition \
                 in this instrument's profile",
                partitions.join(", ")
            )}));
        }
    }
    out
}
