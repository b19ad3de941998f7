//! `mozart patterns-entropy`, `patterns-budget` and `entropy-status` (learning.md §13).

use mozart_learning::{BudgetRecord, EntropyResponseRecord, EntropySnapshot};
use serde_json::{json, Value};

use super::shared::{History, JobHistory, Listing};
use super::{head, open_store, round, store_error};
use crate::output::print_json;
use crate::CliError;
use crate::OutputMode;

/// Arguments of `mozart patterns-entropy`.
#[derive(Debug, clap::Args)]
#[command(mut_arg("history", |a| a.help("Show recorded snapshots instead")))]
pub struct EntropyArgs {
    /// Alert when the diversity index is below this.
    #[arg(short, long, default_value_t = 0.5, value_name = "FLOAT")]
    pub threshold: f64,
    #[command(flatten)]
    pub rows: History,
    /// Output as JSON.
    #[arg(id = "json", short = 'j', long = "json", action = clap::ArgAction::SetTrue, value_parser = OutputMode::flag())]
    pub output: OutputMode,
    /// Record this measurement in the history.
    #[arg(short, long)]
    pub record: bool,
}

fn snapshot_json(h: &EntropySnapshot) -> Value {
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
}

const SNAPSHOTS: Listing<'static, EntropySnapshot> = Listing {
    title: "Pattern Entropy History",
    headers: &[
        "Time",
        "Shannon H",
        "Diversity",
        "Unique",
        "Effective",
        "Applications",
        "Dominant %",
    ],
    none: &[
        "No entropy history recorded.",
        "Record a snapshot with: mozart patterns-entropy --record",
    ],
    cells: |h| {
        vec![
            head(&h.calculated_at, 19),
            format!("{:.3}", h.shannon_entropy),
            format!("{:.3}", h.diversity_index),
            h.unique_pattern_count.to_string(),
            h.effective_pattern_count.to_string(),
            h.total_applications.to_string(),
            format!("{:.1}%", h.dominant_pattern_share * 100.0),
        ]
    },
};

