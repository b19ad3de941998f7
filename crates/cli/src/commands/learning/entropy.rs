//! `mozart patterns-entropy`, `patterns-budget` and `entropy-status` (learning.md §13).

use serde_json::{json, Value};

use super::{head, open_store, round, store_error, table};
use crate::output::print_json;
use crate::CliError;

/// Arguments of `mozart patterns-entropy`.
#[derive(Debug, clap::Args)]
pub struct EntropyArgs {
    /// Alert when the diversity index is below this.
    #[arg(
        short = 't',
        long = "threshold",
        default_value_t = 0.5,
        value_name = "FLOAT"
    )]
    pub threshold: f64,
    /// Show recorded snapshots instead.
    #[arg(short = 'H', long = "history")]
    pub history: bool,
    /// Maximum history rows.
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
    /// Record this measurement in the history.
    #[arg(short = 'r', long = "record")]
    pub record: bool,
}

/// Run `mozart patterns-entropy`.
pub fn entropy(args: EntropyArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    if args.history {
        let rows = store.entropy_history(args.limit).map_err(store_error)?;
        if args.json {
            let items: Vec<Value> = rows
                .iter()
                .map(|h| {
                    json!({
                        "calculated_at": h.calculated_at,
                        "shannon_entropy": round(h.shannon_entropy, 4),
                        "max_possible_entropy": round(h.max_possible_entropy, 4),
                        "diversity_index": round(h.diversity_index, 4),
                        "unique_pattern_count": h.unique_pattern_count,
                        "effective_pattern_count": h.effective_pattern_count,
                        "total_applications": h.total_applications,
                        "dominant_pattern_share": round(h.dominant_pattern_share, 4),
                        "threshold_exceeded": h.threshold_exceeded,
                    })
                })
                .collect();
            print_json(&Value::Array(items));
            return Ok(0);
        }
        if rows.is_empty() {
            println!("No entropy history recorded.");
            println!("Record a snapshot with: mozart patterns-entropy --record");
            return Ok(0);
        }
        let lines: Vec<Vec<String>> = rows
            .iter()
            .map(|h| {
                vec![
                    head(&h.calculated_at, 19),
                    format!("{:.3}", h.shannon_entropy),
                    format!("{:.3}", h.diversity_index),
                    h.unique_pattern_count.to_string(),
                    h.effective_pattern_count.to_string(),
                    h.total_applications.to_string(),
                    format!("{:.1}%", h.dominant_pattern_share * 100.0),
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                "Pattern Entropy History",
                &[
                    "Time",
                    "Shannon H",
                    "Diversity",
                    "Unique",
                    "Effective",
                    "Applications",
                    "Dominant %"
                ],
                &lines
            )
        );
        return Ok(0);
    }
    let m = store.pattern_entropy().map_err(store_error)?;
    let exceeded = m.diversity_index < args.threshold;
    if args.record {
        let id = store
            .record_entropy_snapshot(&m, exceeded)
            .map_err(store_error)?;
        if !args.json {
            println!("Recorded entropy snapshot: {}", head(&id, 10));
        }
    }
    if args.json {
        print_json(&json!({
            "calculated_at": jiff::Zoned::now().datetime().to_string(),
            "shannon_entropy": round(m.shannon_entropy, 4),
            "max_possible_entropy": round(m.max_possible_entropy, 4),
            "diversity_index": round(m.diversity_index, 4),
            "unique_pattern_count": m.unique_pattern_count,
            "effective_pattern_count": m.effective_pattern_count,
            "total_applications": m.total_applications,
            "dominant_pattern_share": round(m.dominant_pattern_share, 4),
            "threshold_exceeded": exceeded,
            "alert_threshold": args.threshold,
        }));
        return Ok(0);
    }
    if m.total_applications == 0 {
        println!("No pattern applications yet.");
        println!("Entropy is measured once patterns are applied to prompts.");
        return Ok(0);
    }
    println!("Pattern Population Entropy\n");
    println!("  Shannon entropy: {:.3} bits", m.shannon_entropy);
    println!("  Max possible: {:.3} bits", m.max_possible_entropy);
    println!(
        "  Diversity index: {:.3} (threshold {})",
        m.diversity_index, args.threshold
    );
    println!("  Unique patterns: {}", m.unique_pattern_count);
    println!("  Effective patterns: {}", m.effective_pattern_count);
    println!("  Total applications: {}", m.total_applications);
    println!(
        "  Dominant pattern share: {:.1}%",
        m.dominant_pattern_share * 100.0
    );
    println!();
    if exceeded {
        println!("⚠ Pattern population shows low diversity - model collapse risk!");
    } else if m.dominant_pattern_share > 0.5 {
        println!("⚠ Single pattern holds >50% of applications");
    } else {
        println!("✓ Healthy pattern diversity");
    }
    Ok(0)
}

/// Arguments of `mozart patterns-budget`.
#[derive(Debug, clap::Args)]
pub struct BudgetArgs {
    /// Only this job hash (the conductor records `daemon-entropy-check`).
    #[arg(short = 'j', long = "job", value_name = "TEXT")]
    pub job: Option<String>,
    /// Show the adjustment history.
    #[arg(short = 'H', long = "history")]
    pub history: bool,
    /// Maximum history rows.
    #[arg(
        short = 'n',
        long = "limit",
        default_value_t = 20,
        value_name = "INTEGER"
    )]
    pub limit: usize,
    /// Output as JSON.
    #[arg(long = "json")]
    pub json: bool,
}

