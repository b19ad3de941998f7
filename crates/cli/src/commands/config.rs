//! `mozart config show|set|path|init|check` (cli.md §6.2), on the one file the conductor
//! really loads: `<MOZART_HOME>/conductor.yaml` (upstream edits `~/.mozart/daemon.yaml`,
//! which its conductor never reads — docs/differences.md).

use std::path::{Path, PathBuf};

use mozart_conductor::DaemonConfig;
use serde_json::Value;

use crate::conductor_client;
use crate::{CliError, Globals, OutputMode};

/// Rows `config show` prints without `--all`.
const ESSENTIALS: [&str; 6] = [
    "max_concurrent_jobs",
    "log_level",
    "log_file",
    "job_timeout_seconds",
    "learning.enabled",
    "profiler.enabled",
];

/// Subcommands of `mozart config`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Show the conductor configuration (live from a running conductor, else the file).
    Show {
        /// Config file (default: <MOZART_HOME>/conductor.yaml).
        #[arg(short = 'c', long = "config", value_name = "PATH")]
        config: Option<PathBuf>,
        /// Show every key, not only the essentials.
        #[arg(short = 'a', long = "all")]
        all: bool,
        /// Only keys of this section (e.g. `learning`).
        #[arg(short = 's', long = "section", value_name = "TEXT")]
        section: Option<String>,
        /// Output the rows as JSON.
        #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
        output: OutputMode,
    },
    /// Set one key (dotted, e.g. `learning.enabled`) in the config file.
    Set {
        /// Dotted key.
        key: String,
        /// New value (true/false/yes/no, null/none/~, an integer, a float, or text).
        value: String,
        /// Config file (default: <MOZART_HOME>/conductor.yaml).
        #[arg(short = 'c', long = "config", value_name = "PATH")]
        config: Option<PathBuf>,
    },
    /// Print the config file's path and whether it exists.
    Path {
        /// Config file (default: <MOZART_HOME>/conductor.yaml).
        #[arg(short = 'c', long = "config", value_name = "PATH")]
        config: Option<PathBuf>,
    },
    /// Write a config file with every default.
    Init {
        /// Config file (default: <MOZART_HOME>/conductor.yaml).
        #[arg(short = 'c', long = "config", value_name = "PATH")]
        config: Option<PathBuf>,
        /// Overwrite an existing file.
        #[arg(short = 'f', long = "force")]
        force: bool,
    },
    /// Validate the config file.
    Check {
        /// Config file (default: <MOZART_HOME>/conductor.yaml).
        #[arg(short = 'c', long = "config", value_name = "PATH")]
        config: Option<PathBuf>,
    },
}

/// Run `mozart config ...`.
pub fn run(globals: &Globals, command: Command) -> Result<i32, CliError> {
    match command {
        Command::Show {
            config,
            all,
            section,
            output,
        } => show(globals, file(config)?, all, section, output),
        Command::Set { key, value, config } => set(globals, &file(config)?, &key, &value),
        Command::Path { config } => {
            let path = file(config)?;
            let state = if path.exists() {
                "exists"
            } else {
                "not created"
            };
            println!("{}  ({state})", path.display());
            Ok(0)
        }
        Command::Init { config, force } => init(&file(config)?, force),
        Command::Check { config } => check(&file(config)?),
    }
}

/// The file a subcommand works on, made absolute.
pub fn file(given: Option<PathBuf>) -> Result<PathBuf, CliError> {
    let path = match given {
        Some(p) => p,
        None => mozart_conductor::mozart_home()
            .map_err(|e| CliError::failed(e.to_string(), vec![]))?
            .join("conductor.yaml"),
    };
    Ok(std::path::absolute(&path).unwrap_or(path))
}

/// Flatten a JSON document into `(dotted key, value)` rows, in document order.
fn flatten(prefix: &str, value: &Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => out.push((prefix.to_string(), other.clone())),
    }
}

