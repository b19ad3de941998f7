//! `mozart patterns-list` and `mozart patterns-why` (learning.md §19).

use mozart_learning::{PatternQuery, PatternRecord, QuarantineStatus, WhyAnalysis};
use serde_json::{json, Value};

use super::shared::{pattern_head, Listing};
use super::{cut, head, open_store, round, store_error, table};
use crate::output::print_json;
use crate::CliError;
use crate::OutputMode;

/// Arguments of `mozart patterns-list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Show global patterns (the default; kept for upstream compatibility).
    #[arg(short = 'g', long = "global", overrides_with = "local")]
    pub global: bool,
    /// Show local patterns (upstream ignores this too: there is one store).
    #[arg(short = 'l', long = "local")]
    pub local: bool,
    /// Minimum priority score.
    #[arg(short = 'p', long, default_value_t = 0.0, value_name = "FLOAT")]
    pub min_priority: f64,
    /// Maximum number of patterns.
    #[arg(short = 'n', long, default_value_t = 20, value_name = "INTEGER")]
    pub limit: usize,
    /// Output as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
    /// Only quarantined patterns.
    #[arg(short, long)]
    pub quarantined: bool,
    /// Only patterns with trust >= 0.7.
    #[arg(long = "high-trust")]
    pub high_trust: bool,
    /// Only patterns with trust <= 0.3.
    #[arg(long = "low-trust")]
    pub low_trust: bool,
}

/// Run `mozart patterns-list`.
pub fn list(args: ListArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    let query = PatternQuery {
        min_priority: args.min_priority,
        limit: args.limit,
        quarantine_status: args.quarantined.then_some(QuarantineStatus::Quarantined),
        min_trust: args.high_trust.then_some(0.7),
        max_trust: args.low_trust.then_some(0.3),
        ..PatternQuery::default()
    };
    let (patterns, matched) = super::first_patterns(&store, query)?;
    let json = args
        .output
        .json(|| Value::Array(patterns.iter().map(pattern_json).collect()));
    if json.is_none() && patterns.is_empty() && matched > 0 {
        println!("{}", limit_zero(matched, "-n"));
        return Ok(0);
    }
    if json.is_none() && patterns.is_empty() {
        let stored = store
            .get_patterns(&PatternQuery {
                min_priority: 0.0,
                limit: usize::MAX,
                ..PatternQuery::default()
            })
            .map_err(store_error)?
            .len();
        if stored > 0 {
            println!(
                "No patterns match these filters ({} in the global learning store).",
                mozart_config::plural(stored, "pattern", "patterns")
            );
            println!(
                "Run mozart patterns-list without -p/-q/--high-trust/--low-trust to see them."
            );
            return Ok(0);
        }
    }
    if PATTERNS.print(&patterns, json) {
        println!("\n{}", showing(patterns.len(), matched, "-n"));
    }
    Ok(0)
}

/// What a pattern command prints when its limit is 0 and `matched` patterns match.
pub(crate) fn limit_zero(matched: usize, limit_flag: &str) -> String {
    let matches = if matched == 1 {
        "1 pattern matches".to_string()
    } else {
        format!("{matched} patterns match")
    };
    format!("No patterns shown: the limit is 0, and {matches} ({limit_flag} {matched} shows all).")
}

/// The footer of a pattern table: `Showing 3 patterns`, or — when the limit left some out —
/// `Showing 20 of 57 patterns (-n 57 for all)`.
pub(crate) fn showing(shown: usize, matched: usize, limit_flag: &str) -> String {
    if shown < matched {
        format!("Showing {shown} of {matched} patterns ({limit_flag} {matched} for all)")
    } else {
        format!(
            "Showing {}",
            mozart_config::plural(shown, "pattern", "patterns")
        )
    }
}

fn pattern_json(p: &PatternRecord) -> Value {
    let mut doc = pattern_head(p);
    doc.insert("priority_score".into(), json!(round(p.priority_score, 3)));
    doc.insert("context_tags".into(), json!(p.context_tags));
    doc.insert(
        "quarantine_status".into(),
        json!(p.quarantine_status.as_str()),
    );
    doc.insert("trust_score".into(), json!(round(p.trust_score, 3)));
    Value::Object(doc)
}

const PATTERNS: Listing<'static, PatternRecord> = Listing {
    title: "Global Learning Patterns",
    headers: &[
        "ID",
        "Type",
        "Name",
        "Status",
        "Trust",
        "Auto",
        "Count",
        "Success rate",
        "Effectiveness score",
        "Prior",
    ],
    none: &[
        "No patterns found in global learning store.",
        "Patterns are learned as jobs run; run some scores first.",
    ],
    cells: |p| {
        let auto = p.trust_score >= 0.85
            && matches!(
                p.quarantine_status,
                QuarantineStatus::Validated | QuarantineStatus::Active
            );
        vec![
            head(&p.id, 10),
            // A cut type or name is marked (`validation_f...`), not passed off as whole.
            cut(&p.pattern_type, 12),
            cut(&p.pattern_name, 20),
            p.quarantine_status.as_str().to_string(),
            format!("{:.2}", p.trust_score),
            if auto { "⚡".into() } else { String::new() },
            p.occurrence_count.to_string(),
            p.success_rate_text(),
            format!("{:.2}", p.effectiveness_score),
            format!("{:.2}", p.priority_score),
        ]
    },
};

/// Arguments of `mozart patterns-why`.
#[derive(Debug, clap::Args)]
pub struct WhyArgs {
    /// Pattern ID (or a prefix of it); without it, every pattern with success factors.
    #[arg(value_name = "PATTERN_ID")]
    pub pattern_id: Option<String>,
    /// Minimum observations.
    #[arg(short, long = "min-obs", default_value_t = 1, value_name = "INTEGER")]
    pub min_obs: i64,
    /// Maximum number of patterns.
    #[arg(short = 'n', long, default_value_t = 10, value_name = "INTEGER")]
    pub limit: usize,
    /// Output as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
}

