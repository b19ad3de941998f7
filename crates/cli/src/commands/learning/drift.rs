//! `mozart learning-drift` and `mozart learning-epistemic-drift` (learning.md §14.4, §14.5).

use mozart_learning::{LearningStore, PatternQuery};
use serde_json::{json, Value};

use super::{head, open_store, round, store_error, table};
use crate::output::print_json;
use crate::CliError;

/// Arguments of `mozart learning-drift`.
#[derive(Debug, clap::Args)]
pub struct DriftArgs {
    /// Drift threshold.
    #[arg(
        short = 't',
        long = "threshold",
        default_value_t = 0.2,
        value_name = "FLOAT"
    )]
    pub threshold: f64,
    /// Applications per comparison window.
    #[arg(
        short = 'w',
        long = "window",
        default_value_t = 5,
        value_name = "INTEGER"
    )]
    pub window: usize,
    /// Maximum number of patterns.
    #[arg(
        short = 'l',
        long = "limit",
        default_value_t = 10,
        value_name = "INTEGER"
    )]
    pub limit: usize,
    /// Output as JSON.
    #[arg(short = 'j', long = "json")]
    pub json: bool,
    /// Show the store-wide drift summary.
    #[arg(short = 's', long = "summary")]
    pub summary: bool,
}

/// Arguments of `mozart learning-epistemic-drift` (same options, another default threshold).
#[derive(Debug, clap::Args)]
pub struct EpistemicArgs {
    /// Belief-change threshold.
    #[arg(
        short = 't',
        long = "threshold",
        default_value_t = 0.15,
        value_name = "FLOAT"
    )]
    pub threshold: f64,
    /// Applications per comparison window.
    #[arg(
        short = 'w',
        long = "window",
        default_value_t = 5,
        value_name = "INTEGER"
    )]
    pub window: usize,
    /// Maximum number of patterns.
    #[arg(
        short = 'l',
        long = "limit",
        default_value_t = 10,
        value_name = "INTEGER"
    )]
    pub limit: usize,
    /// Output as JSON.
    #[arg(short = 'j', long = "json")]
    pub json: bool,
    /// Show the store-wide epistemic drift summary.
    #[arg(short = 's', long = "summary")]
    pub summary: bool,
}

/// Every pattern id with at least `min_apps` applications (inactive included).
fn candidates(store: &LearningStore, min_apps: i64) -> Result<Vec<String>, CliError> {
    let query = PatternQuery {
        min_priority: f64::MIN,
        limit: 100_000,
        include_inactive: true,
        ..PatternQuery::default()
    };
    Ok(store
        .get_patterns(&query)
        .map_err(store_error)?
        .into_iter()
        .filter(|p| p.applications() >= min_apps)
        .map(|p| p.id)
        .collect())
}

/// `get_pattern_drift_summary` (§14.4): patterns with >= 10 applications, default window.
fn drift_summary(store: &LearningStore) -> Result<Value, CliError> {
    let ids = candidates(store, 10)?;
    let mut analyzed = 0usize;
    let mut drifting = 0usize;
    let mut total_mag = 0.0;
    let mut most: Option<(String, f64)> = None;
    for id in &ids {
        if let Some(d) = store
            .calculate_effectiveness_drift(id, 5, 0.2)
            .map_err(store_error)?
        {
            analyzed += 1;
            total_mag += d.drift_magnitude;
            if d.threshold_exceeded {
                drifting += 1;
            }
            if most.as_ref().is_none_or(|(_, m)| d.drift_magnitude > *m) {
                most = Some((id.clone(), d.drift_magnitude));
            }
        }
    }
    let total = store.stats().map_err(store_error)?.total_patterns;
    Ok(json!({
        "total_patterns": total,
        "patterns_analyzed": analyzed,
        "patterns_drifting": drifting,
        "avg_drift_magnitude": if analyzed > 0 { total_mag / analyzed as f64 } else { 0.0 },
        "most_drifted": most.map(|(id, _)| id),
    }))
}

fn epistemic_summary(store: &LearningStore) -> Result<Value, CliError> {
    let ids = candidates(store, 10)?;
    let (mut analyzed, mut drifting) = (0usize, 0usize);
    let (mut change, mut entropy) = (0.0, 0.0);
    let mut most: Option<(String, f64)> = None;
    for id in &ids {
        if let Some(d) = store
            .calculate_epistemic_drift(id, 5, 0.15)
            .map_err(store_error)?
        {
            analyzed += 1;
            change += d.belief_change.abs();
            entropy += d.belief_entropy;
            if d.threshold_exceeded {
                drifting += 1;
            }
            if most.as_ref().is_none_or(|(_, e)| d.belief_entropy > *e) {
                most = Some((id.clone(), d.belief_entropy));
            }
        }
    }
    let total = store.stats().map_err(store_error)?.total_patterns;
    let avg = |x: f64| {
        if analyzed > 0 {
            x / analyzed as f64
        } else {
            0.0
        }
    };
    Ok(json!({
        "total_patterns": total,
        "patterns_analyzed": analyzed,
        "patterns_with_epistemic_drift": drifting,
        "avg_belief_change": avg(change),
        "avg_belief_entropy": avg(entropy),
        "most_unstable": most.map(|(id, _)| id),
    }))
}

