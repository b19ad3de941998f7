//! Ours: `job.status` of a large job without its every sheet (issue 24). A client asks for a
//! *summary* (counts by state, per-movement counts and durations, the running and failed
//! sheets up to a cap) or for one *page* of sheets (optionally only some states); the answer
//! is the usual checkpoint whose `sheets` holds only the chosen sheets, plus a
//! [`SheetsView`] under `sheets_view` saying what was left out and how to page.
//!
//! Without a `sheets` param `job.status` answers as upstream's conductor does — every sheet
//! — for any job of up to [`DEFAULT_FULL_SHEETS`] sheets, so upstream's own CLI reads our
//! status unchanged; a larger job gets the summary, marked as cut.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::checkpoint::SheetStatus;

/// Without a `sheets` param, jobs of up to this many sheets get every sheet (the wire shape
/// upstream's clients read); larger ones get the summary.
pub const DEFAULT_FULL_SHEETS: u32 = 10_000;
/// Summary: every sheet is returned for a job of at most this many sheets unless the query
/// says otherwise (the human view's table threshold).
pub const DEFAULT_SUMMARY_FULL_UP_TO: u32 = 50;
/// Summary: at most this many running and this many failed sheets, unless the query says.
pub const DEFAULT_CAP: u32 = 20;
/// Page: sheets per page unless the query says.
pub const DEFAULT_PAGE_LIMIT: u64 = 100;
/// Page / summary: the most sheets one answer may hold (a bound on the document's size).
pub const MAX_PAGE_LIMIT: u64 = 1_000;

/// Every sheet state a query may name: the sheet states, `running` (= `in_progress`), and
/// `failed` also matching a sheet that completed with failed validations (as shown).
pub const STATES: &[&str] = &[
    "pending",
    "in_progress",
    "running",
    "completed",
    "failed",
    "skipped",
];

/// `job.status` params (conductor.md §8.2, plus our optional `sheets`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusParams {
    /// The job ID.
    pub job_id: String,
    /// Overrides the stored workspace where the method honours it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Ours: which sheets to return (absent: every sheet of a job that fits, see module doc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sheets: Option<SheetQuery>,
}

/// What a query wants back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SheetMode {
    /// Counts, movements, running and failed sheets up to `cap` (every sheet of a small job).
    #[default]
    Summary,
    /// The sheets matching `states`, in sheet order, `offset` skipped, at most `limit`.
    Page,
}

/// The `sheets` param of `job.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SheetQuery {
    /// Summary (default) or page.
    #[serde(default)]
    pub mode: SheetMode,
    /// Summary: return every sheet when the job has at most this many
    /// (default [`DEFAULT_SUMMARY_FULL_UP_TO`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_up_to: Option<u32>,
    /// Summary: at most this many running and this many failed sheets (default
    /// [`DEFAULT_CAP`], at most [`MAX_PAGE_LIMIT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<u32>,
    /// Page: only sheets in these states (see [`STATES`]); absent for every state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub states: Option<Vec<String>>,
    /// Page: matching sheets to skip.
    #[serde(default)]
    pub offset: u64,
    /// Page: at most this many sheets (default [`DEFAULT_PAGE_LIMIT`], at most
    /// [`MAX_PAGE_LIMIT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

impl SheetQuery {
    /// The summary a human view wants: every sheet of a job of up to `full_up_to` sheets.
    pub fn summary(full_up_to: u32) -> SheetQuery {
        SheetQuery {
            full_up_to: Some(full_up_to),
            ..SheetQuery::default()
        }
    }

    /// A summary that lists no sheet: the job's state and counts alone, whatever its size
    /// (for a client that reads the job's status, error or workspace, not its sheets).
    pub fn state_only() -> SheetQuery {
        SheetQuery {
            full_up_to: Some(0),
            cap: Some(0),
            ..SheetQuery::default()
        }
    }

    /// The states named that are not sheet states (for the caller's error message).
    pub fn unknown_states(&self) -> Vec<String> {
        self.states
            .iter()
            .flatten()
            .filter(|s| !STATES.contains(&s.trim().to_lowercase().as_str()))
            .cloned()
            .collect()
    }

    fn limit(&self) -> u64 {
        self.limit
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_PAGE_LIMIT)
            .min(MAX_PAGE_LIMIT)
    }

    fn cap(&self) -> u32 {
        let cap = self.cap.unwrap_or(DEFAULT_CAP);
        u32::try_from(u64::from(cap).min(MAX_PAGE_LIMIT)).unwrap_or(DEFAULT_CAP)
    }
}