/// Run `mozart patterns-budget`.
pub fn budget(args: BudgetArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    let limit = if args.history { args.limit } else { 10_000 };
    let rows = store
        .exploration_budget_history(args.job.as_deref(), limit)
        .map_err(store_error)?;
    if args.history {
        if args.json {
            print_json(&serde_json::to_value(&rows).unwrap_or(Value::Null));
            return Ok(0);
        }
        if rows.is_empty() {
            println!("No exploration budget history.");
            return Ok(0);
        }
        let lines: Vec<Vec<String>> = rows
            .iter()
            .map(|b| {
                vec![
                    head(&b.recorded_at, 19),
                    format!("{:.1}%", b.budget_value * 100.0),
                    b.entropy_at_time.map_or("-".into(), |e| format!("{e:.3}")),
                    b.adjustment_type.clone(),
                    b.adjustment_reason.clone().unwrap_or_default(),
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                "Exploration Budget History",
                &["Time", "Budget", "Entropy", "Type", "Reason"],
                &lines
            )
        );
        return Ok(0);
    }
    let Some(current) = rows.first() else {
        if args.json {
            print_json(&json!({"current": null, "statistics": null}));
        } else {
            println!("No exploration budget recorded yet.");
            println!("The budget is adjusted by the conductor's periodic entropy check.");
        }
        return Ok(0);
    };
    let values: Vec<f64> = rows.iter().map(|b| b.budget_value).collect();
    let count = |t: &str| rows.iter().filter(|b| b.adjustment_type == t).count();
    let (floors, boosts, decays) = (count("floor_enforced"), count("boost"), count("decay"));
    let stats = json!({
        "avg_budget": round(values.iter().sum::<f64>() / values.len() as f64, 4),
        "min_budget": round(values.iter().copied().fold(f64::INFINITY, f64::min), 4),
        "max_budget": round(values.iter().copied().fold(f64::NEG_INFINITY, f64::max), 4),
        "total_adjustments": rows.len(),
        "floor_enforcements": floors,
        "boost_count": boosts,
        "decay_count": decays,
    });
    if args.json {
        print_json(&json!({
            "current": {
                "budget_value": current.budget_value,
                "entropy_at_time": current.entropy_at_time,
                "adjustment_type": current.adjustment_type,
                "recorded_at": current.recorded_at,
            },
            "statistics": stats,
        }));
        return Ok(0);
    }
    let label = match current.budget_value {
        v if v <= 0.10 => "Low (near floor)",
        v if v >= 0.30 => "High (exploring)",
        _ => "Normal",
    };
    println!("Exploration Budget\n");
    println!(
        "  Current budget: {:.1}% — {label}",
        current.budget_value * 100.0
    );
    if let Some(e) = current.entropy_at_time {
        println!("  Entropy at last check: {e:.3}");
    }
    println!(
        "  Last adjustment: {} at {}",
        current.adjustment_type,
        head(&current.recorded_at, 19)
    );
    println!(
        "\n  Adjustments: {} (boosts {boosts}, decays {decays}, floor enforced {floors})",
        rows.len()
    );
    if floors as f64 > 0.3 * rows.len() as f64 {
        println!("\n⚠ Budget frequently hitting floor");
    } else if boosts > 2 * decays {
        println!("\nFrequent boosts: pattern diversity keeps dropping");
    } else {
        println!("\n✓ Budget adjusting normally");
    }
    Ok(0)
}

/// Arguments of `mozart entropy-status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Only this job hash.
    #[arg(short = 'j', long = "job", value_name = "TEXT")]
    pub job: Option<String>,
    /// Show the response history.
    #[arg(short = 'H', long = "history")]
    pub history: bool,
    /// Maximum history rows.
    #[arg(
        short = 'n',
        long = "limit",
        default_value_t = 20,
        value_name = "INTEGER"
    )]
    pub limit: usize,
    /// Output as JSON.
    #[arg(long = "json")]
    pub json: bool,
    /// Check whether a response is needed now.
    #[arg(short = 'c', long = "check")]
    pub check: bool,
}

