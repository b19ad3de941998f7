//! Micro-benchmark of the learning store's per-sheet work, as the conductor does it for a
//! 1,000-sheet job on an empty store: a pattern selection per prompt, a sheet outcome per
//! finished sheet (written in small batches, as the conductor's writer drains them), and the
//! job-end aggregation over all sheets.
//!
//! `cargo run --release -p mozart-learning --example outcome_bench [-- SHEETS [ROUNDS [BATCH]]]`

use std::time::{Duration, Instant};

use mozart_learning::{
    ContextTags, JobOutcome, LearningError, LearningStore, Result, SelectionConfig, SheetOutcome,
    SheetStatus, ValidationCheck, XorShift64,
};

/// Outcomes per writer batch by default: with 20 sheets in flight, the writer finds a few
/// queued.
const BATCH: usize = 4;

fn outcome(job: &str, sheet: u32, workspace: &std::path::Path, epoch: f64) -> SheetOutcome {
    let mut o = SheetOutcome::new(job, sheet, workspace);
    o.status = SheetStatus::Completed;
    o.validation_pass_rate = Some(1.0);
    o.validations = vec![ValidationCheck {
        rule_type: "file_exists".into(),
        passed: true,
        confidence: Some(1.0),
        ..ValidationCheck::default()
    }];
    o.duration_seconds = 0.01;
    o.instrument = Some("sh".into());
    o.finished_at_epoch = epoch + f64::from(sheet) * 0.001_25;
    o
}

struct Round {
    select: Duration,
    record: Duration,
    job_end: Duration,
}

/// A clock for one phase: this thread's CPU time where Linux reports it (steadier than wall
/// time on a shared machine, and what the conductor's CPU-per-sheet figure counts), else
/// wall time.
struct Clock {
    cpu: Option<u64>,
    wall: Instant,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            cpu: thread_cpu_ns(),
            wall: Instant::now(),
        }
    }

    fn elapsed(&self) -> Duration {
        match (self.cpu, thread_cpu_ns()) {
            (Some(a), Some(b)) => Duration::from_nanos(b.saturating_sub(a)),
            _ => self.wall.elapsed(),
        }
    }
}

/// Nanoseconds this thread has run on a CPU (`/proc/thread-self/schedstat`, first field).
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn round(dir: &std::path::Path, sheets: u32, batch: usize, n: u32) -> Result<Round> {
    let store = LearningStore::open(dir.join(format!("bench-{n}.db")))?;
    let workspace = dir.join("workspace");
    let job = format!("bench-job-{n}");
    let tags = ContextTags::for_validations(&["file_exists"]);
    let cfg = SelectionConfig {
        instrument: Some("sh".into()),
        ..SelectionConfig::default()
    };
    let mut rng = XorShift64::new(7);
    let base = 1.8e9 + f64::from(n) * 10_000.0;

    let started = Clock::start();
    for _ in 0..sheets {
        let selection = store.patterns_for_prompt(&tags, &cfg, &mut rng)?;
        std::hint::black_box(selection.prompt_section());
    }
    let select = started.elapsed();

    let outcomes: Vec<SheetOutcome> = (1..=sheets)
        .map(|s| outcome(&job, s, &workspace, base))
        .collect();
    let started = Clock::start();
    for chunk in outcomes.chunks(batch.max(1)) {
        store.batch(|s| {
            for o in chunk {
                if let Err(e) = s.record_sheet_outcome(o) {
                    eprintln!("record failed: {e}");
                }
            }
        })?;
    }
    let record = started.elapsed();

    let started = Clock::start();
    let summary = store.record_job_outcome(&JobOutcome {
        job_id: job.clone(),
        sheets: outcomes,
        instrument: Some("sh".into()),
    })?;
    store.maintain_after_job()?;
    let job_end = started.elapsed();
    assert_eq!(
        summary.outcomes_recorded, 0,
        "every sheet was recorded before"
    );
    Ok(Round {
        select,
        record,
        job_end,
    })
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let sheets: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let rounds: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let batch: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(BATCH);
    let dir = tempfile::tempdir().map_err(|e| LearningError::InvalidInput {
        field: "tempdir",
        reason: e.to_string(),
    })?;
    std::fs::create_dir_all(dir.path().join("workspace")).map_err(|e| {
        LearningError::InvalidInput {
            field: "workspace",
            reason: e.to_string(),
        }
    })?;
    let mut all = Vec::new();
    for n in 0..rounds {
        all.push(round(dir.path(), sheets, batch, n)?);
    }
    // The mean over the rounds: the thread CPU clock advances in scheduler ticks, so one
    // phase's reading is off by up to a tick, and only the mean evens that out.
    let mean = |f: fn(&Round) -> Duration| all.iter().map(f).sum::<Duration>() / rounds.max(1);
    let per = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(sheets.max(1));
    let (s, r, j) = (mean(|r| r.select), mean(|r| r.record), mean(|r| r.job_end));
    let clock = if thread_cpu_ns().is_some() {
        "thread CPU"
    } else {
        "wall"
    };
    println!(
        "sheets {sheets}, {batch} outcomes per commit, mean of {rounds} rounds, {clock} µs per sheet:"
    );
    println!("  select (patterns_for_prompt)   {:8.2}", per(s));
    println!("  record (record_sheet_outcome)  {:8.2}", per(r));
    println!("  job end (record_job_outcome)   {:8.2}", per(j));
    println!("  total                          {:8.2}", per(s + r + j));
    Ok(())
}