fn print_summary(title: &str, summary: &Value) {
    println!("{title}\n");
    if let Some(obj) = summary.as_object() {
        for (k, v) in obj {
            let shown = match v {
                Value::Number(n) if n.is_f64() => format!("{:.3}", n.as_f64().unwrap_or(0.0)),
                Value::Null => "-".into(),
                other => other.to_string().trim_matches('"').to_string(),
            };
            println!("  {}: {shown}", k.replace('_', " "));
        }
    }
}

/// Run `mozart learning-drift`.
pub fn drift(args: DriftArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    if args.summary {
        let summary = drift_summary(&store)?;
        if args.json {
            print_json(&summary);
        } else {
            print_summary("Pattern Drift Summary", &summary);
        }
        return Ok(0);
    }
    let found = store
        .drifting_patterns(args.threshold, args.window, args.limit)
        .map_err(store_error)?;
    if args.json {
        let items: Vec<Value> = found
            .iter()
            .map(|d| {
                json!({
                    "pattern_id": d.pattern_id,
                    "pattern_name": d.pattern_name,
                    "effectiveness_before": round(d.effectiveness_before, 3),
                    "effectiveness_after": round(d.effectiveness_after, 3),
                    "drift_magnitude": round(d.drift_magnitude, 3),
                    "drift_direction": d.drift_direction,
                    "grounding_confidence_avg": round(d.grounding_confidence_avg, 3),
                    "applications_analyzed": d.applications_analyzed,
                })
            })
            .collect();
        print_json(&json!({
            "threshold": args.threshold,
            "window_size": args.window,
            "patterns": items,
        }));
        return Ok(0);
    }
    if found.is_empty() {
        println!(
            "✓ No patterns exceeding drift threshold ({})",
            args.threshold
        );
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|d| {
            let dir = match d.drift_direction {
                "negative" => "↓ declining",
                "positive" => "↑ improving",
                _ => "→ stable",
            };
            vec![
                head(&d.pattern_name, 30),
                format!("{:.2}", d.effectiveness_before),
                format!("{:.2}", d.effectiveness_after),
                format!("{:.2}", d.drift_magnitude),
                dir.into(),
                format!("{:.2}", d.grounding_confidence_avg),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            "Patterns with Effectiveness Drift",
            &[
                "Pattern",
                "Before",
                "After",
                "Drift",
                "Direction",
                "Grounding"
            ],
            &rows
        )
    );
    let declining = found
        .iter()
        .filter(|d| d.drift_direction == "negative")
        .count();
    if declining > 0 {
        println!("\n{declining} pattern(s) declining in effectiveness");
    }
    Ok(0)
}

/// Run `mozart learning-epistemic-drift`.
pub fn epistemic(args: EpistemicArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    if args.summary {
        let summary = epistemic_summary(&store)?;
        if args.json {
            print_json(&summary);
        } else {
            print_summary("Epistemic Drift Summary", &summary);
        }
        return Ok(0);
    }
    let found = store
        .epistemic_drifting_patterns(args.threshold, args.window, args.limit)
        .map_err(store_error)?;
    if args.json {
        let items: Vec<Value> = found
            .iter()
            .map(|d| {
                json!({
                    "pattern_id": d.pattern_id,
                    "pattern_name": d.pattern_name,
                    "confidence_before": round(d.confidence_before, 3),
                    "confidence_after": round(d.confidence_after, 3),
                    "belief_change": round(d.belief_change, 3),
                    "belief_entropy": round(d.belief_entropy, 3),
                    "drift_direction": d.drift_direction,
                    "applications_analyzed": d.applications_analyzed,
                })
            })
            .collect();
        print_json(&json!({
            "threshold": args.threshold,
            "window_size": args.window,
            "patterns": items,
        }));
        return Ok(0);
    }
    if found.is_empty() {
        println!(
            "✓ No patterns exceeding epistemic drift threshold ({})",
            args.threshold
        );
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|d| {
            vec![
                head(&d.pattern_name, 30),
                format!("{:.2}", d.confidence_before),
                format!("{:.2}", d.confidence_after),
                format!("{:+.1}%", d.belief_change * 100.0),
                d.drift_direction.into(),
                format!("{:.2}", d.belief_entropy),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            "Patterns with Epistemic Drift",
            &[
                "Pattern",
                "Before",
                "After",
                "Change",
                "Direction",
                "Entropy"
            ],
            &rows
        )
    );
    if found.iter().any(|d| d.drift_direction == "weakening") {
        println!("\nWeakening patterns: confidence in them is falling; review their relevance.");
    }
    if found.iter().any(|d| d.belief_entropy > 0.3) {
        println!("High belief entropy: outcomes of some patterns vary a lot.");
    }
    Ok(0)
}
