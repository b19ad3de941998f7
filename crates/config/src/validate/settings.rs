//! Checks of backend, prompt and sheet settings that are legal but likely mistakes.

use super::{find_line, format_placeholders, Ctx, Issue, Severity, CORE_BUILTINS};
use crate::model::BackendType;
use crate::plan::total_sheets;

/// V103 / V104: very short or very long backend timeouts.
pub(super) fn v103_v104(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let raw = x.raw;
    let t = c.backend.timeout_seconds;
    let ts = crate::yaml::python_float(t);
    if t < 60.0 {
        out.push(
            Issue::new(
                "V103",
                Severity::Warning,
                format!("Very short timeout ({ts}s) may cause premature failures"),
            )
            .line(find_line(raw, "timeout_seconds:"))
            .suggest("Consider timeout_seconds >= 60 for Claude CLI operations")
            .meta("timeout", ts.clone())
            .meta("threshold", "60"),
        );
    }
    if t > 7200.0 {
        out.push(
            Issue::new(
                "V104",
                Severity::Info,
                format!(
                    "Very long timeout ({ts}s = {:.1}h) - consider if this is necessary",
                    t / 3600.0
                ),
            )
            .line(find_line(raw, "timeout_seconds:"))
            .suggest("Long timeouts can tie up resources; consider breaking into smaller tasks")
            .meta("timeout", ts)
            .meta("threshold", "7200"),
        );
    }
}

/// V202: format-string placeholders in the prompt template.
pub(super) fn v202(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let raw = x.raw;
    if let Some(tpl) = c.prompt.template.as_deref().filter(|t| !t.is_empty()) {
        for (start, name) in format_placeholders(tpl) {
            out.push(Issue::new("V202", Severity::Warning, format!("Format-string syntax '{{{name}}}' found in prompt template — use Jinja '{{{{ {name} }}}}'"))
                .line(find_line(raw, &format!("{{{name}}}")))
                .context(format!("{{{name}}}"))
                .suggest(format!("Use {{{{ {name} }}}} not {{{name}}} in Jinja templates"))
                .meta("variable", name.clone()));
            let _ = start;
        }
    }
}

/// V204: Claude CLI without `skip_permissions`.
/// V010 (ours, not upstream's): a score that plans no sheet at all.
pub(super) fn v010(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let (c, raw) = (x.c, x.raw);
    if let Some(message) = crate::plan::impossible_sheet_count(&c.sheet) {
        out.push(
            Issue::new("V010", Severity::Error, message)
                .line(find_line(raw, "start_item:").or_else(|| find_line(raw, "sheet:")))
                .suggest("Make sheet.start_item at most sheet.total_items")
                .meta("start_item", c.sheet.start_item.to_string())
                .meta("total_items", c.sheet.total_items.to_string())
                .meta("size", c.sheet.size.to_string()),
        );
    }
}

pub(super) fn v204(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let raw = x.raw;
    if c.backend.kind == BackendType::ClaudeCli && !c.backend.skip_permissions {
        out.push(Issue::new("V204", Severity::Warning, "Claude CLI backend without skip_permissions will hang waiting for permission approval".into())
            .line(find_line(raw, "skip_permissions"))
            .suggest("Set backend.skip_permissions: true for unattended execution")
            .meta("backend_type", "claude_cli"));
    }
}

/// V206 / V207: fan-out without dependencies or without parallel execution.
pub(super) fn v206_v207(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let raw = x.raw;
    // A `tasks:` fan-out of a single movement has no stages to misorder.
    let lone_task_movement = c.tasks.is_some()
        && c.sheet
            .fan_out_stage_map
            .as_ref()
            .is_some_and(|m| m.values().all(|meta| meta.stage == Some(1)));
    if c.sheet.fan_out_stage_map.is_some() && c.sheet.dependencies.is_empty() && !lone_task_movement
    {
        out.push(Issue::new("V206", Severity::Warning, "Fan-out is configured but no sheet dependencies are declared — stages may run out of order".into())
            .line(find_line(raw, "fan_out"))
            .suggest("Add sheet.dependencies to control stage execution order"));
    }
    if c.sheet.fan_out_stage_map.is_some() && !c.parallel.enabled {
        out.push(Issue::new("V207", Severity::Info, "Fan-out is configured but parallel execution is disabled — instances will run sequentially".into())
            .line(find_line(raw, "parallel"))
            .suggest("Enable parallel.enabled: true to run fan-out instances concurrently"));
    }
}

