//! `mozart doctor` (cli.md §5.6): is this machine ready to run scores? Never fails.

use mozart_backends::InstrumentKind;
use mozart_conductor::RunState;
use mozart_config::plural;
use serde_json::{json, Value};

use super::instruments::load_registry;
use crate::conductor_client;
use crate::instrument_lookup::{binary, Lookup};
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

/// What `mozart doctor` found, printed as text or JSON.
struct Findings {
    /// `running`, `not running` or `untrusted socket`.
    status: &'static str,
    /// The conductor's PID, when it runs and has one.
    pid: Option<u32>,
    /// Why the socket is refused: another user controls it (issue 21).
    refused: Option<String>,
    /// The conductor runs but listens on another socket than the one named
    /// (`$MOZART_SOCKET`): where, and how to reach it (a warning).
    elsewhere: Option<String>,
    /// One entry per instrument profile (or the error loading them).
    instruments: Vec<Value>,
    /// The Slurm checks (empty when no profile places its sheets on Slurm).
    slurm: Vec<Value>,
    /// The job registry's check (`PRAGMA quick_check`).
    registry: Value,
    /// The learning store's check (`PRAGMA quick_check`): a damaged store is a warning
    /// (the conductor runs scores without learning).
    learning: Value,
    /// Whether conductor.yaml loads as `mozart start` loads it: an invalid file is an error
    /// (the conductor cannot start, or restart, with it).
    config: Value,
    /// The `Warning:` lines said about instrument profiles (each is a warning).
    profile_warnings: usize,
    /// Errors found: Mozart is not ready.
    errors: usize,
    /// Why the instruments were looked up in this shell's environment although a conductor
    /// runs (its environment could not be read): what they show may not be what it sees.
    looked_here: Option<String>,
}

impl Findings {
    /// Every `!` line is a warning: the cost-limit one, a conductor that is not running, and
    /// an instrument this shell finds but the running conductor does not.
    fn warnings(&self) -> usize {
        let unreachable = self
            .instruments
            .iter()
            .filter(|i| i["status"] == "warning")
            .count();
        1 + usize::from(self.status != "running" && self.refused.is_none())
            + usize::from(self.elsewhere.is_some())
            + unreachable
            + self.profile_warnings
            + usize::from(self.looked_here.is_some())
            + usize::from(self.learning["status"] == "warning")
    }
}

/// Run `mozart doctor`.
pub fn run(globals: &Globals, args: Args) -> Result<i32, CliError> {
    let (status, pid, refused) = conductor_check(globals);
    let elsewhere = conductor_client::paths(globals, None)
        .ok()
        .and_then(|paths| conductor_client::elsewhere(&paths, false, OutputMode::Human))
        .map(|err| {
            let mut text = err.message().unwrap_or_default().to_string();
            if let CliError::Failed { hints, .. } = &err {
                if let Some(reach) = hints.first() {
                    text = format!("{text}. {reach}");
                }
            }
            text
        });
    let mut errors = usize::from(refused.is_some());
    // Instruments run with the conductor's PATH, not this shell's: look there when it runs.
    let lookup = Lookup::of_state((status == "running").then_some(RunState::Running { pid }));
    let config = config_check(&mut errors);
    let (instruments, placed, profile_warnings) = instrument_checks(&mut errors, &lookup);
    let looked_here = (status == "running")
        .then(|| lookup.why_this_shell())
        .flatten();
    let slurm = slurm_checks(&placed, &mut errors);
    let registry = registry_check(globals, &mut errors);
    let learning = learning_check(globals);
    let findings = Findings {
        status,
        pid,
        refused,
        elsewhere,
        instruments,
        slurm,
        registry,
        learning,
        config,
        profile_warnings,
        errors,
        looked_here,
    };
    if args.output.is_json() {
        print_json(&findings);
    } else {
        print_text(&findings);
    }
    Ok(0)
}

