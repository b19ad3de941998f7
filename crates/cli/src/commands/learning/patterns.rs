//! `mozart patterns-list` and `mozart patterns-why` (learning.md §19).

use mozart_learning::{PatternQuery, QuarantineStatus, WhyAnalysis};
use serde_json::{json, Value};

use super::{cut, head, open_store, round, store_error, table};
use crate::output::print_json;
use crate::CliError;

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
    #[arg(
        short = 'p',
        long = "min-priority",
        default_value_t = 0.0,
        value_name = "FLOAT"
    )]
    pub min_priority: f64,
    /// Maximum number of patterns.
    #[arg(
        short = 'n',
        long = "limit",
        default_value_t = 20,
        value_name = "INTEGER"
    )]
    pub limit: usize,
    /// Output as JSON.
    #[arg(short = 'j', long = "json")]
    pub json: bool,
    /// Only quarantined patterns.
    #[arg(short = 'q', long = "quarantined")]
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
    let patterns = store.get_patterns(&query).map_err(store_error)?;
    if args.json {
        let items: Vec<Value> = patterns
            .iter()
            .map(|p| {
                json!({
                    "id": p.id,
                    "pattern_type": p.pattern_type,
                    "pattern_name": p.pattern_name,
                    "description": p.description,
                    "occurrence_count": p.occurrence_count,
                    "effectiveness_score": round(p.effectiveness_score, 3),
                    "priority_score": round(p.priority_score, 3),
                    "context_tags": p.context_tags,
                    "quarantine_status": p.quarantine_status.as_str(),
                    "trust_score": round(p.trust_score, 3),
                })
            })
            .collect();
        print_json(&Value::Array(items));
        return Ok(0);
    }
    if patterns.is_empty() {
        println!("No patterns found in global learning store.");
        println!("Patterns are learned as jobs run; run some scores first.");
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = patterns
        .iter()
        .map(|p| {
            let auto = p.trust_score >= 0.85
                && matches!(
                    p.quarantine_status,
                    QuarantineStatus::Validated | QuarantineStatus::Active
                );
            vec![
                head(&p.id, 10),
                head(&p.pattern_type, 12),
                head(&p.pattern_name, 20),
                p.quarantine_status.as_str().to_string(),
                format!("{:.2}", p.trust_score),
                if auto { "⚡".into() } else { String::new() },
                p.occurrence_count.to_string(),
                format!("{:.2}", p.effectiveness_score),
                format!("{:.2}", p.priority_score),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            "Global Learning Patterns",
            &["ID", "Type", "Name", "Status", "Trust", "Auto", "Count", "Effect", "Prior"],
            &rows
        )
    );
    println!("\nShowing {} pattern(s)", patterns.len());
    Ok(0)
}

/// Arguments of `mozart patterns-why`.
#[derive(Debug, clap::Args)]
pub struct WhyArgs {
    /// Pattern ID (or a prefix of it); without it, every pattern with success factors.
    #[arg(value_name = "PATTERN_ID")]
    pub pattern_id: Option<String>,
    /// Minimum observations.
    #[arg(
        short = 'm',
        long = "min-obs",
        default_value_t = 1,
        value_name = "INTEGER"
    )]
    pub min_obs: i64,
    /// Maximum number of patterns.
    #[arg(
        short = 'n',
        long = "limit",
        default_value_t = 10,
        value_name = "INTEGER"
    )]
    pub limit: usize,
    /// Output as JSON.
    #[arg(short = 'j', long = "json")]
    pub json: bool,
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

/// Run `mozart patterns-why`.
pub fn why(args: WhyArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    let Some(prefix) = args.pattern_id else {
        let all = store
            .patterns_with_why(args.min_obs, args.limit)
            .map_err(store_error)?;
        if args.json {
            let items: Vec<Value> = all
                .iter()
                .map(|w| json!({"pattern_id": w.pattern_id, "pattern_name": w.pattern_name, "analysis": why_json(w)}))
                .collect();
            print_json(&Value::Array(items));
            return Ok(0);
        }
        if all.is_empty() {
            println!("No patterns with captured success factors found.");
            println!("Success factors are captured when patterns lead to successful sheets.");
            return Ok(0);
        }
        let rows: Vec<Vec<String>> = all
            .iter()
            .map(|w| {
                let insight = w
                    .key_conditions
                    .first()
                    .cloned()
                    .unwrap_or_else(|| w.factors_summary.clone());
                vec![
                    head(&w.pattern_name, 25),
                    w.observation_count.to_string(),
                    format!("{:.0}%", w.success_rate * 100.0),
                    format!("{:.2}", w.confidence),
                    cut(&insight, 35),
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                "Patterns with WHY Analysis",
                &["Pattern", "Obs", "Success%", "Confidence", "Key Insight"],
                &rows
            )
        );
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
            crate::output::print_error(
                &format!("No pattern found with ID starting with '{prefix}'"),
                &[],
            );
            return Ok(1);
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
        crate::output::print_error(&format!("Pattern {} not found", matches[0].id), &[]);
        return Ok(1);
    };
    if args.json {
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
        vec!["Observations".into(), w.observation_count.to_string()],
        vec![
            "Success Rate".into(),
            format!("{:.1}%", w.success_rate * 100.0),
        ],
        vec!["Confidence".into(), format!("{:.2}", w.confidence)],
        vec!["Trust Score".into(), format!("{:.2}", w.trust_score)],
        vec![
            "Effectiveness".into(),
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
