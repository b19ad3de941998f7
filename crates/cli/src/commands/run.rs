//! `mozart run` (cli.md §3.1). The `--dry-run` path is complete here; submitting to the
//! conductor lives in [`submit`].

use std::path::PathBuf;

use mozart_client::hints::LoadPurpose;
use mozart_config::plan::total_sheets;
use mozart_config::{ConfigError, Score};

use super::submit::{not_submitted, ESCALATION_UNSUPPORTED};
use crate::output::{boxed, console_width, print_json};
use crate::{CliError, ErrorKind, Globals, OutputMode};

/// Arguments of `mozart run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score file to run.
    #[arg(value_name = "CONFIG_FILE")]
    pub config_file: PathBuf,
    /// More score files, each submitted in turn as if run on its own (one command for many
    /// scores: one process instead of one per score). Not with --workspace or --start-sheet,
    /// which name one score's workspace and sheet.
    #[arg(value_name = "MORE_CONFIG_FILES")]
    pub more: Vec<PathBuf>,
    /// Show the plan without running anything (no conductor needed).
    #[arg(short = 'n', long = "dry-run")]
    pub dry_run: bool,
    /// Start from this sheet (>= 1).
    #[arg(
        short = 's',
        long = "start-sheet",
        value_name = "INT",
        allow_negative_numbers = true
    )]
    pub start_sheet: Option<i64>,
    /// Override the workspace directory.
    #[arg(short = 'w', long, value_name = "PATH")]
    pub workspace: Option<PathBuf>,
    /// JSON output.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
    /// Escalation prompts (not supported in daemon mode; always rejected).
    #[arg(short = 'e', long)]
    pub escalation: bool,
    /// Self-healing: a sheet that used up its retries gets one extra attempt.
    #[arg(short = 'H', long = "self-healing")]
    pub self_healing: bool,
    /// Confirm self-healing fixes without asking (needs --self-healing). This conductor never
    /// asks (the extra attempt is automatic), so it changes nothing here; kept for upstream's
    /// command lines, and passed on to the conductor.
    #[arg(short = 'y', long, requires = "self_healing")]
    pub yes: bool,
    /// Start fresh, discarding previous state.
    #[arg(long)]
    pub fresh: bool,
}

fn load_failure(mode: OutputMode, file: &str, err: ConfigError) -> CliError {
    let advice = mozart_client::hints::load_failure(err, LoadPurpose::Run { file }, mode.is_json());
    not_submitted(advice.message, advice.hints, mode)
}

/// Run `mozart run`: one score, or each of several in turn.
pub fn run(globals: &Globals, mut args: Args) -> Result<i32, CliError> {
    if args.more.is_empty() {
        return run_one(globals, &args);
    }
    if let Some(flag) = [
        (args.workspace.is_some(), "--workspace"),
        (args.start_sheet.is_some(), "--start-sheet"),
    ]
    .iter()
    .find_map(|(set, flag)| set.then_some(*flag))
    {
        eprintln!(
            "Usage: mozart run [OPTIONS] CONFIG_FILE [MORE_CONFIG_FILES]...\nTry 'mozart run --help' for help.\n\nError: Invalid value: {flag} applies to one score; give one CONFIG_FILE with it, or run the scores one at a time"
        );
        return Ok(2);
    }
    let files: Vec<PathBuf> = std::iter::once(args.config_file.clone())
        .chain(std::mem::take(&mut args.more))
        .collect();
    // Each score is handled exactly as `mozart run FILE` handles it (its panel, its
    // submission, its early-failure watch); one that is refused does not stop the others.
    // A conductor that cannot be reached stops the command at the first score.
    // The exit code is the worst of the scores' (0 when every one was taken).
    let (mut refused, mut worst) = (Vec::new(), 0);
    for file in &files {
        args.config_file = file.clone();
        let code = match run_one(globals, &args) {
            Ok(code) => code,
            // No conductor to take it, or one of another user: every other score would get
            // the same answer.
            Err(err)
                if matches!(
                    err.kind(),
                    Some(ErrorKind::NotRunning | ErrorKind::Untrusted)
                ) || err.message() == Some(super::submit::RUN_NOT_RUNNING_JSON) =>
            {
                return Err(err)
            }
            // This score's own failure (it does not load, it was refused): said, and the
            // next score goes on.
            Err(err) => err.report(),
        };
        if code != 0 {
            refused.push(file.display().to_string());
            worst = worst.max(code);
        }
        if !args.output.is_json() && !globals.quiet {
            println!();
        }
    }
    if !args.output.is_json() {
        let done = files.len() - refused.len();
        let verb = if args.dry_run { "checked" } else { "submitted" };
        let of = mozart_config::plural(files.len(), "score", "scores");
        if refused.is_empty() {
            println!("{done} of {of} {verb}.");
        } else {
            println!("{done} of {of} {verb}; not {verb}: {}", refused.join(", "));
        }
    }
    Ok(worst)
}