/// What `sheets` holds and what was left out (`sheets_view` of a `job.status` answer).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SheetsView {
    /// `summary` or `page`.
    pub mode: SheetMode,
    /// Sheets the job has.
    pub total: u32,
    /// Sheets by state (`pending`, `in_progress`, `completed`, `failed`, `skipped`), every
    /// sheet of the job counted.
    pub counts: BTreeMap<String, u32>,
    /// Of the `completed` sheets, how many failed their validations (shown as failed).
    #[serde(default)]
    pub failed_validation: u32,
    /// Each movement's counts and durations (sheets without a movement are movement 0).
    #[serde(default)]
    pub movements: Vec<MovementSummary>,
    /// Sheets in this answer's `sheets`.
    pub returned: u32,
    /// Whether sheets were left out of `sheets` (`returned` < `total`).
    pub truncated: bool,
    /// Summary: the cap on running and on failed sheets returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<u32>,
    /// Page: the states asked for (absent: every state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub states: Option<Vec<String>>,
    /// Page: sheets matching `states` in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<u32>,
    /// Page: matching sheets skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Page: the most sheets this page could hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Page: the `offset` of the next page, when matching sheets are left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
}

impl SheetsView {
    /// Sheets whose stored state is `state` (`completed` includes those that failed their
    /// validations).
    pub fn count(&self, state: &str) -> u32 {
        self.counts.get(state).copied().unwrap_or(0)
    }

    /// Sheets by the state a user is shown: a completed sheet whose validations failed
    /// counts as failed. In the order a summary lists them.
    pub fn shown_counts(&self) -> Vec<(&'static str, u32)> {
        let mut out = Vec::new();
        for state in ["completed", "failed", "in_progress", "pending", "skipped"] {
            let n = match state {
                "completed" => self.count(state).saturating_sub(self.failed_validation),
                "failed" => self.count(state) + self.failed_validation,
                _ => self.count(state),
            };
            if n > 0 {
                out.push((state, n));
            }
        }
        out
    }
}

/// One movement's sheets, counted (in a [`SheetsView`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MovementSummary {
    /// Movement number (0: sheets without one).
    pub movement: u32,
    /// `completed`, `failed`, `running`, `skipped` or `pending` (as the movement view shows).
    pub status: String,
    /// Sheets in the movement.
    pub sheet_count: u32,
    /// Distinct voices among them.
    pub voice_count: u32,
    /// Sheets by shown state (a completed sheet with failed validations is `failed`).
    pub counts: BTreeMap<String, u32>,
    /// Lowest sheet number.
    pub first_sheet: u32,
    /// Highest sheet number.
    pub last_sheet: u32,
    /// The longest run of one of its sheets, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_seconds: Option<f64>,
    /// Its sheets' run times added up, in seconds.
    #[serde(default)]
    pub total_seconds: f64,
    /// Instruments its sheets ran on (at most [`MAX_MOVEMENT_INSTRUMENTS`]).
    #[serde(default)]
    pub instruments: Vec<String>,
}

/// Instruments listed per movement at most.
pub const MAX_MOVEMENT_INSTRUMENTS: usize = 8;

/// What the view needs of one sheet (borrowed from whichever model holds it).
#[derive(Debug, Clone, Copy)]
pub struct SheetFacts<'a> {
    /// Sheet number.
    pub num: u32,
    /// Stored state.
    pub status: SheetStatus,
    /// Completed, but its validations failed.
    pub failed_validation: bool,
    /// Movement, if the score has movements.
    pub movement: Option<u32>,
    /// Voice within the movement.
    pub voice: Option<u32>,
    /// How long its last run took.
    pub duration: Option<f64>,
    /// Instrument it ran on.
    pub instrument: Option<&'a str>,
}

impl SheetFacts<'_> {
    fn shown(&self) -> &'static str {
        if self.status == SheetStatus::Completed && self.failed_validation {
            "failed"
        } else {
            self.status.as_str()
        }
    }

    fn matches(&self, states: &[String]) -> bool {
        let shown = self.shown();
        states
            .iter()
            .any(|s| match s.trim().to_lowercase().as_str() {
                "running" | "in_progress" => self.status == SheetStatus::InProgress,
                other => other == shown,
            })
    }
}

