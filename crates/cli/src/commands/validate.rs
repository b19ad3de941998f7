//! `mozart validate` (cli.md §3.6, score.md §6).

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use mozart_client::hints::LoadPurpose;
use mozart_config::validate::{self as checks, CheckEnv, Issue, Severity};
use mozart_config::{ConfigError, Score};

use crate::instrument_lookup::Lookup;
use crate::output::{boxed, console_width, write_py_json, PyJsonNode};
use crate::{CliError, Globals, OutputMode};

/// Arguments of `mozart validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Score file to validate.
    #[arg(value_name = "CONFIG_FILE")]
    pub config_file: PathBuf,
    /// Print the result as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
    /// Preview every sheet, not just the first.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// A score that cannot be checked: `Error:` + hints, or the JSON error object; exit 2.
fn fail(mode: OutputMode, message: String, hints: Vec<String>) -> CliError {
    let mut obj = serde_json::Map::new();
    obj.insert("success".into(), false.into());
    obj.insert("message".into(), message.clone().into());
    if !hints.is_empty() {
        obj.insert("hints".into(), hints.clone().into());
    }
    CliError::Detailed(Box::new(crate::error::Detailed {
        code: None,
        message,
        hints,
        after: Vec::new(),
        document: serde_json::Value::Object(obj),
        mode,
        exit: 2,
    }))
}

/// Print a click-style usage error for a missing CONFIG_FILE and return exit code 2.
pub fn missing_file(command: &str, path: &Path) -> i32 {
    eprintln!(
        "Usage: mozart {command} [OPTIONS] CONFIG_FILE\nTry 'mozart {command} --help' for help.\n\nError: Invalid value for 'config_file': path '{}' does not exist.",
        path.display()
    );
    2
}

/// Instrument profile directories V210/V211 consult (score.md §6.4), plus the instruments
/// this build embeds.
pub fn check_env() -> CheckEnv {
    let mut env = profile_dir_env();
    add_builtin_instruments(&mut env);
    env
}

/// [`check_env`] for one score: the embedded profiles are only loaded (which compiles every
/// profile's error patterns, about a third of `validate`'s time on the corpus score) when
/// the score names an instrument nothing else knows, since only then can V210/V211 fire.
fn check_env_for(score: &Score) -> CheckEnv {
    let mut env = profile_dir_env();
    if !env.knows_all(&score.config) {
        add_builtin_instruments(&mut env);
    }
    env
}

fn profile_dir_env() -> CheckEnv {
    let dirs = mozart_ipc::paths::instrument_profile_dirs();
    let mut env = CheckEnv::with_profile_dirs(&dirs);
    // A profile file that names an instrument but would not load (a typo'd field, a bad
    // pattern): the conductor does not have that instrument, so V210 says why. Loaded as
    // the conductor loads it; a name another file of the dirs loads is not broken.
    let mut loaded = std::collections::BTreeSet::new();
    for dir in &dirs {
        // Another user's profiles are not loaded: said by the registry's warning.
        if mozart_config::profile_trust::untrusted_profile_dir(dir).is_some() {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for path in entries.flatten().map(|e| e.path()) {
            if !matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            ) {
                continue;
            }
            let Ok(text) = mozart_config::profile_trust::read_profile_file(&path) else {
                continue;
            };
            let origin = path.display().to_string();
            match mozart_backends::InstrumentProfile::from_yaml(&text, &origin) {
                Ok(profile) => {
                    loaded.insert(profile.name);
                }
                Err(err) => {
                    let name = mozart_config::yaml::parse(&text)
                        .ok()
                        .flatten()
                        .and_then(|node| node.get("name")?.as_str().map(str::to_string));
                    let Some(name) = name else {
                        continue;
                    };
                    // A built-in of that name stays: the conductor plays it (it skips a
                    // profile that does not load, and never reads ./.mozart/instruments/).
                    let builtin = mozart_backends::InstrumentRegistry::builtin()
                        .is_ok_and(|b| b.get(&name).is_some());
                    if builtin {
                        let home = dirs.first().filter(|h| *h != dir);
                        let fix = match home {
                            Some(home) => format!(
                                "The conductor does not read ./.mozart/instruments/; to play your own '{name}', correct the profile, move it to {}/ and run 'mozart restart'",
                                home.display()
                            ),
                            None => format!(
                                "To play your own '{name}', correct the profile and run 'mozart restart'; until then the conductor plays the built-in"
                            ),
                        };
                        // The fault only: its usual "what to do" (restart) is the fix's.
                        let err = err.to_string();
                        let fault = err.split(". Correct the profile").next().unwrap_or(&err);
                        env.shadowing_profiles
                            .insert(name, (fault.to_string(), fix));
                    } else {
                        env.broken_profiles.insert(name, err.to_string());
                    }
                }
            }
        }
    }
    env.broken_profiles.retain(|name, _| !loaded.contains(name));
    env.shadowing_profiles
        .retain(|name, _| !loaded.contains(name));
    env
}

