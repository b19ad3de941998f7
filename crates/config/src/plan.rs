//! Sheet arithmetic, fan-out expansion, dependency checks and the per-sheet plan (score.md §4,
//! §3.5).

use indexmap::IndexMap;

use crate::error::ConfigError;
use crate::model::{FreeMap, JobConfig, MovementDef, SheetConfig, SkipWhenCommand};

/// Concrete sheet count: `(total_items − start_item + size) // size` (Python floor division,
/// so it can be 0 or negative when `start_item > total_items`, §4.1).
pub fn total_sheets(sheet: &SheetConfig) -> i64 {
    if sheet.size < 1 {
        return 0;
    }
    // In i128: extreme `total_items` / `size` must not overflow (found by fuzzing).
    let n = (i128::from(sheet.total_items) - i128::from(sheet.start_item) + i128::from(sheet.size))
        .div_euclid(i128::from(sheet.size));
    i64::try_from(n).unwrap_or(if n < 0 { i64::MIN } else { i64::MAX })
}

/// Why the sheet arithmetic gives no sheet at all, or `None` when it gives one or more.
/// Upstream accepts such scores (`validate` passes and shows a negative count); we refuse
/// them with check V010 in `validate`, `run` and the conductor (docs/differences.md).
pub fn impossible_sheet_count(sheet: &SheetConfig) -> Option<String> {
    let n = total_sheets(sheet);
    (n < 1).then(|| {
        format!(
            "Sheet count computes to {n}: sheet.start_item ({}) is past sheet.total_items ({}) \
             (sheets = (total_items - start_item + size) // size with sheet.size {})",
            sheet.start_item, sheet.total_items, sheet.size
        )
    })
}

/// Most concrete sheets one score may plan. Upstream has no limit, but a score asking for
/// a hundred million sheets made load and planning run out of memory or never finish, in
/// `validate` and inside the conductor alike (found by fuzzing, docs/reliability.md). A
/// job of 100,000 sheets runs in well under 200 MB of conductor memory
/// (docs/performance.md, session 8); every planned sheet costs a row in the registry and a
/// few hundred bytes in the conductor for the whole job, so far beyond that it is several
/// jobs' work.
pub const MAX_SHEETS: i64 = 100_000;

/// The too-many-sheets error; a fan-out score (whose sheet.size must stay 1) is told to plan
/// fewer stages or voices instead of larger sheets.
fn too_many_sheets(n: i128, fan_out: bool) -> String {
    let fewer = if fan_out {
        "plan fewer stages (sheet.total_items) or voices (sheet.fan_out counts); fan-out needs \
         sheet.size 1"
    } else {
        "give each sheet more items with sheet.size"
    };
    format!(
        "score plans {n} sheets; at most {MAX_SHEETS} are supported in one job (every planned \
         sheet is tracked by the conductor and the registry until the job ends): split the \
         work over several scores, or {fewer}"
    )
}

/// `(stage, instance, fan_count)` of a concrete sheet (§4.2).
pub fn fan_meta(sheet: &SheetConfig, num: i64) -> (i64, i64, i64) {
    match sheet.fan_out_stage_map.as_ref().and_then(|m| m.get(num)) {
        Some(meta) => (
            meta.stage.unwrap_or(num),
            meta.instance.unwrap_or(1),
            meta.fan_count.unwrap_or(1),
        ),
        None => (num, 1, 1),
    }
}

/// Number of stages (movements) before expansion (§4.2).
pub fn total_stages(sheet: &SheetConfig) -> i64 {
    match &sheet.fan_out_stage_map {
        Some(m) if !m.is_empty() => m.values().filter_map(|meta| meta.stage).max().unwrap_or(0),
        _ => total_sheets(sheet),
    }
}

/// Item range of sheet `num` (§4.1).
pub fn item_range(sheet: &SheetConfig, num: i64) -> (i64, i64) {
    let start = (num - 1) * sheet.size + sheet.start_item;
    (start, (start + sheet.size - 1).min(sheet.total_items))
}

/// Upstream's fan-out expansion plus the dependency range check, run as `SheetConfig`'s
/// after-validators (§4.3, §4.4). Errors are the `ValueError` messages.
pub fn expand_sheet(sheet: &mut SheetConfig) -> Result<(), String> {
    expand_sheet_at(sheet).map_err(|(message, _)| message)
}

