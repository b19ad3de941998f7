//! `mozart init [SCORE_NAME]` (cli.md §6.1): a project directory with a starter score.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::CliError;
use crate::OutputMode;

/// The `--name` default; the positional name is used only when `--name` keeps it.
const DEFAULT_NAME: &str = "my-score";

/// Arguments of `mozart init`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Name of the score to create.
    #[arg(value_name = "SCORE_NAME")]
    pub score_name: Option<String>,
    /// Directory to initialize.
    #[arg(
        short = 'p',
        long = "path",
        default_value = ".",
        value_name = "DIRECTORY"
    )]
    pub path: PathBuf,
    /// Name of the score (same as SCORE_NAME).
    #[arg(short = 'n', long = "name", default_value = DEFAULT_NAME, value_name = "TEXT")]
    pub name: String,
    /// Overwrite existing files.
    #[arg(short = 'f', long = "force")]
    pub force: bool,
    /// Output as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// Upstream's name rules, in order; the error message of the first that fails.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("Score name cannot be empty.".into());
    }
    if name.contains('\0') {
        return Err("Score name contains invalid characters.".into());
    }
    if name.contains('/') || name.contains('\\') {
        return Err("Score name cannot contain path separators.".into());
    }
    if name.contains(' ') {
        return Err("Score name cannot contain spaces. Use hyphens or underscores instead.".into());
    }
    if name.starts_with('.') {
        return Err("Score name cannot start with a dot.".into());
    }
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(format!(
            "Invalid score name '{name}'. Use alphanumeric characters, hyphens, and underscores."
        ));
    }
    Ok(())
}

/// The commented starter score.
pub fn starter_score(name: &str) -> String {
    format!(
        r#"# {name}: a Mozart score.
#
# Run it with:     mozart run {name}.yaml
# Watch it with:   mozart status {name}
# Check it with:   mozart validate {name}.yaml
#
# Every sheet is one prompt sent to the instrument (an AI CLI); validations decide
# whether a sheet succeeded, and failed sheets are retried.

name: {name}
workspace: ./workspaces/{name}

# The AI CLI that plays each sheet (see: mozart instruments list).
instrument: claude-code
instrument_config:
  timeout_seconds: 300

# total_items / size = number of sheets (here 3 sheets of 1 item each).
sheet:
  size: 1
  total_items: 3

# The prompt is a Jinja template; sheet_num, total_sheets and workspace are built in.
prompt:
  template: |
    This is sheet {{{{ sheet_num }}}} of {{{{ total_sheets }}}}.
    Write a short note about step {{{{ sheet_num }}}} of the task to
    {{{{ workspace }}}}/output-{{{{ sheet_num }}}}.md.

# A sheet succeeds only when every validation passes.
validations:
  - type: file_exists
    path: "{{workspace}}/output-{{sheet_num}}.md"
    description: "Sheet output file exists"
"#
    )
}

fn fail(message: String, hints: &[&str], mode: OutputMode) -> CliError {
    CliError::Failed {
        kind: crate::ErrorKind::Command,
        message,
        hints: hints.iter().map(|h| h.to_string()).collect(),
        mode,
    }
}

/// Run `mozart init`.
pub fn run(args: Args) -> Result<i32, CliError> {
    let name = match (&args.score_name, args.name.as_str()) {
        (Some(positional), DEFAULT_NAME) => positional.clone(),
        _ => args.name.clone(),
    };
    if let Err(message) = check_name(&name) {
        return Err(fail(
            message,
            &["Use a simple name like 'my-score' or 'data-pipeline'."],
            args.output,
        ));
    }
    let target = std::path::absolute(&args.path).unwrap_or_else(|_| args.path.clone());
    let score_file = target.join(format!("{name}.yaml"));
    let project = target.join(".mozart");
    if !args.force {
        let existing = if score_file.exists() {
            Some(format!("Score already exists: {}", score_file.display()))
        } else if project.exists() {
            Some(format!(
                "Mozart project already initialized: {}",
                target.display()
            ))
        } else {
            None
        };
        if let Some(message) = existing {
            if args.output.is_json() {
                crate::output::print_json(
                    &json!({"success": false, "message": message, "hints": ["Use --force to overwrite."]}),
                );
            } else {
                println!("Warning: {message}");
                println!("Use --force to overwrite.");
            }
            return Ok(1);
        }
    }
    create(&target, &project, &score_file, &name).map_err(|e| {
        fail(
            format!("Cannot initialize {}: {e}", target.display()),
            &["Check that the directory is writable."],
            args.output,
        )
    })?;
    if args.output.is_json() {
        crate::output::print_json(&json!({
            "success": true,
            "name": name,
            "score_file": score_file.display().to_string(),
            "target_path": target.display().to_string(),
        }));
        return Ok(0);
    }
    println!("Mozart project initialized in {}", target.display());
    println!();
    println!("Created:");
    println!("  {}", score_file.display());
    println!("  {}/", project.display());
    println!("  {}/", target.join("workspaces").display());
    println!();
    // The score as the user reaches it from here: `--path DIR` is part of its path.
    let shown = if args.path == Path::new(".") {
        PathBuf::from(format!("{name}.yaml"))
    } else {
        args.path.join(format!("{name}.yaml"))
    };
    let shown = mozart_config::placeholders::quote(&shown.display().to_string());
    println!("Next steps:");
    println!("  1. Edit {shown} to describe your task");
    println!("  2. Start the conductor:  mozart start");
    println!("  3. Run the score:        mozart run {shown}");
    println!("  4. Watch it:             mozart status {name}");
    Ok(0)
}

fn create(target: &Path, project: &Path, score_file: &Path, name: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(project)?;
    std::fs::create_dir_all(target.join("workspaces"))?;
    std::fs::write(score_file, starter_score(name))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_upstream_rules_in_order() {
        assert_eq!(check_name(""), Err("Score name cannot be empty.".into()));
        assert!(check_name("a/b").unwrap_err().contains("path separators"));
        assert!(check_name("a b").unwrap_err().contains("spaces"));
        assert!(check_name(".x").unwrap_err().contains("start with a dot"));
        assert!(check_name("-x")
            .unwrap_err()
            .contains("Invalid score name '-x'"));
        assert!(check_name("data_pipeline-2").is_ok());
    }

    #[test]
    fn the_starter_score_loads_and_plans_three_sheets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("demo.yaml");
        std::fs::write(&path, starter_score("demo")).unwrap();
        let score = mozart_config::load_score(&path).unwrap();
        assert_eq!(mozart_config::plan::total_sheets(&score.config.sheet), 3);
        assert_eq!(score.config.name, "demo");
    }
}