fn add_builtin_instruments(env: &mut CheckEnv) {
    // The instruments this build embeds (e.g. our `shell`), from the one place that defines
    // them, so V210 never warns about an instrument the conductor can play.
    if let Ok(builtin) = mozart_backends::InstrumentRegistry::builtin() {
        env.known_instruments.extend(builtin.names());
    }
}

/// One instrument a score plays, as the conductor looks it up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Played<'a> {
    /// The profile the conductor plays.
    profile: &'a str,
    /// The name the score writes: the profile's, or an `instruments:` alias of it.
    named: &'a str,
}

impl Played<'_> {
    /// The instrument as a message names it: the profile, and the alias the score wrote.
    fn label(&self) -> String {
        if self.named == self.profile {
            format!("'{}'", self.profile)
        } else {
            format!("'{}' (through alias '{}')", self.profile, self.named)
        }
    }
}

/// Every instrument the score plays, once per profile: score-level, movements, per-sheet
/// choices and the reviewer, through an `instruments:` alias as each sheet's instrument is
/// chosen (score.md §3.5 step 5, one level); then every fallback as written, since the
/// conductor looks fallbacks up by profile name without following aliases (execution.md §2).
fn played(c: &mozart_config::JobConfig) -> Vec<Played<'_>> {
    let top = c.instrument.as_deref().unwrap_or(c.backend.kind.as_str());
    let chosen = std::iter::once(top)
        .chain(c.movements.values().filter_map(|m| m.instrument.as_deref()))
        .chain(c.sheet.per_sheet_instruments.values().map(String::as_str))
        .chain(c.sheet.instrument_map.keys().map(String::as_str))
        .chain(c.review.as_ref().and_then(|r| r.instrument.as_deref()))
        .map(|named| Played {
            profile: c
                .instruments
                .get(named)
                .map_or(named, |def| def.profile.as_str()),
            named,
        });
    let fallbacks = c
        .instrument_fallbacks
        .iter()
        .chain(
            c.movements
                .values()
                .flat_map(|m| m.instrument_fallbacks.iter()),
        )
        .chain(c.sheet.per_sheet_fallbacks.values().flatten())
        .map(|named| Played {
            profile: named,
            named,
        });
    let mut played: Vec<Played<'_>> = chosen.chain(fallbacks).collect();
    // The profile's own name first: an alias is named only when nothing else plays it.
    played.sort_by_key(|p| (p.profile, p.named != p.profile, p.named));
    played.dedup_by_key(|p| p.profile);
    played
}

