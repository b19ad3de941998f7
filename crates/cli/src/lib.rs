//! The `mozart` command-line interface: clap definitions and dispatch.
//!
//! Each command lives in `commands/<verb>.rs` with its own `Args` and `run`. Errors are
//! one type, [`CliError`], mapped to the documented exit codes at the edge.

pub mod commands;
pub mod conductor_client;
pub mod error;
mod instrument_lookup;
pub mod logging;
pub mod output;
pub mod render;
pub mod selector;
mod sigpipe;

use clap::{Parser, Subcommand};

pub use error::{CliError, ErrorKind};
pub use output::OutputMode;

/// Version line printed by `mozart --version` (upstream prints `Mozart AI Compose v0.1.0`).
pub const VERSION_LINE: &str = concat!("Mozart AI Compose v", env!("CARGO_PKG_VERSION"));

/// Orchestration system for AI agent workflows.
#[derive(Debug, Parser)]
#[command(name = "mozart", about = "Orchestration system for AI agent workflows")]
#[command(disable_version_flag = true, propagate_version = false)]
pub struct Cli {
    /// Print the version and exit.
    #[arg(short = 'V', long = "version", global = false)]
    pub version: bool,
    /// Verbose output: the extra detail of `validate` (every sheet's preview) and `errors`
    /// (each error's detail panel), as their own -v / -V give.
    #[arg(short, long)]
    pub verbose: bool,
    /// Quiet output.
    #[arg(short, long)]
    pub quiet: bool,
    /// Route all conductor interactions to a clone (`--conductor-clone=` for the default
    /// clone, `--conductor-clone=NAME` for a named one).
    #[arg(long = "conductor-clone", value_name = "NAME", num_args = 0..=1, default_missing_value = "", require_equals = true)]
    pub conductor_clone: Option<String>,
    /// CLI log level on stderr: DEBUG, INFO, WARNING (default) or ERROR. DEBUG shows the
    /// socket reached and every conductor call (start / restart: use their own --log-level).
    #[arg(
        short = 'L',
        long = "log-level",
        env = "MOZART_LOG_LEVEL",
        value_name = "LEVEL",
        value_parser = clap::builder::PossibleValuesParser::new(logging::LEVELS),
        ignore_case = true
    )]
    pub log_level: Option<String>,
    /// Also log to this file (appended).
    #[arg(long = "log-file", env = "MOZART_LOG_FILE", value_name = "PATH")]
    pub log_file: Option<std::path::PathBuf>,
    /// Log format: console (default), json (one JSON object a line), or both (console on
    /// stderr, JSON in --log-file).
    #[arg(
        long = "log-format",
        env = "MOZART_LOG_FORMAT",
        value_name = "FORMAT",
        value_parser = clap::builder::PossibleValuesParser::new(logging::FORMATS),
        ignore_case = true
    )]
    pub log_format: Option<String>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Options every command can see.
#[derive(Debug, Clone, Default)]
pub struct Globals {
    /// `--verbose` was given.
    pub verbose: bool,
    /// `--quiet` was given.
    pub quiet: bool,
    /// `--conductor-clone[=NAME]`: `Some("")` is the default clone.
    pub conductor_clone: Option<String>,
}

