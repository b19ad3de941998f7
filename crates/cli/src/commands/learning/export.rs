//! `mozart learning-export` and `mozart learning-record-evolution` (learning.md §19).

use std::path::{Path, PathBuf};

use mozart_learning::{EvolutionEntry, LearningStore, PatternQuery, QuarantineStatus};
use serde_json::{json, Value};

use super::shared::pattern_head;
use super::{open_store, round, store_error};
use crate::CliError;

/// Arguments of `mozart learning-export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Directory to write the files into.
    #[arg(short, long, default_value = "./learning-export", value_name = "TEXT")]
    pub output_dir: PathBuf,
    /// `markdown` or `json`.
    #[arg(short, long, default_value = "markdown", value_name = "TEXT")]
    pub format: String,
    /// Days of history (accepted; upstream does not use it either).
    #[arg(short, long, default_value_t = 30, value_name = "INTEGER")]
    pub since: i64,
    /// Include patterns still pending validation.
    #[arg(long = "include-pending", overrides_with = "no_include_pending")]
    pub include_pending: bool,
    /// Leave out patterns still pending validation.
    #[arg(long = "no-include-pending")]
    pub no_include_pending: bool,
    /// Minimum effectiveness of exported patterns.
    #[arg(long, default_value_t = 0.0, value_name = "FLOAT")]
    pub min_effectiveness: f64,
}

fn sections(
    store: &LearningStore,
    args: &ExportArgs,
) -> Result<Vec<(&'static str, Value)>, CliError> {
    let all = store
        .get_patterns(&PatternQuery {
            min_priority: 0.0,
            limit: 10_000,
            ..PatternQuery::default()
        })
        .map_err(store_error)?;
    let include_pending = !args.no_include_pending;
    let exported: Vec<_> = all
        .iter()
        .filter(|p| p.effectiveness_score >= args.min_effectiveness)
        .filter(|p| include_pending || p.quarantine_status != QuarantineStatus::Pending)
        .collect();
    let pattern_json = |p: &&mozart_learning::PatternRecord| {
        let mut doc = pattern_head(p);
        doc.insert("trust_score".into(), json!(round(p.trust_score, 3)));
        doc.insert(
            "quarantine_status".into(),
            json!(p.quarantine_status.as_str()),
        );
        doc.insert("context_tags".into(), json!(p.context_tags));
        Value::Object(doc)
    };
    let semantic = json!({
        "patterns": exported.iter().map(pattern_json).collect::<Vec<_>>(),
        "total": exported.len(),
    });
    let drift = store.drifting_patterns(0.15, 5, 30).map_err(store_error)?;
    let epistemic = store
        .epistemic_drifting_patterns(0.1, 5, 30)
        .map_err(store_error)?;
    let drift_report = json!({
        "effectiveness_drift": drift.iter().map(|d| json!({
            "pattern_id": d.pattern_id, "pattern_name": d.pattern_name,
            "effectiveness_before": round(d.effectiveness_before, 3),
            "effectiveness_after": round(d.effectiveness_after, 3),
            "drift_direction": d.drift_direction,
        })).collect::<Vec<_>>(),
        "epistemic_drift": epistemic.iter().map(|d| json!({
            "pattern_id": d.pattern_id, "pattern_name": d.pattern_name,
            "belief_change": round(d.belief_change, 3),
            "drift_direction": d.drift_direction,
        })).collect::<Vec<_>>(),
    });
    let m = store.pattern_entropy().map_err(store_error)?;
    let entropy = serde_json::to_value(&m).unwrap_or(Value::Null);
    let by_status = |s: QuarantineStatus| {
        all.iter()
            .filter(|p| p.quarantine_status == s)
            .map(|p| json!({"id": p.id, "pattern_name": p.pattern_name, "trust_score": round(p.trust_score, 3)}))
            .collect::<Vec<_>>()
    };
    let health = json!({
        "validated": by_status(QuarantineStatus::Validated),
        "pending": by_status(QuarantineStatus::Pending),
        "quarantined": by_status(QuarantineStatus::Quarantined),
        "retired": by_status(QuarantineStatus::Retired),
    });
    let evolution = store.evolution_trajectory(5).map_err(store_error)?;
    let errors: Vec<Value> = all
        .iter()
        .filter(|p| {
            matches!(
                p.pattern_type.as_str(),
                "validation_failure" | "semantic_failure" | "retry_success"
            )
        })
        .map(|p| json!({"pattern_type": p.pattern_type, "pattern_name": p.pattern_name, "occurrence_count": p.occurrence_count}))
        .collect();
    Ok(vec![
        ("semantic-insights", semantic),
        ("drift-report", drift_report),
        ("entropy-state", entropy),
        ("pattern-health", health),
        (
            "evolution-history",
            serde_json::to_value(&evolution).unwrap_or(Value::Null),
        ),
        ("error-landscape", json!({"error_patterns": errors})),
    ])
}