/// Whether the conductor runs: its status, PID, and why its socket is refused when another
/// user controls it (issue 21: an error, with who owns it).
fn conductor_check(globals: &Globals) -> (&'static str, Option<u32>, Option<String>) {
    match conductor_client::paths(globals, None) {
        Ok(paths) => match conductor_client::conductor_state(&paths, OutputMode::Human) {
            Ok(RunState::Running { pid }) => ("running", pid, None),
            Ok(RunState::Stopped { .. }) => ("not running", None, None),
            Err(err) => ("untrusted socket", None, Some(err.to_string())),
        },
        Err(_) => ("not running", None, None),
    }
}

/// Whether `<home>/conductor.yaml` loads as `mozart start` loads it (values, and the
/// directories of `log_file` and `socket.path`): an invalid file is an error, naming it.
fn config_check(errors: &mut usize) -> Value {
    let file = match super::config::file(None) {
        Ok(file) => file,
        Err(_) => {
            return json!({"status": "unknown", "detail": "the Mozart home could not be found"})
        }
    };
    let p = file.display().to_string();
    if !file.exists() {
        return json!({"status": "ok", "path": p, "detail": "defaults (no conductor.yaml)"});
    }
    let socket_named =
        std::env::var_os(mozart_ipc::paths::SOCKET_ENV).is_some_and(|v| !v.is_empty());
    let loaded = mozart_conductor::DaemonConfig::load(Some(&file), None)
        .and_then(|c| c.check_paths(&file, !socket_named));
    match loaded {
        Ok(()) => json!({"status": "ok", "path": p, "detail": p}),
        Err(err) => {
            *errors += 1;
            json!({"status": "error", "path": p, "detail": format!(
                "{err} (mozart start and restart refuse it)"
            )})
        }
    }
}

/// Whether the job registry can be read whole (`PRAGMA quick_check`, read-only): a
/// damaged file is an error, with what to do.
fn registry_check(globals: &Globals, errors: &mut usize) -> Value {
    let Ok(paths) = conductor_client::paths(globals, None) else {
        return json!({"status": "unknown", "detail": "the Mozart home could not be found"});
    };
    let path = &paths.registry_db;
    let p = path.display();
    if !path.exists() {
        return json!({"status": "absent", "path": p.to_string(),
            "detail": format!("{p} (none yet: the first mozart start creates it)")});
    }
    let damaged = |what: String| {
        let fix = mozart_state::damaged_registry_fix(path);
        json!({"status": "error", "path": p.to_string(), "detail": format!("{what}. {fix}")})
    };
    match mozart_state::Registry::quick_check(path) {
        Ok(problems) if problems.is_empty() => {
            json!({"status": "ok", "path": p.to_string(), "detail": p.to_string()})
        }
        Ok(problems) => {
            *errors += 1;
            let first = problems.first().cloned().unwrap_or_default();
            damaged(format!(
                "{p} is damaged ({} problem(s); first: {first})",
                problems.len()
            ))
        }
        Err(e @ mozart_state::StateError::NotARegistry { .. }) => {
            *errors += 1;
            json!({"status": "error", "path": p.to_string(),
                "detail": format!("{e}. {}", e.fix(path))})
        }
        Err(e) if e.is_damaged() => {
            *errors += 1;
            damaged(format!("{p} is damaged: {e}"))
        }
        Err(e) => json!({"status": "unknown", "path": p.to_string(),
            "detail": format!("cannot check it: {e}")}),
    }
}

/// Whether the learning store can be read whole (`PRAGMA quick_check`, read-only). A
/// damaged store is a warning with what to do: scores still run (the conductor goes on
/// without a store it cannot open), but learning does not work.
fn learning_check(globals: &Globals) -> Value {
    let Ok(paths) = conductor_client::paths(globals, None) else {
        return json!({"status": "unknown", "detail": "the Mozart home could not be found"});
    };
    let path = &paths.learning_db;
    let p = path.display();
    if !path.exists() {
        return json!({"status": "absent", "path": p.to_string(),
            "detail": format!("{p} (none yet: the first mozart start creates it)")});
    }
    let damaged = |what: String| {
        json!({"status": "warning", "path": p.to_string(), "detail": format!(
            "{what}. Scores still run, but learning (patterns applied to prompts, outcomes \
             recorded) does not work while it is damaged. It holds no job's state: to start a \
             new, empty store, move it aside: mv {p} {p}.damaged (with {p}-wal and {p}-shm if \
             present); the conductor makes a new one when it starts (mozart restart if it \
             runs). Keep the damaged copy to recover from (e.g. sqlite3 {p}.damaged .recover)."
        )})
    };
    match mozart_learning::LearningStore::quick_check(path) {
        Ok(problems) if problems.is_empty() => {
            json!({"status": "ok", "path": p.to_string(), "detail": p.to_string()})
        }
        Ok(problems) => {
            let first = problems.first().cloned().unwrap_or_default();
            damaged(format!(
                "{p} is damaged ({}; first: {first})",
                plural(problems.len(), "problem", "problems")
            ))
        }
        // The error names the file.
        Err(e) => damaged(e.to_string()),
    }
}