/// The subcommands.
///
/// Their arguments are built only for the subcommand being parsed (`defer`): building the
/// whole tree of 40 commands cost every `mozart` call ~0.2 ms of CPU and 30 pages of stack
/// and heap. [`command`] keeps each subcommand's help text its variant's (see
/// [`deferred_args`]).
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Validate a score file without running it.
    Validate(commands::validate::Args),
    /// Submit a score to the conductor (or show its plan with --dry-run).
    ///
    /// Exit 0 once the conductor accepted the job, also when the job has already failed by
    /// the time `run` looked (it then prints the cause: the failed sheet, its error code and
    /// message); `mozart wait JOB` exits with the job's outcome. Exit 1 when nothing was
    /// submitted (the score does not load, no conductor, rejected), 2 for usage errors.
    Run(commands::run::Args),
    /// Show the conductor overview or one job's progress.
    Status(commands::status::Args),
    /// List jobs known to the conductor.
    ///
    /// Newest first, 20 a page: when more match, the last line says how many and how to see
    /// them (--offset, --limit 0).
    List(commands::list::Args),
    /// Pause a running job.
    Pause(commands::pause::Args),
    /// Resume a paused or failed job.
    Resume(commands::resume::Args),
    /// Cancel a job.
    Cancel(commands::cancel::Args),
    /// Apply a new score file to a job.
    Modify(commands::modify::Args),
    /// Remove finished jobs from the registry.
    Clear(commands::clear::Args),
    /// Real-time system monitor for Mozart: the conductor's processes and jobs.
    Top(commands::top::Args),
    /// Show or follow a job's events in the conductor log, and where its sheet logs are.
    ///
    /// With a conductor running, a SCORE_ID it does not know is an error (exit 1), except
    /// with --follow, which waits for the job to be submitted.
    Logs(commands::logs::Args),
    /// List all errors for a score with detailed information.
    Errors(commands::errors::Args),
    /// Generate a comprehensive diagnostic report for a score.
    Diagnose(commands::diagnose::Args),
    /// Show execution history for a score.
    History(commands::history::Args),
    /// Start the conductor daemon.
    ///
    /// Returns once the conductor is ready. With one already running it prints its PID and
    /// socket and exits 0 (so `mozart start && mozart run …` works every time); a foreground
    /// start beside it exits 1.
    Start(commands::start::Args),
    /// Stop the conductor daemon.
    ///
    /// With jobs running it asks first; without a terminal to ask on, pass --yes or it
    /// refuses (exit 1). Nothing is lost: nothing new starts, running sheets get
    /// shutdown_timeout_seconds to finish, and a sheet still running then runs again on the
    /// next start without spending a retry.
    Stop(commands::stop::Args),
    /// Restart the conductor daemon.
    ///
    /// Stops it as `mozart stop` does (with jobs running: asks, or needs --yes without a
    /// terminal), then starts it; the jobs go on from their checkpoints.
    Restart(commands::restart::Args),
    /// Show the conductor's status.
    #[command(name = "conductor-status")]
    ConductorStatus(commands::conductor_status::Args),
    /// Internal: the instrument watchdog the conductor starts (not for direct use).
    #[command(name = "__watchdog", hide = true)]
    Watchdog,
    /// Inspect instruments.
    Instruments(commands::instruments::Group),
    /// Serve the live web dashboard.
    Dashboard(commands::dashboard::Args),
    /// Run a Model Context Protocol server on stdio (for Claude Code and other agents).
    Mcp(commands::mcp::Args),
    /// Create a new Mozart project with a starter score.
    Init(commands::init::Args),
    /// Check the environment: conductor, instruments, safety.
    Doctor(commands::doctor::Args),
    /// Re-validate a job's failed sheets (hidden, as upstream).
    #[command(hide = true)]
    Recover(commands::recover::Args),
    /// Manage the conductor configuration (conductor.yaml).
    Config(commands::config::Group),
    /// Clear the conductor's active rate limits.
    #[command(name = "clear-rate-limits")]
    ClearRateLimits(commands::clear_rate_limits::Args),
    /// Wait until a job ends; the exit code is its outcome.
    Wait(commands::wait::Args),
    /// Print a shell completion script (bash, zsh or fish).
    Completion(commands::completion::Args),
    /// Print the man page (or write every page with --out-dir).
    Man(commands::completion::ManArgs),
    /// Internal: score IDs for shell completion.
    #[command(name = "__complete-jobs", hide = true)]
    CompleteJobs,
    /// List patterns in the global learning store.
    #[command(name = "patterns-list")]
    PatternsList(commands::learning::patterns::ListArgs),
    /// Explain WHY patterns succeed (their captured success factors).
    #[command(name = "patterns-why")]
    PatternsWhy(commands::learning::patterns::WhyArgs),
    /// Measure the diversity (entropy) of pattern usage.
    #[command(name = "patterns-entropy")]
    PatternsEntropy(commands::learning::entropy::EntropyArgs),
    /// Show the exploration budget and its adjustments.
    #[command(name = "patterns-budget")]
    PatternsBudget(commands::learning::entropy::BudgetArgs),
    /// Show global learning statistics.
    #[command(name = "learning-stats")]
    LearningStats(commands::learning::stats::StatsArgs),
    /// Show the patterns learned so far.
    #[command(name = "learning-insights")]
    LearningInsights(commands::learning::stats::InsightsArgs),
    /// Find patterns whose effectiveness is drifting.
    #[command(name = "learning-drift")]
    LearningDrift(commands::learning::drift::DriftArgs),
    /// Find patterns whose grounding confidence is drifting.
    #[command(name = "learning-epistemic-drift")]
    LearningEpistemicDrift(commands::learning::drift::EpistemicArgs),
    /// Show recent learning activity.
    #[command(name = "learning-activity")]
    LearningActivity(commands::learning::stats::ActivityArgs),
    /// Export learning data as Markdown or JSON files.
    #[command(name = "learning-export")]
    LearningExport(commands::learning::export::ExportArgs),
    /// Record one evolution cycle in the trajectory.
    #[command(name = "learning-record-evolution")]
    LearningRecordEvolution(commands::learning::export::RecordEvolutionArgs),
    /// Show the entropy response system's status.
    #[command(name = "entropy-status")]
    EntropyStatus(commands::learning::entropy::StatusArgs),
}