/// A value as conductor.yaml spells it (not Python's `True`/`None`, issue 23).
fn shown(v: &Value) -> String {
    match v {
        Value::Null => "(not set)".into(),
        Value::Bool(b) => if *b { "true" } else { "false" }.into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn show(
    globals: &Globals,
    path: PathBuf,
    all: bool,
    section: Option<String>,
    mode: OutputMode,
) -> Result<i32, CliError> {
    // Live first: what the running conductor uses is what matters.
    let live = conductor_client::connect_in(globals, mode)
        .ok()
        .and_then(|mut c| c.call_value(mozart_ipc::methods::DAEMON_CONFIG, ()).ok());
    // The file too, when a conductor runs: a value changed since it last read the file is
    // not in effect yet, and the user must be told.
    let file_doc = live
        .as_ref()
        .and_then(|_| DaemonConfig::load(Some(&path), None).ok())
        .and_then(|c| serde_json::to_value(&c).ok());
    let (doc, label, from_file) = match live {
        Some(doc) => (doc, "[live] from running conductor".to_string(), None),
        None => {
            let config = match DaemonConfig::load(Some(&path), None) {
                Ok(c) => c,
                Err(err) => {
                    return Err(CliError::Failed {
                        kind: crate::ErrorKind::Command,
                        message: format!("Error loading config: {err}"),
                        hints: vec![format!("Check {} syntax.", path.display())],
                        mode,
                    })
                }
            };
            let exists = path.exists();
            let raw = if exists {
                std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|t| mozart_yaml::load_value(&t).ok())
                    .and_then(|v| serde_json::to_value(v).ok())
            } else {
                None
            };
            let label = if exists {
                path.display().to_string()
            } else {
                "(defaults)".to_string()
            };
            (
                serde_json::to_value(&config).unwrap_or(Value::Null),
                label,
                Some(raw.unwrap_or(Value::Null)),
            )
        }
    };
    let mut rows = Vec::new();
    flatten("", &doc, &mut rows);
    rows.retain(|(k, _)| k != "config_file");
    let filtered: Vec<&(String, Value)> = rows
        .iter()
        .filter(|(k, _)| match &section {
            Some(s) => k == s || k.starts_with(&format!("{s}.")),
            None => all || ESSENTIALS.contains(&k.as_str()),
        })
        .collect();
    let source = |key: &str| -> &'static str {
        match &from_file {
            None => "live",
            Some(raw) => {
                let mut node = raw;
                for part in key.split('.') {
                    match node.get(part) {
                        Some(n) => node = n,
                        None => return "default",
                    }
                }
                "file"
            }
        }
    };
    // Keys whose file value differs from the running one: (key, file value).
    let mut pending: Vec<(String, Value)> = Vec::new();
    if let Some(file_doc) = &file_doc {
        let mut file_rows = Vec::new();
        flatten("", file_doc, &mut file_rows);
        for (key, value) in file_rows {
            let differs = rows.iter().any(|(k, v)| *k == key && *v != value);
            if differs && filtered.iter().any(|(k, _)| *k == key) {
                pending.push((key, value));
            }
        }
    }
    let applies = |key: &str| mozart_conductor::config::applies(key);
    if mode.is_json() {
        let items: Vec<Value> = filtered
            .iter()
            .map(|(k, v)| {
                let a = applies(k);
                let mut item = serde_json::json!({"key": k, "value": v, "source": source(k),
                    "takes_effect": a.label()});
                if let mozart_conductor::config::Applies::Unused(why) = a {
                    item["note"] = serde_json::json!(why);
                }
                if let Some((_, file_value)) = pending.iter().find(|(pk, _)| pk == k) {
                    item["file_value"] = file_value.clone();
                }
                item
            })
            .collect();
        crate::output::print_json(&serde_json::json!({"source": label, "settings": items}));
        return Ok(0);
    }
    println!("Daemon configuration — {label}");
    let table_rows: Vec<Vec<String>> = filtered
        .iter()
        .map(|(k, v)| {
            let effect = match applies(k) {
                mozart_conductor::config::Applies::Unused(why) => format!("not used: {why}"),
                a => a.label().to_string(),
            };
            vec![k.clone(), shown(v), source(k).to_string(), effect]
        })
        .collect();
    print!(
        "{}",
        super::learning::table("", &["Key", "Value", "Source", "Takes effect"], &table_rows)
    );
    if !pending.is_empty() {
        println!(
            "\n{} has values the running conductor does not use yet:",
            path.display()
        );
        for (key, value) in &pending {
            let when = match applies(key) {
                mozart_conductor::config::Applies::Reload => {
                    "on reload: kill -HUP <conductor pid>, or set it with mozart config set"
                }
                mozart_conductor::config::Applies::Restart => "on mozart restart",
                mozart_conductor::config::Applies::Unused(_) => "never (not used)",
            };
            println!("  {key} = {} — {when}", shown(value));
        }
    }
    println!(
        "\nTakes effect: reload = on SIGHUP or 'mozart config set' while the conductor runs; restart = on 'mozart restart'."
    );
    if section.is_none() && !all {
        println!("Showing essential settings. Use --all to see every key, --section NAME for one section.");
    }
    Ok(0)
}