/// V208: prompt variables that shadow built-ins.
pub(super) fn v208(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let raw = x.raw;
    for name in c.prompt.variables.keys() {
        if CORE_BUILTINS.contains(&name.as_str()) {
            out.push(
                Issue::new(
                    "V208",
                    Severity::Warning,
                    format!("Variable '{name}' shadows the built-in {name}"),
                )
                .line(
                    x.line_of(&format!("prompt.variables.{name}"))
                        .or_else(|| find_line(raw, &format!("{name}:"))),
                )
                .suggest(format!(
                    "Rename variable '{name}' — it shadows the built-in {name}"
                ))
                .meta("variable", name.clone()),
            );
        }
    }
}

/// V209: Claude CLI without `disable_mcp`.
pub(super) fn v209(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let raw = x.raw;
    if c.backend.kind == BackendType::ClaudeCli && !c.backend.disable_mcp {
        out.push(
            Issue::new(
                "V209",
                Severity::Info,
                "Claude CLI backend without disable_mcp may experience MCP deadlocks".into(),
            )
            .line(find_line(raw, "disable_mcp"))
            .suggest("Set backend.disable_mcp: true to prevent MCP deadlocks")
            .meta("backend_type", "claude_cli"),
        );
    }
}

/// V212: skip rules keyed on sheets that do not exist.
pub(super) fn v212(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let total = total_sheets(&c.sheet);
    for (source, keys) in [
        (
            "skip_when",
            c.sheet.skip_when.keys().copied().collect::<Vec<_>>(),
        ),
        (
            "skip_when_command",
            c.sheet.skip_when_command.keys().copied().collect(),
        ),
    ] {
        for k in keys {
            if !(1..=total).contains(&k) {
                out.push(Issue::new("V212", Severity::Warning, format!("{source} key {k} is out of range (valid: 1\u{2013}{total}); this rule will never fire"))
                    .suggest(format!("Remove sheet {k} or adjust total_sheets / fan-out"))
                    .meta("sheet_num", k.to_string())
                    .meta("source", source));
            }
        }
    }
}

/// V012 (ours): a Slurm partition the cluster does not have. Asked of Slurm itself
/// (`sinfo`) only when it answers within a few seconds: on a machine without Slurm, or
/// with its controller down, there is nothing to check against — a warning says so when
/// the score places sheets on Slurm, since they cannot run from here either.
pub(super) fn v012(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let slurm = |p: &Option<crate::model::PlacementConfig>| {
        p.as_ref()
            .is_some_and(|p| p.kind == Some(crate::model::PlacementType::Slurm))
    };
    let placed = if slurm(&c.placement) {
        Some("placement.type".to_string())
    } else {
        c.movements
            .iter()
            .find(|(_, m)| slurm(&m.placement))
            .map(|(n, _)| format!("movements.{n}.placement.type"))
            .or_else(|| {
                c.sheet
                    .per_sheet_placement
                    .iter()
                    .find(|(_, p)| p.kind == Some(crate::model::PlacementType::Slurm))
                    .map(|(n, _)| format!("sheet.per_sheet_placement.{n}.type"))
            })
    };
    let mut wanted: Vec<(String, &str)> = Vec::new();
    if let Some(p) = c.placement.as_ref().and_then(|p| p.partition.as_deref()) {
        wanted.push(("placement.partition".into(), p));
    }
    for (n, m) in &c.movements {
        if let Some(p) = m.placement.as_ref().and_then(|p| p.partition.as_deref()) {
            wanted.push((format!("movements.{n}.placement.partition"), p));
        }
    }
    for (n, p) in &c.sheet.per_sheet_placement {
        if let Some(p) = p.partition.as_deref() {
            wanted.push((format!("sheet.per_sheet_placement.{n}.partition"), p));
        }
    }
    if wanted.is_empty() && placed.is_none() {
        return;
    }
    let known = match slurm_partitions_or_why() {
        Ok(known) => known,
        Err(why) => {
            let field = placed.or_else(|| wanted.first().map(|(f, _)| f.clone()));
            if let Some(field) = field {
                let unchecked = if wanted.is_empty() {
                    String::new()
                } else {
                    " (its partitions were not checked)".to_string()
                };
                out.push(
                    Issue::new(
                        "V012",
                        Severity::Warning,
                        format!(
                            "{field}: the score places sheets on Slurm, but Slurm does not \
                             answer here: {why}{unchecked}"
                        ),
                    )
                    .line(find_line(x.raw, "placement"))
                    .suggest(
                        "Run the conductor on a Slurm submit host with sbatch, squeue, scontrol \
                         and scancel on its PATH (check: sinfo), or leave placement.type out to \
                         run the sheets on this machine",
                    ),
                );
            }
            return;
        }
    };
    for (field, partition) in wanted {
        if !known.iter().any(|k| k == partition) {
            out.push(
                Issue::new(
                    "V012",
                    Severity::Error,
                    format!(
                        "{field}: Slurm has no partition '{partition}' (sinfo lists: {})",
                        known.join(", ")
                    ),
                )
                .line(find_line(x.raw, "partition:"))
                .suggest("Use one of the partitions sinfo lists, or leave partition out for the cluster's default")
                .meta("partition", partition.to_string()),
            );
        }
    }
}