/// [`expand_sheet`], its error with the dotted path of the entry at fault
/// (`sheet.dependencies.2`, `sheet.fan_out.5`), for the line a message names.
pub fn expand_sheet_at(sheet: &mut SheetConfig) -> Result<(), (String, String)> {
    let whole = |message: String| (message, "sheet".to_string());
    expand_checked(sheet).map_err(|(message, at)| match at {
        Some(at) => (message, at),
        None => whole(message),
    })
}

fn expand_checked(sheet: &mut SheetConfig) -> Result<(), (String, Option<String>)> {
    let dep_at = |k: i64| Some(format!("sheet.dependencies.{k}"));
    // Before expansion too: fan-out walks every stage, and stages = total_items.
    if i128::from(total_sheets(sheet)) > i128::from(MAX_SHEETS) {
        return Err((
            too_many_sheets(i128::from(total_sheets(sheet)), !sheet.fan_out.is_empty()),
            None,
        ));
    }
    if !sheet.fan_out.is_empty() {
        expand_fan_out(sheet)?;
    }
    let n = total_sheets(sheet);
    for (k, deps) in &sheet.dependencies {
        if *k < 1 || *k > n {
            return Err((
                format!("Dependency key sheet {k} is out of range (valid: 1-{n})"),
                dep_at(*k),
            ));
        }
        for d in deps {
            if *d < 1 || *d > n {
                return Err((
                    format!("Sheet {k} depends on sheet {d}, which is out of range (valid: 1-{n})"),
                    dep_at(*k),
                ));
            }
        }
    }
    // Upstream lets cycles through load and validate and only the legacy runner notices them;
    // we refuse them here so every entry point agrees (architecture.md "Where upstream is broken").
    if let Some(cycle) = find_cycle(&sheet.dependencies, n) {
        let path: Vec<String> = cycle.iter().map(i64::to_string).collect();
        return Err((
            format!("Circular dependency detected: {}", path.join(" -> ")),
            cycle.first().and_then(|k| dep_at(*k)),
        ));
    }
    Ok(())
}

fn expand_fan_out(sheet: &mut SheetConfig) -> Result<(), (String, Option<String>)> {
    if sheet.size != 1 {
        return Err((format!("fan_out requires size=1, got size={}. Each stage must map to exactly one sheet for fan-out to work.", sheet.size), Some("sheet.size".into())));
    }
    if sheet.start_item != 1 {
        return Err((format!("fan_out requires start_item=1, got start_item={}. Fan-out stages are 1-indexed from the beginning.", sheet.start_item), Some("sheet.start_item".into())));
    }
    let stages = sheet.total_items;
    for (s, c) in &sheet.fan_out {
        if *s < 1 || *s > stages {
            return Err((
                format!(
                    "fan_out references stage {s}, but total_stages is {stages} (valid: 1-{stages})"
                ),
                Some(format!("sheet.fan_out.{s}")),
            ));
        }
        if *c < 1 {
            return Err((
                format!("fan_out count for stage {s} must be >= 1, got {c}"),
                Some(format!("sheet.fan_out.{s}")),
            ));
        }
    }
    let planned: i128 = (1..=stages)
        .map(|stage| i128::from(sheet.fan_out.get(&stage).copied().unwrap_or(1)))
        .sum();
    if planned > i128::from(MAX_SHEETS) {
        return Err((too_many_sheets(planned, true), None));
    }
    for (k, deps) in &sheet.dependencies {
        if *k < 1 || *k > stages {
            return Err((
                format!(
                    "dependency references stage {k}, but total_stages is {stages} (valid: 1-{stages})"
                ),
                Some(format!("sheet.dependencies.{k}")),
            ));
        }
        for d in deps {
            if *d < 1 || *d > stages {
                return Err((
                    format!(
                        "stage {k} depends on stage {d}, but total_stages is {stages} (valid: 1-{stages})"
                    ),
                    Some(format!("sheet.dependencies.{k}")),
                ));
            }
        }
    }
    let mut stage_sheets: Vec<Vec<i64>> = Vec::with_capacity(stages.max(0) as usize);
    let mut stage_map = crate::model::StageMap::new();
    let mut next = 1;
    for stage in 1..=stages {
        let count = sheet.fan_out.get(&stage).copied().unwrap_or(1);
        let nums: Vec<i64> = (next..next + count).collect();
        for (i, num) in nums.iter().enumerate() {
            let meta = crate::model::FanOutMeta {
                stage: Some(stage),
                instance: Some(i as i64 + 1),
                fan_count: Some(count),
            };
            stage_map.push(*num, meta);
        }
        next += count;
        stage_sheets.push(nums);
    }
    let sheets_of = |stage: i64| -> &[i64] { &stage_sheets[(stage - 1) as usize] };
    let mut deps: IndexMap<i64, Vec<i64>> = IndexMap::new();
    for (target_stage, sources) in &sheet.dependencies {
        let targets = sheets_of(*target_stage);
        for source_stage in sources {
            let src = sheets_of(*source_stage);
            for (i, t) in targets.iter().enumerate() {
                let edges: Vec<i64> = if src.len() == targets.len() && src.len() > 1 {
                    vec![src[i]]
                } else {
                    // 1→1, fan-out (one source), fan-in (one target), or all-to-all.
                    src.to_vec()
                };
                let entry = deps.entry(*t).or_default();
                for e in edges {
                    if !entry.contains(&e) {
                        entry.push(e);
                    }
                }
            }
        }
    }
    sheet.skip_when = rekey_stages(&sheet.skip_when, &stage_sheets);
    sheet.skip_when_command = rekey_stages(&sheet.skip_when_command, &stage_sheets);
    sheet.total_items = next - 1;
    sheet.dependencies = deps;
    sheet.fan_out_stage_map = Some(stage_map);
    sheet.fan_out = IndexMap::new();
    Ok(())
}