/// V219 (ours): a score whose sheets each get a git worktree (`isolation.scope: sheet`, a
/// task list's default) that `mozart run` would refuse (`Cannot isolate the job's sheets`):
/// its repository directory is not in a git repository, has uncommitted changes or no
/// commit, its `isolation.source_branch` names no commit, or — for `tasks.dispatch: pr` —
/// the remote is missing or `gh` is not on the PATH `lookup` says the conductor runs with.
/// The conductor's own check, so the cause and the fix are worded as its refusal words
/// them. Only this per-sheet isolation of ours: a job-scope one is upstream's, whose
/// validate passes it (and `fallback_on_error` may run such a job without a worktree).
fn worktrees_refused(score: &Score, job_id: &str, lookup: &Lookup) -> Option<Issue> {
    use mozart_jobs::sheet_worktrees::{self as sw, PreflightError};
    let c = &score.config;
    if !sw::per_sheet(c) {
        return None;
    }
    let path = lookup.path();
    let err = sw::preflight_on(c, job_id, path.as_deref()).err()?;
    // The line of the first of these keys the score writes.
    let fields: &[&str] = match &err {
        PreflightError::BadSourceBranch { .. } => &["isolation.source_branch"],
        PreflightError::NoRemote { .. } => &["tasks.remote", "tasks.dispatch"],
        PreflightError::NoGh => &["tasks.dispatch"],
        _ => &["tasks.repository", "isolation"],
    };
    let line = fields
        .iter()
        .find_map(|f| mozart_config::check::key_line(&score.document, f));
    Some(Issue {
        check_id: "V219",
        severity: Severity::Error,
        message: format!(
            "Each sheet gets a git worktree (isolation.scope: sheet), and mozart run would refuse the score: {err}"
        ),
        line,
        column: None,
        context: None,
        suggestion: Some(err.fix()),
        auto_fixable: false,
        metadata: Vec::new(),
    })
}

/// A V213 warning.
fn v213(message: String, suggestion: String) -> Issue {
    Issue {
        check_id: "V213",
        severity: Severity::Warning,
        message,
        line: None,
        column: None,
        context: None,
        suggestion: Some(suggestion),
        auto_fixable: false,
        metadata: Vec::new(),
    }
}

/// V213 for an instrument no profile plays: an alias whose `profile` is unknown (V210 takes
/// an alias for known and does not look at its profile, score.md §3.5), or a fallback naming
/// an alias (the conductor does not follow it). Other unknown names are V210's and V211's.
fn unknown(c: &mozart_config::JobConfig, p: &Played<'_>, home: &Path) -> Option<Issue> {
    if p.named != p.profile {
        return Some(v213(
            format!(
                "Instrument alias '{}' plays '{}', which is not a known instrument: each of its sheets would fail with 'unknown instrument'",
                p.named, p.profile
            ),
            format!(
                "Set instruments.{}.profile to an instrument 'mozart instruments list' shows, or add a profile '{}' to {}",
                p.named,
                p.profile,
                home.join("instruments").display()
            ),
        ));
    }
    let def = c.instruments.get(p.named)?;
    Some(v213(
        format!(
            "Fallback instrument '{}' is an instruments: alias, which the conductor does not follow for a fallback: falling back to it would fail with 'unknown instrument'",
            p.named
        ),
        format!(
            "Name the profile itself in the fallback list: '{}'",
            def.profile
        ),
    ))
}

