//! Small inline SVG pictures, drawn server-side: a job's sheet timeline, its progress and
//! cost over time, and the learning entropy history. No script, no external library.

use std::fmt::Write;

use mozart_ipc::checkpoint::{JobCheckpoint as CheckpointState, JobStatus, SheetStatus};

const W: f64 = 760.0;
const PAD_L: f64 = 52.0;
const PAD_R: f64 = 52.0;

/// Escape text for SVG/HTML.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn color(status: SheetStatus, validation_failed: bool) -> &'static str {
    match status {
        SheetStatus::Completed if validation_failed => "#d9534f",
        SheetStatus::Completed => "#3c9d5d",
        SheetStatus::Failed => "#d9534f",
        SheetStatus::InProgress => "#2f7ed8",
        SheetStatus::Skipped => "#aaaaaa",
        SheetStatus::Pending => "#dddddd",
    }
}

/// Start and end (epoch seconds) of the job's activity, if any sheet started: from the
/// job's start (not the first listed sheet's, which a cut answer may not hold).
fn span(cp: &CheckpointState, now: f64) -> Option<(f64, f64)> {
    let job_start = cp.started_at.as_ref().and_then(|t| t.to_epoch());
    let mut start = job_start.unwrap_or(f64::MAX);
    let mut end = f64::MIN;
    for s in cp.sheets.values() {
        let Some(st) = s.started_at.as_ref().and_then(|t| t.to_epoch()) else {
            continue;
        };
        start = start.min(st);
        let en = s
            .completed_at
            .as_ref()
            .and_then(|t| t.to_epoch())
            .unwrap_or(now);
        end = end.max(en);
    }
    if job_start.is_some() && end == f64::MIN {
        // The job started, but the answer lists none of its started sheets.
        end = now;
    }
    (start < f64::MAX).then(|| (start, end.max(start + 1.0)))
}

/// One bar per started sheet, on a shared time axis.
pub fn timeline(cp: &CheckpointState, now: f64) -> String {
    let Some((t0, t1)) = span(cp, now) else {
        return String::new();
    };
    let started: Vec<_> = cp
        .sheets
        .values()
        .filter(|s| s.started_at.is_some())
        .take(200)
        .collect();
    let row = 14.0;
    let h = 24.0 + row * started.len() as f64;
    let plot = W - PAD_L - PAD_R;
    let x = |t: f64| PAD_L + (t - t0) / (t1 - t0) * plot;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" role="img" aria-label="Sheet timeline" viewBox="0 0 {W} {h}" width="{W}" height="{h}">"#
    );
    for (i, s) in started.iter().enumerate() {
        let st = s
            .started_at
            .as_ref()
            .and_then(|t| t.to_epoch())
            .unwrap_or(t0);
        let en = s
            .completed_at
            .as_ref()
            .and_then(|t| t.to_epoch())
            .unwrap_or(now);
        let y = 4.0 + i as f64 * row;
        let (x0, x1) = (x(st), x(en).max(x(st) + 2.0));
        let c = if s.rate_limit.is_some() {
            // Parked on a rate limit: waiting, not running.
            "#c99400"
        } else {
            color(s.status, s.validation_passed == Some(false))
        };
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" font-size="10" text-anchor="end">#{}</text><rect x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{}" fill="{c}"><title>Sheet {}: {} ({:.1}s)</title></rect>"#,
            PAD_L - 4.0,
            y + 10.0,
            s.sheet_num,
            x1 - x0,
            row - 3.0,
            s.sheet_num,
            esc(&s.shown_state(cp.status == JobStatus::Paused)),
            en - st
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{PAD_L}" y="{}" font-size="10">0s</text><text x="{}" y="{}" font-size="10" text-anchor="end">{:.1}s</text></svg>"#,
        h - 4.0,
        W - PAD_R,
        h - 4.0,
        t1 - t0
    );
    svg
}