/// First dependency cycle, as `a -> b -> … -> a`, searching prerequisite → dependent edges from
/// sheet 1 upwards (the legacy runner's order, §4.4).
pub fn find_cycle(deps: &IndexMap<i64, Vec<i64>>, n: i64) -> Option<Vec<i64>> {
    if deps.is_empty() || n < 1 {
        return None;
    }
    let size = n as usize + 1;
    let mut dependents: Vec<Vec<i64>> = vec![Vec::new(); size];
    for (k, ds) in deps {
        for d in ds {
            if (1..=n).contains(d) && (1..=n).contains(k) {
                dependents[*d as usize].push(*k);
            }
        }
    }
    // 0 = unvisited, 1 = on the current path, 2 = done.
    let mut state = vec![0u8; size];
    for start in 1..=n {
        if state[start as usize] != 0 {
            continue;
        }
        let mut path: Vec<i64> = vec![start];
        let mut iters: Vec<usize> = vec![0];
        state[start as usize] = 1;
        while let Some(&node) = path.last() {
            let idx = iters.last().copied().unwrap_or(0);
            let next = dependents[node as usize].get(idx).copied();
            match next {
                Some(child) => {
                    if let Some(top) = iters.last_mut() {
                        *top += 1;
                    }
                    match state[child as usize] {
                        0 => {
                            state[child as usize] = 1;
                            path.push(child);
                            iters.push(0);
                        }
                        1 => {
                            let from = path.iter().position(|p| *p == child).unwrap_or(0);
                            let mut cycle = path[from..].to_vec();
                            cycle.push(child);
                            return Some(cycle);
                        }
                        _ => {}
                    }
                }
                None => {
                    state[node as usize] = 2;
                    path.pop();
                    iters.pop();
                }
            }
        }
    }
    None
}

/// One concrete sheet with everything resolved for it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedSheet {
    /// Sheet number (1-based).
    pub num: u32,
    /// Movement (stage) number.
    pub movement: u32,
    /// Voice (instance) within the movement, 1-based.
    pub voice: u32,
    /// Voices in this movement (fan_count).
    pub voice_count: u32,
    /// First item.
    pub start_item: i64,
    /// Last item.
    pub end_item: i64,
    /// Prerequisite sheets (expanded, sheet-level).
    pub dependencies: Vec<u32>,
    /// Resolved instrument profile name (§3.5).
    pub instrument: String,
    /// Merged instrument config (shared by consecutive sheets whose merge came out the same:
    /// a 1,000-voice fan-out holds one copy, not a thousand).
    pub instrument_config: std::sync::Arc<FreeMap>,
    /// `model` from the merged instrument config, if any.
    pub model: Option<String>,
    /// Fallback chain.
    pub instrument_fallbacks: Vec<String>,
    /// Skip expression (§5.7).
    pub skip_when: Option<String>,
    /// Skip command (§5.7).
    pub skip_when_command: Option<SkipWhenCommand>,
    /// Effective timeout in seconds (§3.5).
    pub timeout_seconds: f64,
    /// Display label.
    pub description: Option<String>,
    /// Movement display name.
    pub movement_name: Option<String>,
}