fn why_json(w: &WhyAnalysis) -> Value {
    json!({
        "pattern_name": w.pattern_name,
        "pattern_type": w.pattern_type,
        "has_factors": w.has_factors,
        "factors_summary": w.factors_summary,
        "key_conditions": w.key_conditions,
        "confidence": w.confidence,
        "recommendations": w.recommendations,
        "trust_score": w.trust_score,
        "effectiveness_score": w.effectiveness_score,
        "observation_count": w.observation_count,
        "success_rate": w.success_rate,
    })
}

const WITH_FACTORS: Listing<'static, WhyAnalysis> = Listing {
    title: "Patterns with WHY Analysis",
    headers: &[
        "Pattern",
        "Obs",
        "Success rate",
        "Confidence",
        "Key Insight",
    ],
    none: &[
        "No patterns with captured success factors found.",
        "Success factors are captured when patterns lead to successful sheets.",
    ],
    cells: |w| {
        let insight = w
            .key_conditions
            .first()
            .cloned()
            .unwrap_or_else(|| w.factors_summary.clone());
        vec![
            head(&w.pattern_name, 25),
            w.observation_count.to_string(),
            w.success_rate_text.clone(),
            format!("{:.2}", w.confidence),
            cut(&insight, 35),
        ]
    },
};

/// Run `mozart patterns-why`.
pub fn why(args: WhyArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    let Some(prefix) = args.pattern_id else {
        let all = store
            .patterns_with_why(args.min_obs, args.limit)
            .map_err(store_error)?;
        let json = args.output.json(|| {
            let items = all.iter().map(|w| {
                json!({"pattern_id": w.pattern_id, "pattern_name": w.pattern_name, "analysis": why_json(w)})
            });
            Value::Array(items.collect())
        });
        WITH_FACTORS.print(&all, json);
        return Ok(0);
    };
    let query = PatternQuery {
        min_priority: 0.0,
        limit: 1000,
        ..PatternQuery::default()
    };
    let matches: Vec<_> = store
        .get_patterns(&query)
        .map_err(store_error)?
        .into_iter()
        .filter(|p| p.id.starts_with(&prefix))
        .collect();
    match matches.len() {
        0 => {
            return Err(CliError::failed(
                format!("No pattern found with ID starting with '{prefix}'"),
                vec![],
            ));
        }
        1 => {}
        _ => {
            println!("Warning: Multiple patterns match '{prefix}':");
            for p in matches.iter().take(5) {
                println!("  {} - {}", head(&p.id, 12), p.pattern_name);
            }
            return Ok(1);
        }
    }
    let Some(w) = store
        .analyze_pattern_why(&matches[0].id)
        .map_err(store_error)?
    else {
        return Err(CliError::failed(
            format!("Pattern {} not found", matches[0].id),
            vec![],
        ));
    };
    if args.output.is_json() {
        print_json(&why_json(&w));
        return Ok(0);
    }
    println!("WHY Analysis: {}", w.pattern_name);
    println!("Type: {}", w.pattern_type);
    println!();
    if !w.has_factors {
        println!("No success factors captured yet.");
    } else {
        println!("Factors Summary: {}", w.factors_summary);
        if !w.key_conditions.is_empty() {
            println!("\nKey Conditions:");
            for c in &w.key_conditions {
                println!("  • {c}");
            }
        }
    }
    println!();
    let rows = vec![
        vec!["Successes observed".into(), w.observation_count.to_string()],
        vec!["Success rate".into(), w.success_rate_text.clone()],
        vec!["Confidence".into(), format!("{:.2}", w.confidence)],
        vec!["Trust score".into(), format!("{:.2}", w.trust_score)],
        vec![
            "Effectiveness score".into(),
            format!("{:.2}", w.effectiveness_score),
        ],
    ];
    print!("{}", table("Metrics", &["Metric", "Value"], &rows));
    if !w.recommendations.is_empty() {
        println!("\nRecommendations:");
        for r in &w.recommendations {
            println!("  → {r}");
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_why_table_shows_the_first_key_condition_else_the_summary() {
        let why = |name: &str, conditions: &[&str]| WhyAnalysis {
            pattern_id: "p".into(),
            pattern_name: name.into(),
            pattern_type: "t".into(),
            has_factors: true,
            trust_score: 0.5,
            effectiveness_score: 0.5,
            factors_summary: "Succeeds on first attempt".into(),
            key_conditions: conditions.iter().map(|c| c.to_string()).collect(),
            confidence: 0.22,
            recommendations: vec![],
            observation_count: 3,
            success_rate: 0.75,
            success_rate_text: "75.0% (3 of 4 applications)".into(),
        };
        assert_eq!(
            WITH_FACTORS.render(&[
                why("missing output file", &[]),
                why("slow network retry", &["Often succeeds after 1 retries, when the network is back"]),
            ]),
            "Patterns with WHY Analysis\n\
             Pattern              Obs  Success rate                 Confidence  Key Insight\n\
             ───────────────────  ───  ───────────────────────────  ──────────  ──────────────────────────────────────\n\
             missing output file  3    75.0% (3 of 4 applications)  0.22        Succeeds on first attempt\n\
             slow network retry   3    75.0% (3 of 4 applications)  0.22        Often succeeds after 1 retries, whe...\n"
        );
        assert_eq!(
            WITH_FACTORS.render(&[]),
            "No patterns with captured success factors found.\n\
             Success factors are captured when patterns lead to successful sheets.\n"
        );
    }
}