/// A profile placing its sheets on Slurm, with the partition it names.
type Placed = (String, Option<String>);

/// One entry per instrument profile (whether it could run here), and the profiles that
/// place their sheets on Slurm with the partition each names. Profiles that do not load
/// are one error entry. A CLI instrument's program is looked for where `lookup` says (the
/// running conductor's `PATH`, where the conductor will look for it).
fn instrument_checks(errors: &mut usize, lookup: &Lookup) -> (Vec<Value>, Vec<Placed>, usize) {
    let registry = match load_registry() {
        Ok(registry) => registry,
        Err(err) => {
            *errors += 1;
            let entry = json!({
                "name": "instrument profiles",
                "display_name": "Instrument profiles",
                "kind": "cli",
                "status": "error",
                "detail": err.to_string(),
            });
            return (vec![entry], Vec::new(), 0);
        }
    };
    // Each profile skipped (or otherwise warned about) was said as a `Warning:` line.
    let profile_warnings = registry.warnings().len();
    let mut instruments = Vec::new();
    let mut placed = Vec::new();
    for p in registry.profiles() {
        if let Some(spec) = p
            .placement
            .as_ref()
            .filter(|s| s.kind == mozart_backends::placement::PlacementKind::Slurm)
        {
            placed.push((p.name.clone(), spec.partition.clone()));
        }
        let (state, detail) = match p.kind {
            InstrumentKind::Cli => cli_check(p, lookup),
            // Not "ok" just for being HTTP: a refused API, an unset key or a local server
            // that is not running would fail every sheet.
            InstrumentKind::Http => {
                let r = mozart_backends::http_readiness_in(
                    &registry,
                    p,
                    std::time::Duration::from_millis(500),
                    |var| lookup.is_set(var),
                );
                let state = if r.is_ready() { "ok" } else { "optional" };
                (state, lookup.describe(&r))
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
    (instruments, placed, profile_warnings)
}

/// A CLI instrument's status and detail: its program as the running conductor finds it
/// (when `lookup` is the conductor's), else as this shell does.
fn cli_check(p: &mozart_backends::InstrumentProfile, lookup: &Lookup) -> (&'static str, String) {
    let here = binary(p);
    if let (None, Some(file)) = (lookup.binary(p), lookup.not_executable(p)) {
        return (
            "warning",
            format!(
                "{} is not executable: its sheets would fail to start (chmod +x {})",
                file.display(),
                file.display()
            ),
        );
    }
    if !lookup.is_conductor() {
        return match here {
            Some(found) => ("ok", found.display().to_string()),
            None => ("optional", "not installed".to_string()),
        };
    }
    match (lookup.binary(p), here) {
        (Some(found), _) => ("ok", found.display().to_string()),
        (None, Some(found)) => (
            "warning",
            format!(
                "{} is on this shell's PATH but not on the running conductor's: its sheets \
                 would fail to start. Add {} to the conductor's PATH and restart it (for \
                 systemd: the unit's Environment=PATH= line, see docs/conductor.md)",
                found.display(),
                found
                    .parent()
                    .map_or_else(String::new, |d| d.display().to_string())
            ),
        ),
        (None, None) => ("optional", "not installed".to_string()),
    }
}

/// `mozart doctor --json`.
fn print_json(f: &Findings) {
    let version = env!("CARGO_PKG_VERSION");
    crate::output::print_json(&json!({
        // Upstream reports its Python version; this build has no Python, so the key stays
        // (for tools reading it) and says so.
        "python_version": Value::Null,
        "runtime": format!("rust (mozart {version})"),
        "mozart_version": version,
        "conductor": match &f.refused {
            // Upstream's shape, plus the reason only when there is one.
            None => match &f.elsewhere {
                None => json!({"status": f.status, "pid": f.pid}),
                Some(detail) => json!({"status": f.status, "pid": f.pid, "detail": detail}),
            },
            Some(detail) => json!({"status": f.status, "pid": f.pid, "detail": detail}),
        },
        "instruments": f.instruments,
        "instruments_looked_up_here": f.looked_here,
        "slurm": f.slurm,
        "registry": f.registry,
        "conductor_config": f.config,
        "learning_store": f.learning,
        "safety_warnings": [SAFETY_WARNING],
        "warnings_count": f.warnings(),
        "errors_count": f.errors,
    }));
}

/// One line of the text report: icon, name, detail.
fn line(icon: &str, name: &str, detail: &str) {
    // A profile's name and what a program said are shown, not obeyed.
    let (name, detail) = (crate::output::plain(name), crate::output::plain(detail));
    println!("  {icon} {name:<24} {detail}");
}

/// `mozart doctor` as text: runtime, conductor, instruments, Slurm, safety, verdict.
fn print_text(f: &Findings) {
    let version = env!("CARGO_PKG_VERSION");
    println!("Mozart Doctor\n");
    line("✓", "Runtime", &format!("Rust build of mozart {version}"));
    line("✓", "Mozart", version);
    let conductor = match (f.status, f.pid) {
        ("running", Some(pid)) => format!("running (pid {pid})"),
        (s, _) => s.to_string(),
    };
    line(
        match f.status {
            "running" if f.elsewhere.is_some() => "!",
            "running" => "✓",
            "untrusted socket" => "✗",
            _ => "!",
        },
        "Conductor",
        &conductor,
    );
    if let Some(detail) = f.refused.as_ref().or(f.elsewhere.as_ref()) {
        println!("      {detail}");
    }
    let icon = match f.config["status"].as_str() {
        Some("ok") => "✓",
        Some("error") => "✗",
        _ => "·",
    };
    line(
        icon,
        "Conductor config",
        f.config["detail"].as_str().unwrap_or(""),
    );
    let icon = match f.registry["status"].as_str() {
        Some("ok") => "✓",
        Some("error") => "✗",
        _ => "·",
    };
    line(
        icon,
        "Job registry",
        f.registry["detail"].as_str().unwrap_or(""),
    );
    let icon = match f.learning["status"].as_str() {
        Some("ok") => "✓",
        Some("warning") => "!",
        _ => "·",
    };
    line(
        icon,
        "Learning store",
        f.learning["detail"].as_str().unwrap_or(""),
    );
    println!("\nInstruments:");
    if let Some(why) = &f.looked_here {
        let mut why = why.clone();
        if let Some(first) = why.get_mut(..1) {
            first.make_ascii_uppercase();
        }
        println!("  ! {why}: the conductor may find other programs and keys than shown here");
    }
    for i in &f.instruments {
        let icon = match i["status"].as_str() {
            Some("ok") => "✓",
            Some("optional") => "·",
            Some("warning") => "!",
            _ => "✗",
        };
        check_line(icon, i);
    }
    if !f.slurm.is_empty() {
        println!("\nSlurm placement:");
        for c in &f.slurm {
            let icon = match c["status"].as_str() {
                Some("ok") => "✓",
                _ => "✗",
            };
            check_line(icon, c);
        }
    }
    println!("\nSafety:");
    line("!", "Cost limits", SAFETY_WARNING);
    println!();
    let warnings = f.warnings();
    if f.errors > 0 {
        println!(
            "{}, {}. Mozart is not ready.",
            plural(f.errors, "error", "errors"),
            plural(warnings, "warning", "warnings")
        );
    } else {
        println!(
            "{}. Mozart is ready.",
            plural(warnings, "warning", "warnings")
        );
    }
}

/// The line of one check entry (`name`, `detail`).
fn check_line(icon: &str, entry: &Value) {
    line(
        icon,
        entry["name"].as_str().unwrap_or(""),
        entry["detail"].as_str().unwrap_or(""),
    );
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