/// The concrete sheets of a score.
#[derive(Debug, Clone, PartialEq)]
pub struct SheetPlan {
    /// Sheets in number order.
    pub sheets: Vec<PlannedSheet>,
    /// Concrete sheet count.
    pub total_sheets: u32,
    /// Movement count.
    pub total_movements: u32,
    /// Whether fan-out metadata exists.
    pub has_fan_out: bool,
}

impl SheetPlan {
    /// Build the plan of an already loaded (expanded) score.
    pub fn build(job: &JobConfig) -> Result<SheetPlan, ConfigError> {
        let outline = PlanOutline::of(job)?;
        let mut sheets = Vec::with_capacity(outline.total_sheets as usize);
        for mut planned in outline.sheets(job) {
            if let Some(prev) = sheets.last().map(|p: &PlannedSheet| &p.instrument_config) {
                if *prev == planned.instrument_config {
                    planned.instrument_config = std::sync::Arc::clone(prev);
                }
            }
            sheets.push(planned);
        }
        Ok(SheetPlan {
            sheets,
            total_sheets: outline.total_sheets,
            total_movements: outline.total_movements,
            has_fan_out: outline.has_fan_out,
        })
    }
}

/// A score's plan without its sheets: the checked counts, and each concrete sheet made
/// from the score when it is asked for — exactly the [`SheetPlan`]'s sheet. What a
/// conductor holds for a running job, so that a planned sheet costs it nothing until it
/// runs (a whole [`PlannedSheet`] is ~0.3 KB; issue 24).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanOutline {
    /// Concrete sheet count.
    pub total_sheets: u32,
    /// Movement count.
    pub total_movements: u32,
    /// Whether fan-out metadata exists.
    pub has_fan_out: bool,
}

impl PlanOutline {
    /// The outline of an already loaded (expanded) score, with the checks of
    /// [`SheetPlan::build`]: a sheet count in `1..=MAX_SHEETS`, no dependency cycle.
    pub fn of(job: &JobConfig) -> Result<PlanOutline, ConfigError> {
        let n = total_sheets(&job.sheet);
        if let Some(message) = impossible_sheet_count(&job.sheet) {
            return Err(ConfigError::Plan(format!("[V010] {message}")));
        }
        if n > MAX_SHEETS {
            return Err(ConfigError::Plan(too_many_sheets(
                i128::from(n),
                job.sheet.fan_out_stage_map.is_some(),
            )));
        }
        if let Some(cycle) = find_cycle(&job.sheet.dependencies, n) {
            let path: Vec<String> = cycle.iter().map(i64::to_string).collect();
            return Err(ConfigError::Plan(format!(
                "Circular dependency detected: {}",
                path.join(" -> ")
            )));
        }
        Ok(PlanOutline {
            total_sheets: u32::try_from(n).unwrap_or(u32::MAX),
            total_movements: u32::try_from(total_stages(&job.sheet).max(0)).unwrap_or(u32::MAX),
            has_fan_out: job.sheet.fan_out_stage_map.is_some(),
        })
    }

    /// Sheet `num` of `job` (the score this outline is of), or `None` past the plan.
    pub fn sheet(&self, job: &JobConfig, num: u32) -> Option<PlannedSheet> {
        (1..=self.total_sheets)
            .contains(&num)
            .then(|| plan_sheet(job, i64::from(num)))
    }

    /// Every sheet of `job` (the score this outline is of), in number order, each made as
    /// the pass reaches it.
    pub fn sheets<'a>(&self, job: &'a JobConfig) -> impl Iterator<Item = PlannedSheet> + 'a {
        (1..=i64::from(self.total_sheets)).map(move |num| plan_sheet(job, num))
    }

    /// The profile names the conductor may be asked to play `job`'s sheets with, in order
    /// of first use: each sheet's instrument (an `instruments:` alias followed) and its
    /// fallbacks — resolved as [`sheet`](Self::sheet) resolves them, without building the
    /// sheets — and the reviewer's (`review.instrument`, else the sheets'), each once.
    pub fn instruments(&self, job: &JobConfig) -> Vec<String> {
        let mut seen: indexmap::IndexSet<&str> = indexmap::IndexSet::new();
        for num in 1..=i64::from(self.total_sheets) {
            let (stage, _, _) = fan_meta(&job.sheet, num);
            let movement = job.movements.get(&stage);
            let (named, _) = named_instrument(job, num, movement);
            seen.insert(profile_of(job, named));
            seen.extend(fallbacks_of(job, num, movement).iter().map(String::as_str));
        }
        if let Some(review) = &job.review {
            if let Some(named) = review.instrument.as_deref() {
                seen.insert(profile_of(job, named));
            }
        }
        seen.into_iter().map(str::to_string).collect()
    }
}