/// V213 (ours): an instrument the score plays cannot run — a command-line program that is
/// not on the PATH it will run with, or an HTTP instrument `mozart doctor` would not mark
/// ready (an API this build cannot call, its key variable unset, its local server down) —
/// or the conductor will not find it at all, so each of its sheets would fail. Programs and
/// keys are looked for where `lookup` says: the running conductor's environment (it runs
/// the instruments with the PATH it was started with), else this shell's. A warning, not an
/// error: the score may be meant for another machine.
fn missing_programs(score: &Score, lookup: &Lookup) -> Vec<Issue> {
    let project = std::env::current_dir().ok();
    let home = mozart_ipc::paths::mozart_home().unwrap_or_else(|_| PathBuf::from(".mozart"));
    let Ok(registry) = mozart_backends::InstrumentRegistry::load(&home, project.as_deref()) else {
        return Vec::new();
    };
    // A broken profile: one line, as `mozart instruments list` says it.
    for warning in registry.warnings() {
        eprintln!("Warning: {}", crate::output::plain(warning));
    }
    // The conductor reads the Mozart home's profiles, not the current directory's.
    let conductors = mozart_backends::InstrumentRegistry::load(&home, None).ok();
    let c = &score.config;
    played(c)
        .iter()
        .filter_map(|p| {
            let Some(profile) = registry.get(p.profile) else {
                return unknown(c, p, &home);
            };
            let name = p.profile;
            let label = p.label();
            if conductors.as_ref().is_some_and(|c| c.get(name).is_none()) {
                let file = match registry.source(name) {
                    Some(mozart_backends::ProfileSource::File(path)) => path.display().to_string(),
                    _ => String::from("./.mozart/instruments/"),
                };
                return Some(v213(
                    format!(
                        "Instrument {label} is defined only in ./.mozart/instruments/ ({file}), which the conductor does not read: each of its sheets would fail with 'unknown instrument'"
                    ),
                    format!(
                        "Move the profile to {}, then run 'mozart restart' so the conductor reads it",
                        home.join("instruments").display()
                    ),
                ));
            }
            let message = if profile.kind == mozart_backends::InstrumentKind::Http {
                let ready = mozart_backends::http_readiness_in(
                    &registry,
                    profile,
                    std::time::Duration::from_millis(300),
                    |var| lookup.is_set(var),
                );
                if ready.is_ready() {
                    return None;
                }
                let mut why = lookup.describe(&ready);
                if matches!(ready, mozart_backends::HttpReadiness::MissingKey(_)) {
                    if let Some(reason) = lookup.why_this_shell() {
                        why.push_str(&format!(" in this shell; {reason}"));
                    }
                }
                format!("Instrument {label} cannot run from here ({why}): each of its sheets would fail")
            } else {
                let program = &profile.cli.as_ref()?.command.executable;
                if lookup.binary(profile).is_some() {
                    return None;
                }
                if let Some(here) = lookup.only_in_this_shell(profile) {
                    return Some(v213(
                        format!(
                            "Instrument {label} runs `{program}`, which is on this shell's PATH ({}) but not on the running conductor's: each of its sheets would fail to start",
                            here.display()
                        ),
                        format!(
                            "Add {} to the conductor's PATH and restart it (for systemd: the unit's Environment=PATH= line, see docs/conductor.md); 'mozart instruments check {name}' shows where it looks",
                            here.parent().map_or_else(String::new, |d| d.display().to_string())
                        ),
                    ));
                }
                let whose = match lookup.why_this_shell() {
                    None => "the running conductor's PATH".to_string(),
                    Some(reason) => format!("this shell's PATH ({reason})"),
                };
                format!("Instrument {label} runs `{program}`, which is not on {whose}: each of its sheets would fail to start")
            };
            Some(v213(
                message,
                format!(
                    "Check with 'mozart instruments check {name}' and fix what it names (the conductor uses the PATH and environment it was started with), or try the score with 'instrument: shell'"
                ),
            ))
        })
        .collect()
}

/// Run `mozart validate`.
pub fn run(globals: &Globals, mut args: Args) -> Result<i32, CliError> {
    // The global -v asks for the same extra detail as the command's own.
    args.verbose |= globals.verbose;
    let path = &args.config_file;
    if !path.exists() {
        return Ok(missing_file("validate", path));
    }
    let mut score = match mozart_config::load_score(path) {
        Ok(score) => score,
        Err(err) => return report_load_error(err, args.output),
    };
    for warning in &score.warnings {
        eprintln!("{}: warning: {warning}", path.display());
    }
    // The branches the tasks will really get (the job ID is the file's stem).
    let job_id = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let json = args.output.is_json();
    let limit = if json || args.verbose { None } else { Some(1) };
    // The instruments' programs are looked up — and, unless planning the branches changes
    // what it shows, the preview made — while the checks render the score's sheets: neither
    // depends on what the checks find.
    let early = !crate::render::tasks::plans_branches(&score.config);
    let (mut issues, (missing, refused, preview)) =
        checks::run_checks_with(&score, path, &check_env_for(&score), || {
            // Where the instruments (and `gh`) will run: the conductor's lock and
            // environment (files), no socket round trip.
            let lookup = Lookup::by_lock(globals);
            (
                missing_programs(&score, &lookup),
                worktrees_refused(&score, &job_id, &lookup),
                early.then(|| checks::preview(&score, path, limit)),
            )
        });
    issues.extend(missing);
    issues.extend(refused);
    let (plan, preview) = match preview {
        Some(preview) => (crate::render::tasks::unplanned(&score.config), preview),
        None => {
            let plan = crate::render::tasks::plan_branches(&mut score.config, &job_id);
            (plan, checks::preview(&score, path, limit))
        }
    };
    let code = report(&score, &issues, args.verbose, args.output, &plan, preview);
    // The process ends right after this command: freeing the parsed document and the model
    // value by value is pure overhead (about a millisecond on the corpus score).
    std::mem::forget(score);
    code
}

