//! Micro-benchmark of the baton core: events handled per second.
//!
//! `cargo run -p mozart-baton --example events_per_sec --release`
//!
//! 20 jobs of 1,000 sheets each (half of them in dependency chains), 10 % of attempts fail and
//! retry through the timer wheel, all musicians answer instantly. Prints events/s with and
//! without observer events.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use mozart_baton::{
    AttemptResult, BatonConfig, BatonCore, Effect, Event, FailureKind, InstrumentSpec, JobSpec,
    Millis, SheetSpec, TimerWheel,
};

fn job(j: u32) -> JobSpec {
    let sheets = (1..=1000)
        .map(|i| {
            let mut s = SheetSpec::new(
                i,
                if j.is_multiple_of(2) {
                    "claude-code"
                } else {
                    "gemini-cli"
                },
            );
            if j.is_multiple_of(2) && i > 1 {
                s.dependencies = vec![i - 1];
            }
            s.retry.max_retries = 5;
            s
        })
        .collect();
    let mut spec = JobSpec::new(format!("job-{j}"), sheets);
    spec.max_concurrent_sheets = 8;
    spec
}

/// Runs the workload once; returns the events handled and the time taken. Public because
/// `mozart-bench` (tests/src/bin/bench/main.rs) includes this file to report the same figure.
pub fn run(observer: bool) -> (u64, Duration) {
    let mut config = BatonConfig {
        max_concurrent_sheets: 100,
        emit_observer_events: observer,
        ..BatonConfig::default()
    };
    for name in ["claude-code", "gemini-cli"] {
        let mut inst = InstrumentSpec::new(name);
        inst.max_concurrent = 60;
        inst.circuit_breaker_threshold = 1_000;
        config.instruments.push(inst);
    }
    let mut core = BatonCore::new(config);
    let mut wheel: TimerWheel<Event> = TimerWheel::new();
    let mut now = Millis(0);
    let mut out = Vec::with_capacity(256);
    let mut inbox: VecDeque<Event> = (0..20)
        .map(|j| Event::RegisterJob(Box::new(job(j))))
        .collect();
    let mut events = 0u64;
    let mut finished = 0;
    let started = Instant::now();
    while finished < 20 {
        let event = match inbox.pop_front() {
            Some(e) => e,
            None => match wheel.next_deadline() {
                Some(at) => {
                    now = now.max(at);
                    match wheel.pop_due(now) {
                        Some((_, e)) => e,
                        None => continue,
                    }
                }
                None => break,
            },
        };
        events += 1;
        core.handle(event, now, &mut out);
        for effect in out.drain(..) {
            match effect {
                Effect::Dispatch {
                    job_id,
                    sheet_num,
                    attempt,
                } => {
                    let fails = attempt.dispatch_id.is_multiple_of(10);
                    let r = if fails {
                        AttemptResult::failed(
                            job_id,
                            sheet_num,
                            attempt.dispatch_id,
                            FailureKind::Transient,
                            "x",
                        )
                    } else {
                        AttemptResult::success(job_id, sheet_num, attempt.dispatch_id)
                    };
                    inbox.push_back(Event::SheetAttemptResult(Box::new(r)));
                }
                Effect::ScheduleTimer { id, at, event } => wheel.schedule(id, at, event),
                Effect::CancelTimer { id } => {
                    wheel.cancel(id);
                }
                Effect::JobFinished { .. } => finished += 1,
                _ => {}
            }
        }
    }
    assert_eq!(finished, 20, "every job must finish");
    (events, started.elapsed())
}

fn main() {
    for observer in [false, true] {
        let (events, took) = run(observer);
        println!(
            "observer events {}: {events} events in {:.3}s = {:.0} events/s",
            if observer { "on " } else { "off" },
            took.as_secs_f64(),
            events as f64 / took.as_secs_f64()
        );
    }
}