fn merge(into: &mut FreeMap, from: &FreeMap) {
    for (k, v) in from {
        into.insert(k.clone(), v.clone());
    }
}

/// Where `job` names `profile`, one of the instruments [`PlanOutline::instruments`] gives, as
/// a dotted field path (`movements.2.instrument`): the first field that plays it, else the
/// first fallback list holding it; `backend.type` when no field names an instrument.
pub fn instrument_field(job: &JobConfig, profile: &str) -> String {
    let sheet = &job.sheet;
    // A name that is an alias is played under it only as a fallback (never followed).
    let played = !job.instruments.contains_key(profile);
    if played && job.instrument.as_deref() == Some(profile) {
        return "instrument".into();
    }
    if let Some((n, _)) = sheet
        .per_sheet_instruments
        .iter()
        .find(|(_, name)| played && *name == profile)
    {
        return format!("sheet.per_sheet_instruments.{n}");
    }
    if played && sheet.instrument_map.contains_key(profile) {
        return format!("sheet.instrument_map.{profile}");
    }
    if let Some((n, _)) = job
        .movements
        .iter()
        .find(|(_, m)| played && m.instrument.as_deref() == Some(profile))
    {
        return format!("movements.{n}.instrument");
    }
    if let Some((alias, _)) = job.instruments.iter().find(|(_, d)| d.profile == profile) {
        return format!("instruments.{alias}.profile");
    }
    if played && job.review.as_ref().and_then(|r| r.instrument.as_deref()) == Some(profile) {
        return "review.instrument".into();
    }
    let holds = |list: &[String]| list.iter().any(|f| f == profile);
    if holds(&job.instrument_fallbacks) {
        return "instrument_fallbacks".into();
    }
    if let Some((n, _)) = job
        .movements
        .iter()
        .find(|(_, m)| holds(&m.instrument_fallbacks))
    {
        return format!("movements.{n}.instrument_fallbacks");
    }
    if let Some((n, _)) = sheet.per_sheet_fallbacks.iter().find(|(_, f)| holds(f)) {
        return format!("sheet.per_sheet_fallbacks.{n}");
    }
    "backend.type".into()
}

/// The profile `named` plays: an `instruments:` alias's, else the name itself.
fn profile_of<'a>(job: &'a JobConfig, named: &'a str) -> &'a str {
    job.instruments
        .get(named)
        .map_or(named, |d| d.profile.as_str())
}

/// The instrument name sheet `num` is given before an `instruments:` alias is followed —
/// its own, its `instrument_map` entry, its movement's, the score's, else the
/// `backend.type` — as §3.5 orders them; and whether its movement's `instrument_config`
/// applies (when neither of the sheet's own names chose).
fn named_instrument<'a>(
    job: &'a JobConfig,
    num: i64,
    movement: Option<&'a MovementDef>,
) -> (&'a str, bool) {
    let sheet = &job.sheet;
    if let Some(name) = sheet.per_sheet_instruments.get(&num) {
        return (name, false);
    }
    if let Some((name, _)) = sheet
        .instrument_map
        .iter()
        .find(|(_, sheets)| sheets.contains(&num))
    {
        return (name, false);
    }
    if let Some(name) = movement.and_then(|m| m.instrument.as_deref()) {
        return (name, true);
    }
    let name = job
        .instrument
        .as_deref()
        .unwrap_or_else(|| job.backend.kind.as_str());
    (name, movement.is_some())
}

/// Sheet `num`'s fallback chain: its own, its movement's, else the score's. The conductor
/// takes each name as a profile name (an `instruments:` alias is not followed).
fn fallbacks_of<'a>(
    job: &'a JobConfig,
    num: i64,
    movement: Option<&'a MovementDef>,
) -> &'a [String] {
    if let Some(f) = job.sheet.per_sheet_fallbacks.get(&num) {
        f
    } else if let Some(m) = movement.filter(|m| !m.instrument_fallbacks.is_empty()) {
        &m.instrument_fallbacks
    } else {
        &job.instrument_fallbacks
    }
}