/// Print what `validate` found, as text or `--json`; the command's exit code.
fn report(
    score: &Score,
    issues: &[Issue],
    verbose: bool,
    mode: OutputMode,
    plan: &crate::render::tasks::BranchPlan,
    preview: checks::Preview<'_>,
) -> Result<i32, CliError> {
    let has_errors = issues.iter().any(|i| i.severity == Severity::Error);
    if mode.is_json() {
        write_json(score, issues, plan, &preview)
            .map_err(|e| CliError::failed(e.to_string(), vec![]))?;
    } else {
        print_terminal(score, issues, verbose, plan, &preview);
    }
    // Freeing the preview's sheets one by one is overhead too (see above).
    std::mem::forget(preview);
    Ok(i32::from(has_errors))
}

fn report_load_error(err: ConfigError, mode: OutputMode) -> Result<i32, CliError> {
    let advice = mozart_client::hints::load_failure(err, LoadPurpose::Validate, mode.is_json());
    Err(fail(mode, advice.message, advice.hints))
}

fn print_terminal(
    score: &Score,
    issues: &[Issue],
    verbose: bool,
    plan: &crate::render::tasks::BranchPlan,
    preview: &checks::Preview<'_>,
) {
    let c = &score.config;
    let width = console_width();
    println!("\nValidating {}...\n", crate::output::plain(&c.name));
    println!("✓ YAML syntax valid");
    println!("✓ Schema valid\n");
    println!("Running extended validation checks...");
    println!();
    if issues.is_empty() {
        print!(
            "{}",
            boxed(&[format!("✓ Configuration valid: {}", c.name)], width, true)
        );
    } else {
        let sections = [
            (Severity::Error, "ERRORS (must fix before running)", "✗"),
            (Severity::Warning, "WARNINGS (may cause issues)", "!"),
            (Severity::Info, "INFO (consider reviewing)", "i"),
        ];
        for (sev, title, icon) in sections {
            let of: Vec<&Issue> = issues.iter().filter(|i| i.severity == sev).collect();
            if of.is_empty() {
                continue;
            }
            println!("\n{title}:");
            for i in of {
                let loc = i.line.map(|l| format!("Line {l}: ")).unwrap_or_default();
                println!("  {icon} [{}] {loc}{}", i.check_id, i.message);
                if let Some(ctx) = &i.context {
                    let shown = if ctx.chars().count() > 70 {
                        format!("{}...", ctx.chars().take(67).collect::<String>())
                    } else {
                        ctx.clone()
                    };
                    println!("         {shown}");
                }
                if let Some(s) = &i.suggestion {
                    println!("         Suggestion: {s}");
                }
            }
        }
        let count = |s: Severity| issues.iter().filter(|i| i.severity == s).count();
        let mut parts = Vec::new();
        let plural = |n: usize| if n > 1 { "s" } else { "" };
        let (e, w, n) = (
            count(Severity::Error),
            count(Severity::Warning),
            count(Severity::Info),
        );
        if e > 0 {
            parts.push(format!("{e} error{} (must fix)", plural(e)));
        }
        if w > 0 {
            parts.push(format!("{w} warning{} (should fix)", plural(w)));
        }
        if n > 0 {
            parts.push(format!("{n} info note{}", plural(n)));
        }
        println!("\nSummary: {}", parts.join(", "));
        if e > 0 {
            println!("\nValidation: FAILED");
            return;
        }
        println!(
            "\nValidation: PASSED (with {})",
            if w > 0 { "warnings" } else { "notes" }
        );
    }
    println!();
    println!("Configuration summary:");
    println!("  Sheets: {}", mozart_config::plan::total_sheets(&c.sheet));
    // As the score wrote it: shown, not obeyed by the terminal.
    println!(
        "  Instrument: {}",
        crate::output::plain(c.instrument.as_deref().unwrap_or(c.backend.kind.as_str()))
    );
    println!("  Validations: {}", c.validations.len());
    println!("  Notifications: {}", c.notifications.len());
    if !c.sheet.dependencies.is_empty() {
        print_dag(c);
    }
    crate::render::tasks::print_tasks(c, plan);
    print_preview(preview, verbose, width);
    for s in &preview.sheets {
        if let Some(err) = &s.render_error {
            println!("  Sheet {} render error: {err}", s.sheet_num);
        }
    }
}

