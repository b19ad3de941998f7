//! The conductor's own CPU per instrument call (the per-sheet cost of the 1,000-sheet run,
//! docs/performance.md): `CLOCK_PROCESS_CPUTIME_ID` of this process — the instrument's
//! own CPU is not in it — divided by the number of calls, for sequential calls and for 20
//! in flight at once (the benchmark score's `max_concurrent`), on a two-worker runtime like
//! the conductor's.
//!
//! `cargo bench -p mozart-backends --bench spawn_cpu [-- --n 2000]`
//! Prints a table; never fails on a number.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mozart_backends::{Backend, ExecutionRequest, InstrumentProfile, ProfileBackend};

fn backend(extra: &str) -> Arc<ProfileBackend> {
    let yaml = format!(
        "name: cpu-true\ndisplay_name: cpu true\nkind: cli\ncli:\n  command:\n    executable: 'true'\n{extra}  output:\n    format: text\n"
    );
    let profile = InstrumentProfile::from_yaml(&yaml, "spawn_cpu bench")
        .unwrap_or_else(|e| panic!("bench profile: {e}"));
    Arc::new(ProfileBackend::new(Arc::new(profile)).unwrap_or_else(|e| panic!("backend: {e}")))
}

fn cpu_now() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

fn main() {
    let mut n = 2000usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--n" {
            n = args
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("--n needs a number"));
        }
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    let cases = [
        ("`true`, inherited environment", backend("")),
        (
            "`true`, profile sets a variable",
            backend("    env: {MOZART_BENCH_VAR: '$HOME/x'}\n"),
        ),
    ];
    println!("spawn_cpu — N = {n} calls per row, conductor-side CPU per call (µs)");
    println!();
    println!("| case | in flight | CPU per call | wall per call |");
    println!("|---|---:|---:|---:|");
    for (name, backend) in &cases {
        for in_flight in [1usize, 20] {
            let run = |count: usize| {
                let backend = Arc::clone(backend);
                let dir = dir.path().to_path_buf();
                rt.block_on(async move {
                    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
                    let mut tasks = Vec::new();
                    for _ in 0..in_flight {
                        let (backend, dir, next) =
                            (Arc::clone(&backend), dir.clone(), Arc::clone(&next));
                        tasks.push(tokio::spawn(async move {
                            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < count {
                                let req = ExecutionRequest::new("x", &dir, Duration::from_secs(60));
                                let r = backend.execute(req).await;
                                assert!(r.success, "{:?}", r.error_message);
                            }
                        }));
                    }
                    for t in tasks {
                        t.await.unwrap_or_else(|e| panic!("task: {e}"));
                    }
                })
            };
            run(50);
            let (cpu0, wall0) = (cpu_now(), Instant::now());
            run(n);
            let cpu = (cpu_now() - cpu0).as_secs_f64() * 1e6 / n as f64;
            let wall = wall0.elapsed().as_secs_f64() * 1e6 / n as f64;
            println!("| {name} | {in_flight} | {cpu:.1} µs | {wall:.1} µs |");
        }
    }
}
