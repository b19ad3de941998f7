//! The task list of a `tasks:` score (docs/mochi.md), as `validate` and `run --dry-run` show it,
//! with the branch each task's (or sheet's) own worktree will really get.

use mozart_config::JobConfig;
use mozart_jobs::isolation::PlannedWorktree;

/// Sheets with their own worktrees listed one by one; more are summed up.
const SHEETS_LISTED: usize = 20;

/// The worktrees a score with `isolation.scope: sheet` will use, as [`plan_branches`] found
/// them in the repository.
#[derive(Debug, Default)]
pub struct BranchPlan {
    /// Per task, in order: the name `tasks.branch` gives it (its `branch` is now the one it
    /// will really get).
    requested: Vec<String>,
    /// Every sheet's worktree, in sheet order.
    sheets: Vec<(u32, PlannedWorktree)>,
    /// Why the names could not be checked against the repository.
    unchecked: Option<String>,
}

/// Give each task the branch its worktree will really get when the job `job_id` runs: a
/// taken name gets `-2`, `-3`, … as the conductor will give it, and a worktree an earlier
/// run recorded is reused with its branch. The prompt preview then shows the real
/// `task_branch` too. Nothing in the repository changes.
pub fn plan_branches(c: &mut JobConfig, job_id: &str) -> BranchPlan {
    let mut plan = unplanned(c);
    if !mozart_jobs::sheet_worktrees::per_sheet(c) {
        return plan;
    }
    let task_sheets = sheet_numbers(c);
    let total = u32::try_from(mozart_config::plan::total_sheets(&c.sheet)).unwrap_or(0);
    let wanted: Vec<(u32, Option<String>)> = (1..=total)
        .map(|n| {
            let task = task_sheets
                .iter()
                .position(|s| *s == i64::from(n))
                .and_then(|i| plan.requested.get(i).cloned());
            (n, task)
        })
        .collect();
    match mozart_jobs::sheet_worktrees::plan(c, job_id, &wanted) {
        Ok(planned) => {
            if let Some(tasks) = c.tasks.as_mut() {
                for (i, item) in tasks.items.iter_mut().enumerate() {
                    let sheet = task_sheets.get(i).and_then(|s| u32::try_from(*s).ok());
                    if let Some(p) = sheet.and_then(|s| planned.get(s as usize - 1)) {
                        item.branch = p.branch.clone();
                    }
                }
            }
            plan.sheets = (1..=total).zip(planned).collect();
        }
        Err(e) => plan.unchecked = Some(e),
    }
    plan
}

/// Whether [`plan_branches`] changes the score: only a score whose sheets get their own
/// worktrees has branches to plan; for any other, [`unplanned`] is its whole answer.
pub fn plans_branches(c: &JobConfig) -> bool {
    mozart_jobs::sheet_worktrees::per_sheet(c)
}

/// The plan of a score without per-sheet worktrees: each task's branch as `tasks` names it.
pub fn unplanned(c: &JobConfig) -> BranchPlan {
    BranchPlan {
        requested: c
            .tasks
            .as_ref()
            .map(|t| t.items.iter().map(|i| i.branch.clone()).collect())
            .unwrap_or_default(),
        ..BranchPlan::default()
    }
}

/// The worktrees of a per-sheet score as JSON (`null` without them):
/// `[{"sheet", "branch", "path", "reused"}]`.
pub fn worktrees_json(plan: &BranchPlan) -> serde_json::Value {
    if plan.sheets.is_empty() {
        return serde_json::Value::Null;
    }
    serde_json::Value::Array(
        plan.sheets
            .iter()
            .map(|(n, w)| {
                serde_json::json!({
                    "sheet": n,
                    "branch": w.branch,
                    "path": w.path.display().to_string(),
                    "reused": w.reused,
                })
            })
            .collect(),
    )
}

/// The tasks as JSON (`null` without `tasks:`): `branch` is the one the task will really
/// use, `requested_branch` the name `tasks.branch` gives it.
pub fn tasks_json(c: &JobConfig, plan: &BranchPlan) -> serde_json::Value {
    let Some(tasks) = &c.tasks else {
        return serde_json::Value::Null;
    };
    let sheets = sheet_numbers(c);
    serde_json::Value::Array(
        tasks
            .items
            .iter()
            .enumerate()
            .map(|(i, t)| {
                serde_json::json!({
                    "num": t.num,
                    "sheet": sheets.get(t.num as usize - 1),
                    "task": t.text,
                    "slug": t.slug,
                    "branch": t.branch,
                    "requested_branch": plan.requested.get(i).unwrap_or(&t.branch),
                    "model": t.model,
                    "line": t.line,
                })
            })
            .collect(),
    )
}