/// Builds a deferred subcommand's arguments, keeping the help text of its `Command` variant.
///
/// With `defer`, the arguments struct's own doc comment ("Arguments of `mozart …`") is
/// applied after the variant's help text instead of before it and would replace it; the
/// variant's text is read before and set again after, as the eager tree had it.
fn args_keeping_about<A: clap::Args>(cmd: clap::Command) -> clap::Command {
    let about = cmd.get_about().cloned();
    let long_about = cmd.get_long_about().cloned();
    let cmd = A::augment_args(cmd);
    let cmd = match about {
        Some(text) => cmd.about(text),
        None => cmd.about(None::<&'static str>),
    };
    match long_about {
        Some(text) => cmd.long_about(text),
        None => cmd.long_about(None::<&'static str>),
    }
}

/// The deferred builder of each subcommand that takes an arguments struct, by name (the
/// commands without arguments and those with their own subcommands need none).
fn deferred_args(name: &str) -> Option<fn(clap::Command) -> clap::Command> {
    use commands::learning::{drift, entropy, export, patterns, stats};
    use commands::*;
    Some(match name {
        "validate" => args_keeping_about::<validate::Args>,
        "run" => args_keeping_about::<run::Args>,
        "status" => args_keeping_about::<status::Args>,
        "list" => args_keeping_about::<list::Args>,
        "pause" => args_keeping_about::<pause::Args>,
        "resume" => args_keeping_about::<resume::Args>,
        "cancel" => args_keeping_about::<cancel::Args>,
        "modify" => args_keeping_about::<modify::Args>,
        "clear" => args_keeping_about::<clear::Args>,
        "top" => args_keeping_about::<top::Args>,
        "logs" => args_keeping_about::<logs::Args>,
        "errors" => args_keeping_about::<errors::Args>,
        "diagnose" => args_keeping_about::<diagnose::Args>,
        "history" => args_keeping_about::<history::Args>,
        "start" => args_keeping_about::<start::Args>,
        "stop" => args_keeping_about::<stop::Args>,
        "restart" => args_keeping_about::<restart::Args>,
        "conductor-status" => args_keeping_about::<conductor_status::Args>,
        "dashboard" => args_keeping_about::<dashboard::Args>,
        "mcp" => args_keeping_about::<mcp::Args>,
        "init" => args_keeping_about::<init::Args>,
        "doctor" => args_keeping_about::<doctor::Args>,
        "recover" => args_keeping_about::<recover::Args>,
        "clear-rate-limits" => args_keeping_about::<clear_rate_limits::Args>,
        "wait" => args_keeping_about::<wait::Args>,
        "completion" => args_keeping_about::<completion::Args>,
        "man" => args_keeping_about::<completion::ManArgs>,
        "patterns-list" => args_keeping_about::<patterns::ListArgs>,
        "patterns-why" => args_keeping_about::<patterns::WhyArgs>,
        "patterns-entropy" => args_keeping_about::<entropy::EntropyArgs>,
        "patterns-budget" => args_keeping_about::<entropy::BudgetArgs>,
        "learning-stats" => args_keeping_about::<stats::StatsArgs>,
        "learning-insights" => args_keeping_about::<stats::InsightsArgs>,
        "learning-drift" => args_keeping_about::<drift::DriftArgs>,
        "learning-epistemic-drift" => args_keeping_about::<drift::EpistemicArgs>,
        "learning-activity" => args_keeping_about::<stats::ActivityArgs>,
        "learning-export" => args_keeping_about::<export::ExportArgs>,
        "learning-record-evolution" => args_keeping_about::<export::RecordEvolutionArgs>,
        "entropy-status" => args_keeping_about::<entropy::StatusArgs>,
        _ => return None,
    })
}

/// Help panels of `mozart --help`, as upstream groups its commands (cli.md §1.3); `wait`,
/// `completion` and `man` are ours. Visible commands in no panel are listed under
/// "Commands".
pub const HELP_PANELS: &[(&str, &[&str])] = &[
    ("Getting Started", &["init"]),
    (
        "Jobs",
        &[
            "run", "resume", "pause", "modify", "cancel", "validate", "wait",
        ],
    ),
    ("Monitoring", &["status", "list", "top", "clear"]),
    (
        "Diagnostics",
        &["logs", "errors", "diagnose", "history", "doctor", "recover"],
    ),
    ("Services", &["dashboard", "mcp"]),
    (
        "Conductor",
        &[
            "start",
            "stop",
            "restart",
            "conductor-status",
            "clear-rate-limits",
        ],
    ),
    (
        "Learning",
        &[
            "patterns-list",
            "patterns-why",
            "patterns-entropy",
            "patterns-budget",
            "learning-stats",
            "learning-insights",
            "learning-drift",
            "learning-epistemic-drift",
            "learning-activity",
            "learning-export",
            "learning-record-evolution",
            "entropy-status",
        ],
    ),
    ("Shell", &["completion", "man"]),
];

/// The `Commands` part of `mozart --help`, panel by panel.
fn command_panels(cmd: &clap::Command) -> String {
    let visible: Vec<&clap::Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    let width = visible
        .iter()
        .map(|s| s.get_name().len())
        .max()
        .unwrap_or(0);
    let about = |s: &clap::Command| s.get_about().map(|a| a.to_string()).unwrap_or_default();
    let mut out = String::new();
    let mut placed: Vec<&str> = Vec::new();
    let mut panel = |title: &str, names: Vec<&clap::Command>| {
        if names.is_empty() {
            return;
        }
        out.push_str(&format!("\n{title}:\n"));
        for s in names {
            out.push_str(&format!("  {:<width$}  {}\n", s.get_name(), about(s)));
        }
    };
    for (title, names) in HELP_PANELS {
        let members: Vec<&clap::Command> = names
            .iter()
            .filter_map(|n| visible.iter().find(|s| s.get_name() == *n).copied())
            .collect();
        placed.extend(names.iter().copied());
        panel(title, members);
    }
    let rest: Vec<&clap::Command> = visible
        .iter()
        .filter(|s| !placed.contains(&s.get_name()))
        .copied()
        .collect();
    panel("Commands", rest);
    out
}

/// The clap command tree, each subcommand's arguments built when it is used (or when
/// `build` is called, as completions and man pages do).
pub fn command_tree() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().mut_subcommands(|sub| match deferred_args(sub.get_name()) {
        Some(build) => sub.defer(build),
        None => sub,
    })
}

/// The clap command with upstream's help panels in its top-level help.
pub fn command() -> clap::Command {
    with_help_panels(command_tree())
}

/// `cmd` with the top-level help laid out in upstream's panels.
fn with_help_panels(cmd: clap::Command) -> clap::Command {
    let panels = command_panels(&cmd);
    cmd.help_template(format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\nOptions:\n{{options}}\n{panels}"
    ))
}

