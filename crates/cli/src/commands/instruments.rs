//! `mozart instruments list|check` (cli.md §6.3).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mozart_backends::process::{run_process, ProcessSpec};
use mozart_backends::{
    HttpReadiness, InstrumentKind, InstrumentProfile, InstrumentRegistry, Progress,
};
use serde_json::{json, Value};

use crate::error::Detailed;
use crate::instrument_lookup::Lookup;
use crate::output::print_json;
use crate::{CliError, Globals, OutputMode};

/// How long `check` waits for `<binary> --version`.
const VERSION_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long `check` waits for a local HTTP instrument's server to accept a connection (as
/// `mozart doctor` does).
const HTTP_PROBE_TIMEOUT: Duration = Duration::from_millis(500);

// `mozart instruments [SUBCOMMAND]`: without one it runs `list` (cli.md §6.3). (No doc
// comment: the group's help keeps the command's own about.)
#[derive(Debug, clap::Args)]
#[command(about = "Inspect instruments", long_about = None)]
#[allow(missing_docs)]
pub struct Group {
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands of `mozart instruments`.
///
/// Their arguments are built only for the one being parsed (every `mozart` call builds
/// this enum's commands; see `mozart_cli::Command`).
#[derive(Debug, clap::Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// List the instruments Mozart knows and whether each is ready here.
    List {
        /// Output as JSON.
        #[arg(id = "json", long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
        output: OutputMode,
    },
    /// Check readiness and configuration of one instrument.
    Check {
        /// Instrument name to check.
        name: String,
        /// Output as JSON.
        #[arg(id = "json", long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
        output: OutputMode,
    },
}

/// Run `mozart instruments ...`.
pub fn run(globals: &Globals, group: Group) -> Result<i32, CliError> {
    let command = group.command.unwrap_or(Command::List {
        output: OutputMode::Human,
    });
    let registry = load_registry()?;
    // Instruments run in the conductor's environment: look there when it runs.
    let lookup = Lookup::of(globals);
    // And they run as the conductor loaded them, when it started.
    let conductor = ConductorProfiles::of(globals);
    match command {
        Command::List { output } => {
            list(&registry, &lookup, conductor.as_ref(), output);
            Ok(0)
        }
        Command::Check { name, output } => {
            check(&registry, &lookup, conductor.as_ref(), &name, output)
        }
    }
}

/// The profiles the running conductor loaded (it reads them when it starts), as it holds
/// them (`daemon.instruments`).
struct ConductorProfiles(serde_json::Map<String, Value>);

/// Whether the running conductor has a profile as this command read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// It has this very profile.
    Same,
    /// It has another version of it (the file changed after it started, or a file here
    /// replaces a built-in the conductor runs).
    Changed,
    /// It has no profile of that name.
    Missing,
}

impl ConductorProfiles {
    /// `None` when no conductor runs, or it does not say (one that predates the method).
    fn of(globals: &Globals) -> Option<ConductorProfiles> {
        let paths = crate::conductor_client::paths(globals, None).ok()?;
        let state = crate::conductor_client::conductor_state(&paths, OutputMode::Human).ok()?;
        if !matches!(state, mozart_conductor::RunState::Running { .. }) {
            return None;
        }
        let mut client = mozart_client::blocking::connect_direct(&paths.socket).ok()?;
        let answer: Value =
            mozart_client::blocking::call(&mut client, mozart_ipc::methods::DAEMON_INSTRUMENTS, ())
                .ok()?;
        answer
            .get("instruments")?
            .as_object()
            .cloned()
            .map(ConductorProfiles)
    }

    fn held(&self, profile: &InstrumentProfile) -> Held {
        let Some(theirs) = self.0.get(&profile.name) else {
            return Held::Missing;
        };
        // Ours through the same text round trip theirs made on the wire.
        let ours = serde_json::to_string(profile)
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(&text).ok());
        if ours.as_ref() == Some(theirs) {
            Held::Same
        } else {
            Held::Changed
        }
    }
}