/// Upstream's value coercion (case-insensitive): booleans, null, int, float, else text.
pub fn coerce(raw: &str) -> serde_yaml::Value {
    let lower = raw.to_lowercase();
    match lower.as_str() {
        "true" | "yes" => return serde_yaml::Value::Bool(true),
        "false" | "no" => return serde_yaml::Value::Bool(false),
        "null" | "none" | "~" => return serde_yaml::Value::Null,
        _ => {}
    }
    if let Ok(i) = raw.parse::<i64>() {
        return serde_yaml::Value::Number(i.into());
    }
    if let Ok(f) = raw.parse::<f64>() {
        return serde_yaml::Value::Number(f.into());
    }
    serde_yaml::Value::String(raw.to_string())
}

/// A coerced value as conductor.yaml spells it (upstream printed Python's `repr`: `True`,
/// `None`, `'debug'`).
fn py_repr(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::Null => "null".into(),
        serde_yaml::Value::Bool(b) => if *b { "true" } else { "false" }.into(),
        serde_yaml::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) if f.fract() == 0.0 && f.is_finite() => format!("{f:.1}"),
            (None, Some(f)) => f.to_string(),
            _ => n.to_string(),
        },
        serde_yaml::Value::String(s) => s.clone(),
        other => serde_yaml::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}

fn read_mapping(path: &Path) -> Result<serde_yaml::Value, CliError> {
    if !path.exists() {
        return Ok(serde_yaml::Value::Mapping(Default::default()));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::failed(format!("Cannot read {}: {e}", path.display()), vec![]))?;
    if text.trim().is_empty() {
        return Ok(serde_yaml::Value::Mapping(Default::default()));
    }
    // YAML 1.1, as the conductor reads the file (`enabled: yes` is true).
    match mozart_yaml::load_value(&text) {
        Ok(v @ serde_yaml::Value::Mapping(_)) => Ok(v),
        Ok(serde_yaml::Value::Null) => Ok(serde_yaml::Value::Mapping(Default::default())),
        Ok(_) => Err(CliError::failed(
            format!(
                "Invalid config: {} — the top level is not a mapping",
                path.display()
            ),
            vec![],
        )),
        Err(e) => Err(CliError::failed(
            format!("Invalid config: {} — {e}", path.display()),
            vec![],
        )),
    }
}

/// Write `text` to `path` through a temporary file and a rename (never a half-written file).
fn write_atomic(path: &Path, text: &str) -> Result<(), CliError> {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let tmp = path.with_extension("yaml.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            CliError::failed(format!("Cannot write {}: {e}", path.display()), vec![])
        })
}

fn set(globals: &Globals, path: &Path, key: &str, raw: &str) -> Result<i32, CliError> {
    let mut doc = read_mapping(path)?;
    let value = coerce(raw);
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(CliError::failed(
            format!("Invalid key '{key}'"),
            vec!["Use a dotted key such as learning.enabled.".into()],
        ));
    }
    set_dotted(&mut doc, &parts, value.clone());
    let text = serde_yaml::to_string(&doc).map_err(|e| CliError::failed(e.to_string(), vec![]))?;
    // Validate the whole new file before replacing the old one.
    let probe = tempfile_beside(path);
    let checked = std::fs::write(&probe, &text)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            DaemonConfig::load(Some(&probe), None).map_err(|e| {
                // Name the user's file, not the probe.
                e.to_string()
                    .replace(&probe.display().to_string(), &path.display().to_string())
            })
        });
    let _ = std::fs::remove_file(&probe);
    if let Err(err) = checked {
        return Err(CliError::failed(
            format!("Invalid value: {err}"),
            vec!["Run 'mozart config show --all' to see current values.".into()],
        ));
    }
    write_atomic(path, &text)?;
    println!("Set {key} = {} in {}", py_repr(&value), path.display());
    let applies = mozart_conductor::config::applies(key);
    if let mozart_conductor::config::Applies::Unused(why) = applies {
        println!("Note: this conductor does not use {key} ({why}).");
        return Ok(0);
    }
    match running_conductor(globals, path) {
        None => println!("Takes effect when the conductor starts."),
        Some(_) if applies == mozart_conductor::config::Applies::Restart => {
            println!("The running conductor keeps its current value until 'mozart restart'.")
        }
        Some(pid) => apply_live(globals, pid, key, path)?,
    }
    Ok(0)
}

/// The PID of a running conductor that reads `path` on reload (from its own answer, not a
/// PID file that may be stale).
fn running_conductor(globals: &Globals, path: &Path) -> Option<u32> {
    let mut client = conductor_client::connect(globals).ok()?;
    let config = client
        .call_value(mozart_ipc::methods::DAEMON_CONFIG, ())
        .ok()?;
    let reads = match config.get("config_file").and_then(Value::as_str) {
        Some(file) => Path::new(file) == path,
        // Started without a file: a reload reads <home>/conductor.yaml.
        None => mozart_conductor::mozart_home()
            .map(|home| home.join("conductor.yaml") == path)
            .unwrap_or(false),
    };
    if !reads {
        return None;
    }
    let status = client
        .call_value(mozart_ipc::methods::DAEMON_STATUS, ())
        .ok()?;
    status
        .get("pid")
        .and_then(Value::as_u64)
        .and_then(|p| u32::try_from(p).ok())
}

