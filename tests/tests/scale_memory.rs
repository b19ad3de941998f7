//! Issue 24: a job's memory in the conductor grows with the sheets that run, not with the
//! sheets it plans. A 20,000-sheet job of which a handful run is mostly planned sheets;
//! what it costs the conductor is read from `/proc` (RSS and its whole-life peak), a
//! memory bound rather than a timing.

use std::time::{Duration, Instant};

use mozart_tests::{stdout, TestEnv};

/// Planned sheets of the job.
const SHEETS: u64 = 20_000;

/// What the job may add to the conductor's resident memory while 4 of its sheets run:
/// 600 bytes per planned sheet (the 4 running sheets' own cost included). Before planned
/// sheets were held compact (issue 24) a planned sheet added ~2.4 KB (debug build, measured:
/// 47 MB for 20,000); then ~1.5 KB; then ~0.8 KB (772 B on `main` at ede2ca5); now ~0.4 KB
/// (the baton's sheet without attempt state, a bitset of ready sheets, a planned sheet
/// packed in its checkpoint slot, the stage map as runs, in the score and its snapshot).
const MAX_GROWTH_BYTES: u64 = SHEETS * 600;

/// The whole-life peak the job may add, its submission's working memory included: 700
/// bytes per planned sheet (1,107 B on `main` at ede2ca5, where the baton's spec of every
/// sheet was alive at once; ~0.44 KB now that the baton makes each sheet's spec in turn).
const MAX_PEAK_BYTES: u64 = SHEETS * 700;

fn kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// (VmRSS, VmHWM) of `pid` in bytes.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = kib(&status, "VmRSS:").expect("VmRSS of the conductor");
    let hwm = kib(&status, "VmHWM:").expect("VmHWM of the conductor");
    (rss * 1024, hwm * 1024)
}

/// Child processes of `pid` (its instruments).
fn children(pid: u32) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .map(|c| c.split_whitespace().count())
        .sum()
}

#[test]
fn planned_sheets_cost_the_conductor_little_memory() {
    let env = TestEnv::new();
    env.start_conductor();
    let pid = env.conductor_pid().expect("conductor pid");
    // Settled: the conductor's own start-up is not the job's.
    std::thread::sleep(Duration::from_millis(500));
    let (idle, _) = memory(pid);
    let score = env.write_score(
        "planned",
        &format!(
            "name: planned\nworkspace: ./planned-ws\ninstrument: shell\n\
             instrument_config:\n  timeout_seconds: 600\n\
             sheet:\n  size: 1\n  total_items: 1\n  fan_out:\n    1: {SHEETS}\n\
             parallel:\n  enabled: true\n  max_concurrent: 4\n\
             prompt:\n  template: \"RUN: sleep 300\"\n"
        ),
    );
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    // Wait until its sheets run (the job is accepted, planned, saved and dispatching).
    let deadline = Instant::now() + Duration::from_secs(180);
    while children(pid) < 4 {
        assert!(
            Instant::now() < deadline,
            "the job's sheets never ran:\n{}",
            env.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    let (rss, hwm) = memory(pid);
    let _ = env.mozart(&["cancel", "planned"]);
    env.kill_all();
    let mb = |b: u64| b as f64 / 1e6;
    eprintln!(
        "{SHEETS} planned sheets: RSS {:.1} MB over idle ({} B a sheet), peak {:.1} MB over \
         idle ({} B a sheet)",
        mb(rss.saturating_sub(idle)),
        rss.saturating_sub(idle) / SHEETS,
        mb(hwm.saturating_sub(idle)),
        hwm.saturating_sub(idle) / SHEETS
    );
    assert!(
        rss.saturating_sub(idle) < MAX_GROWTH_BYTES,
        "a job of {SHEETS} planned sheets (4 running) grew the conductor from {:.1} MB to \
         {:.1} MB: more than {:.1} MB",
        mb(idle),
        mb(rss),
        mb(MAX_GROWTH_BYTES)
    );
    // The whole-life peak counts the submission's own working memory too.
    assert!(
        hwm.saturating_sub(idle) < MAX_PEAK_BYTES,
        "submitting {SHEETS} sheets peaked the conductor at {:.1} MB (idle {:.1} MB): more \
         than {:.1} MB above idle",
        mb(hwm),
        mb(idle),
        mb(MAX_PEAK_BYTES)
    );
}