/// `mozart run` of one score.
fn run_one(globals: &Globals, args: &Args) -> Result<i32, CliError> {
    let path = &args.config_file;
    if !path.exists() {
        return Ok(super::validate::missing_file("run", path));
    }
    if let Some(n) = args.start_sheet.filter(|n| *n < 1) {
        eprintln!(
            "Usage: mozart run [OPTIONS] CONFIG_FILE\nTry 'mozart run --help' for help.\n\nError: Invalid value: --start-sheet must be >= 1, got {n}"
        );
        return Ok(2);
    }
    if !args.dry_run {
        // The job ID is the file's stem: refuse an unsafe one before anything is printed or
        // sent (the conductor refuses it too). A dry run submits nothing, as upstream.
        let id = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(message) = mozart_ipc::job_id::file_refusal(&id) {
            return Err(not_submitted(message, vec![], args.output));
        }
    }
    let mut score = match mozart_config::load_score(path) {
        Ok(score) => score,
        Err(err) => return Err(load_failure(args.output, &path.display().to_string(), err)),
    };
    for warning in &score.warnings {
        eprintln!("{}: warning: {warning}", path.display());
    }
    if let Some(message) = mozart_config::plan::impossible_sheet_count(&score.config.sheet) {
        return Err(not_submitted(
            format!("[V010] {message}"),
            vec!["Make sheet.start_item at most sheet.total_items.".to_string()],
            args.output,
        ));
    }
    let last_sheet = total_sheets(&score.config.sheet);
    if let Some(n) = args.start_sheet.filter(|n| *n > last_sheet) {
        eprintln!(
            "Usage: mozart run [OPTIONS] CONFIG_FILE\nTry 'mozart run --help' for help.\n\nError: Invalid value: --start-sheet must be at most {last_sheet} (the score has {last_sheet} sheet{}), got {n}",
            if last_sheet == 1 { "" } else { "s" }
        );
        return Ok(2);
    }
    if let Some(ws) = &args.workspace {
        score.config.workspace = match mozart_config::resolve_own_path(ws) {
            Ok(resolved) => resolved,
            Err(link) => {
                return Err(not_submitted(
                    link.refusal("--workspace", ws),
                    vec![],
                    args.output,
                ))
            }
        };
    }
    if !globals.quiet && !args.output.is_json() {
        print_config_panel(&score);
    }
    if args.escalation {
        return Err(not_submitted(ESCALATION_UNSUPPORTED, vec![], args.output));
    }
    if args.dry_run {
        return dry_run(score, args);
    }
    submit(globals, args, &score)
}

fn print_config_panel(score: &Score) {
    let c = &score.config;
    let width = console_width();
    let lines = vec![
        c.name.clone(),
        c.description
            .clone()
            .unwrap_or_else(|| "No description".into())
            .trim_end()
            .to_string(),
        String::new(),
        format!(
            "Instrument: {}",
            c.instrument.as_deref().unwrap_or(c.backend.kind.as_str())
        ),
        // Upstream's words even for one ("1 items each"): the corpus compares this panel.
        format!(
            "Sheets: {} ({} items each)",
            total_sheets(&c.sheet),
            c.sheet.size
        ),
        format!("Workspace: {}", c.workspace.display()),
    ];
    let mut panel = boxed(&lines, width, true);
    let title = " Score Configuration ";
    if let Some(first) = panel.lines().next() {
        let total = first.chars().count();
        let dashes = total.saturating_sub(2 + title.chars().count());
        let left = dashes / 2;
        let top = format!("╭{}{title}{}╮", "─".repeat(left), "─".repeat(dashes - left));
        panel = format!("{top}\n{}", panel.split_once('\n').map_or("", |(_, r)| r));
    }
    print!("{panel}");
    // No money to guard on a score that only runs the free `shell` instrument (issue 23).
    if !c.cost_limits.enabled && !super::submit::only_free_instruments(c) {
        println!("\n{}", super::submit::NO_COST_LIMIT_NOTE);
        println!("  To enable, add to your score: cost_limits: {{enabled: true, max_cost_per_job: 10.00}}");
    }
}