/// Markdown rendering of one exported section: a title and its JSON in a code block (the
/// data stays machine-readable and the file reads well in a browser).
fn markdown(name: &str, value: &Value) -> String {
    let title: String = name
        .split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "# {title}\n\nExported by `mozart learning-export`.\n\n```json\n{}\n```\n",
        serde_json::to_string_pretty(value).unwrap_or_default()
    )
}

fn write(path: &Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text)
        .map_err(|e| CliError::failed(format!("Cannot write {}: {e}", path.display()), vec![]))
}

/// Run `mozart learning-export`.
pub fn export(args: ExportArgs) -> Result<i32, CliError> {
    let ext = match args.format.as_str() {
        "markdown" => "md",
        "json" => "json",
        other => {
            return Err(CliError::failed(
                format!("Unknown format '{other}'"),
                vec!["Use --format markdown or --format json.".into()],
            ));
        }
    };
    let store = open_store()?;
    let parts = sections(&store, &args)?;
    std::fs::create_dir_all(&args.output_dir).map_err(|e| {
        CliError::failed(
            format!("Cannot create {}: {e}", args.output_dir.display()),
            vec![],
        )
    })?;
    for (name, value) in &parts {
        let path = args.output_dir.join(format!("{name}.{ext}"));
        let text = if ext == "json" {
            serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
        } else {
            markdown(name, value)
        };
        write(&path, &text)?;
    }
    println!("Exported learning data to {}/", args.output_dir.display());
    let count = |name: &str, key: &str| {
        parts
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.get(key))
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    };
    println!("  Patterns: {}", count("semantic-insights", "patterns"));
    println!(
        "  Drifting patterns: {}",
        count("drift-report", "effectiveness_drift")
    );
    println!("  Files: {}", parts.len());
    Ok(0)
}

/// Arguments of `mozart learning-record-evolution`.
#[derive(Debug, clap::Args)]
pub struct RecordEvolutionArgs {
    /// Cycle number.
    #[arg(long = "cycle", value_name = "INTEGER")]
    pub cycle: i64,
    /// Evolutions completed.
    #[arg(long = "evolutions-completed", value_name = "INTEGER")]
    pub evolutions_completed: i64,
    /// Issue classes addressed (comma-separated).
    #[arg(long = "issue-classes", value_name = "TEXT")]
    pub issue_classes: String,
    /// Implementation lines of code.
    #[arg(long = "implementation-loc", value_name = "INTEGER")]
    pub implementation_loc: i64,
    /// Test lines of code.
    #[arg(long = "test-loc", value_name = "INTEGER")]
    pub test_loc: i64,
    /// Evolutions deferred.
    #[arg(long, default_value_t = 0, value_name = "INTEGER")]
    pub evolutions_deferred: i64,
    /// Average consciousness volume.
    #[arg(long = "cv-avg", default_value_t = 0.0, value_name = "FLOAT")]
    pub cv_avg: f64,
    /// Accuracy of the LOC estimate.
    #[arg(long = "loc-accuracy", default_value_t = 1.0, value_name = "FLOAT")]
    pub loc_accuracy: f64,
    /// Notes.
    #[arg(long = "notes", default_value = "", value_name = "TEXT")]
    pub notes: String,
}

/// Run `mozart learning-record-evolution`.
pub fn record_evolution(args: RecordEvolutionArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    let entry = EvolutionEntry {
        cycle: args.cycle,
        evolutions_completed: args.evolutions_completed,
        evolutions_deferred: args.evolutions_deferred,
        issue_classes: args
            .issue_classes
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
        cv_avg: args.cv_avg,
        implementation_loc: args.implementation_loc,
        test_loc: args.test_loc,
        loc_accuracy: args.loc_accuracy,
        notes: args.notes,
        ..EvolutionEntry::default()
    };
    let id = match store.record_evolution_entry(&entry) {
        Ok(id) => id,
        Err(e) => {
            return Err(CliError::failed(
                format!("Cannot record evolution cycle {}: {e}", args.cycle),
                vec!["Each cycle can be recorded once.".into()],
            ));
        }
    };
    println!("Recorded evolution cycle {}", args.cycle);
    println!("  Entry ID: {id}");
    println!(
        "  Evolutions: {} completed, {} deferred",
        entry.evolutions_completed, entry.evolutions_deferred
    );
    println!(
        "  LOC: {} implementation, {} test",
        entry.implementation_loc, entry.test_loc
    );
    Ok(0)
}