fn plan_sheet(job: &JobConfig, num: i64) -> PlannedSheet {
    let sheet = &job.sheet;
    let (stage, instance, fan_count) = fan_meta(sheet, num);
    let (start_item, end_item) = item_range(sheet, num);
    let movement = job.movements.get(&stage);
    let mut cfg = job.instrument_config.clone();
    let (named, from_movement) = named_instrument(job, num, movement);
    if from_movement {
        if let Some(m) = movement {
            merge(&mut cfg, &m.instrument_config);
        }
    }
    let mut name = named.to_string();
    if let Some(def) = job.instruments.get(&name) {
        merge(&mut cfg, &def.config);
        name = def.profile.clone();
    }
    if let Some(extra) = sheet.per_sheet_instrument_config.get(&num) {
        merge(&mut cfg, extra);
    }
    let fallbacks = fallbacks_of(job, num, movement).to_vec();
    let mut timeout = job.backend.timeout_seconds;
    // Upstream documents `instrument_config.timeout_seconds` everywhere but never reads it
    // (score.md §3.5 [GAP]); it is the sheet's timeout unless a per-sheet override says more.
    if let Some(t) = cfg
        .get("timeout_seconds")
        .and_then(|v| v.as_f64())
        .filter(|t| *t > 0.0)
    {
        timeout = t;
    }
    if let Some(t) = job.backend.timeout_overrides.get(&num) {
        timeout = *t;
    }
    if let Some(t) = job
        .backend
        .sheet_overrides
        .get(&num)
        .and_then(|o| o.timeout_seconds)
    {
        timeout = t;
    }
    let model = cfg
        .get("model")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    PlannedSheet {
        num: num as u32,
        movement: stage.max(0) as u32,
        voice: instance.max(0) as u32,
        voice_count: fan_count.max(0) as u32,
        start_item,
        end_item,
        dependencies: sheet
            .dependencies
            .get(&num)
            .map(|d| d.iter().map(|x| *x as u32).collect())
            .unwrap_or_default(),
        instrument: name,
        instrument_config: std::sync::Arc::new(cfg),
        model,
        instrument_fallbacks: fallbacks,
        skip_when: sheet.skip_when.get(&num).cloned(),
        skip_when_command: sheet.skip_when_command.get(&num).cloned(),
        timeout_seconds: timeout,
        description: sheet.descriptions.get(&num).cloned(),
        movement_name: movement.and_then(|m| m.name.clone()),
    }
}