fn dry_run(mut score: Score, args: &Args) -> Result<i32, CliError> {
    // The job ID a run of this file gets: it names the worktrees and their manifest.
    let job_id = args
        .config_file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let plan = crate::render::tasks::plan_branches(&mut score.config, &job_id);
    let score = &score;
    let c = &score.config;
    let total = total_sheets(&c.sheet);
    if args.output.is_json() {
        let mut doc = serde_json::json!({
            "dry_run": true,
            "job_name": c.name,
            "total_sheets": total,
            "workspace": c.workspace.display().to_string(),
        });
        if c.tasks.is_some() {
            doc["tasks"] = crate::render::tasks::tasks_json(c, &plan);
        }
        let worktrees = crate::render::tasks::worktrees_json(&plan);
        if !worktrees.is_null() {
            doc["worktrees"] = worktrees;
        }
        print_json(&doc);
        return Ok(0);
    }
    println!("\nDry run - not executing");
    let rows: Vec<[String; 3]> = (1..=total)
        .map(|n| {
            let (s, e) = mozart_config::plan::item_range(&c.sheet, n);
            [
                n.to_string(),
                format!("{s}-{e}"),
                c.validations.len().to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        table("Sheet Plan", ["Sheet", "Items", "Validations"], &rows)
    );
    crate::render::tasks::print_tasks(c, &plan);
    let preview = mozart_config::validate::preview(score, &args.config_file, Some(1));
    super::validate::print_preview(&preview, false, console_width());
    if !c.sheet.dependencies.is_empty() {
        println!("\nSheet Dependencies:");
        let mut keys: Vec<&i64> = c.sheet.dependencies.keys().collect();
        keys.sort();
        for k in keys {
            let deps: Vec<String> = c.sheet.dependencies[k].iter().map(i64::to_string).collect();
            println!("  Sheet {k} depends on: {}", deps.join(", "));
        }
    }
    Ok(0)
}

/// A Rich-style heavy-header table.
fn table(title: &str, headers: [&str; 3], rows: &[[String; 3]]) -> String {
    let mut widths = headers.map(|h| h.chars().count());
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let total: usize = widths.iter().map(|w| w + 3).sum::<usize>() + 1;
    let pad = total.saturating_sub(title.len());
    let mut out = format!(
        "{}{title}{}\n",
        " ".repeat(pad / 2),
        " ".repeat(pad - pad / 2)
    );
    let line = |l: &str, m: &str, r: &str, fill: &str| {
        let parts: Vec<String> = widths.iter().map(|w| fill.repeat(w + 2)).collect();
        format!("{l}{}{r}\n", parts.join(m))
    };
    let cells = |sep: &str, vals: &[String]| {
        let parts: Vec<String> = vals
            .iter()
            .zip(widths.iter())
            .map(|(v, w)| format!(" {v}{} ", " ".repeat(w - v.chars().count())))
            .collect();
        format!("{sep}{}{sep}\n", parts.join(sep))
    };
    out.push_str(&line("┏", "┳", "┓", "━"));
    out.push_str(&cells("┃", &headers.map(str::to_string)));
    out.push_str(&line("┡", "╇", "┩", "━"));
    for row in rows {
        out.push_str(&cells("│", row));
    }
    out.push_str(&line("└", "┴", "┘", "─"));
    out
}

/// Submit the score to the conductor (cli.md §3.1 steps 5–9).
/// Hand the score to the conductor (cli.md §3.1 steps 5–9). The panel was printed above, so
/// the submit path runs quiet.
fn submit(globals: &Globals, args: &Args, score: &Score) -> Result<i32, CliError> {
    let submit_args = super::submit::SubmitArgs {
        config_file: args.config_file.clone(),
        workspace: args.workspace.clone(),
        fresh: args.fresh,
        start_sheet: args.start_sheet.and_then(|n| u32::try_from(n).ok()),
        output: args.output,
        self_healing: args.self_healing,
        yes: args.yes,
        escalation: false,
        quiet: true,
    };
    super::submit::submit(globals, &submit_args, score)
}