fn print_dag(c: &mozart_config::JobConfig) {
    println!("\nExecution DAG:");
    let levels = checks::dag_levels(c);
    // One write for all the levels: stdout writes each line on its own, and the corpus
    // score has 187 of them.
    let mut block = String::new();
    for (k, level) in levels.iter().enumerate() {
        let list: Vec<String> = level.iter().map(i64::to_string).collect();
        let parallel = if level.len() > 1 { " (parallel)" } else { "" };
        let _ = writeln!(block, "  Level {k}: {}{parallel}", list.join(", "));
    }
    print!("{block}");
    match levels.iter().map(Vec::len).max() {
        // Upstream's words even for one ("1 sheets"): the corpus compares this output.
        Some(m) => println!("  Max concurrency: {m} sheets"),
        None => println!("\n  Sequential execution (no parallelization)"),
    }
}

/// Print the rendering preview the way `validate` and `run --dry-run` do.
pub fn print_preview(preview: &checks::Preview<'_>, verbose: bool, width: usize) {
    let shown = if verbose {
        &preview.sheets[..]
    } else {
        &preview.sheets[..preview.sheets.len().min(1)]
    };
    for sp in shown {
        let mut header = format!(
            "Rendering Preview (Sheet {} of {})",
            sp.sheet_num, preview.total_sheets
        );
        if verbose {
            let mut parts = Vec::new();
            if let Some(s) = sp.stage {
                parts.push(format!("stage={s}"));
            }
            if let Some(i) = sp.instance {
                parts.push(format!("instance={i}"));
            }
            if !parts.is_empty() {
                header.push_str(&format!(" [{}]", parts.join(", ")));
            }
        }
        println!("\n{header}:");
        match &sp.render_error {
            Some(err) => print!("{}", boxed(std::slice::from_ref(err), width, false)),
            None => {
                println!("  Prompt:");
                let lines: Vec<String> =
                    sp.prompt_snippet.split('\n').map(str::to_string).collect();
                print!("{}", boxed(&lines, width, false));
            }
        }
        let validations = preview.validations(sp);
        if validations.len() > 0 {
            println!("  Validations (expanded for sheet {}):", sp.sheet_num);
            // One write for the list (923 lines on the corpus score), not one per line.
            let mut block = String::new();
            for v in validations {
                // A rule without a path (`command_succeeds`) is named by its description.
                let path = v
                    .expanded_path
                    .map(|p| p.into_owned())
                    .filter(|p| !p.is_empty())
                    .or_else(|| v.description.map(str::to_string))
                    .unwrap_or_default();
                let _ = if v.applicable {
                    writeln!(block, "    {}. {}: {path}", v.index + 1, v.kind)
                } else {
                    writeln!(
                        block,
                        "    {}. {}: {path} (not applicable: {})",
                        v.index + 1,
                        v.kind,
                        v.condition.unwrap_or_default()
                    )
                };
            }
            print!("{block}");
        }
    }
    if !preview.render_errors.is_empty() {
        println!("\nRender Errors:");
        for e in &preview.render_errors {
            println!("  {e}");
        }
    }
}