/// Whether these arguments may ask for the top-level help (`--help`, `-h` alone or among
/// short flags, or the `help` command) — the only output that uses the panels, which every
/// other call need not lay out. A superset: a command's own help ignores the panels.
fn may_ask_for_help(args: &[std::ffi::OsString]) -> bool {
    args.iter().skip(1).any(|arg| {
        let arg = arg.as_encoded_bytes();
        arg == b"help"
            || arg.starts_with(b"--help")
            || (arg.starts_with(b"-") && !arg.starts_with(b"--") && arg.contains(&b'h'))
    })
}

/// clap's refusal of `--log-level` when the bad value came from `$MOZART_LOG_LEVEL`: clap
/// names only the option, so the user is told which variable to fix.
fn bad_log_level_env(err: &clap::Error) -> Option<String> {
    if err.kind() != clap::error::ErrorKind::InvalidValue {
        return None;
    }
    let value = std::env::var("MOZART_LOG_LEVEL").ok()?;
    let valid = logging::LEVELS
        .iter()
        .any(|l| l.eq_ignore_ascii_case(value.trim()));
    let text = err.to_string();
    let given_on_line =
        std::env::args().any(|a| a.starts_with("-L") || a.starts_with("--log-level"));
    if valid
        || given_on_line
        || !text.contains("'--log-level")
        || !text.contains(&format!("'{value}'"))
    {
        return None;
    }
    Some(format!(
        "error: MOZART_LOG_LEVEL={value} is not a log level: set it to one of {} (any case), or unset it",
        logging::LEVELS.join(", ")
    ))
}