/// Run `mozart entropy-status`.
pub fn status(args: StatusArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    if args.check {
        let job = args.job.as_deref().unwrap_or("default");
        let c = store
            .check_entropy_response_needed(job, 0.3, 3600.0)
            .map_err(store_error)?;
        let entropy = c.current_entropy.filter(|e| *e != 0.0);
        if args.json {
            print_json(&json!({
                "needs_response": c.needs_response,
                "current_entropy": entropy,
                "reason": c.reason,
            }));
        } else {
            println!(
                "{}",
                if c.needs_response {
                    "⚠ Response NEEDED"
                } else {
                    "✓ No response needed"
                }
            );
            if let Some(e) = entropy {
                println!("  Current entropy: {e:.3}");
            }
            println!("  Reason: {}", c.reason);
        }
        return Ok(0);
    }
    let limit = if args.history { args.limit } else { 10_000 };
    let rows = store
        .entropy_response_history(args.job.as_deref(), limit)
        .map_err(store_error)?;
    let row_json = |r: &mozart_learning::EntropyResponseRecord| {
        json!({
            "id": r.id,
            "job_hash": r.job_hash,
            "recorded_at": r.recorded_at,
            "entropy_at_trigger": r.entropy_at_trigger,
            "threshold_used": r.threshold_used,
            "actions_taken": r.actions_taken,
            "budget_boosted": r.budget_boosted,
            "quarantine_revisits": r.quarantine_revisits,
        })
    };
    if args.history {
        if args.json {
            print_json(&Value::Array(rows.iter().map(row_json).collect()));
            return Ok(0);
        }
        if rows.is_empty() {
            println!("No entropy responses recorded.");
            return Ok(0);
        }
        let lines: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    head(&r.recorded_at, 19),
                    format!("{:.3}", r.entropy_at_trigger),
                    format!("{:.3}", r.threshold_used),
                    if r.budget_boosted { "yes" } else { "no" }.into(),
                    r.quarantine_revisits.to_string(),
                    r.actions_taken.join(", "),
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                "Entropy Response History",
                &[
                    "Time",
                    "Entropy",
                    "Threshold",
                    "Budget+",
                    "Revisits",
                    "Actions"
                ],
                &lines
            )
        );
        return Ok(0);
    }
    let total = rows.len();
    let avg = if total > 0 {
        rows.iter().map(|r| r.entropy_at_trigger).sum::<f64>() / total as f64
    } else {
        0.0
    };
    let boosts = rows.iter().filter(|r| r.budget_boosted).count();
    let revisits: i64 = rows.iter().map(|r| r.quarantine_revisits).sum();
    let last = rows.first();
    if args.json {
        print_json(&json!({
            "statistics": {
                "total_responses": total,
                "avg_entropy_at_trigger": round(avg, 4),
                "budget_boosts": boosts,
                "quarantine_revisits": revisits,
                "last_response": last.map(|r| r.recorded_at.clone()),
            },
            "last_response": last.map(row_json),
        }));
        return Ok(0);
    }
    if total == 0 {
        println!("No entropy responses recorded yet.");
        println!("The conductor responds when pattern diversity drops below its threshold.");
        return Ok(0);
    }
    println!("Entropy Response Status\n");
    println!("  Total responses: {total}");
    println!("  Avg entropy at trigger: {avg:.3}");
    println!("  Budget boosts: {boosts}");
    println!("  Quarantine revisits: {revisits}");
    if let Some(r) = last {
        println!(
            "  Last response: {} ({})",
            head(&r.recorded_at, 19),
            r.actions_taken.join(", ")
        );
    }
    if total > 10 {
        println!("\n⚠ Many responses triggered");
    } else if revisits > total as i64 {
        println!("\nActive quarantine revisiting");
    } else {
        println!("\n✓ Entropy response system active");
    }
    Ok(0)
}
