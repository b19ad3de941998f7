//! The `mozart` command-line interface: clap definitions and dispatch.
//!
//! Each command lives in `commands/<verb>.rs` with its own `Args` and `run`. Errors are
//! one type, [`CliError`], mapped to the documented exit codes at the edge.

pub mod commands;
pub mod conductor_client;
pub mod error;
pub mod output;
pub mod render;
mod sigpipe;

use clap::{Parser, Subcommand};

pub use error::CliError;

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
    /// Verbose output.
    #[arg(short, long)]
    pub verbose: bool,
    /// Quiet output.
    #[arg(short, long)]
    pub quiet: bool,
    /// Route all conductor interactions to a clone (`--conductor-clone=` for the default
    /// clone, `--conductor-clone=NAME` for a named one).
    #[arg(long = "conductor-clone", value_name = "NAME", num_args = 0..=1, default_missing_value = "", require_equals = true)]
    pub conductor_clone: Option<String>,
    /// CLI log level: DEBUG, INFO, WARNING or ERROR.
    #[arg(
        short = 'L',
        long = "log-level",
        env = "MOZART_LOG_LEVEL",
        value_name = "LEVEL"
    )]
    pub log_level: Option<String>,
    /// Also log to this file.
    #[arg(long = "log-file", env = "MOZART_LOG_FILE", value_name = "PATH")]
    pub log_file: Option<std::path::PathBuf>,
    /// Log format: json, console or both.
    #[arg(long = "log-format", env = "MOZART_LOG_FORMAT", value_name = "FORMAT")]
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
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a score file without running it.
    Validate(commands::validate::Args),
    /// Submit a score to the conductor (or show its plan with --dry-run).
    Run(commands::run::Args),
    /// Show the conductor overview or one job's progress.
    Status(commands::status::Args),
    /// List jobs known to the conductor.
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
    /// Show or tail log files (the conductor log by default).
    Logs(commands::logs::Args),
    /// List all errors for a score with detailed information.
    Errors(commands::errors::Args),
    /// Generate a comprehensive diagnostic report for a score.
    Diagnose(commands::diagnose::Args),
    /// Show execution history for a score.
    History(commands::history::Args),
    /// Start the conductor daemon.
    Start(commands::start::Args),
    /// Stop the conductor daemon.
    Stop(commands::stop::Args),
    /// Restart the conductor daemon.
    Restart(commands::restart::Args),
    /// Show the conductor's status.
    #[command(name = "conductor-status")]
    ConductorStatus(commands::conductor_status::Args),
    /// Internal: the instrument watchdog the conductor starts (not for direct use).
    #[command(name = "__watchdog", hide = true)]
    Watchdog,
    /// Inspect instruments.
    #[command(subcommand)]
    Instruments(commands::instruments::Command),
    /// Serve the live web dashboard.
    Dashboard(commands::dashboard::Args),
    /// Run a Model Context Protocol server on stdio (for Claude Code and other agents).
    Mcp(commands::mcp::Args),
}

/// Parse the process arguments, run the command, and return the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { 2 } else { 0 };
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
    if !matches!(
        cli.command,
        Some(Command::Start(_)) | Some(Command::Restart(_))
    ) {
        sigpipe::restore_default();
    }
    let Some(command) = cli.command else {
        eprintln!("Usage: mozart [OPTIONS] COMMAND [ARGS]...\nTry 'mozart --help' for help.\n\nError: Missing command.");
        return 2;
    };
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
    };
    match result {
        Ok(code) => code,
        Err(err) => err.report(),
    }
}