/// Sheets done (step line, left axis: completed or skipped, as the job's "N/M done" counts
/// them) and cumulative cost (dashed line, right axis) over time. When the answer lists
/// only some of the job's sheets (a large job's summary, a page), their history is not the
/// job's: the chart then shows where the job stands now and says why it draws no history.
pub fn progress(cp: &CheckpointState, now: f64) -> String {
    let Some((t0, t1)) = span(cp, now) else {
        return String::new();
    };
    if cp.sheets_view.as_ref().is_some_and(|v| v.truncated) {
        return progress_now(cp, t0, t1);
    }
    let mut ends: Vec<(f64, f64)> = cp
        .sheets
        .values()
        .filter(|s| matches!(s.status, SheetStatus::Completed | SheetStatus::Skipped))
        .filter_map(|s| {
            let t = s.completed_at.as_ref()?.to_epoch()?;
            Some((t, s.estimated_cost.unwrap_or(0.0)))
        })
        .collect();
    ends.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = f64::from(cp.total_sheets.max(1));
    let max_cost = ends.iter().map(|e| e.1).sum::<f64>().max(1e-9);
    let h = 160.0;
    let (top, bottom) = (10.0, h - 22.0);
    let plot = W - PAD_L - PAD_R;
    let x = |t: f64| PAD_L + (t - t0) / (t1 - t0) * plot;
    let y_sheets = |n: f64| bottom - n / total * (bottom - top);
    let y_cost = |c: f64| bottom - c / max_cost * (bottom - top);
    let mut steps = format!("{PAD_L:.1},{bottom:.1}");
    let mut cost_line = format!("{PAD_L:.1},{bottom:.1}");
    let (mut n, mut cost) = (0.0, 0.0);
    for (t, c) in &ends {
        let _ = write!(steps, " {:.1},{:.1}", x(*t), y_sheets(n));
        n += 1.0;
        cost += c;
        let _ = write!(steps, " {:.1},{:.1}", x(*t), y_sheets(n));
        let _ = write!(cost_line, " {:.1},{:.1}", x(*t), y_cost(cost));
    }
    let _ = write!(steps, " {:.1},{:.1}", x(t1), y_sheets(n));
    let _ = write!(cost_line, " {:.1},{:.1}", x(t1), y_cost(cost));
    // Not "$0.0000" when the instrument reported no cost (issue 22).
    let cost_label = crate::view::cost_figure(cost, cp.cost_confidence());
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg class="chart" role="img" aria-label="Progress and cost" viewBox="0 0 {W} {h}" width="{W}" height="{h}">
<line x1="{PAD_L}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="#999"/>
<line x1="{PAD_L}" y1="{top}" x2="{PAD_L}" y2="{bottom}" stroke="#999"/>
<polyline fill="none" stroke="#2f7ed8" stroke-width="2" points="{steps}"/>
<polyline fill="none" stroke="#e08a00" stroke-width="2" stroke-dasharray="5 3" points="{cost_line}"/>
<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>
<text x="{}" y="{bottom}" font-size="10" text-anchor="end">0</text>
<text x="{}" y="{}" font-size="10">{}</text>
<text x="{PAD_L}" y="{}" font-size="10">0s</text>
<text x="{}" y="{}" font-size="10" text-anchor="end">{:.1}s</text>
<text x="{}" y="{}" font-size="10" fill="#2f7ed8">sheets done</text>
<text x="{}" y="{}" font-size="10" fill="#e08a00">cost</text>
</svg>"##,
        W - PAD_R,
        PAD_L - 4.0,
        top + 8.0,
        cp.total_sheets,
        PAD_L - 4.0,
        W - PAD_R + 4.0,
        top + 8.0,
        esc(&cost_label),
        h - 6.0,
        W - PAD_R,
        h - 6.0,
        t1 - t0,
        PAD_L + 8.0,
        top + 10.0,
        PAD_L + 90.0,
        top + 10.0,
    );
    svg
}