/// The partitions `sinfo` lists, or `None` when Slurm does not answer within 10 s.
pub fn slurm_partitions() -> Option<Vec<String>> {
    slurm_partitions_or_why().ok()
}

/// The partitions `sinfo` lists, or why there are none to tell (`sinfo` missing, failing,
/// silent for 10 s, or listing none).
fn slurm_partitions_or_why() -> Result<Vec<String>, String> {
    let mut child = match std::process::Command::new("sinfo")
        .args(["-h", "-o", "%R"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("sinfo is not on PATH".into())
        }
        Err(e) => return Err(format!("cannot run sinfo: {e}")),
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(status)) => return Err(format!("sinfo failed ({status})")),
            Err(e) => return Err(format!("sinfo failed: {e}")),
            Ok(None) if std::time::Instant::now() >= until => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("sinfo did not answer within 10 s".into());
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
    let mut text = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        std::io::Read::read_to_string(&mut stdout, &mut text)
            .map_err(|e| format!("cannot read sinfo's answer: {e}"))?;
    }
    let parts: Vec<String> = text
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    if parts.is_empty() {
        Err("sinfo lists no partition".into())
    } else {
        Ok(parts)
    }
}

/// V217 (ours, a warning): a `parallel` setting the score changes from its default that this
/// port accepts but does not use (docs/scores.md "Fields that are accepted but do nothing
/// yet"). The `rate_limit` fields upstream's own example scores set are said when the score
/// loads instead (`load::collect_warnings`, on stderr as upstream's "will be ignored"
/// warnings), so that `validate`'s issues stay upstream's on those scores.
pub(super) fn v217(x: &Ctx<'_>, out: &mut Vec<Issue>) {
    let c = x.c;
    let mut unused: Vec<(&str, &str, &str)> = Vec::new();
    let default_parallel = crate::model::ParallelConfig::default();
    if c.parallel.stagger_delay_ms != default_parallel.stagger_delay_ms {
        unused.push((
            "parallel.stagger_delay_ms",
            "stagger_delay_ms:",
            "ready sheets start together",
        ));
    }
    if c.parallel.fail_fast != default_parallel.fail_fast {
        unused.push((
            "parallel.fail_fast",
            "fail_fast:",
            "a failed sheet fails its dependents; other sheets keep running",
        ));
    }
    for (field, marker, instead) in unused {
        out.push(
            Issue::new(
                "V217",
                Severity::Warning,
                format!("{field} is accepted but not used by this conductor"),
            )
            .line(find_line(x.raw, marker))
            .suggest(format!("Remove it: {instead} (docs/scores.md)"))
            .meta("field", field),
        );
    }
}