/// Decides which sheets of a job an answer holds, and builds its [`SheetsView`]. Feed it
/// every sheet in sheet order with [`ViewBuilder::add`]; it keeps only the numbers chosen.
#[derive(Debug)]
pub struct ViewBuilder {
    query: SheetQuery,
    total: u32,
    full: bool,
    /// By [`state_index`] of the stored state.
    counts: [u32; 5],
    failed_validation: u32,
    /// Movement → its summary (counts kept in `Tally`), voices seen.
    movements: BTreeMap<u32, (MovementSummary, Tally, Vec<u32>)>,
    chosen: Vec<u32>,
    running_kept: u32,
    failed_kept: u32,
    matched: u64,
}

impl ViewBuilder {
    /// A builder for a job of `total` sheets.
    pub fn new(query: SheetQuery, total: u32) -> ViewBuilder {
        let full = query.mode == SheetMode::Summary
            && total <= query.full_up_to.unwrap_or(DEFAULT_SUMMARY_FULL_UP_TO);
        ViewBuilder {
            query,
            total,
            full,
            counts: [0; 5],
            failed_validation: 0,
            movements: BTreeMap::new(),
            chosen: Vec::new(),
            running_kept: 0,
            failed_kept: 0,
            matched: 0,
        }
    }

    /// Count one sheet, and keep its number if the answer holds it.
    pub fn add(&mut self, s: &SheetFacts<'_>) {
        self.counts[state_index(s.status)] += 1;
        if s.failed_validation && s.status == SheetStatus::Completed {
            self.failed_validation += 1;
        }
        let shown = s.shown();
        let (m, tally, voices) = self
            .movements
            .entry(s.movement.unwrap_or(0))
            .or_insert_with(|| {
                (
                    MovementSummary {
                        movement: s.movement.unwrap_or(0),
                        first_sheet: s.num,
                        last_sheet: s.num,
                        ..MovementSummary::default()
                    },
                    [0; 5],
                    Vec::new(),
                )
            });
        m.sheet_count += 1;
        let shown_status = if shown == "failed" {
            SheetStatus::Failed
        } else {
            s.status
        };
        tally[state_index(shown_status)] += 1;
        m.first_sheet = m.first_sheet.min(s.num);
        m.last_sheet = m.last_sheet.max(s.num);
        if let Some(v) = s.voice {
            // Sorted and deduplicated once, in finish().
            if voices.last() != Some(&v) {
                voices.push(v);
            }
        }
        if let Some(d) = s.duration {
            m.total_seconds += d;
            m.longest_seconds = Some(m.longest_seconds.map_or(d, |l: f64| l.max(d)));
        }
        if let Some(i) = s.instrument.filter(|i| !i.is_empty()) {
            if m.instruments.len() < MAX_MOVEMENT_INSTRUMENTS
                && !m.instruments.iter().any(|x| x == i)
            {
                m.instruments.push(i.to_owned());
            }
        }
        match self.query.mode {
            SheetMode::Summary if self.full => self.chosen.push(s.num),
            SheetMode::Summary => {
                let cap = self.query.cap();
                if s.status == SheetStatus::InProgress && self.running_kept < cap {
                    self.running_kept += 1;
                    self.chosen.push(s.num);
                } else if shown == "failed" && self.failed_kept < cap {
                    self.failed_kept += 1;
                    self.chosen.push(s.num);
                }
            }
            SheetMode::Page => {
                let wanted = self.query.states.as_deref().is_none_or(|st| s.matches(st));
                if wanted {
                    if self.matched >= self.query.offset
                        && (self.chosen.len() as u64) < self.query.limit()
                    {
                        self.chosen.push(s.num);
                    }
                    self.matched += 1;
                }
            }
        }
    }

    /// The sheet numbers the answer holds, in sheet order.
    pub fn chosen(&self) -> &[u32] {
        &self.chosen
    }

    /// The view, once every sheet was added.
    pub fn finish(self) -> SheetsView {
        let returned = u32::try_from(self.chosen.len()).unwrap_or(u32::MAX);
        let movements = self
            .movements
            .into_values()
            .map(|(mut m, tally, mut voices)| {
                voices.sort_unstable();
                voices.dedup();
                m.voice_count = u32::try_from(voices.len()).unwrap_or(u32::MAX);
                m.counts = count_map(&tally);
                m.status = movement_status(&m).to_owned();
                m
            })
            .collect();
        let counted: u32 = self.counts.iter().sum();
        let mut view = SheetsView {
            mode: self.query.mode,
            total: self.total.max(counted),
            counts: count_map(&self.counts),
            failed_validation: self.failed_validation,
            movements,
            returned,
            truncated: false,
            ..SheetsView::default()
        };
        view.truncated = returned < view.total;
        match self.query.mode {
            SheetMode::Summary => view.cap = (!self.full).then(|| self.query.cap()),
            SheetMode::Page => {
                let limit = self.query.limit();
                let next = self.query.offset.saturating_add(u64::from(returned));
                view.states = self.query.states.clone();
                view.matched = Some(u32::try_from(self.matched).unwrap_or(u32::MAX));
                view.offset = Some(self.query.offset);
                view.limit = Some(limit);
                view.next_offset = (next < self.matched && returned > 0).then_some(next);
            }
        }
        view
    }
}

