//! `mozart config show|set|path|init|check` (cli.md §6.2), on the one file the conductor
//! really loads: `<MOZART_HOME>/conductor.yaml` (upstream edits `~/.mozart/daemon.yaml`,
//! which its conductor never reads — docs/differences.md).

use std::path::{Path, PathBuf};

use mozart_client::conductor_config::{self, ConfigFileError};
use mozart_conductor::config::{applies, Applies};
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

// `mozart config [SUBCOMMAND]`: without one it prints the group's help, exit 0 (cli.md
// §6.2). (No doc comment: the group's help keeps the command's own about.)
#[derive(Debug, clap::Args)]
#[command(about = "Manage the conductor configuration (conductor.yaml)", long_about = None)]
#[allow(missing_docs)]
pub struct Group {
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands of `mozart config`.
///
/// Their arguments are built only for the one being parsed (every `mozart` call builds
/// this enum's commands; see `mozart_cli::Command`).
#[derive(Debug, clap::Subcommand)]
#[command(defer = true)]
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
pub fn run(globals: &Globals, group: Group) -> Result<i32, CliError> {
    let Some(command) = group.command else {
        // Exactly what `mozart config --help` prints.
        if let Err(help) =
            crate::command_tree().try_get_matches_from(["mozart", "config", "--help"])
        {
            let _ = help.print();
        }
        return Ok(0);
    };
    match command {
        Command::Show {
            config,
            all,
            section,
            output,
        } => {
            let named = config.is_some();
            show(globals, file(config)?, named, all, section, output)
        }
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

/// What `config show` shows: the settings, where they come from, and (with a conductor
/// running) the file's own values.
struct Shown {
    /// The settings as a JSON document (live, or loaded from the file).
    doc: Value,
    /// `[live] from running conductor`, the file, or `(defaults)`.
    label: String,
    /// Without a conductor: the file's own values, to tell `file` from `default`.
    from_file: Option<Value>,
    /// With a conductor: the file as it would load now, to list what is not in effect yet.
    file_doc: Option<Value>,
    /// With a conductor: why the file on disk does not load (the conductor keeps what it
    /// has; its next reload or restart would fail).
    file_error: Option<String>,
    /// The file compared with the live settings: the one the running conductor reads on a
    /// reload (`mozart start -c FILE`), unless `config show -c` named one.
    path: PathBuf,
    /// With a conductor: the file changed after it started, so its `dashboard.*` (read at
    /// start only) may not be what the conductor serves.
    dashboard_changed: bool,
}

/// The live settings when a conductor answers, else the file's.
fn gather(
    globals: &Globals,
    path: &Path,
    named: bool,
    mode: OutputMode,
) -> Result<Shown, CliError> {
    // Live first: what the running conductor uses is what matters.
    let mut client = conductor_client::connect_in(globals, mode).ok();
    let live = client
        .as_mut()
        .and_then(|c| c.call_value(mozart_ipc::methods::DAEMON_CONFIG, ()).ok());
    if let Some(doc) = live {
        // Compared with the file the conductor itself reads (`start -c FILE`), unless the
        // user named one.
        let conductor_file = doc
            .get("config_file")
            .and_then(Value::as_str)
            .map(PathBuf::from);
        let path: &Path = match (&conductor_file, named) {
            (Some(file), false) => file,
            _ => path,
        };
        let uptime = client
            .as_mut()
            .and_then(|c| c.call_value(mozart_ipc::methods::DAEMON_STATUS, ()).ok())
            .and_then(|s| s.get("uptime_seconds")?.as_f64());
        let dashboard_changed = match (uptime, std::fs::metadata(path).and_then(|m| m.modified())) {
            (Some(up), Ok(modified)) => modified
                .elapsed()
                // (The uptime is rounded: a file written just before the start is older.)
                .map_or(true, |age| age.as_secs_f64() + 1.0 < up),
            _ => false,
        };
        // The file too: a value changed since it last read the file is not in effect yet,
        // and the user must be told.
        let (file_doc, file_error, dashboard) = match DaemonConfig::load(Some(path), None) {
            Ok(c) => (
                serde_json::to_value(&c).ok(),
                None,
                conductor_config::dashboard_document(&c),
            ),
            Err(err) => (
                None,
                Some(err.to_string()),
                conductor_config::dashboard_document(&DaemonConfig::default()),
            ),
        };
        // `daemon.config` leaves `dashboard:` out (its token stays in the conductor); it is
        // read at start only, so the file's section is what a (re)start serves.
        let mut doc = doc;
        if let Some(obj) = doc.as_object_mut() {
            obj.insert("dashboard".into(), dashboard);
        }
        return Ok(Shown {
            doc,
            label: "[live] from running conductor".to_string(),
            from_file: None,
            file_doc,
            file_error,
            path: path.to_path_buf(),
            dashboard_changed,
        });
    }
    let config = DaemonConfig::load(Some(path), None).map_err(|err| CliError::Failed {
        kind: crate::ErrorKind::Command,
        message: format!("Error loading config: {err}"),
        hints: vec![format!("Check {} syntax.", path.display())],
        mode,
    })?;
    let exists = path.exists();
    let raw = exists
        .then(|| conductor_config::file_values(path))
        .flatten();
    Ok(Shown {
        doc: conductor_config::document(&config),
        label: if exists {
            path.display().to_string()
        } else {
            "(defaults)".to_string()
        },
        from_file: Some(raw.unwrap_or(Value::Null)),
        file_doc: None,
        file_error: None,
        path: path.to_path_buf(),
        dashboard_changed: false,
    })
}

/// `live`, `file` or `default`: where a key's value comes from.
fn source_of(from_file: Option<&Value>, key: &str) -> &'static str {
    let Some(raw) = from_file else {
        // `daemon.config` does not report `dashboard:`: the values shown are the file's.
        if key.starts_with("dashboard.") {
            return "file";
        }
        return "live";
    };
    match key.split('.').try_fold(raw, |node, part| node.get(part)) {
        Some(_) => "file",
        None => "default",
    }
}

/// Keys shown whose file value differs from the running one: (key, file value).
fn pending_values(
    rows: &[(String, Value)],
    shown_keys: &[&String],
    file_doc: Option<&Value>,
) -> Vec<(String, Value)> {
    let Some(file_doc) = file_doc else {
        return Vec::new();
    };
    let mut file_rows = Vec::new();
    flatten("", file_doc, &mut file_rows);
    // A restart uses `$MOZART_SOCKET` over `socket.path`; an unset path is the one the
    // conductor resolved (and reports): neither would change on a restart.
    let env_socket = std::env::var_os(mozart_ipc::paths::SOCKET_ENV).is_some_and(|v| !v.is_empty());
    let resolved = ["socket.path", "pid_file", "state_db_path"];
    file_rows
        .into_iter()
        .filter(|(key, value)| {
            let unchanged_by_restart = (resolved.contains(&key.as_str()) && value.is_null())
                || (env_socket && key == "socket.path");
            // `dashboard.*` shown are the file's own (listed apart when it changed).
            !unchanged_by_restart && !key.starts_with("dashboard.")
        })
        .filter(|(key, value)| {
            rows.iter().any(|(k, v)| k == key && v != value) && shown_keys.contains(&key)
        })
        .collect()
}

fn show(
    globals: &Globals,
    path: PathBuf,
    named: bool,
    all: bool,
    section: Option<String>,
    mode: OutputMode,
) -> Result<i32, CliError> {
    let shown_doc = gather(globals, &path, named, mode)?;
    let path = shown_doc.path.clone();
    let mut rows = Vec::new();
    flatten("", &shown_doc.doc, &mut rows);
    rows.retain(|(k, _)| k != "config_file");
    let filtered: Vec<&(String, Value)> = rows
        .iter()
        .filter(|(k, _)| match &section {
            Some(s) => k == s || k.starts_with(&format!("{s}.")),
            None => all || ESSENTIALS.contains(&k.as_str()),
        })
        .collect();
    if let (Some(name), true) = (&section, filtered.is_empty()) {
        // A misspelt section is not an empty one.
        let mut sections: Vec<&str> = rows
            .iter()
            .filter_map(|(k, _)| k.split_once('.').map(|(s, _)| s))
            .collect();
        sections.dedup();
        return Err(CliError::Failed {
            kind: crate::ErrorKind::Command,
            message: format!("No section or key '{name}' in the conductor configuration."),
            hints: vec![
                format!("Sections: {}", sections.join(", ")),
                "Every key: mozart config show --all".to_string(),
            ],
            mode,
        });
    }
    let keys: Vec<&String> = filtered.iter().map(|(k, _)| k).collect();
    let pending = pending_values(&rows, &keys, shown_doc.file_doc.as_ref());
    let source = |key: &str| source_of(shown_doc.from_file.as_ref(), key);
    // An invalid file is exit 1 also while a conductor runs: it keeps the settings shown,
    // but its next reload or restart would fail on the file.
    let exit = i32::from(shown_doc.file_error.is_some());
    // The loader's error names the file, the line and the fix.
    let invalid = shown_doc.file_error.as_deref();
    let dashboard_note =
        shown_doc.dashboard_changed && keys.iter().any(|k| k.starts_with("dashboard."));
    if mode.is_json() {
        print_json(
            &shown_doc.label,
            &filtered,
            &pending,
            source,
            invalid,
            dashboard_note,
        );
        return Ok(exit);
    }
    print_table(&shown_doc.label, &filtered, source);
    if !pending.is_empty() {
        println!(
            "\n{} has values the running conductor does not use yet:",
            path.display()
        );
        for (key, value) in &pending {
            let when = match applies(key) {
                Applies::Reload => {
                    "on reload: kill -HUP <conductor pid>, or set it with mozart config set"
                }
                Applies::Restart => "on mozart restart",
                Applies::Unused(_) => "never (not used)",
            };
            println!("  {key} = {} — {when}", shown(value));
        }
    }
    if dashboard_note {
        println!(
            "\nThe dashboard.* values shown are {}'s, which changed after the conductor started: it serves what the file said then, until 'mozart restart'.",
            path.display()
        );
    }
    println!(
        "\nTakes effect: reload = on SIGHUP or 'mozart config set' while the conductor runs; restart = on 'mozart restart'."
    );
    if section.is_none() && !all {
        println!("Showing essential settings. Use --all to see every key, --section NAME for one section.");
    }
    if let Some(invalid) = invalid {
        println!(
            "\nError: {invalid}\nThe running conductor keeps the settings shown above; its next reload or restart would fail on this file."
        );
    }
    Ok(exit)
}

/// `config show --json`: the source and one item per setting.
fn print_json(
    label: &str,
    filtered: &[&(String, Value)],
    pending: &[(String, Value)],
    source: impl Fn(&str) -> &'static str,
    file_error: Option<&str>,
    dashboard_changed: bool,
) {
    let items: Vec<Value> = filtered
        .iter()
        .map(|(k, v)| {
            let a = applies(k);
            let mut item = serde_json::json!({"key": k, "value": v, "source": source(k),
                "takes_effect": a.label()});
            if let Applies::Unused(why) = a {
                item["note"] = serde_json::json!(why);
            }
            if let Some((_, file_value)) = pending.iter().find(|(pk, _)| pk == k) {
                item["file_value"] = file_value.clone();
            }
            if dashboard_changed && k.starts_with("dashboard.") {
                item["note"] = serde_json::json!(
                    "the file changed after the conductor started; it serves what the file said then, until mozart restart"
                );
            }
            item
        })
        .collect();
    let mut doc = serde_json::json!({"source": label, "settings": items});
    if let Some(err) = file_error {
        doc["file_error"] = serde_json::json!(err);
    }
    crate::output::print_json(&doc);
}

/// `config show`: the heading and the Key / Value / Source / Takes effect table.
fn print_table(label: &str, filtered: &[&(String, Value)], source: impl Fn(&str) -> &'static str) {
    println!("Daemon configuration — {label}");
    let table_rows: Vec<Vec<String>> = filtered
        .iter()
        .map(|(k, v)| {
            let effect = match applies(k) {
                Applies::Unused(why) => format!("not used: {why}"),
                a => a.label().to_string(),
            };
            vec![k.clone(), shown(v), source(k).to_string(), effect]
        })
        .collect();
    print!(
        "{}",
        super::learning::table("", &["Key", "Value", "Source", "Takes effect"], &table_rows)
    );
}

/// A `conductor.yaml` editing failure as the CLI reports it.
fn file_error(err: ConfigFileError) -> CliError {
    let hints = err.hints();
    CliError::failed(err.to_string(), hints)
}

fn set(globals: &Globals, path: &Path, key: &str, raw: &str) -> Result<i32, CliError> {
    let value = conductor_config::set_key(path, key, raw).map_err(file_error)?;
    // A secret (dashboard.token) is not printed back: terminals and CI logs keep what is shown.
    let text = if conductor_config::is_secret_key(key) {
        "(hidden)".to_string()
    } else {
        conductor_config::value_text(&value)
    };
    println!("Set {key} = {text} in {}", path.display());
    let applies = applies(key);
    if let Applies::Unused(why) = applies {
        println!("Note: this conductor does not use {key} ({why}).");
        return Ok(0);
    }
    match running_conductor(globals, path) {
        None => match other_file_in_use(globals, path) {
            Some(file) => println!(
                "The running conductor reads {}, not this file: it does not use this value (a start without -c does).",
                file.display()
            ),
            None => println!("Takes effect when the conductor starts."),
        },
        Some(_) if applies == Applies::Restart => {
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

/// The file a running conductor reads, when it is not `path` (`mozart start -c FILE`).
fn other_file_in_use(globals: &Globals, path: &Path) -> Option<PathBuf> {
    let mut client = conductor_client::connect(globals).ok()?;
    let config = client
        .call_value(mozart_ipc::methods::DAEMON_CONFIG, ())
        .ok()?;
    let file = PathBuf::from(config.get("config_file")?.as_str()?);
    (file != path).then_some(file)
}

/// Reload the running conductor (SIGHUP) and confirm it now runs with the file's value.
fn apply_live(globals: &Globals, pid: u32, key: &str, path: &Path) -> Result<(), CliError> {
    let wanted = DaemonConfig::load(Some(path), None)
        .ok()
        .and_then(|c| serde_json::to_value(&c).ok())
        .and_then(|doc| lookup(&doc, key).cloned());
    let live_config = || {
        conductor_client::connect(globals)
            .ok()
            .and_then(|mut c| c.call_value(mozart_ipc::methods::DAEMON_CONFIG, ()).ok())
    };
    let before = live_config();
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
        let live = live_config();
        if live.as_ref().and_then(|doc| lookup(doc, key)) == wanted.as_ref() {
            println!("Applied to the running conductor (PID {pid}).");
            say_also_changed(before.as_ref(), live.as_ref(), key, path);
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

/// A reload reads the whole file (as upstream's SIGHUP, spec conductor.md §5.3): values the
/// conductor was started with besides the file (`mozart start -p PROFILE`, `-l LEVEL`, or a
/// file edited by hand since) are replaced too, and the user is told which.
fn say_also_changed(before: Option<&Value>, after: Option<&Value>, key: &str, path: &Path) {
    let (Some(before), Some(after)) = (before, after) else {
        return;
    };
    let (mut old_rows, mut new_rows) = (Vec::new(), Vec::new());
    flatten("", before, &mut old_rows);
    flatten("", after, &mut new_rows);
    let changed: Vec<String> = new_rows
        .iter()
        .filter(|(k, _)| k != key && k != "config_file")
        .filter_map(|(k, new)| {
            let (_, old) = old_rows.iter().find(|(ok, _)| ok == k)?;
            (old != new).then(|| format!("  {k}: {} → {}", shown(old), shown(new)))
        })
        .collect();
    if changed.is_empty() {
        return;
    }
    println!(
        "The reload also took {}'s values over what the conductor had (from 'mozart start -p/-l' or an earlier edit):",
        path.display()
    );
    for line in changed {
        println!("{line}");
    }
}

/// The value at a dotted key of a JSON document.
fn lookup<'a>(doc: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.').try_fold(doc, |node, part| node.get(part))
}

fn init(path: &Path, force: bool) -> Result<i32, CliError> {
    if path.exists() && !force {
        println!("Config file already exists: {}", path.display());
        println!("Use --force to overwrite.");
        return Ok(1);
    }
    conductor_config::write_atomic(path, &conductor_config::init_text()).map_err(file_error)?;
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
    // What `mozart start` would refuse about the file's paths is refused here too.
    let loaded = DaemonConfig::load_noting(Some(path), None)
        .and_then(|(config, warnings)| config.check_paths(path, true).map(|()| warnings));
    match loaded {
        Ok(warnings) => {
            for warning in warnings {
                eprintln!("{}: warning: {warning}", path.display());
            }
            println!("Valid config: {}", path.display());
            Ok(0)
        }
        Err(err) => Err(CliError::failed(
            // The loader's error names the file (and the line) already.
            format!("Invalid config: {err}"),
            vec![],
        )),
    }
}