/// Sheet number of each task, in task order.
fn sheet_numbers(c: &JobConfig) -> Vec<i64> {
    let Some(tasks) = &c.tasks else {
        return Vec::new();
    };
    let mut nums: Vec<(i64, i64)> = c
        .sheet
        .fan_out_stage_map
        .iter()
        .flatten()
        .filter(|(_, m)| m.stage == Some(tasks.movement))
        .map(|(n, m)| (m.instance.unwrap_or(1), n))
        .collect();
    nums.sort_unstable();
    nums.into_iter().map(|(_, n)| n).collect()
}

/// Print the task table, and the worktrees of the sheets that play no task (nothing
/// without `tasks:` or per-sheet worktrees).
pub fn print_tasks(c: &JobConfig, plan: &BranchPlan) {
    let Some(tasks) = &c.tasks else {
        print_sheet_worktrees(plan, &[]);
        return;
    };
    let source = match (&tasks.file, tasks.issue) {
        (Some(f), _) => f.display().to_string(),
        (None, Some(n)) => format!("GitHub issue #{n}"),
        _ => String::new(),
    };
    println!(
        "\nTasks ({} from {source}, movement {}):",
        tasks.items.len(),
        tasks.movement
    );
    let sheets = sheet_numbers(c);
    let rows: Vec<[String; 5]> = tasks
        .items
        .iter()
        .map(|t| {
            let sheet = sheets
                .get(t.num as usize - 1)
                .map_or_else(|| "?".into(), i64::to_string);
            [
                sheet,
                t.slug.clone(),
                t.branch.clone(),
                t.model.clone().unwrap_or_else(|| "-".into()),
                t.text.clone(),
            ]
        })
        .collect();
    let headers = ["Sheet", "Slug", "Branch", "Model", "Task"];
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        println!("  {}", parts.join("  ").trim_end());
    };
    line(headers);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4]]);
    }
    if mozart_jobs::sheet_worktrees::per_sheet(c) {
        println!(
            "  (each task gets its own git worktree; a taken branch name gets a -2, -3 suffix)"
        );
        for (i, t) in tasks.items.iter().enumerate() {
            let requested = plan.requested.get(i).unwrap_or(&t.branch);
            let reused = sheets
                .get(i)
                .and_then(|s| plan.sheets.iter().find(|(n, _)| i64::from(*n) == *s))
                .filter(|(_, w)| w.reused);
            if let Some((_, w)) = reused {
                println!(
                    "  task {}: reuses the worktree {} of an earlier run, on branch {}",
                    t.num,
                    w.path.display(),
                    w.branch
                );
            } else if *requested != t.branch {
                println!(
                    "  task {}: {requested} is taken (a branch or worktree of that name exists): it gets {}",
                    t.num, t.branch
                );
            }
        }
        if let Some(why) = &plan.unchecked {
            println!("  (branch names not checked against the repository: {why})");
        }
    }
    if let Some(r) = &c.review {
        println!(
            "  Reviewer: {}{}, up to {} iterations; dispatch: {}",
            r.instrument.as_deref().unwrap_or("the sheet's instrument"),
            r.model
                .as_deref()
                .map(|m| format!(" (model {m})"))
                .unwrap_or_default(),
            r.max_iterations,
            tasks.dispatch.as_str()
        );
    } else {
        println!("  Dispatch: {}", tasks.dispatch.as_str());
    }
    print_sheet_worktrees(plan, &sheets);
}

/// The worktrees of per-sheet sheets that play no task (`tasks` lists the task sheets).
fn print_sheet_worktrees(plan: &BranchPlan, tasks: &[i64]) {
    let others: Vec<&(u32, PlannedWorktree)> = plan
        .sheets
        .iter()
        .filter(|(n, _)| !tasks.contains(&i64::from(*n)))
        .collect();
    if others.is_empty() {
        if tasks.is_empty() {
            if let Some(why) = &plan.unchecked {
                println!("\nWorktrees: one per sheet (not checked against the repository: {why})");
            }
        }
        return;
    }
    println!("\nWorktrees (isolation.scope: sheet, one per sheet):");
    for (n, w) in others.iter().take(SHEETS_LISTED) {
        let reused = if w.reused { " (reused)" } else { "" };
        println!("  Sheet {n}: {}{reused}", w.branch);
    }
    if others.len() > SHEETS_LISTED {
        println!(
            "  … and {} more (mozart run --dry-run --json lists every one)",
            others.len() - SHEETS_LISTED
        );
    }
}