/// Stream the `--json` report (score.md §6.5) in upstream's exact layout. On the 516-sheet
/// corpus score it is 155 MB, nearly all of it 923 rules repeated for every sheet, so each
/// rule's JSON text is made once per distinct (applicable, expanded path) and copied.
fn write_json(
    score: &Score,
    issues: &[Issue],
    plan: &crate::render::tasks::BranchPlan,
    preview: &checks::Preview<'_>,
) -> std::io::Result<()> {
    // V213 is about this machine, not the score: `--json` keeps it out of `issues` (the
    // list upstream's readers and its own corpus compare) and reports it under
    // `environment` (ours).
    let (environment, issues): (Vec<Issue>, Vec<Issue>) =
        issues.iter().cloned().partition(|i| i.check_id == "V213");
    let issues = &issues[..];
    let count = |s: Severity| issues.iter().filter(|i| i.severity == s).count();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    let out = &mut out;
    let mut root = PyJsonNode::object(out, 0)?;
    root.field(out, "valid", &(count(Severity::Error) == 0))?;
    root.field(out, "error_count", &count(Severity::Error))?;
    root.field(out, "warning_count", &count(Severity::Warning))?;
    root.field(out, "info_count", &count(Severity::Info))?;
    root.field(out, "issues", issues)?;
    if !environment.is_empty() {
        root.field(out, "environment", &environment)?;
    }
    if score.config.tasks.is_some() {
        root.field(
            out,
            "tasks",
            &crate::render::tasks::tasks_json(&score.config, plan),
        )?;
    }
    root.key(out, "rendering")?;
    let mut rendering = PyJsonNode::object(out, 1)?;
    rendering.field(out, "total_sheets", &preview.total_sheets)?;
    rendering.field(out, "has_fan_out", &preview.has_fan_out)?;
    rendering.field(out, "has_dependencies", &preview.has_dependencies)?;
    rendering.field(out, "render_errors", &preview.render_errors)?;
    rendering.key(out, "sheets")?;
    let mut sheets = PyJsonNode::array(out, 2)?;
    let mut cache = RuleTexts::default();
    for sheet in &preview.sheets {
        sheets.next(out)?;
        let mut obj = PyJsonNode::object(out, 3)?;
        obj.field(out, "sheet_num", &sheet.sheet_num)?;
        obj.field(out, "item_range", &sheet.item_range)?;
        obj.field(out, "stage", &sheet.stage)?;
        obj.field(out, "instance", &sheet.instance)?;
        obj.field(out, "fan_count", &sheet.fan_count)?;
        obj.field(out, "prompt_snippet", &sheet.prompt_snippet)?;
        obj.field(out, "render_error", &sheet.render_error)?;
        obj.key(out, "validations")?;
        let mut rules = PyJsonNode::array(out, 4)?;
        for v in preview.validations(sheet) {
            rules.next(out)?;
            out.write_all(cache.text(&v, 5)?)?;
        }
        rules.end(out)?;
        obj.end(out)?;
    }
    sheets.end(out)?;
    rendering.end(out)?;
    root.end(out)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// The JSON text of each preview rule, kept per rule index and applicability together with
/// the expanded path it was made for.
#[derive(Default)]
struct RuleTexts {
    texts: Vec<[Option<RuleText>; 2]>,
}

/// One rule's JSON text and the expanded path it shows.
struct RuleText {
    path: Option<String>,
    text: Vec<u8>,
}

impl RuleTexts {
    fn text(&mut self, v: &checks::PreviewValidation<'_>, depth: usize) -> std::io::Result<&[u8]> {
        if self.texts.len() <= v.index {
            self.texts.resize_with(v.index + 1, Default::default);
        }
        let slot = &mut self.texts[v.index][usize::from(v.applicable)];
        let fresh = match slot {
            Some(made) => made.path.as_deref() != v.expanded_path.as_deref(),
            None => true,
        };
        if fresh {
            let mut text = Vec::with_capacity(512);
            write_py_json(&mut text, depth, v)?;
            *slot = Some(RuleText {
                path: v.expanded_path.as_deref().map(str::to_string),
                text,
            });
        }
        Ok(slot.as_ref().map_or(&[][..], |made| made.text.as_slice()))
    }
}