/// Run `mozart patterns-entropy`.
pub fn entropy(args: EntropyArgs) -> Result<i32, CliError> {
    let store = open_store()?;
    if args.rows.history {
        let rows = store
            .entropy_history(args.rows.limit)
            .map_err(store_error)?;
        let json = args
            .output
            .json(|| Value::Array(rows.iter().map(snapshot_json).collect()));
        SNAPSHOTS.print(&rows, json);
        return Ok(0);
    }
    let m = store.pattern_entropy().map_err(store_error)?;
    let exceeded = m.diversity_index < args.threshold;
    if args.record {
        let id = store
            .record_entropy_snapshot(&m, exceeded)
            .map_err(store_error)?;
        if !args.output.is_json() {
            println!("Recorded entropy snapshot: {}", head(&id, 10));
        }
    }
    if args.output.is_json() {
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
#[command(mut_arg("history", |a| a.help("Show the adjustment history")))]
pub struct BudgetArgs {
    #[command(flatten)]
    pub select: JobHistory,
}

const ADJUSTMENTS: Listing<'static, BudgetRecord> = Listing {
    title: "Exploration Budget History",
    headers: &["Time", "Budget", "Entropy", "Type", "Reason"],
    none: &["No exploration budget history."],
    cells: |b| {
        vec![
            head(&b.recorded_at, 19),
            format!("{:.1}%", b.budget_value * 100.0),
            b.entropy_at_time.map_or("-".into(), |e| format!("{e:.3}")),
            b.adjustment_type.clone(),
            b.adjustment_reason.clone().unwrap_or_default(),
        ]
    },
};

/// Run `mozart patterns-budget`.
pub fn budget(args: BudgetArgs) -> Result<i32, CliError> {
    let args = args.select;
    let store = open_store()?;
    let rows = store
        .exploration_budget_history(args.job.as_deref(), args.read_limit())
        .map_err(store_error)?;
    if args.rows.history {
        let json = args
            .output
            .json(|| serde_json::to_value(&rows).unwrap_or(Value::Null));
        ADJUSTMENTS.print(&rows, json);
        return Ok(0);
    }
    let Some(current) = rows.first() else {
        if args.output.is_json() {
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
    if args.output.is_json() {
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
#[command(mut_arg("job", |a| a.help("Only this job hash")))]
#[command(mut_arg("history", |a| a.help("Show the response history")))]
pub struct StatusArgs {
    #[command(flatten)]
    pub select: JobHistory,
    /// Check whether a response is needed now.
    #[arg(short, long)]
    pub check: bool,
}

fn response_json(r: &EntropyResponseRecord) -> Value {
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
}

const RESPONSES: Listing<'static, EntropyResponseRecord> = Listing {
    title: "Entropy Response History",
    headers: &[
        "Time",
        "Entropy",
        "Threshold",
        "Budget+",
        "Revisits",
        "Actions",
    ],
    none: &["No entropy responses recorded."],
    cells: |r| {
        vec![
            head(&r.recorded_at, 19),
            format!("{:.3}", r.entropy_at_trigger),
            format!("{:.3}", r.threshold_used),
            if r.budget_boosted { "yes" } else { "no" }.into(),
            r.quarantine_revisits.to_string(),
            r.actions_taken.join(", "),
        ]
    },
};

/// Run `mozart entropy-status`.
pub fn status(args: StatusArgs) -> Result<i32, CliError> {
    let (check, args) = (args.check, args.select);
    let store = open_store()?;
    if check {
        let job = args.job.as_deref().unwrap_or("default");
        let c = store
            .check_entropy_response_needed(job, 0.3, 3600.0)
            .map_err(store_error)?;
        let entropy = c.current_entropy.filter(|e| *e != 0.0);
        if args.output.is_json() {
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
    let rows = store
        .entropy_response_history(args.job.as_deref(), args.read_limit())
        .map_err(store_error)?;
    if args.rows.history {
        let json = args
            .output
            .json(|| Value::Array(rows.iter().map(response_json).collect()));
        RESPONSES.print(&rows, json);
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
    if args.output.is_json() {
        print_json(&json!({
            "statistics": {
                "total_responses": total,
                "avg_entropy_at_trigger": round(avg, 4),
                "budget_boosts": boosts,
                "quarantine_revisits": revisits,
                "last_response": last.map(|r| r.recorded_at.clone()),
            },
            "last_response": last.map(response_json),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_tables_keep_their_columns() {
        let snapshot = |at: &str, h: f64, d: f64, share: f64| EntropySnapshot {
            id: "h".into(),
            calculated_at: at.into(),
            shannon_entropy: h,
            max_possible_entropy: 1.58,
            diversity_index: d,
            unique_pattern_count: 3,
            effective_pattern_count: 2,
            total_applications: 31,
            dominant_pattern_share: share,
            threshold_exceeded: false,
        };
        assert_eq!(
            SNAPSHOTS.render(&[snapshot("2026-11-21T12:00:00.123456", 2.2, 0.4, 0.6)]),
            "Pattern Entropy History\n\
             Time                 Shannon H  Diversity  Unique  Effective  Applications  Dominant %\n\
             ───────────────────  ─────────  ─────────  ──────  ─────────  ────────────  ──────────\n\
             2026-11-21T12:00:00  2.200      0.400      3       2          31            60.0%\n"
        );
        assert_eq!(
            SNAPSHOTS.render(&[]),
            "No entropy history recorded.\nRecord a snapshot with: mozart patterns-entropy --record\n"
        );

        let budget =
            |value: f64, entropy: Option<f64>, kind: &str, why: Option<&str>| BudgetRecord {
                id: "b".into(),
                job_hash: "daemon-entropy-check".into(),
                recorded_at: "2026-11-22T10:00:00".into(),
                budget_value: value,
                entropy_at_time: entropy,
                adjustment_type: kind.into(),
                adjustment_reason: why.map(str::to_string),
            };
        assert_eq!(
            ADJUSTMENTS.render(&[
                budget(0.35, Some(0.6), "decay", Some("reason 2")),
                budget(0.05, None, "floor_enforced", None),
            ]),
            "Exploration Budget History\n\
             Time                 Budget  Entropy  Type            Reason\n\
             ───────────────────  ──────  ───────  ──────────────  ────────\n\
             2026-11-22T10:00:00  35.0%   0.600    decay           reason 2\n\
             2026-11-22T10:00:00  5.0%    -        floor_enforced\n"
        );

        let response = EntropyResponseRecord {
            id: "r".into(),
            job_hash: "daemon-entropy-check".into(),
            recorded_at: "2026-11-21T11:00:00".into(),
            entropy_at_trigger: 0.26,
            threshold_used: 0.3,
            actions_taken: vec!["boost_budget".into(), "revisit_quarantine".into()],
            budget_boosted: true,
            quarantine_revisits: 2,
            patterns_revisited: vec![],
        };
        assert_eq!(
            RESPONSES.render(&[response]),
            "Entropy Response History\n\
             Time                 Entropy  Threshold  Budget+  Revisits  Actions\n\
             ───────────────────  ───────  ─────────  ───────  ────────  ────────────────────────────────\n\
             2026-11-21T11:00:00  0.260    0.300      yes      2         boost_budget, revisit_quarantine\n"
        );
        assert_eq!(RESPONSES.render(&[]), "No entropy responses recorded.\n");
    }
}
