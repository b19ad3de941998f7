//! The task list of a `tasks:` score (docs/mochi.md), as `validate` and `run --dry-run` show it.

use mozart_config::JobConfig;

/// The tasks as JSON (`null` without `tasks:`).
pub fn tasks_json(c: &JobConfig) -> serde_json::Value {
    let Some(tasks) = &c.tasks else {
        return serde_json::Value::Null;
    };
    let sheets = sheet_numbers(c);
    serde_json::Value::Array(
        tasks
            .items
            .iter()
            .map(|t| {
                serde_json::json!({
                    "num": t.num,
                    "sheet": sheets.get(t.num as usize - 1),
                    "task": t.text,
                    "slug": t.slug,
                    "branch": t.branch,
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
        .filter(|(_, m)| m.get("stage").copied() == Some(tasks.movement))
        .map(|(n, m)| (m.get("instance").copied().unwrap_or(1), *n))
        .collect();
    nums.sort_unstable();
    nums.into_iter().map(|(_, n)| n).collect()
}

/// Print the task table (nothing without `tasks:`).
pub fn print_tasks(c: &JobConfig) {
    let Some(tasks) = &c.tasks else {
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
    if c.isolation.enabled && c.isolation.scope == mozart_config::model::IsolationScope::Sheet {
        println!(
            "  (each task gets its own git worktree; a taken branch name gets a -2, -3 suffix)"
        );
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
}
