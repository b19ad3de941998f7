//! Single-brace `{placeholder}` expansion (score.md §5.8) — not Jinja.

use std::borrow::Cow;

use indexmap::IndexMap;

pub use crate::braces::expand_with;

/// Placeholder values in lookup order (later inserts replace earlier ones).
pub type PlaceholderVars = IndexMap<String, String>;

/// Replace every literal `{key}` by its value; unknown placeholders stay as written.
/// With `shell_quote`, values are quoted like Python's `shlex.quote` (§5.8.2).
///
/// One pass over the text: a substituted value is never scanned again, so a value that
/// itself contains `{name}` is inserted as it is (no second-order expansion).
pub fn expand(text: &str, vars: &PlaceholderVars, shell_quote: bool) -> String {
    expand_with(text, |key| {
        vars.get(key).map(|value| {
            if shell_quote {
                Cow::Owned(quote(value))
            } else {
                Cow::Borrowed(value.as_str())
            }
        })
    })
}

/// Python `shlex.quote`.
pub fn quote(s: &str) -> String {
    if s.is_empty() {
        return "''".into();
    }
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\"'\"'"))
}

/// The sheet context of §5.2 as placeholder values: user variables first, built-ins over
/// them (§5.8.1), `workspace` last.
pub fn sheet_vars(
    job: &crate::JobConfig,
    sheet: &crate::PlannedSheet,
    total_sheets: u32,
    total_movements: u32,
) -> PlaceholderVars {
    let mut vars = PlaceholderVars::with_capacity(job.prompt.variables.len() + 13);
    for (k, v) in &job.prompt.variables {
        vars.insert(k.clone(), python_str_of(v));
    }
    let builtins: [(&str, String); 12] = [
        ("sheet_num", sheet.num.to_string()),
        ("total_sheets", total_sheets.to_string()),
        ("start_item", sheet.start_item.to_string()),
        ("end_item", sheet.end_item.to_string()),
        ("stage", sheet.movement.to_string()),
        ("instance", sheet.voice.to_string()),
        ("fan_count", sheet.voice_count.to_string()),
        ("total_stages", total_movements.to_string()),
        ("movement", sheet.movement.to_string()),
        ("voice", sheet.voice.to_string()),
        ("voice_count", sheet.voice_count.to_string()),
        ("total_movements", total_movements.to_string()),
    ];
    for (k, v) in builtins {
        vars.insert(k.to_string(), v);
    }
    if let Some(task) = crate::tasks::task_of(job, sheet.movement, sheet.voice) {
        for (k, v) in crate::tasks::task_vars(job, task) {
            vars.insert(k.to_string(), v);
        }
    }
    vars.insert(
        "workspace".into(),
        job.workspace.to_string_lossy().into_owned(),
    );
    vars
}

/// The value [`sheet_vars`] holds for `key`, without building the map (a text usually
/// names one or two placeholders): the same answer for every key, `None` for a name the map
/// does not have.
pub fn sheet_value<'a>(
    job: &'a crate::JobConfig,
    sheet: &crate::PlannedSheet,
    total_sheets: u32,
    total_movements: u32,
    key: &str,
) -> Option<Cow<'a, str>> {
    let number = match key {
        "sheet_num" => i64::from(sheet.num),
        "total_sheets" => i64::from(total_sheets),
        "start_item" => sheet.start_item,
        "end_item" => sheet.end_item,
        "stage" | "movement" => i64::from(sheet.movement),
        "instance" | "voice" => i64::from(sheet.voice),
        "fan_count" | "voice_count" => i64::from(sheet.voice_count),
        "total_stages" | "total_movements" => i64::from(total_movements),
        "workspace" => return Some(job.workspace.to_string_lossy()),
        _ if key.starts_with("task") => {
            if let Some(task) = crate::tasks::task_of(job, sheet.movement, sheet.voice) {
                if let Some((_, v)) = crate::tasks::task_vars(job, task)
                    .into_iter()
                    .find(|(k, _)| *k == key)
                {
                    return Some(Cow::Owned(v));
                }
            }
            return job.prompt.variables.get(key).map(|v| match v {
                serde_json::Value::String(s) => Cow::Borrowed(s.as_str()),
                other => Cow::Owned(python_str_of(other)),
            });
        }
        _ => {
            return job.prompt.variables.get(key).map(|v| match v {
                serde_json::Value::String(s) => Cow::Borrowed(s.as_str()),
                other => Cow::Owned(python_str_of(other)),
            })
        }
    };
    Some(Cow::Owned(number.to_string()))
}

/// Python `str()` of a JSON value (what `str.format` would print for a user variable).
pub fn python_str_of(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "None".into(),
        serde_json::Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => crate::yaml::python_float(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_and_quotes() {
        let mut vars = PlaceholderVars::new();
        vars.insert("workspace".into(), "/tmp/my ws".into());
        vars.insert("sheet_num".into(), "3".into());
        assert_eq!(
            expand("{workspace}/out-{sheet_num}.md", &vars, false),
            "/tmp/my ws/out-3.md"
        );
        assert_eq!(
            expand("test -f {workspace}/x {other}", &vars, true),
            "test -f '/tmp/my ws'/x {other}"
        );
        assert_eq!(expand("{{workspace}}", &vars, false), "{/tmp/my ws}");
        assert_eq!(expand("{sheet_num}{sheet_num}", &vars, false), "33");
        assert_eq!(
            expand("open {brace and {sheet_num", &vars, false),
            "open {brace and {sheet_num"
        );
        // A value is not expanded again.
        vars.insert("evil".into(), "{sheet_num}".into());
        assert_eq!(expand("{evil}", &vars, false), "{sheet_num}");
        assert_eq!(quote("it's"), "'it'\"'\"'s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("/plain/path-1.md"), "/plain/path-1.md");
    }

    #[test]
    fn one_value_is_the_maps_value() {
        let score = crate::load_score_str(
            concat!(
                "name: t\nworkspace: /tmp/w s\n",
                "sheet: {size: 1, total_items: 3, fan_out: {2: 3}}\n",
                "prompt:\n  template: x\n",
                "  variables: {who: me, n: 3, f: 1.5, b: true, none: null, l: [1, 'a'], ",
                "m: {k: v}, voice: 99, sheet_num: shadowed}\n",
            ),
            std::path::Path::new("t.yaml"),
        )
        .unwrap();
        let job = &score.config;
        let plan = crate::plan::SheetPlan::build(job).unwrap();
        for sheet in &plan.sheets {
            let vars = sheet_vars(job, sheet, plan.total_sheets, plan.total_movements);
            for (key, value) in &vars {
                assert_eq!(
                    sheet_value(job, sheet, plan.total_sheets, plan.total_movements, key)
                        .as_deref(),
                    Some(value.as_str()),
                    "sheet {} key {key}",
                    sheet.num
                );
            }
            for unknown in ["nope", "", "Workspace"] {
                assert_eq!(
                    sheet_value(job, sheet, plan.total_sheets, plan.total_movements, unknown),
                    None
                );
            }
        }
    }
}