/// Reload the running conductor (SIGHUP) and confirm it now runs with the file's value.
fn apply_live(globals: &Globals, pid: u32, key: &str, path: &Path) -> Result<(), CliError> {
    let wanted = DaemonConfig::load(Some(path), None)
        .ok()
        .and_then(|c| serde_json::to_value(&c).ok())
        .and_then(|doc| lookup(&doc, key).cloned());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
        nix::sys::signal::Signal::SIGHUP,
    )
    .map_err(|e| {
        CliError::failed(
            format!(
                "The file is saved, but the conductor (PID {pid}) could not be told to reload: {e}"
            ),
            vec![format!("Reload it by hand: kill -HUP {pid}")],
        )
    })?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        let live = conductor_client::connect(globals)
            .ok()
            .and_then(|mut c| c.call_value(mozart_ipc::methods::DAEMON_CONFIG, ()).ok());
        if live.as_ref().and_then(|doc| lookup(doc, key)) == wanted.as_ref() {
            println!("Applied to the running conductor (PID {pid}).");
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Err(CliError::failed(
        format!(
            "The file is saved, but the running conductor (PID {pid}) did not take the new {key}."
        ),
        vec![
            "Check its log: mozart logs".to_string(),
            "Or restart it: mozart restart".to_string(),
        ],
    ))
}

/// The value at a dotted key of a JSON document.
fn lookup<'a>(doc: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.').try_fold(doc, |node, part| node.get(part))
}

/// Set `parts` (a dotted key) in `node`, turning anything on the way into a mapping.
fn set_dotted(node: &mut serde_yaml::Value, parts: &[&str], value: serde_yaml::Value) {
    if !node.is_mapping() {
        *node = serde_yaml::Value::Mapping(Default::default());
    }
    let serde_yaml::Value::Mapping(map) = node else {
        return;
    };
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    let key = serde_yaml::Value::String(first.to_string());
    if rest.is_empty() {
        map.insert(key, value);
        return;
    }
    let child = map
        .entry(key)
        .or_insert_with(|| serde_yaml::Value::Mapping(Default::default()));
    set_dotted(child, rest, value);
}

fn tempfile_beside(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let _ = std::fs::create_dir_all(dir);
    dir.join(format!(".conductor-check-{}.yaml", std::process::id()))
}

/// The defaults as a YAML document (paths the conductor derives stay unset).
pub fn defaults_yaml() -> String {
    let mut value = serde_json::to_value(DaemonConfig::default()).unwrap_or(Value::Null);
    if let Some(obj) = value.as_object_mut() {
        obj.remove("config_file");
    }
    serde_yaml::to_string(&value).unwrap_or_default()
}

fn init(path: &Path, force: bool) -> Result<i32, CliError> {
    if path.exists() && !force {
        println!("Config file already exists: {}", path.display());
        println!("Use --force to overwrite.");
        return Ok(1);
    }
    let text = format!(
        "# Mozart conductor configuration (every default written out).\n# Change a key with: mozart config set KEY VALUE\n{}",
        defaults_yaml()
    );
    write_atomic(path, &text)?;
    println!("Created default config: {}", path.display());
    Ok(0)
}

fn check(path: &Path) -> Result<i32, CliError> {
    if !path.exists() {
        return Err(CliError::failed(
            format!("Config file not found: {}", path.display()),
            vec!["Run 'mozart config init' to create a default config.".into()],
        ));
    }
    match DaemonConfig::load(Some(path), None) {
        Ok(_) => {
            println!("Valid config: {}", path.display());
            Ok(0)
        }
        Err(err) => Err(CliError::failed(
            format!("Invalid config: {} — {err}", path.display()),
            vec![],
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn values_are_coerced_like_upstream() {
        assert_eq!(py_repr(&coerce("YES")), "true");
        assert_eq!(py_repr(&coerce("none")), "null");
        assert_eq!(py_repr(&coerce("12")), "12");
        assert_eq!(py_repr(&coerce("2.5")), "2.5");
        assert_eq!(py_repr(&coerce("debug")), "debug");
    }

    #[test]
    fn the_written_defaults_load_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conductor.yaml");
        std::fs::write(&path, defaults_yaml()).unwrap();
        let loaded = DaemonConfig::load(Some(&path), None).unwrap();
        assert_eq!(
            loaded.max_concurrent_jobs,
            DaemonConfig::default().max_concurrent_jobs
        );
    }
}