/// A map keyed by stage, re-keyed by the sheets of each stage; keys that are not a stage
/// stay as they are.
fn rekey_stages<V: Clone>(map: &IndexMap<i64, V>, stage_sheets: &[Vec<i64>]) -> IndexMap<i64, V> {
    let mut out = IndexMap::new();
    for (k, v) in map {
        match usize::try_from(*k - 1)
            .ok()
            .and_then(|i| stage_sheets.get(i))
        {
            Some(sheets) => {
                for s in sheets {
                    out.insert(*s, v.clone());
                }
            }
            None => {
                out.insert(*k, v.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// A fan-out score over the sheet limit is not told to raise sheet.size (fan-out needs 1).
    #[test]
    fn too_many_sheets_suggests_what_the_score_can_change() {
        let fan = too_many_sheets(200_000, true);
        assert!(!fan.contains("more items with sheet.size"), "{fan}");
        assert!(fan.contains("fan-out needs sheet.size 1"), "{fan}");
        let plain = too_many_sheets(200_000, false);
        assert!(
            plain.ends_with("give each sheet more items with sheet.size"),
            "{plain}"
        );
        let text = "name: t\nsheet:\n  size: 1\n  total_items: 2\n  fan_out: {1: 100000}\n\
                    prompt: {template: hi}\n";
        let err = crate::load::load_score_str(text, std::path::Path::new("t.yaml"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("100001 sheets"), "{err}");
        assert!(err.contains("fan-out needs sheet.size 1"), "{err}");
    }

    use super::*;

    fn sheet(total: i64, fan: &[(i64, i64)], deps: &[(i64, &[i64])]) -> SheetConfig {
        let text = "size: 1\ntotal_items: 1\n";
        let node = crate::yaml::parse(text).unwrap().unwrap();
        let mut s: SheetConfig = crate::de::from_node(&node, &[]).unwrap();
        s.total_items = total;
        s.fan_out = fan.iter().copied().collect();
        s.dependencies = deps.iter().map(|(k, v)| (*k, v.to_vec())).collect();
        s
    }

    #[test]
    fn spec_worked_example() {
        let mut s = sheet(4, &[(2, 3), (3, 2)], &[(2, &[1]), (3, &[2]), (4, &[3, 1])]);
        s.skip_when = [
            (2, "False".to_string()),
            (4, "True".into()),
            (9, "x".into()),
        ]
        .into_iter()
        .collect();
        expand_sheet(&mut s).unwrap();
        assert_eq!(total_sheets(&s), 7);
        assert_eq!(total_stages(&s), 4);
        let deps: Vec<(i64, Vec<i64>)> = s.dependencies.clone().into_iter().collect();
        assert_eq!(
            deps,
            vec![
                (2, vec![1]),
                (3, vec![1]),
                (4, vec![1]),
                (5, vec![2, 3, 4]),
                (6, vec![2, 3, 4]),
                (7, vec![5, 6, 1])
            ]
        );
        let skip: Vec<i64> = s.skip_when.keys().copied().collect();
        assert_eq!(skip, vec![2, 3, 4, 7, 9]);
        assert_eq!(fan_meta(&s, 6), (3, 2, 2));
    }

    /// Issue 24: a stage of 99,998 voices is one run in the run's score, and the map
    /// reads, writes and looks up as upstream's map of sheets.
    #[test]
    fn the_stage_map_is_runs_and_reads_as_the_map_of_sheets() {
        let mut s = sheet(3, &[(1, 1), (2, 99_998), (3, 1)], &[(2, &[1]), (3, &[2])]);
        expand_sheet(&mut s).unwrap();
        let map = s.fan_out_stage_map.as_ref().unwrap();
        assert_eq!(map.runs_len(), 3);
        assert_eq!(map.len(), 100_000);
        assert_eq!(fan_meta(&s, 1), (1, 1, 1));
        assert_eq!(fan_meta(&s, 2), (2, 1, 99_998));
        assert_eq!(fan_meta(&s, 50_001), (2, 50_000, 99_998));
        assert_eq!(fan_meta(&s, 100_000), (3, 1, 1));
        assert_eq!(total_stages(&s), 3);
        assert!(map.get(0).is_none() && map.get(100_001).is_none());
        // The JSON is the map of sheets, in order, and reads back to the same runs.
        let text = serde_json::to_string(map).unwrap();
        assert!(text.starts_with(r#"{"1":{"stage":1,"instance":1,"fan_count":1},"2":{"stage":2,"instance":1,"fan_count":99998},"3":"#));
        let plain: IndexMap<i64, crate::model::FanOutMeta> = serde_json::from_str(&text).unwrap();
        assert_eq!(plain.len(), 100_000);
        assert_eq!(serde_json::to_string(&plain).unwrap(), text);
        let back: crate::model::StageMap = serde_json::from_str(&text).unwrap();
        assert_eq!(&back, map);
        // Any other map (out of order, a sheet twice, gaps, fields missing) is kept as it is.
        let odd =
            r#"{"5":{"stage":2},"1":{"stage":1,"instance":1},"5":{"stage":3},"2":{"instance":2}}"#;
        let odd_map: crate::model::StageMap = serde_json::from_str(odd).unwrap();
        let plain: IndexMap<i64, crate::model::FanOutMeta> = serde_json::from_str(odd).unwrap();
        assert_eq!(
            serde_json::to_string(&odd_map).unwrap(),
            serde_json::to_string(&plain).unwrap()
        );
        assert_eq!(odd_map.get(5).and_then(|m| m.stage), Some(3));
        assert_eq!(odd_map.get(2).and_then(|m| m.instance), Some(2));
        assert!(odd_map.get(3).is_none());
    }

    #[test]
    fn pairwise_example() {
        let mut s = sheet(3, &[(1, 2), (2, 2), (3, 3)], &[(2, &[1]), (3, &[2])]);
        expand_sheet(&mut s).unwrap();
        let deps: Vec<(i64, Vec<i64>)> = s.dependencies.clone().into_iter().collect();
        assert_eq!(
            deps,
            vec![
                (3, vec![1]),
                (4, vec![2]),
                (5, vec![3, 4]),
                (6, vec![3, 4]),
                (7, vec![3, 4])
            ]
        );
    }

    #[test]
    fn instrument_config_timeout_is_the_sheet_timeout_unless_a_sheet_override_wins() {
        let text = "name: t\nworkspace: ./ws\ninstrument: claude-code\n\
                    instrument_config:\n  timeout_seconds: 42\n\
                    backend:\n  timeout_seconds: 1800\n  timeout_overrides:\n    2: 7\n\
                    sheet:\n  size: 1\n  total_items: 3\n\
                    prompt:\n  template: hi\n";
        let score = crate::load::load_score_str(text, std::path::Path::new("/tmp/t.yaml"))
            .expect("valid score");
        let plan = SheetPlan::build(&score.config).expect("plan");
        let timeouts: Vec<f64> = plan.sheets.iter().map(|s| s.timeout_seconds).collect();
        assert_eq!(timeouts, vec![42.0, 7.0, 42.0]);
    }

    /// The instruments a submission checks are the ones the sheets are planned with (an
    /// alias followed, a fallback not), each with the field that names it.
    #[test]
    fn played_instruments_are_the_planned_sheets_and_their_fallbacks() {
        let text = "name: t\nworkspace: ./ws\ninstrument: quick\n\
                    instruments:\n  quick: {profile: shell}\n\
                    instrument_fallbacks: [quick]\n\
                    movements:\n  2: {instrument: gemini-cli, instrument_fallbacks: [codex-cli]}\n\
                    sheet:\n  size: 1\n  total_items: 3\n  per_sheet_instruments: {3: aider}\n\
                    prompt:\n  template: hi\n";
        let score = crate::load::load_score_str(text, std::path::Path::new("/tmp/t.yaml"))
            .expect("valid score");
        let job = &score.config;
        let plan = SheetPlan::build(job).expect("plan");
        let mut planned: Vec<&str> = Vec::new();
        for s in &plan.sheets {
            for name in std::iter::once(&s.instrument).chain(&s.instrument_fallbacks) {
                if !planned.contains(&name.as_str()) {
                    planned.push(name);
                }
            }
        }
        let outline = PlanOutline::of(job).expect("outline");
        assert_eq!(outline.instruments(job), planned);
        assert_eq!(
            planned,
            ["shell", "quick", "gemini-cli", "codex-cli", "aider"]
        );
        let fields: Vec<String> = planned.iter().map(|n| instrument_field(job, n)).collect();
        assert_eq!(
            fields,
            [
                "instruments.quick.profile",
                "instrument_fallbacks",
                "movements.2.instrument",
                "movements.2.instrument_fallbacks",
                "sheet.per_sheet_instruments.3",
            ]
        );
    }

    #[test]
    fn cycles_are_refused() {
        let mut s = sheet(3, &[], &[(2, &[3]), (3, &[2])]);
        let err = expand_sheet(&mut s).unwrap_err();
        assert_eq!(err, "Circular dependency detected: 2 -> 3 -> 2");
    }

    /// Property: for every generated fan-out shape, expansion numbers sheets contiguously,
    /// every expanded edge points from a later stage to an earlier one, and the four cases of
    /// §4.3 hold.
    #[test]
    fn expansion_properties_over_generated_shapes() {
        let mut seed: u64 = 0x9e3779b97f4a7c15;
        let mut rand = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..300 {
            let stages = 1 + rand(6) as i64;
            let mut fan: Vec<(i64, i64)> = Vec::new();
            for st in 1..=stages {
                if rand(2) == 0 {
                    fan.push((st, 1 + rand(4) as i64));
                }
            }
            let mut deps: Vec<(i64, Vec<i64>)> = Vec::new();
            for t in 2..=stages {
                if rand(3) == 0 {
                    continue;
                }
                let mut srcs = Vec::new();
                for s2 in 1..t {
                    if rand(2) == 0 {
                        srcs.push(s2);
                    }
                }
                if !srcs.is_empty() {
                    deps.push((t, srcs));
                }
            }
            let dep_refs: Vec<(i64, &[i64])> =
                deps.iter().map(|(k, v)| (*k, v.as_slice())).collect();
            let mut s = sheet(stages, &fan, &dep_refs);
            if fan.is_empty() {
                s.fan_out.insert(1, 1);
            }
            expand_sheet(&mut s).unwrap();
            let count = |st: i64| fan.iter().find(|(k, _)| *k == st).map_or(1, |(_, c)| *c);
            let expected: i64 = (1..=stages).map(count).sum();
            assert_eq!(total_sheets(&s), expected);
            for (t, ds) in &s.dependencies {
                let (ts, ti, tc) = fan_meta(&s, *t);
                for d in ds {
                    let (ds_, di, dc) = fan_meta(&s, *d);
                    assert!(ds_ < ts, "edge must point to an earlier stage");
                    if tc == dc && tc > 1 {
                        assert_eq!(ti, di, "equal fan counts pair by position");
                    }
                }
                if let Some((_, srcs)) = deps.iter().find(|(k, _)| *k == ts) {
                    let want: usize = srcs
                        .iter()
                        .map(|s2| {
                            if count(*s2) == tc && tc > 1 {
                                1
                            } else {
                                count(*s2) as usize
                            }
                        })
                        .sum();
                    assert_eq!(ds.len(), want);
                }
            }
        }
    }
}