/// Parse the process arguments, run the command, and return the exit code.
pub fn main() -> i32 {
    use clap::FromArgMatches;
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cmd = if may_ask_for_help(&args) {
        with_help_panels(command_tree())
    } else {
        command_tree()
    };
    let parsed = cmd
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { 2 } else { 0 };
            if let Some(message) = bad_log_level_env(&err) {
                eprintln!("{message}");
                return code;
            }
            let _ = err.print();
            return code;
        }
    };
    if cli.version {
        println!("{VERSION_LINE}");
        return 0;
    }
    let globals = Globals {
        verbose: cli.verbose,
        quiet: cli.quiet,
        conductor_clone: cli.conductor_clone.clone(),
    };
    selector::set(globals.conductor_clone.as_deref());
    // Only a process that becomes the conductor keeps ignoring SIGPIPE; a background
    // `start` / `restart` is a short-lived client like the rest (`mozart start | head -1`).
    let becomes_conductor = match &cli.command {
        Some(Command::Start(a)) => a.foreground || a.detached_child,
        Some(Command::Restart(a)) => a.start.foreground || a.start.detached_child,
        _ => false,
    };
    if !becomes_conductor {
        sigpipe::restore_default();
    }
    let Some(command) = cli.command else {
        eprintln!("Usage: mozart [OPTIONS] COMMAND [ARGS]...\nTry 'mozart --help' for help.\n\nError: Missing command.");
        return 2;
    };
    // The conductor (started in this process by start / restart) installs its own log.
    if !matches!(
        command,
        Command::Start(_) | Command::Restart(_) | Command::Watchdog
    ) {
        if let Err(err) = logging::init(
            cli.log_level.as_deref(),
            cli.log_file.as_ref(),
            cli.log_format.as_deref(),
        ) {
            return err.report();
        }
    }
    let result = match command {
        Command::Validate(a) => commands::validate::run(&globals, a),
        Command::Run(a) => commands::run::run(&globals, a),
        Command::Status(a) => commands::status::run(&globals, a),
        Command::List(a) => commands::list::run(&globals, a),
        Command::Pause(a) => commands::pause::run(&globals, a),
        Command::Resume(a) => commands::resume::run(&globals, a),
        Command::Cancel(a) => commands::cancel::run(&globals, a),
        Command::Modify(a) => commands::modify::run(&globals, a),
        Command::Clear(a) => commands::clear::run(&globals, a),
        Command::Top(a) => commands::top::run(&globals, a),
        Command::Logs(a) => commands::logs::run(&globals, a),
        Command::Errors(a) => commands::errors::run(&globals, a),
        Command::Diagnose(a) => commands::diagnose::run(&globals, a),
        Command::History(a) => commands::history::run(&globals, a),
        Command::Start(a) => commands::start::run(&globals, a),
        Command::Stop(a) => commands::stop::run(&globals, a),
        Command::Restart(a) => commands::restart::run(&globals, a),
        Command::ConductorStatus(a) => commands::conductor_status::run(&globals, a),
        Command::Instruments(c) => commands::instruments::run(&globals, c),
        Command::Dashboard(a) => commands::dashboard::run(&globals, a),
        Command::Mcp(a) => commands::mcp::run(&globals, a),
        Command::Watchdog => Ok(mozart_conductor::watchdog::run()),
        Command::Init(a) => commands::init::run(a),
        Command::Doctor(a) => commands::doctor::run(&globals, a),
        Command::Recover(a) => commands::recover::run(&globals, a),
        Command::Config(c) => commands::config::run(&globals, c),
        Command::ClearRateLimits(a) => commands::clear_rate_limits::run(&globals, a),
        Command::Wait(a) => commands::wait::run(&globals, a),
        Command::Completion(a) => commands::completion::run(a),
        Command::Man(a) => commands::completion::man(a),
        Command::CompleteJobs => commands::completion::complete_jobs(&globals),
        Command::PatternsList(a) => commands::learning::patterns::list(a),
        Command::PatternsWhy(a) => commands::learning::patterns::why(a),
        Command::PatternsEntropy(a) => commands::learning::entropy::entropy(a),
        Command::PatternsBudget(a) => commands::learning::entropy::budget(a),
        Command::LearningStats(a) => commands::learning::stats::stats(a),
        Command::LearningInsights(a) => commands::learning::stats::insights(a),
        Command::LearningDrift(a) => commands::learning::drift::drift(a),
        Command::LearningEpistemicDrift(a) => commands::learning::drift::epistemic(a),
        Command::LearningActivity(a) => commands::learning::stats::activity(a),
        Command::LearningExport(a) => commands::learning::export::export(a),
        Command::LearningRecordEvolution(a) => commands::learning::export::record_evolution(a),
        Command::EntropyStatus(a) => commands::learning::entropy::status(a),
    };
    match result {
        Ok(code) => code,
        Err(err) => err.report(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_tree_is_consistent() {
        // clap's own checks (unique short options, …) run only when a command is used.
        super::command().debug_assert();
    }

    #[test]
    fn a_subcommand_arguments_are_built_only_when_it_is_used() {
        // Building all 40 commands' arguments was most of clap's share of every start.
        let cmd = super::command();
        let validate = cmd
            .find_subcommand("validate")
            .expect("validate is a command");
        assert_eq!(validate.get_arguments().count(), 0, "built eagerly");
        let mut built = super::command();
        built.build();
        let validate = built
            .find_subcommand("validate")
            .expect("validate is a command");
        assert!(validate.get_arguments().any(|a| a.get_id() == "json"));
        for (parent, sub) in [("config", "show"), ("instruments", "check")] {
            // The group's subcommands are deferred with it (it runs bare too).
            let group = cmd.find_subcommand(parent).expect("a command group");
            let eager = group
                .find_subcommand(sub)
                .map_or(0, |nested| nested.get_arguments().count());
            assert_eq!(eager, 0, "{parent} {sub} built eagerly");
        }
    }

    #[test]
    fn every_command_keeps_its_help_text_once_built() {
        // The arguments structs' own doc comments must not replace the variants' text.
        let lazy = super::command();
        let mut built = super::command();
        built.build();
        for sub in lazy.get_subcommands() {
            let name = sub.get_name();
            let done = built.find_subcommand(name).expect("same tree");
            let text = |c: &clap::Command| {
                (
                    c.get_about().map(|a| a.to_string()),
                    c.get_long_about().map(|a| a.to_string()),
                )
            };
            assert_eq!(text(sub), text(done), "{name}");
            assert!(
                !done
                    .get_about()
                    .map(|a| a.to_string())
                    .unwrap_or_default()
                    .starts_with("Arguments of"),
                "{name}"
            );
        }
    }

    #[test]
    fn every_way_to_ask_for_the_top_level_help_gets_the_panels() {
        // The panels are laid out only when help may be asked for; clap answering with the
        // top-level help to arguments that skipped them would print the plain layout.
        for argv in [
            &["mozart", "--help"][..],
            &["mozart", "-h"],
            &["mozart", "help"],
            &["mozart", "-qh"],
            &["mozart", "-hv"],
            &["mozart", "-L", "debug", "--help"],
            &["mozart", "--conductor-clone=x", "-h"],
        ] {
            let args: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            let err = super::command_tree()
                .try_get_matches_from(&args)
                .expect_err("help is an early exit");
            assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp, "{argv:?}");
            assert!(super::may_ask_for_help(&args), "{argv:?}");
        }
        for argv in [&["mozart", "--version"][..], &["mozart", "list", "--json"]] {
            let args: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            assert!(!super::may_ask_for_help(&args), "{argv:?}");
        }
    }

    #[test]
    fn every_visible_command_is_in_a_help_panel() {
        let cmd = super::command();
        let placed: Vec<&str> = super::HELP_PANELS
            .iter()
            .flat_map(|(_, names)| names.iter().copied())
            .collect();
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = sub.get_name();
            assert!(
                placed.contains(&name) || ["config", "instruments"].contains(&name),
                "{name} is in no help panel"
            );
        }
    }
}
