//! `mozart learning-stats`, `learning-insights` and `learning-activity` (learning.md §19).

use mozart_learning::PatternQuery;
use serde_json::json;

use super::{cut, open_store, round, store_error, table};
use crate::output::print_json;
use crate::CliError;
use crate::OutputMode;

/// Arguments of `mozart learning-stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Output as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// Run `mozart learning-stats`.
pub fn stats(args: StatsArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    let s = store.stats().map_err(store_error)?;
    if args.output.is_json() {
        print_json(&s.to_cli_json());
        return Ok(0);
    }
    println!("Global Learning Statistics\n");
    println!("Executions");
    println!("  Total recorded: {}", s.total_executions);
    println!(
        "  First-attempt success: {:.1}%",
        s.success_without_retry_rate * 100.0
    );
    println!("\nPatterns");
    println!("  Total learned: {}", s.total_patterns);
    println!("  Avg effectiveness: {:.2}", s.avg_pattern_effectiveness);
    println!("\nData Sources");
    println!("  Output patterns: {}", s.output_patterns);
    println!("  Error code patterns: {}", s.error_code_patterns);
    println!(
        "  Semantic failure patterns: {}",
        s.semantic_failure_patterns
    );
    println!("\nWorkspaces");
    println!("  Unique workspaces: {}", s.unique_workspaces);
    println!("\nError Recovery Learning");
    println!("  Recoveries recorded: {}", s.total_error_recoveries);
    println!(
        "  Recovery success rate: {:.1}%",
        s.error_recovery_success_rate * 100.0
    );
    if s.migration_needed() {
        println!("\nNo executions recorded yet: run some scores to start learning.");
    }
    Ok(0)
}

/// Arguments of `mozart learning-insights`.
#[derive(Debug, clap::Args)]
pub struct InsightsArgs {
    /// Maximum number of patterns.
    #[arg(long = "limit", default_value_t = 10, value_name = "INTEGER")]
    pub limit: usize,
    /// Only this pattern type.
    #[arg(long = "pattern-type", value_name = "TEXT")]
    pub pattern_type: Option<String>,
}

/// Run `mozart learning-insights`.
pub fn insights(args: InsightsArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    let query_type = args.pattern_type.clone();
    let query = PatternQuery {
        limit: args.limit,
        pattern_type: args.pattern_type,
        ..PatternQuery::default()
    };
    let (patterns, matched) = super::first_patterns(&store, query)?;
    if patterns.is_empty() {
        let learned = store
            .get_patterns(&PatternQuery {
                limit: usize::MAX,
                ..PatternQuery::default()
            })
            .map_err(store_error)?
            .len();
        if matched > 0 {
            println!("{}", super::patterns::limit_zero(matched, "--limit"));
        } else if learned > 0 {
            println!(
                "No patterns of type '{}' ({} learned; leave out --pattern-type to see them).",
                query_type.as_deref().unwrap_or_default(),
                mozart_config::plural(learned, "pattern", "patterns")
            );
        } else {
            println!("No patterns learned yet. Run some jobs!");
        }
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = patterns
        .iter()
        .map(|p| {
            vec![
                p.pattern_type.clone(),
                cut(p.description.as_deref().unwrap_or(&p.pattern_name), 45),
                p.occurrence_count.to_string(),
                p.success_rate_text(),
                // A 0–1 score, as everywhere: it is not a percentage of anything.
                if p.effectiveness_score == 0.0 {
                    "-".into()
                } else {
                    format!("{:.2}", p.effectiveness_score)
                },
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            "Learned Patterns",
            &[
                "Type",
                "Description",
                "Freq",
                "Success rate",
                "Effectiveness score"
            ],
            &rows
        )
    );
    if patterns.len() < matched {
        println!(
            "\n{}",
            super::patterns::showing(patterns.len(), matched, "--limit")
        );
    }
    Ok(0)
}

/// Arguments of `mozart learning-activity` (`-h` is `--hours`, as upstream; help is
/// `--help` only).
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true)]
pub struct ActivityArgs {
    /// Print help.
    #[arg(long = "help", action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    /// Look back this many hours.
    #[arg(short, long, default_value_t = 24, value_name = "INTEGER")]
    pub hours: i64,
    /// Output as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

/// Run `mozart learning-activity`.
pub fn activity(args: ActivityArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    // Every execution completed in the window (upstream looked only at the 20 most recent,
    // so "Recent executions: 20" could stand for hundreds: docs/differences.md). Newest
    // first, a page at a time, until one ended before the window.
    let cutoff = mozart_ipc::time::epoch_now() - (args.hours as f64) * 3600.0;
    let (mut in_window, mut first_try) = (0usize, 0usize);
    let page = 500;
    'pages: for offset in (0..).step_by(page) {
        let rows = store
            .recent_executions_from(offset, page)
            .map_err(store_error)?;
        for e in &rows {
            match e.completed_at.as_deref().and_then(parse_epoch) {
                Some(t) if t >= cutoff => {
                    in_window += 1;
                    first_try += usize::from(e.success_without_retry);
                }
                Some(_) => break 'pages,
                None => {}
            }
        }
        if rows.len() < page {
            break;
        }
    }
    let rate = if in_window == 0 {
        0.0
    } else {
        first_try as f64 / in_window as f64 * 100.0
    };
    let s = store.stats().map_err(store_error)?;
    let window = store.optimal_execution_window(None).map_err(store_error)?;
    if args.output.is_json() {
        print_json(&json!({
            "period_hours": args.hours,
            "recent_executions": in_window,
            "success_without_retry_rate": round(rate, 1),
            "patterns_active": s.total_patterns,
            "optimal_hours": window.optimal_hours,
            "avoid_hours": window.avoid_hours,
            "scheduling_confidence": round(window.confidence, 3),
        }));
        return Ok(0);
    }
    println!(
        "Learning Activity (last {})\n",
        mozart_config::plural(args.hours, "hour", "hours")
    );
    println!("  Recent executions: {in_window}");
    println!("  First-attempt success: {rate:.1}%");
    println!("  Patterns: {}", s.total_patterns);
    println!("  Avg effectiveness: {:.2}", s.avg_pattern_effectiveness);
    if window.confidence > 0.3 {
        let hours = |h: &[i64]| {
            h.iter()
                .map(|x| format!("{x:02}:00"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !window.optimal_hours.is_empty() {
            println!("  Optimal hours: {}", hours(&window.optimal_hours));
        }
        if !window.avoid_hours.is_empty() {
            println!("  Avoid hours: {}", hours(&window.avoid_hours));
        }
    }
    let status = match s.total_executions {
        n if n >= 50 => "well-trained",
        n if n >= 10 => "gathering data",
        _ => "early training",
    };
    println!(
        "\nTraining status: {status} ({})",
        mozart_config::plural(s.total_executions, "execution", "executions")
    );
    Ok(0)
}

/// Seconds since the epoch of a stored timestamp (ISO 8601, with or without offset; no
/// offset means local time, as upstream writes it).
pub(crate) fn parse_epoch(text: &str) -> Option<f64> {
    if let Ok(ts) = text.parse::<jiff::Timestamp>() {
        return Some(ts.as_millisecond() as f64 / 1000.0);
    }
    let dt = text.parse::<jiff::civil::DateTime>().ok()?;
    let zoned = dt.to_zoned(jiff::tz::TimeZone::system()).ok()?;
    Some(zoned.timestamp().as_millisecond() as f64 / 1000.0)
}