/// Why the running conductor does not run `profile` as its file says, and what to do.
fn held_words(registry: &InstrumentRegistry, profile: &InstrumentProfile, held: Held) -> String {
    let home_dir = mozart_home().join("instruments");
    let outside = match registry.source(&profile.name) {
        Some(mozart_backends::ProfileSource::File(path)) if !path.starts_with(&home_dir) => {
            Some(path.clone())
        }
        _ => None,
    };
    match (held, outside) {
        (Held::Same, _) => "loaded by the running conductor".into(),
        (_, Some(path)) => format!(
            "{} the running conductor: it reads profiles only from {}/ (this one is {}): put it there and run 'mozart restart'",
            if held == Held::Missing { "not loaded by" } else { "another version runs in" },
            home_dir.display(),
            path.display()
        ),
        (Held::Missing, None) => "not loaded by the running conductor (added after it started): 'mozart restart' loads it".into(),
        (Held::Changed, None) => "the running conductor runs an older version (the profile changed after it started): 'mozart restart' loads this one".into(),
    }
}

/// The Mozart home (`mozart_ipc::paths`), or `.mozart` here when neither `$MOZART_HOME`
/// nor `$HOME` is set: listing instruments needs no home of its own.
fn mozart_home() -> PathBuf {
    mozart_ipc::paths::mozart_home().unwrap_or_else(|_| PathBuf::from(".mozart"))
}

/// Where the user's own instrument profiles go, as a hint shows it: under the actual Mozart
/// home (`$MOZART_HOME` when set), not a fixed `~/.mozart`.
fn profiles_dir() -> String {
    format!("{}/", mozart_home().join("instruments").display())
}

pub(crate) fn load_registry() -> Result<InstrumentRegistry, CliError> {
    let project = std::env::current_dir().ok();
    let registry = InstrumentRegistry::load(&mozart_home(), project.as_deref()).map_err(|err| {
        CliError::failed(format!("cannot load instrument profiles: {err}"), vec![])
    })?;
    // A profile's own text (an unknown field's name) is shown, not obeyed.
    for warning in registry.warnings() {
        eprintln!("Warning: {}", crate::output::plain(warning));
    }
    Ok(registry)
}