/// Counts by state, kept in an array while sheets are added (no allocation per sheet).
type Tally = [u32; 5];

/// The slot of a state in a [`Tally`].
fn state_index(status: SheetStatus) -> usize {
    match status {
        SheetStatus::Pending => 0,
        SheetStatus::InProgress => 1,
        SheetStatus::Completed => 2,
        SheetStatus::Failed => 3,
        SheetStatus::Skipped => 4,
    }
}

/// A [`Tally`] as the wire's map, states with no sheet left out.
fn count_map(tally: &Tally) -> BTreeMap<String, u32> {
    [
        SheetStatus::Pending,
        SheetStatus::InProgress,
        SheetStatus::Completed,
        SheetStatus::Failed,
        SheetStatus::Skipped,
    ]
    .into_iter()
    .filter(|st| tally[state_index(*st)] > 0)
    .map(|st| (st.as_str().to_owned(), tally[state_index(st)]))
    .collect()
}

/// A movement's state as the movement view shows it: completed when every sheet is,
/// failed when one is, running when one runs, skipped when all are, else pending.
fn movement_status(m: &MovementSummary) -> &'static str {
    let n = |k: &str| m.counts.get(k).copied().unwrap_or(0);
    if n("completed") == m.sheet_count {
        "completed"
    } else if n("failed") > 0 {
        "failed"
    } else if n("in_progress") > 0 {
        "running"
    } else if n("skipped") == m.sheet_count {
        "skipped"
    } else {
        "pending"
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn facts(num: u32, status: SheetStatus) -> SheetFacts<'static> {
        SheetFacts {
            num,
            status,
            failed_validation: false,
            movement: Some(1 + num / 100),
            voice: Some(num % 100),
            duration: Some(f64::from(num % 7)),
            instrument: Some("shell"),
        }
    }

    fn status_of(n: u32) -> SheetStatus {
        match n % 10 {
            0 => SheetStatus::Failed,
            1 => SheetStatus::InProgress,
            2 | 3 => SheetStatus::Pending,
            _ => SheetStatus::Completed,
        }
    }

    #[test]
    fn pages_return_every_matching_sheet_once() {
        for states in [None, Some(vec!["failed".to_string()])] {
            let mut seen = Vec::new();
            let mut offset = 0;
            loop {
                let mut b = ViewBuilder::new(
                    SheetQuery {
                        mode: SheetMode::Page,
                        states: states.clone(),
                        offset,
                        limit: Some(37),
                        ..SheetQuery::default()
                    },
                    1000,
                );
                for n in 1..=1000 {
                    b.add(&facts(n, status_of(n)));
                }
                seen.extend_from_slice(b.chosen());
                let view = b.finish();
                match view.next_offset {
                    Some(next) => offset = next,
                    None => break,
                }
            }
            let want: Vec<u32> = (1..=1000)
                .filter(|n| states.is_none() || status_of(*n) == SheetStatus::Failed)
                .collect();
            assert_eq!(seen, want);
        }
    }

    #[test]
    fn a_summary_is_capped_and_counts_everything() {
        let mut b = ViewBuilder::new(SheetQuery::summary(50), 1000);
        for n in 1..=1000 {
            b.add(&facts(n, status_of(n)));
        }
        assert_eq!(b.chosen().len(), 40);
        let v = b.finish();
        assert!(v.truncated);
        assert_eq!(v.count("failed"), 100);
        assert_eq!(v.count("in_progress"), 100);
        assert_eq!(v.count("pending"), 200);
        assert_eq!(v.count("completed"), 600);
        assert_eq!(v.movements.len(), 11);
        assert_eq!(v.movements.iter().map(|m| m.sheet_count).sum::<u32>(), 1000);
    }

    #[test]
    fn a_small_job_keeps_every_sheet() {
        let mut b = ViewBuilder::new(SheetQuery::summary(50), 3);
        for n in 1..=3 {
            b.add(&facts(n, SheetStatus::Completed));
        }
        let v = b.finish();
        assert_eq!(v.returned, 3);
        assert!(!v.truncated);
        assert_eq!(v.cap, None);
        assert_eq!(v.movements[0].status, "completed");
    }
}