/// The progress chart of a job whose answer lists only some of its sheets: the done count
/// and cost now (as the header counts them), marked at the right edge, and a note that the
/// history over time is left out and why.
fn progress_now(cp: &CheckpointState, t0: f64, t1: f64) -> String {
    let p = mozart_ipc::status::JobProgress::of(cp);
    let listed = cp.sheets.len();
    let h = 160.0;
    let (top, bottom) = (10.0, h - 22.0);
    let y = bottom - f64::from(p.done) / f64::from(p.total.max(1)) * (bottom - top);
    let x1 = W - PAD_R;
    let cost_label = crate::view::cost_figure(p.cost, p.cost_confidence);
    let now_line = format!(
        "{} of {} sheets done now; cost {}.",
        p.done, p.total, cost_label
    );
    let note = format!(
        "Not drawn over time: this page lists {listed} of the job's {} sheets.",
        p.total
    );
    format!(
        r##"<svg class="chart" role="img" aria-label="Progress and cost" viewBox="0 0 {W} {h}" width="{W}" height="{h}">
<line x1="{PAD_L}" y1="{bottom}" x2="{x1}" y2="{bottom}" stroke="#999"/>
<line x1="{PAD_L}" y1="{top}" x2="{PAD_L}" y2="{bottom}" stroke="#999"/>
<circle cx="{x1:.1}" cy="{y:.1}" r="4" fill="#2f7ed8"><title>{} of {} sheets done</title></circle>
<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>
<text x="{}" y="{bottom}" font-size="10" text-anchor="end">0</text>
<text x="{}" y="{}" font-size="10" fill="#2f7ed8">sheets done</text>
<text class="chart-note" x="{}" y="{}" font-size="10">{}</text>
<text class="chart-note" x="{}" y="{}" font-size="10">{}</text>
<text x="{PAD_L}" y="{}" font-size="10">0s</text>
<text x="{x1}" y="{}" font-size="10" text-anchor="end">{:.1}s</text>
</svg>"##,
        p.done,
        p.total,
        PAD_L - 4.0,
        top + 8.0,
        p.total,
        PAD_L - 4.0,
        PAD_L + 8.0,
        top + 10.0,
        PAD_L + 8.0,
        (top + bottom) / 2.0,
        esc(&now_line),
        PAD_L + 8.0,
        (top + bottom) / 2.0 + 14.0,
        esc(&note),
        h - 6.0,
        h - 6.0,
        t1 - t0,
    )
}

/// Diversity index (0–1) over recorded entropy snapshots.
pub fn entropy(history: &[(String, f64)]) -> String {
    if history.len() < 2 {
        return String::new();
    }
    let h = 120.0;
    let (top, bottom) = (10.0, h - 20.0);
    let plot = W - PAD_L - PAD_R;
    let step = plot / (history.len() - 1) as f64;
    let mut points = String::new();
    for (i, (_, d)) in history.iter().enumerate() {
        let _ = write!(
            points,
            "{:.1},{:.1} ",
            PAD_L + i as f64 * step,
            bottom - d.clamp(0.0, 1.0) * (bottom - top)
        );
    }
    format!(
        r##"<svg class="chart" role="img" aria-label="Entropy history" viewBox="0 0 {W} {h}" width="{W}" height="{h}"><line x1="{PAD_L}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="#999"/><polyline fill="none" stroke="#7a4fd1" stroke-width="2" points="{points}"/><text x="{}" y="{}" font-size="10" text-anchor="end">1.0</text><text x="{}" y="{bottom}" font-size="10" text-anchor="end">0</text><text x="{PAD_L}" y="{}" font-size="10">{}</text><text x="{}" y="{}" font-size="10" text-anchor="end">{}</text></svg>"##,
        W - PAD_R,
        PAD_L - 4.0,
        top + 8.0,
        PAD_L - 4.0,
        h - 4.0,
        esc(&history[0].0),
        W - PAD_R,
        h - 4.0,
        esc(&history[history.len() - 1].0),
    )
}