fn list(
    registry: &InstrumentRegistry,
    lookup: &Lookup,
    conductor: Option<&ConductorProfiles>,
    mode: OutputMode,
) {
    let rows: Vec<(&Arc<InstrumentProfile>, Option<PathBuf>)> =
        registry.profiles().map(|p| (p, lookup.binary(p))).collect();
    let held = |p: &InstrumentProfile| conductor.map(|c| c.held(p));
    if mode.is_json() {
        let items: Vec<Value> = rows
            .iter()
            .map(|(p, path)| {
                let cli = p.kind == InstrumentKind::Cli;
                let missing = held(p) == Some(Held::Missing);
                let status = match (cli, path.is_some()) {
                    _ if missing => "not_loaded",
                    (true, true) => "ready",
                    (true, false) if lookup.not_executable(p).is_some() => "not_executable",
                    (true, false) => "not_found",
                    (false, _) => "unchecked",
                };
                let mut item = json!({
                    "name": p.name,
                    "display_name": p.display_name,
                    "kind": p.kind.as_str(),
                    "status": status,
                    "ready": if cli { Value::Bool(path.is_some() && !missing) } else { Value::Null },
                    "binary_path": path.as_ref().map(|p| p.display().to_string()),
                    "default_model": p.default_model,
                    "capabilities": p.capabilities.iter().collect::<Vec<_>>(),
                });
                if let (Some(h), Some(obj)) = (held(p), item.as_object_mut()) {
                    obj.insert("in_conductor".into(), json!(held_key(h)));
                }
                item
            })
            .collect();
        print_json(&Value::Array(items));
        return;
    }
    if rows.is_empty() {
        println!(
            "No instruments configured.\nAdd instrument profiles to {} or .mozart/instruments/",
            profiles_dir()
        );
        return;
    }
    let (mut ready, mut unchecked) = (0, 0);
    let table: Vec<[String; 4]> = rows
        .iter()
        .map(|(p, path)| {
            let status = match (p.kind, path.is_some()) {
                _ if held(p) == Some(Held::Missing) => "✗ not loaded",
                (InstrumentKind::Cli, true) if held(p) == Some(Held::Changed) => {
                    ready += 1;
                    "✓ ready (older version loaded)"
                }
                (InstrumentKind::Cli, true) => {
                    ready += 1;
                    "✓ ready"
                }
                (InstrumentKind::Cli, false) if lookup.not_executable(p).is_some() => {
                    "✗ not executable"
                }
                (InstrumentKind::Cli, false) => "✗ not found",
                (InstrumentKind::Http, _) => {
                    unchecked += 1;
                    "? unchecked"
                }
            };
            let model = p
                .default_model
                .clone()
                .unwrap_or_else(|| "(instrument default)".into());
            // A profile's words are shown, not obeyed.
            [
                crate::output::plain(&p.name).into_owned(),
                p.kind.as_str().into(),
                status.into(),
                crate::output::plain(&model).into_owned(),
            ]
        })
        .collect();
    let headers = ["NAME", "KIND", "STATUS", "DEFAULT MODEL"];
    let widths: Vec<usize> = (0..4)
        .map(|i| {
            table
                .iter()
                .map(|r| r[i].chars().count())
                .chain([headers[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: [&str; 4]| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            s.push_str(cell);
            if i < 3 {
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        println!("{}", s.trim_end());
    };
    println!("Instruments");
    line(headers);
    for r in &table {
        line([&r[0], &r[1], &r[2], &r[3]]);
    }
    let mut parts = Vec::new();
    if ready > 0 {
        parts.push(format!("{ready} ready"));
    }
    if unchecked > 0 {
        parts.push(format!("{unchecked} unchecked"));
    }
    let summary = format!(
        "{} configured",
        mozart_config::plural(rows.len(), "instrument", "instruments")
    );
    if parts.is_empty() {
        println!("\n{summary}");
    } else {
        println!("\n{summary} ({})", parts.join(", "));
    }
    // The profiles the running conductor does not run as their files say: each, why, and
    // what to do.
    for (p, _) in &rows {
        if let Some(h @ (Held::Missing | Held::Changed)) = held(p) {
            println!(
                "{}: {}",
                crate::output::plain(&p.name),
                held_words(registry, p, h)
            );
        }
    }
}

/// `in_conductor` of the JSON: `loaded`, `changed` (it runs another version), `not_loaded`.
fn held_key(held: Held) -> &'static str {
    match held {
        Held::Same => "loaded",
        Held::Changed => "changed",
        Held::Missing => "not_loaded",
    }
}

/// `<binary> --version`, first line, with a short timeout; `None` when it fails.
/// The first line `--version` prints, or why there is none (said as it happened: a binary
/// that refuses the flag is not one that hung).
fn version_probe(path: &std::path::Path) -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot run it: {e}"))?;
    let mut spec = ProcessSpec::new(
        path.display().to_string(),
        vec!["--version".into()],
        VERSION_PROBE_TIMEOUT,
    );
    spec.kill_grace = Duration::from_secs(1);
    spec.drain_grace = Duration::from_millis(200);
    let (outcome, _) = runtime.block_on(run_process(spec, Arc::new(Progress::new()), None));
    if outcome.timed_out {
        return Err(format!(
            "no answer to --version within {}s",
            VERSION_PROBE_TIMEOUT.as_secs()
        ));
    }
    if let Some(e) = &outcome.spawn_error {
        return Err(format!("cannot run it: {e}"));
    }
    match outcome.exit_code {
        Some(0) => {}
        Some(code) => return Err(format!("it has no --version (exit {code})")),
        None => return Err("--version was ended by a signal".into()),
    }
    let text = outcome.stdout.tail_string();
    // What the program printed is shown, not obeyed (a title or clipboard escape).
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| crate::output::plain(l).into_owned())
        .ok_or_else(|| "--version printed nothing".to_string())
}

/// `mozart instruments check NAME`: the profile and whether it could run here; exit 1
/// (with what to do) when it could not.
fn check(
    registry: &InstrumentRegistry,
    lookup: &Lookup,
    conductor: Option<&ConductorProfiles>,
    name: &str,
    mode: OutputMode,
) -> Result<i32, CliError> {
    let Some(profile) = registry.get(name) else {
        return Err(CliError::Detailed(Box::new(Detailed {
            code: Some("INSTR-001".into()),
            message: format!("Unknown instrument: '{name}'"),
            hints: vec![
                "Run 'mozart instruments list' to see available instruments".into(),
                format!("Add profiles to {} or .mozart/instruments/", profiles_dir()),
            ],
            after: Vec::new(),
            document: json!({"error": format!("Unknown instrument: {name}")}),
            mode,
            exit: 1,
        })));
    };
    let path = lookup.binary(profile);
    // An HTTP instrument is ready when it could run from here, as `mozart doctor` says (a
    // client for its API, its key set, a local server answering): not merely for being HTTP.
    let http = (profile.kind == InstrumentKind::Http).then(|| {
        mozart_backends::http_readiness_in(registry, profile, HTTP_PROBE_TIMEOUT, |var| {
            lookup.is_set(var)
        })
    });
    // A profile the running conductor has not loaded cannot run, whatever its program.
    let held = conductor.map(|c| c.held(profile));
    let missing = held == Some(Held::Missing);
    let ready = !missing
        && match &http {
            Some(r) => r.is_ready(),
            None => path.is_some(),
        };
    if mode.is_json() {
        let mut doc = check_json(profile, lookup, path.as_deref(), http.as_ref(), ready);
        if let (Some(h), Some(obj)) = (held, doc.as_object_mut()) {
            obj.insert("in_conductor".into(), json!(held_key(h)));
        }
        print_json(&doc);
        return Ok(0);
    }
    print_check(profile, lookup, path.as_deref(), http.as_ref());
    if let Some(h) = held {
        let mark = match h {
            Held::Same => "✓",
            Held::Changed => "!",
            Held::Missing => "✗",
        };
        println!(
            "  Conductor:     {mark} {}\n",
            held_words(registry, profile, h)
        );
    }
    if missing {
        return Err(CliError::failed(
            format!(
                "{} is not loaded by the running conductor.",
                crate::output::plain(&profile.name)
            ),
            vec![held_words(registry, profile, Held::Missing)],
        ));
    }
    if ready {
        println!("{} is ready.", crate::output::plain(&profile.name));
        return Ok(0);
    }
    let mut hints = vec![not_ready_hint(profile, http.as_ref())];
    hints.push("Run 'mozart doctor' for a full environment check.".into());
    Err(CliError::failed(
        format!("{} is not ready.", crate::output::plain(&profile.name)),
        hints,
    ))
}

/// `mozart instruments check NAME --json`: the profile, where its program is (a CLI
/// instrument) or its endpoint (an HTTP one), and whether it is ready.
fn check_json(
    profile: &InstrumentProfile,
    lookup: &Lookup,
    path: Option<&Path>,
    http: Option<&HttpReadiness>,
    ready: bool,
) -> Value {
    let mut out = json!({
        "name": profile.name,
        "display_name": profile.display_name,
        "kind": profile.kind.as_str(),
        "description": profile.description,
        "capabilities": profile.capabilities.iter().collect::<Vec<_>>(),
        "default_model": profile.default_model,
        "models": profile.models.iter().map(|m| json!({
            "name": m.name,
            "context_window": m.context_window,
            "cost_per_1k_input": m.cost_per_1k_input,
            "cost_per_1k_output": m.cost_per_1k_output,
        })).collect::<Vec<_>>(),
    });
    if let Some(obj) = out.as_object_mut() {
        if let Some(cli) = &profile.cli {
            obj.insert("binary_found".into(), json!(path.is_some()));
            obj.insert(
                "binary_path".into(),
                json!(path.map(|p| p.display().to_string())),
            );
            obj.insert("executable".into(), json!(cli.command.executable));
            let (vars, set) = profile.key_vars_in(|v| lookup.is_set(v));
            if !vars.is_empty() {
                obj.insert(
                    "credentials".into(),
                    json!({"vars": vars, "set": set, "in_conductor": lookup.is_conductor()}),
                );
            }
        } else if let Some(http) = &profile.http {
            obj.insert(
                "endpoint".into(),
                json!(format!("{}{}", http.base_url, http.endpoint)),
            );
            obj.insert("auth_env_var".into(), json!(http.auth_env_var));
        }
        if let Some(r) = http {
            obj.insert("readiness".into(), json!(lookup.describe(r)));
        }
        obj.insert("ready".into(), json!(ready));
    }
    out
}

/// The text of `mozart instruments check NAME` up to the verdict: the profile, its program
/// and version (a CLI instrument) or its endpoint and readiness (an HTTP one), its
/// capabilities and models.
fn print_check(
    profile: &InstrumentProfile,
    lookup: &Lookup,
    path: Option<&Path>,
    http: Option<&HttpReadiness>,
) {
    // What a profile says is shown, not obeyed (a title or clipboard escape).
    let plain = crate::output::plain;
    println!("\nChecking {}...", plain(&profile.name));
    println!("  Display name:  {}", plain(&profile.display_name));
    if let Some(desc) = &profile.description {
        println!("  Description:   {}", plain(desc));
    }
    println!("  Kind:          {}", profile.kind.as_str());
    if let Some(cli) = &profile.cli {
        match path {
            Some(p) => {
                println!("  Binary:        {} ✓", p.display());
                match version_probe(p) {
                    Ok(v) => println!("  Version:       {v}"),
                    Err(why) => println!("  Version:       ({why})"),
                }
            }
            None => match lookup.only_in_this_shell(profile) {
                Some(here) => println!(
                    "  Binary:        {} ✗ not on the running conductor's PATH (this shell \
                     finds {}: add {} to the conductor's PATH and restart it)",
                    plain(&cli.command.executable),
                    here.display(),
                    here.parent()
                        .map_or_else(String::new, |d| d.display().to_string())
                ),
                None => match lookup.not_executable(profile) {
                    Some(file) => println!(
                        "  Binary:        {} ✗ not executable (make it so: chmod +x {})",
                        file.display(),
                        file.display()
                    ),
                    None => println!(
                        "  Binary:        {} ✗ not found",
                        plain(&cli.command.executable)
                    ),
                },
            },
        }
        let (vars, set) = profile.key_vars_in(|v| lookup.is_set(v));
        if !vars.is_empty() {
            let (there, note) = match lookup.why_this_shell() {
                None => ("in the running conductor's environment", String::new()),
                Some(why) => (
                    "here",
                    format!(" ({why}; what counts is the environment `mozart start` ran with)"),
                ),
            };
            if set.is_empty() {
                println!(
                    "  Credentials:   none of {} is set {there}: the CLI needs one unless it \
                     is logged in{note}",
                    plain(&vars.join(", "))
                );
            } else {
                println!(
                    "  Credentials:   {} is set {there}{note}",
                    plain(&set.join(", "))
                );
            }
        }
    } else if let Some(http) = &profile.http {
        println!(
            "  Endpoint:      {}",
            plain(&format!("{}{}", http.base_url, http.endpoint))
        );
        if let Some(var) = &http.auth_env_var {
            println!("  Auth env var:  {}", plain(var));
        }
    }
    if let Some(r) = http {
        let mark = if r.is_ready() { "✓" } else { "✗" };
        println!("  Readiness:     {mark} {}", lookup.describe(r));
    }
    print_models(profile);
    println!();
}

/// Capabilities, the default model and each model with its context window and cost.
fn print_models(profile: &InstrumentProfile) {
    // What a profile says is shown, not obeyed.
    let plain = crate::output::plain;
    let caps: Vec<&str> = profile.capabilities.iter().map(String::as_str).collect();
    println!(
        "  Capabilities:  {}",
        if caps.is_empty() {
            "(none)".to_string()
        } else {
            plain(&caps.join(", ")).into_owned()
        }
    );
    if let Some(model) = &profile.default_model {
        println!("  Default model: {}", plain(model));
    }
    for m in &profile.models {
        let cost = if m.cost_per_1k_input > 0.0 || m.cost_per_1k_output > 0.0 {
            // As configured: $0.00015 is not "$0.0001" (mozart_client::money).
            format!(
                " ({}/1K in, {}/1K out)",
                mozart_client::money::usd(m.cost_per_1k_input),
                mozart_client::money::usd(m.cost_per_1k_output)
            )
        } else {
            String::new()
        };
        println!(
            "    {}: {} ctx{cost}",
            plain(&m.name),
            group_thousands(m.context_window)
        );
    }
}

/// What to do about an instrument that is not ready, naming the program, variable or server
/// at fault (the profile's name is not the program's: `claude-code` runs `claude`).
fn not_ready_hint(profile: &InstrumentProfile, http: Option<&HttpReadiness>) -> String {
    match http {
        Some(HttpReadiness::MissingKey(var)) => format!(
            "Set {var} in the environment the conductor is started with (the systemd unit reads ~/.mozart/env)."
        ),
        Some(HttpReadiness::NoServer(url, _)) => {
            format!("Start the server at {url}, or point the profile's http.base_url at one that runs.")
        }
        Some(HttpReadiness::Unsupported(_)) => {
            "This build cannot call this API: choose another instrument (mozart instruments list).".into()
        }
        Some(_) => "Check the instrument's http section.".into(),
        None => {
            let exe = profile
                .cli
                .as_ref()
                .map_or(profile.name.as_str(), |c| c.command.executable.as_str());
            format!(
                "Install '{exe}' (the program the {} instrument runs) or put its directory on your PATH; the conductor uses the PATH it was started with.",
                profile.name
            )
        }
    }
}

/// `200000` → `200,000` (Python's `{:,}`).
fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::group_thousands;

    #[test]
    fn thousands_grouping() {
        assert_eq!(group_thousands(200_000), "200,000");
        assert_eq!(group_thousands(1_000_000), "1,000,000");
        assert_eq!(group_thousands(999), "999");
    }
}
