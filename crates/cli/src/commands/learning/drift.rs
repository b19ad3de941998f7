//! `mozart learning-drift` and `mozart learning-epistemic-drift` (learning.md §14.4, §14.5).

use mozart_learning::{
    EffectivenessDrift, EpistemicDrift, LearningError, LearningStore, PatternQuery,
};
use serde_json::{json, Value};

use super::shared::{DriftWindow, Listing};
use super::{head, open_store, round, store_error};
use crate::output::print_json;
use crate::{CliError, OutputMode};

/// Arguments of `mozart learning-drift`.
#[derive(Debug, clap::Args)]
pub struct DriftArgs {
    /// Drift threshold.
    #[arg(short, long, default_value_t = 0.2, value_name = "FLOAT")]
    pub threshold: f64,
    #[command(flatten)]
    pub window: DriftWindow,
    /// Show the store-wide drift summary.
    #[arg(short, long)]
    pub summary: bool,
}

/// Arguments of `mozart learning-epistemic-drift` (same options, another default threshold).
#[derive(Debug, clap::Args)]
pub struct EpistemicArgs {
    /// Belief-change threshold.
    #[arg(short, long, default_value_t = 0.15, value_name = "FLOAT")]
    pub threshold: f64,
    #[command(flatten)]
    pub window: DriftWindow,
    /// Show the store-wide epistemic drift summary.
    #[arg(short, long)]
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

/// The summaries' sample (§14.4 `get_pattern_drift_summary`): each pattern with >= 10
/// applications and its drift over the default window, when it has one.
fn analyzed<D>(
    store: &LearningStore,
    drift: impl Fn(&str) -> Result<Option<D>, LearningError>,
) -> Result<Vec<(String, D)>, CliError> {
    let mut found = Vec::new();
    for id in candidates(store, 10)? {
        if let Some(d) = drift(&id).map_err(store_error)? {
            found.push((id, d));
        }
    }
    Ok(found)
}

/// Mean of one figure over the analyzed patterns (0 without any), summed in their order.
fn mean<D>(found: &[(String, D)], figure: impl Fn(&D) -> f64) -> f64 {
    if found.is_empty() {
        return 0.0;
    }
    let total = found.iter().fold(0.0, |sum, (_, d)| sum + figure(d));
    total / found.len() as f64
}

/// The pattern with the highest figure (the first of equals).
fn most<D>(found: &[(String, D)], figure: impl Fn(&D) -> f64) -> Option<String> {
    let mut best: Option<(&String, f64)> = None;
    for (id, d) in found {
        let value = figure(d);
        if best.is_none_or(|(_, top)| value > top) {
            best = Some((id, value));
        }
    }
    best.map(|(id, _)| id.clone())
}

fn drift_summary(store: &LearningStore) -> Result<Value, CliError> {
    let found = analyzed(store, |id| store.calculate_effectiveness_drift(id, 5, 0.2))?;
    Ok(json!({
        "total_patterns": store.stats().map_err(store_error)?.total_patterns,
        "patterns_analyzed": found.len(),
        "patterns_drifting": found.iter().filter(|(_, d)| d.threshold_exceeded).count(),
        "avg_drift_magnitude": mean(&found, |d| d.drift_magnitude),
        "most_drifted": most(&found, |d| d.drift_magnitude),
    }))
}

fn epistemic_summary(store: &LearningStore) -> Result<Value, CliError> {
    let found = analyzed(store, |id| store.calculate_epistemic_drift(id, 5, 0.15))?;
    Ok(json!({
        "total_patterns": store.stats().map_err(store_error)?.total_patterns,
        "patterns_analyzed": found.len(),
        "patterns_with_epistemic_drift": found.iter().filter(|(_, d)| d.threshold_exceeded).count(),
        "avg_belief_change": mean(&found, |d| d.belief_change.abs()),
        "avg_belief_entropy": mean(&found, |d| d.belief_entropy),
        "most_unstable": most(&found, |d| d.belief_entropy),
    }))
}

/// `--summary`: the JSON document, or its keys as a titled list.
fn print_summary(title: &str, summary: &Value, mode: OutputMode) {
    if mode.is_json() {
        print_json(summary);
        return;
    }
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

/// A drift list: the `--json` document (threshold, window, the patterns), the line saying
/// none exceeds the `kind` threshold, or the table. True when the table was printed.
fn show_list<D>(
    found: &[D],
    threshold: f64,
    window: &DriftWindow,
    kind: &str,
    listing: Listing<'_, D>,
    row_json: fn(&D) -> Value,
) -> bool {
    let json = window.output.json(|| {
        json!({
            "threshold": threshold,
            "window_size": window.window,
            "patterns": found.iter().map(row_json).collect::<Vec<_>>(),
        })
    });
    let none = format!("✓ No patterns exceeding {kind} threshold ({threshold})");
    Listing {
        none: &[&none],
        ..listing
    }
    .print(found, json)
}

fn effectiveness_json(d: &EffectivenessDrift) -> Value {
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
}

const EFFECTIVENESS: Listing<'static, EffectivenessDrift> = Listing {
    title: "Patterns with Effectiveness Drift",
    headers: &[
        "Pattern",
        "Before",
        "After",
        "Drift",
        "Direction",
        "Grounding",
    ],
    none: &[],
    cells: |d| {
        let direction = match d.drift_direction {
            "negative" => "↓ declining",
            "positive" => "↑ improving",
            _ => "→ stable",
        };
        vec![
            head(&d.pattern_name, 30),
            format!("{:.2}", d.effectiveness_before),
            format!("{:.2}", d.effectiveness_after),
            format!("{:.2}", d.drift_magnitude),
            direction.into(),
            format!("{:.2}", d.grounding_confidence_avg),
        ]
    },
};

/// Run `mozart learning-drift`.
pub fn drift(args: DriftArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    let w = &args.window;
    if args.summary {
        print_summary("Pattern Drift Summary", &drift_summary(&store)?, w.output);
        return Ok(0);
    }
    let found = store
        .drifting_patterns(args.threshold, w.window, w.limit)
        .map_err(store_error)?;
    if show_list(
        &found,
        args.threshold,
        w,
        "drift",
        EFFECTIVENESS,
        effectiveness_json,
    ) {
        let declining = found
            .iter()
            .filter(|d| d.drift_direction == "negative")
            .count();
        if declining > 0 {
            println!(
                "\n{} declining in effectiveness",
                mozart_config::plural(declining, "pattern", "patterns")
            );
        }
    }
    Ok(0)
}

fn epistemic_json(d: &EpistemicDrift) -> Value {
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
}

const EPISTEMIC: Listing<'static, EpistemicDrift> = Listing {
    title: "Patterns with Epistemic Drift",
    headers: &[
        "Pattern",
        "Before",
        "After",
        "Change",
        "Direction",
        "Entropy",
    ],
    none: &[],
    cells: |d| {
        vec![
            head(&d.pattern_name, 30),
            format!("{:.2}", d.confidence_before),
            format!("{:.2}", d.confidence_after),
            format!("{:+.1}%", d.belief_change * 100.0),
            d.drift_direction.into(),
            format!("{:.2}", d.belief_entropy),
        ]
    },
};

/// Run `mozart learning-epistemic-drift`.
pub fn epistemic(args: EpistemicArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    let w = &args.window;
    if args.summary {
        print_summary(
            "Epistemic Drift Summary",
            &epistemic_summary(&store)?,
            w.output,
        );
        return Ok(0);
    }
    let found = store
        .epistemic_drifting_patterns(args.threshold, w.window, w.limit)
        .map_err(store_error)?;
    let kind = "epistemic drift";
    if show_list(&found, args.threshold, w, kind, EPISTEMIC, epistemic_json) {
        if found.iter().any(|d| d.drift_direction == "weakening") {
            println!(
                "\nWeakening patterns: confidence in them is falling; review their relevance."
            );
        }
        if found.iter().any(|d| d.belief_entropy > 0.3) {
            println!("High belief entropy: outcomes of some patterns vary a lot.");
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_tables_keep_their_columns() {
        let effectiveness =
            |name: &str, before: f64, after: f64, direction: &'static str| EffectivenessDrift {
                pattern_id: "p".into(),
                pattern_name: name.into(),
                effectiveness_before: before,
                effectiveness_after: after,
                drift_magnitude: (after - before).abs(),
                drift_direction: direction,
                grounding_confidence_avg: 0.69,
                applications_analyzed: 10,
                threshold_exceeded: true,
            };
        assert_eq!(
            EFFECTIVENESS.render(&[
                effectiveness("missing output file", 0.75, 0.08, "negative"),
                effectiveness("slow network retry", 0.25, 0.92, "positive"),
                effectiveness("x".repeat(40).as_str(), 0.5, 0.5, "stable"),
            ]),
            "Patterns with Effectiveness Drift\n\
             Pattern                         Before  After  Drift  Direction    Grounding\n\
             ──────────────────────────────  ──────  ─────  ─────  ───────────  ─────────\n\
             missing output file             0.75    0.08   0.67   ↓ declining  0.69\n\
             slow network retry              0.25    0.92   0.67   ↑ improving  0.69\n\
             xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx  0.50    0.50   0.00   → stable     0.69\n"
        );
        let epistemic = EpistemicDrift {
            pattern_id: "p".into(),
            pattern_name: "missing output file".into(),
            confidence_before: 0.62,
            confidence_after: 0.77,
            belief_change: 0.15,
            belief_entropy: 0.124,
            drift_direction: "strengthening",
            applications_analyzed: 10,
            threshold_exceeded: true,
        };
        assert_eq!(
            EPISTEMIC.render(&[epistemic]),
            "Patterns with Epistemic Drift\n\
             Pattern              Before  After  Change  Direction      Entropy\n\
             ───────────────────  ──────  ─────  ──────  ─────────────  ───────\n\
             missing output file  0.62    0.77   +15.0%  strengthening  0.12\n"
        );
    }

    #[test]
    fn summaries_average_in_order_and_name_the_first_of_equal_maxima() {
        let found: Vec<(String, f64)> =
            vec![("a".into(), 0.1), ("b".into(), 0.3), ("c".into(), 0.3)];
        assert_eq!(mean(&found, |d| *d), (0.1 + 0.3 + 0.3) / 3.0);
        assert_eq!(most(&found, |d| *d).as_deref(), Some("b"));
        assert_eq!(mean(&[] as &[(String, f64)], |d| *d), 0.0);
        assert_eq!(most(&[] as &[(String, f64)], |d| *d), None);
    }
}
