//! `mozart-bench`: one command that measures the port against its speed bars and prints one
//! table (issue #7 part 1; the bars of issues #2–#5). Method and results: docs/performance.md.
//!
//! `cargo run --release -p mozart-tests --bin mozart-bench [-- --baseline FILE] [--save FILE]`
//!
//! The `mozart` under test is this very executable: with `MOZART_BENCH_AS_MOZART` set it
//! behaves exactly like `crates/cli/src/main.rs` (multicall), so `cargo run` builds precisely the
//! code being measured and a stale `target/release/mozart` can never be timed by mistake.
//! `--mozart PATH` measures another build instead (an older commit, or upstream's own CLI).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use mozart_ipc::{methods, BlockingClient};
use mozart_state::{CheckpointState, DaemonJobStatus, JobRecord, Registry};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

mod dashboard_bench;
/// The baton's events/s micro-benchmark, shared with `cargo run -p mozart-baton --example
/// events_per_sec` so both always measure the same workload.
#[allow(dead_code)]
#[path = "../../../../crates/baton/examples/events_per_sec.rs"]
mod events_per_sec;

/// Set in the environment of every `mozart` command this tool runs: the process then is
/// `mozart`, not the benchmark (see the module docs).
const AS_MOZART: &str = "MOZART_BENCH_AS_MOZART";

/// Fixtures, embedded so the binary runs from any directory (tests/bench/README.md).
const INSTANT_PROFILE: &str = include_str!("../../../bench/instant.instrument.yaml");
const INSTANT_SCRIPT: &str = include_str!("../../../bench/mozart-instant");
const CORPUS_SCORE: &str = include_str!("../../../bench/iterative-dev-loop.yaml");
const SCORE_1: &str = include_str!("../../../bench/bench-1-sheet.yaml");
const SCORE_SEQ_20: &str = include_str!("../../../bench/bench-seq-20.yaml");
const SCORE_FANOUT_50: &str = include_str!("../../../bench/bench-fanout-50.yaml");
const SCORE_FANOUT_1000: &str = include_str!("../../../bench/bench-fanout-1000.yaml");
const SCORE_SHELL_SEQ_20: &str = include_str!("../../../bench/bench-shell-seq-20.yaml");
const SCORE_CAPTURE_STDOUT: &str = include_str!("../../../bench/bench-capture-stdout.yaml");
const SCORE_CAPTURE_STDERR: &str = include_str!("../../../bench/bench-capture-stderr.yaml");
const SCORE_CAPTURE_JSON: &str = include_str!("../../../bench/bench-capture-json.yaml");
const SCORE_CAPTURE_JSONL: &str = include_str!("../../../bench/bench-capture-jsonl.yaml");
/// `sh` instruments with JSON / JSONL output, for the capture rows of those formats.
const JSON_SH_PROFILE: &str = include_str!("../../../bench/json-sh.instrument.yaml");
const JSONL_SH_PROFILE: &str = include_str!("../../../bench/jsonl-sh.instrument.yaml");
/// The built-in `shell` instrument's profile, for running its exact command line directly.
const SHELL_PROFILE: &str = include_str!("../../../../crates/backends/profiles/shell.yaml");

/// Same parallelism as the floor's 20 workers (and the scores' `max_concurrent: 20`).
const CONDUCTOR_YAML: &str = "max_concurrent_sheets: 20\n";
const FLOOR_WORKERS: u32 = 20;
/// Jobs put into the registry for the `list` and start-up measurements.
const REGISTRY_JOBS: u32 = 1_000;
/// Longest any one job may take before the run is declared stuck.
const JOB_DEADLINE: Duration = Duration::from_secs(180);

/// Measure the `mozart` command and conductor against the speed bars.
#[derive(Debug, Parser)]
#[command(name = "mozart-bench", version)]
struct Args {
    /// Print each figure's ratio to a run saved earlier with --save.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Write this run (JSON) to FILE.
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// Measure this `mozart` executable instead of the one built into mozart-bench.
    #[arg(long, value_name = "PATH")]
    mozart: Option<PathBuf>,
    /// Repetitions of each command round trip (the median is reported).
    #[arg(long, default_value_t = 20)]
    reps: usize,
    /// Repetitions of the 1,000-sheet run and of its floor (interleaved; median reported).
    #[arg(long, default_value_t = 5)]
    big_reps: usize,
    /// Interval between samples of the conductor's memory and instrument processes while a
    /// job runs, in milliseconds, 0 for none (the job's end is not polled for: `job.watch`
    /// answers when it ends; sampling faster makes the sampling itself a load). The job.submit
    /// runs and the floor are never sampled.
    #[arg(long, default_value_t = 5)]
    poll_ms: u64,
    /// Skip the 1,000-sheet run, its floor and the 1,000-job registry (a quick look).
    #[arg(long)]
    quick: bool,
    /// Measure only the real-Claude-Code row (it runs when tests/real-cli/setup.sh has
    /// installed the CLI).
    #[arg(long)]
    only_real_cli: bool,
    /// Repetitions of the real-Claude-Code sheet and of its direct `claude -p` floor.
    #[arg(long, default_value_t = 5)]
    real_cli_reps: usize,
    /// Measure only the Slurm placement rows (they run whenever a Slurm node answers).
    #[arg(long)]
    only_slurm: bool,
    /// Measure only the operator-command rows (issue 15), against 1,000 registry jobs.
    #[arg(long)]
    only_cmds: bool,
    /// Repetitions of each Slurm placement run and of its plain-sbatch floor.
    #[arg(long, default_value_t = 5)]
    slurm_reps: usize,
    /// Measure only the dashboard figures.
    #[arg(long)]
    dashboard_only: bool,
    /// Measure only the scale rows (issue 24): one job of each --scale-sheets size, then
    /// --scale-jobs jobs of 10 sheets at once, from a shell loop of `mozart run` and from
    /// one `mozart run` of them all.
    #[arg(long)]
    only_scale: bool,
    /// Sheet counts of the one-job scale rows (comma-separated; 0 for none).
    #[arg(long, value_delimiter = ',', default_values_t = [1_000u32, 10_000, 100_000])]
    scale_sheets: Vec<u32>,
    /// Jobs of the many-jobs scale rows (0 skips them).
    #[arg(long, default_value_t = 1_000)]
    scale_jobs: u32,
    /// Measure only the 100× views rows (issue 24): status / list / dashboard of a
    /// 100,000- and a 10,000-sheet job and of 1,000 jobs × 10 sheets, then a real
    /// 10,000-sheet run (skipped with --quick).
    #[arg(long)]
    only_views: bool,
    /// Measure only the views while 1,000 jobs × 10 sheets arrive and run (`list`,
    /// `status`, the dashboard's jobs page; part of --only-views).
    #[arg(long)]
    only_many_live: bool,
    /// Measure only the rows of issue 24's speed bars: `validate` of the 516-sheet score,
    /// the 1-, seq-20-, 50- and 1,000-sheet runs with the 1,000-sheet spawn floor (same
    /// run, interleaved) and seq-20's per-sheet overhead (about a minute).
    #[arg(long)]
    only_runs: bool,
}

/// The real Claude Code row (issue 13).
mod bench_real_cli;

/// The operator-command rows (issue 15).
mod bench_cmds;

/// The 100× views rows (issue 24).
mod bench_views;

/// The Slurm placement rows (issue 17).
mod bench_slurm;

/// The scale rows (issue 24): 100,000-sheet jobs, 1,000 jobs.
mod bench_scale;

/// Everything that can stop a benchmark run, with what was being done.
#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`mozart {args}` failed ({status}):\n{output}")]
    Mozart {
        args: String,
        status: String,
        output: String,
    },
    #[error("conductor call '{method}' failed: {source}")]
    Ipc {
        method: &'static str,
        #[source]
        source: mozart_ipc::IpcError,
    },
    #[error("job '{job}' ended '{status}' instead of 'completed' (workspace {workspace})")]
    JobFailed {
        job: String,
        status: String,
        workspace: PathBuf,
    },
    #[error("job '{job}' completed but {missing} of its {sheets} output files are missing")]
    MissingOutput {
        job: String,
        missing: usize,
        sheets: u32,
    },
    #[error("timed out after {secs} s waiting for {what}")]
    Timeout { what: String, secs: u64 },
    #[error("floor: instant instrument call {index} failed: {detail}")]
    Floor { index: u32, detail: String },
    #[error("shell instrument run directly, call {index}: {detail}")]
    ShellDirect { index: u32, detail: String },
    #[error("seeding the registry {path}: {source}")]
    State {
        path: PathBuf,
        #[source]
        source: Box<mozart_state::StateError>,
    },
    #[error("dashboard: {0}")]
    Dashboard(String),
    #[error("baseline {path}: {source}")]
    Baseline {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

type Result<T, E = BenchError> = std::result::Result<T, E>;

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BenchError {
    let path = path.to_path_buf();
    move |source| BenchError::Io {
        action,
        path,
        source,
    }
}

fn main() -> ExitCode {
    if std::env::var_os(AS_MOZART).is_some() {
        std::process::exit(mozart_cli::main());
    }
    let args = Args::parse();
    match bench(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("mozart-bench: {err}");
            ExitCode::FAILURE
        }
    }
}

fn bench(args: &Args) -> Result<()> {
    let baseline = args.baseline.as_deref().map(Saved::load).transpose()?;
    let mozart = MozartExe::resolve(args.mozart.as_deref())?;
    let mut report = Report::default();
    let started = Instant::now();
    if args.dashboard_only {
        progress("dashboard (issue 16)");
        dashboard(&mozart, args, &mut report)?;
        return finish(&report, args, baseline.as_ref(), started);
    }

    if args.only_views {
        progress("100× views (issue 24)");
        bench_views::view_rows(&mozart, args, &mut report)?;
        return finish(&report, args, baseline.as_ref(), started);
    }
    if args.only_many_live {
        progress("views while 1,000 jobs run (issue 24)");
        bench_views::many_live(&mozart, &mut report)?;
        return finish(&report, args, baseline.as_ref(), started);
    }
    if args.only_slurm {
        only_slurm(args, &mozart, &mut report)?;
        return finish(&report, args, baseline.as_ref(), started);
    }
    if args.only_real_cli {
        bench_real_cli::real_cli_rows(&mozart, args.real_cli_reps, &mut report)?;
        return finish(&report, args, baseline.as_ref(), started);
    }
    if args.only_cmds {
        bench_cmds::only_cmds(args, &mozart, &mut report)?;
        return finish(&report, args, baseline.as_ref(), started);
    }
    if args.only_scale {
        bench_scale::only_scale(args, &mozart, &mut report)?;
        return finish(&report, args, baseline.as_ref(), started);
    }
    progress("local commands (no conductor)");
    let env = Env::new(&mozart)?;
    local_commands(&env, args.reps, &mut report)?;
    if args.only_runs {
        progress("conductor, the runs and their floors");
        let conductor = Conductor::start(&env)?;
        runs(&env, &conductor, args, &mut report)?;
        conductor.stop(&env)?;
        return finish(&report, args, baseline.as_ref(), started);
    }

    progress("conductor, empty registry");
    let conductor = Conductor::start_timed(
        &env,
        &mut report,
        "start_ready_empty",
        "conductor start → ready, empty registry",
    )?;
    report.add(
        Row::new(
            "idle_rss",
            "conductor idle RSS",
            conductor.rss_mib(),
            "MiB",
            1,
        )
        .bar_below(20.0),
    );
    round_trips(&env, args.reps, &mut report)?;
    runs(&env, &conductor, args, &mut report)?;
    conductor.stop(&env)?;
    drop(env);

    // A fresh conductor, so "RSS before the job" is the idle RSS and not memory the
    // allocator kept from the 1,000-sheet runs (which would hide growth).
    progress("conductor, command-instrument bars (issue 4)");
    let env = Env::new(&mozart)?;
    let conductor = Conductor::start(&env)?;
    std::thread::sleep(Duration::from_millis(300));
    capture_rows(&env, &conductor, args, &mut report)?;
    instruments(&env, &conductor, args, &mut report)?;
    conductor.stop(&env)?;
    drop(env);

    progress("real Claude Code against the mock API (issue 13)");
    bench_real_cli::real_cli_rows(&mozart, args.real_cli_reps, &mut report)?;

    progress("conductor, Slurm placement (issue 17)");
    let env = Env::new(&mozart)?;
    let conductor = Conductor::start(&env)?;
    bench_slurm::slurm_rows(&env, &conductor, args.slurm_reps, &mut report)?;
    conductor.stop(&env)?;
    drop(env);

    progress("dashboard (issue 16)");
    dashboard(&mozart, args, &mut report)?;

    if !args.quick {
        progress("fresh conductor, whole-life peak RSS through one 1,000-sheet job");
        let env = Env::new(&mozart)?;
        let conductor = Conductor::start(&env)?;
        whole_life_rss(&env, &conductor, args, &mut report)?;
        conductor.stop(&env)?;
        drop(env);

        progress("conductor, registry with 1,000 jobs");
        let env = Env::new(&mozart)?;
        seed_registry(&env.home.join("registry.db"), REGISTRY_JOBS)?;
        let conductor = Conductor::start_timed(
            &env,
            &mut report,
            "start_ready_1000",
            "conductor start → ready, 1,000 jobs in registry",
        )?;
        report.add(Row::new(
            "idle_rss_1000",
            "conductor idle RSS, 1,000 jobs in registry",
            conductor.rss_mib(),
            "MiB",
            1,
        ));
        let status = median_of(args.reps, || env.time_ok(&["status"]))?;
        report.add(
            Row::ms(
                "status_1000",
                "`mozart status`, 1,000 jobs in registry",
                status,
                args.reps,
            )
            .bar_below(10.0),
        );
        let list = median_of(args.reps, || env.time_ok(&["list"]))?;
        report.add(Row::ms(
            "list_1000",
            "`mozart list`, 1,000 jobs in registry",
            list,
            args.reps,
        ));
        let list_all = median_of(args.reps, || env.time_ok(&["list", "--all", "--json"]))?;
        report.add(Row::ms(
            "list_all_json_1000",
            "`mozart list --all --json`, 1,000 jobs in registry",
            list_all,
            args.reps,
        ));
        bench_cmds::operator_rows(&env, args.reps, &mut report)?;
        conductor.stop(&env)?;
        drop(env);

        progress("100× views (issue 24)");
        bench_views::view_rows(&mozart, args, &mut report)?;
    }

    progress("baton core events/s");
    let (events, took) = events_per_sec::run(false);
    report.add(
        Row::new(
            "baton_events_per_s",
            "baton core events/s (events_per_sec example, observer off)",
            events as f64 / took.as_secs_f64(),
            "events/s",
            1,
        )
        .higher_is_better()
        .bar_above(100_000.0),
    );

    finish(&report, args, baseline.as_ref(), started)
}

/// Print the report's table (against the baseline, if any) and save it with `--save`.
fn finish(report: &Report, args: &Args, baseline: Option<&Saved>, started: Instant) -> Result<()> {
    let saved = Saved::new(report, started.elapsed());
    print!("{}", saved.table(baseline));
    if let Some(path) = &args.save {
        let text = serde_json::to_string_pretty(&saved).map_err(|source| BenchError::Baseline {
            path: path.clone(),
            source,
        })?;
        std::fs::write(path, text + "\n").map_err(io_err("writing", path))?;
        progress(&format!("saved this run to {}", path.display()));
    }
    Ok(())
}

/// `--only-slurm`: the Slurm placement rows alone.
fn only_slurm(args: &Args, mozart: &MozartExe, report: &mut Report) -> Result<()> {
    let env = Env::new(mozart)?;
    let conductor = Conductor::start(&env)?;
    bench_slurm::slurm_rows(&env, &conductor, args.slurm_reps, report)?;
    conductor.stop(&env)
}

/// Sheets of the score whose transitions the SSE latency figure times.
const SSE_SHEETS: u32 = 8;

/// The dashboard's bars: its jobs page with 1,000 jobs, and sheet transition → live list.
fn dashboard(mozart: &MozartExe, args: &Args, report: &mut Report) -> Result<()> {
    let page = dashboard_bench::jobs_page_render(args.reps).map_err(BenchError::Dashboard)?;
    report.add(
        Row::ms(
            "dashboard_jobs_page_1000",
            "dashboard jobs page rendered server-side, 1,000 jobs",
            page,
            args.reps,
        )
        .bar_below(20.0),
    );
    let env = Env::new(mozart)?;
    let conductor = Conductor::start(&env)?;
    let score = env.work.join("sse-live.yaml");
    write_file(
        &score,
        &mozart_tests::sleepy_shell_score("sse-live", SSE_SHEETS, 0.3),
    )?;
    let latency = dashboard_bench::sse_latency(
        &env.socket,
        &env.home.join("global-learning.db"),
        "sse-live",
        SSE_SHEETS,
        || {
            let status = env
                .command(&["run", &score.display().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map_err(|e| e.to_string())?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("mozart run sse-live: {status}"))
            }
        },
    )
    .map_err(BenchError::Dashboard)?;
    report.add(
        Row::ms(
            "dashboard_sse_latency",
            "sheet transition → live jobs list (SSE), median",
            latency.median,
            latency.samples,
        )
        .bar_below(200.0),
    );
    report.add(Row::ms(
        "dashboard_sse_latency_max",
        "sheet transition → live jobs list (SSE), worst",
        latency.max,
        latency.samples,
    ));
    conductor.stop(&env)?;
    Ok(())
}

fn progress(what: &str) {
    eprintln!("mozart-bench: {what}");
}

// ---------------------------------------------------------------- the measurements

/// `--version` and `validate` on the 516-sheet corpus score: pure CLI start-up and the config
/// crate, no conductor (bars: config brief, issue #2).
fn local_commands(env: &Env, reps: usize, report: &mut Report) -> Result<()> {
    let version = median_of(reps, || env.time_ok(&["--version"]))?;
    report.add(Row::ms("version", "`mozart --version`", version, reps));

    // The score's `workspace: ../workspaces/dev-loop-example` needs its parent to exist (V002).
    let parent = env.work.join("workspaces");
    std::fs::create_dir_all(&parent).map_err(io_err("creating", &parent))?;
    let dir = env.work.join("corpus");
    std::fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
    let corpus = dir.join("iterative-dev-loop.yaml");
    write_file(&corpus, CORPUS_SCORE)?;
    let corpus_arg = corpus.display().to_string();
    let validate = median_of(reps, || env.time_ok(&["validate", &corpus_arg]))?;
    report.add(
        Row::ms(
            "validate_corpus",
            "`mozart validate`, 516-sheet corpus score",
            validate,
            reps,
        )
        .bar_below(20.0),
    );
    let json_reps = reps.min(10);
    let validate_json = median_of(json_reps, || {
        env.time_ok(&["validate", "--json", &corpus_arg])
    })?;
    report.add(
        Row::ms(
            "validate_json_corpus",
            "`mozart validate --json`, 516-sheet corpus score",
            validate_json,
            json_reps,
        )
        .bar_below(200.0),
    );
    Ok(())
}

/// `mozart status` and `mozart list` against an idle conductor (bar: status < 10 ms,
/// cli-jobs brief, issue #3).
fn round_trips(env: &Env, reps: usize, report: &mut Report) -> Result<()> {
    let status = median_of(reps, || env.time_ok(&["status"]))?;
    report.add(
        Row::ms(
            "status",
            "`mozart status` round trip (idle conductor)",
            status,
            reps,
        )
        .bar_below(10.0),
    );
    let list = median_of(reps, || env.time_ok(&["list"]))?;
    report.add(Row::ms(
        "list",
        "`mozart list` round trip (idle conductor)",
        list,
        reps,
    ));
    Ok(())
}

/// One benchmark score and how often to run it.
struct Workload {
    key: &'static str,
    yaml: &'static str,
    sheets: u32,
    reps: usize,
    /// Each sheet writes `out-<n>.txt` into the workspace (checked after the run).
    outputs: bool,
}

/// End-to-end runs, the floor and the per-sheet overhead (issue #5 bars).
fn runs(env: &Env, conductor: &Conductor, args: &Args, report: &mut Report) -> Result<()> {
    let mut workloads = vec![
        Workload {
            key: "bench-1-sheet",
            yaml: SCORE_1,
            sheets: 1,
            reps: 10,
            outputs: true,
        },
        Workload {
            key: "bench-seq-20",
            yaml: SCORE_SEQ_20,
            sheets: 20,
            reps: 7,
            outputs: true,
        },
        Workload {
            key: "bench-fanout-50",
            yaml: SCORE_FANOUT_50,
            sheets: 50,
            reps: 5,
            outputs: true,
        },
    ];
    if !args.quick {
        workloads.push(Workload {
            key: "bench-fanout-1000",
            yaml: SCORE_FANOUT_1000,
            sheets: 1_000,
            reps: args.big_reps,
            outputs: true,
        });
    }
    let mut walls = BTreeMap::new();
    let (mut seq_alone, mut seq_walls) = (Vec::new(), Vec::new());
    for w in &workloads {
        progress(&format!(
            "{} ×{} (`mozart run`, then job.submit)",
            w.key, w.reps
        ));
        let big = w.sheets >= 1_000;
        let mut by_cli = Vec::new();
        let mut by_rpc = Vec::new();
        let mut floors = Vec::new();
        let mut runs = Vec::new();
        let seq = w.key == "bench-seq-20";
        let seq_ws = env.work.join("instrument-alone");
        // The floors bracket the runs: one before the first rep, then one after each rep's
        // runs, and each rep is compared with the mean of the two around it — which cancels
        // the machine's drift within the minute (the instruments' own CPU moves by up to
        // 12 % between a floor and a run a minute later), where a floor after the runs only
        // would carry it whole into the ratio.
        if seq {
            seq_alone.push(floor(env, &seq_ws, 20, 1, Prompt::Sequential)?.wall);
        }
        if big {
            let ws = env.work.join("floor-start");
            floors.push(floor(env, &ws, w.sheets, FLOOR_WORKERS, Prompt::FanOut)?);
        }
        for rep in 0..w.reps {
            // Interleaved, so load from other work on a shared machine hits all alike.
            let hwm_reset = conductor.reset_peak_rss();
            let mut run = env.run_job(w, rep, conductor, Via::Cli, args.poll_ms)?;
            if hwm_reset {
                run.peak_rss_mib = run.peak_rss_mib.max(conductor.peak_rss_mib());
            }
            by_cli.push(run.wall);
            runs.push(run);
            // Not sampled, as the floor is not: the ratio to the floor compares like with like.
            by_rpc.push(env.run_job(w, rep, conductor, Via::Rpc, 0)?.wall);
            if seq {
                // The instrument alone, in the same minute as the two runs it is compared to.
                seq_alone.push(floor(env, &seq_ws, 20, 1, Prompt::Sequential)?.wall);
                seq_walls.push((by_cli[rep], by_rpc[rep]));
            }
            if big {
                let ws = env.work.join(format!("floor-{rep}"));
                floors.push(floor(env, &ws, w.sheets, FLOOR_WORKERS, Prompt::FanOut)?);
            }
        }
        // Each rep's runs over the floors of the same minute (the mean of the two that
        // bracket them): the ratio of one rep's walls cancels the machine's drift between
        // reps, which a ratio of medians does not.
        let over_floor = |walls: &[Duration]| {
            median_f64(
                walls
                    .iter()
                    .zip(floors.windows(2))
                    .map(|(wall, around)| {
                        let floor = (around[0].wall + around[1].wall).as_secs_f64() / 2.0;
                        wall.as_secs_f64() / floor
                    })
                    .collect(),
            )
        };
        let (cli_vs_floor, rpc_vs_floor) = (over_floor(&by_cli), over_floor(&by_rpc));
        let (cli, rpc) = (median(by_cli), median(by_rpc));
        walls.insert(w.key, (cli, rpc));
        let n = w.reps;
        report.add(Row::ms(
            &format!("{}_wall", w.key),
            &format!("{}: `mozart run` → completed", w.key),
            cli,
            n,
        ));
        report.add(Row::ms(
            &format!("{}_submit_wall", w.key),
            &format!("{}: job.submit → completed (conductor only)", w.key),
            rpc,
            n,
        ));
        report.add(
            Row::new(
                &format!("{}_sheets_per_s", w.key),
                &format!("{}: sheets/s (`mozart run` → completed)", w.key),
                f64::from(w.sheets) / cli.as_secs_f64(),
                "sheets/s",
                n,
            )
            .higher_is_better(),
        );
        if w.sheets > 1 {
            let in_flight = runs.iter().map(|r| r.peak_in_flight).max().unwrap_or(0);
            report.add(
                Row::new(
                    &format!("{}_in_flight", w.key),
                    &format!("{}: most instrument processes at once", w.key),
                    f64::from(in_flight),
                    "procs",
                    n,
                )
                .higher_is_better(),
            );
        }
        if w.sheets >= 50 {
            // Per-sheet CPU that grows with the job's size means per-sheet work is O(sheets).
            let per_sheet = |f: fn(&JobRun) -> f64| {
                median_f64(runs.iter().map(f).collect()) / f64::from(w.sheets)
            };
            report.add(Row::new(
                &format!("{}_conductor_cpu", w.key),
                &format!("{}: conductor CPU per sheet", w.key),
                per_sheet(|r| r.conductor_cpu_ms),
                "ms",
                n,
            ));
            report.add(Row::new(
                &format!("{}_instrument_cpu", w.key),
                &format!("{}: instrument processes' CPU per sheet", w.key),
                per_sheet(|r| r.children_cpu_ms),
                "ms",
                n,
            ));
        }
        if !big {
            continue;
        }
        let peak_rss = runs.iter().map(|r| r.peak_rss_mib).fold(0.0, f64::max);
        report.add(Row::new(
            &format!("{}_peak_rss", w.key),
            &format!("{}: peak conductor RSS", w.key),
            peak_rss,
            "MiB",
            n,
        ));
        let floor_wall = median(floors.iter().map(|f| f.wall).collect());
        let floor_cpu =
            median_f64(floors.iter().map(|f| f.children_cpu_ms).collect()) / f64::from(w.sheets);
        report.add(Row::ms(
            "floor_1000",
            "floor: the same 1,000 instrument calls, 20 workers",
            floor_wall,
            floors.len(),
        ));
        report.add(Row::new(
            "floor_1000_cpu",
            "floor: instrument processes' CPU per call",
            floor_cpu,
            "ms",
            floors.len(),
        ));
        report.add(
            Row::new(
                "fanout1000_vs_floor",
                "bench-fanout-1000 (`mozart run`) ÷ floor (median of each rep's ratio)",
                cli_vs_floor,
                "×",
                n,
            )
            .bar_below(1.10),
        );
        report.add(
            Row::new(
                "fanout1000_submit_vs_floor",
                "bench-fanout-1000 (job.submit) ÷ floor (median of each rep's ratio)",
                rpc_vs_floor,
                "×",
                n,
            )
            .bar_below(1.10),
        );
    }

    // Per-sheet overhead of seq-20: what the conductor adds on top of the instrument's own
    // time on the critical path (bar < 1 ms/sheet). The instrument alone ×20 ran before the
    // first rep and right after each rep's two runs; each rep is compared with the mean of
    // the two around it, and the median of the per-rep differences is reported.
    let n_seq = seq_walls.len();
    if n_seq > 0 {
        report.add(Row::ms(
            "instrument_alone_20",
            "instant instrument alone, 20 calls in sequence",
            median(seq_alone.clone()),
            seq_alone.len(),
        ));
        let overhead = |pick: fn(&(Duration, Duration)) -> Duration| {
            median_f64(
                seq_walls
                    .iter()
                    .zip(seq_alone.windows(2))
                    .map(|(walls, around)| {
                        let alone = (around[0] + around[1]).as_secs_f64() / 2.0;
                        (pick(walls).as_secs_f64() - alone) * 1000.0 / 20.0
                    })
                    .collect(),
            )
        };
        report.add(
            Row::new(
                "seq20_overhead_per_sheet",
                "bench-seq-20: overhead per sheet beyond the instrument (`mozart run`)",
                overhead(|w| w.0),
                "ms",
                n_seq,
            )
            .bar_below(1.0),
        );
        report.add(
            Row::new(
                "seq20_submit_overhead_per_sheet",
                "bench-seq-20: overhead per sheet beyond the instrument (job.submit)",
                overhead(|w| w.1),
                "ms",
                n_seq,
            )
            .bar_below(1.0),
        );
    }
    Ok(())
}

/// Issue 4's speed bar through the conductor: spawn-to-result overhead of the `shell`
/// instrument, < 5 ms per sheet beyond the program's own runtime. The backend-level view of
/// this and of the capture bar is `cargo bench -p mozart-backends --bench spawn_overhead`.
fn instruments(env: &Env, conductor: &Conductor, args: &Args, report: &mut Report) -> Result<()> {
    const SHEETS: u32 = 20;
    const REPS: usize = 7;
    let seq = Workload {
        key: "bench-shell-seq-20",
        yaml: SCORE_SHELL_SEQ_20,
        sheets: SHEETS,
        reps: REPS,
        outputs: false,
    };
    progress(&format!(
        "{} ×{REPS} (`mozart run`, job.submit, the shell instrument alone ×{SHEETS}; interleaved)",
        seq.key
    ));
    let driver = shell_driver()?;
    let alone_ws = env.work.join("shell-alone");
    std::fs::create_dir_all(&alone_ws).map_err(io_err("creating", &alone_ws))?;
    let (mut by_cli, mut by_rpc, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    let mut rpc_cpu = Vec::new();
    for rep in 0..REPS {
        by_cli.push(
            env.run_job(&seq, rep, conductor, Via::Cli, args.poll_ms)?
                .wall,
        );
        let run = env.run_job(&seq, rep, conductor, Via::Rpc, args.poll_ms)?;
        by_rpc.push(run.wall);
        rpc_cpu.push(run.conductor_cpu_ms / f64::from(SHEETS));
        alone.push(shell_alone(&driver, &alone_ws, SHEETS)?);
    }
    // Overhead from the differences within each repetition (paired): the three measurements
    // of one repetition run back to back, so a load swing on the shared machine hits them alike.
    let per_sheet = |walls: &[Duration]| {
        median_f64(
            walls
                .iter()
                .zip(&alone)
                .map(|(wall, alone)| {
                    (wall.as_secs_f64() - alone.as_secs_f64()) * 1000.0 / f64::from(SHEETS)
                })
                .collect(),
        )
    };
    let (cli_overhead, rpc_overhead) = (per_sheet(&by_cli), per_sheet(&by_rpc));
    report.add(Row::ms(
        "shell_seq20_wall",
        "bench-shell-seq-20 (`true` sheets, shell instrument): `mozart run` → completed",
        median(by_cli),
        REPS,
    ));
    report.add(Row::ms(
        "shell_seq20_submit_wall",
        "bench-shell-seq-20: job.submit → completed (conductor only)",
        median(by_rpc),
        REPS,
    ));
    report.add(Row::ms(
        "shell_alone_20",
        "shell instrument (`RUN: true`) run directly, 20 calls in sequence",
        median(alone),
        REPS,
    ));
    report.add(
        Row::new(
            "shell_spawn_to_result_overhead",
            "command instrument spawn-to-result overhead per sheet (shell seq-20, job.submit)",
            rpc_overhead,
            "ms",
            REPS,
        )
        .bar_below(5.0),
    );
    // No bar: this adds the CLI's own per-job cost (start, parse the score, submit) spread
    // over the 20 sheets; spawn-to-result is the conductor's part. (The command's
    // early-failure watch after submitting is not in it: the clock stops when the job is
    // completed, whether or not `mozart run` has returned yet.)
    report.add(Row::new(
        "shell_spawn_to_result_overhead_cli",
        "command instrument spawn-to-result overhead per sheet (shell seq-20, `mozart run`, CLI start and submit included)",
        cli_overhead,
        "ms",
        REPS,
    ));
    // CPU is steadier than wall time on a loaded machine (10 ms ticks: ±0.5 ms per sheet).
    report.add(Row::new(
        "shell_seq20_conductor_cpu",
        "bench-shell-seq-20: conductor CPU per sheet (job.submit)",
        median_f64(rpc_cpu),
        "ms",
        REPS,
    ));
    Ok(())
}

/// Issue 4's memory bar: the conductor's peak RSS over its idle RSS while one sheet prints
/// 100 MB (stdout, stderr, one JSON document, one JSONL line; bar < 20 MB). Run first on a
/// fresh conductor.
fn capture_rows(env: &Env, conductor: &Conductor, args: &Args, report: &mut Report) -> Result<()> {
    // Control: the first job of a fresh conductor grows it too (thread pools, SQLite caches,
    // the learning store), output or not. Run it first, so the capture rows show what
    // capturing costs on top, and report it so the two can be told apart.
    let control = Workload {
        key: "bench-shell-seq-20",
        yaml: SCORE_SHELL_SEQ_20,
        sheets: 20,
        reps: 1,
        outputs: false,
    };
    progress("control: bench-shell-seq-20 (no output) as the fresh conductor's first job");
    let (growth, _) = rss_growth(env, conductor, &control, 99, args.poll_ms)?;
    report.add(Row::new(
        "first_job_rss_growth",
        "control: first job on a fresh conductor (20 `true` sheets, no output): peak − idle RSS",
        growth,
        "MB",
        1,
    ));
    // `stream` names the row keys; `what` says what the sheet prints.
    for (key, yaml, stream, what) in [
        (
            "bench-capture-stdout",
            SCORE_CAPTURE_STDOUT,
            "stdout",
            "100 MB to stdout",
        ),
        (
            "bench-capture-stderr",
            SCORE_CAPTURE_STDERR,
            "stderr",
            "100 MB to stderr",
        ),
        (
            "bench-capture-json",
            SCORE_CAPTURE_JSON,
            "json",
            "one 100 MB JSON document, format: json",
        ),
        (
            "bench-capture-jsonl",
            SCORE_CAPTURE_JSONL,
            "jsonl",
            "one 100 MB JSONL line, format: jsonl",
        ),
    ] {
        const CAPTURE_REPS: usize = 3;
        progress(&format!("{key} ×{CAPTURE_REPS} ({what}, job.submit)"));
        let w = Workload {
            key,
            yaml,
            sheets: 1,
            reps: CAPTURE_REPS,
            outputs: false,
        };
        let (mut growth, mut peaks, mut walls) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..CAPTURE_REPS {
            let (g, run) = rss_growth(env, conductor, &w, rep, args.poll_ms)?;
            growth.push(g);
            peaks.push(run.peak_rss_mib);
            walls.push(run.wall);
        }
        report.add(Row::ms(
            &format!("capture_{stream}_wall"),
            &format!("{key}: job.submit → completed ({what})"),
            median(walls),
            CAPTURE_REPS,
        ));
        report.add(
            Row::new(
                &format!("capture_{stream}_rss_growth"),
                &format!("{key}: conductor peak RSS − idle RSS before the job (worst run)"),
                growth.into_iter().fold(0.0, f64::max),
                "MB",
                CAPTURE_REPS,
            )
            .bar_below(20.0),
        );
        report.add(Row::new(
            &format!("capture_{stream}_peak_rss"),
            &format!("{key}: peak conductor RSS (worst run)"),
            peaks.into_iter().fold(0.0, f64::max),
            "MiB",
            CAPTURE_REPS,
        ));
    }
    Ok(())
}

/// Issue 12's memory bar: a fresh conductor's peak RSS over its whole life (VmHWM from
/// start, never reset) through one 1,000-sheet job submitted by `mozart run`, so the
/// transient peak of the submission itself counts (bar: under 30 MB).
fn whole_life_rss(
    env: &Env,
    conductor: &Conductor,
    args: &Args,
    report: &mut Report,
) -> Result<()> {
    let w = Workload {
        key: "bench-fanout-1000",
        yaml: SCORE_FANOUT_1000,
        sheets: 1_000,
        reps: 1,
        outputs: true,
    };
    let run = env.run_job(&w, 0, conductor, Via::Cli, args.poll_ms)?;
    let peak = conductor.peak_rss_mib().max(run.peak_rss_mib);
    report.add(
        Row::new(
            "fanout_1000_whole_life_peak_rss",
            "fresh conductor through one 1,000-sheet job: whole-life peak RSS (VmHWM, no reset)",
            peak * MIB_IN_MB,
            "MB",
            1,
        )
        .bar_below(30.0),
    );
    Ok(())
}

/// Runs one job by job.submit and returns the conductor's peak RSS during it minus its RSS
/// just before (MB), with the run (its `peak_rss_mib` set to the `VmHWM` peak).
fn rss_growth(
    env: &Env,
    conductor: &Conductor,
    w: &Workload,
    rep: usize,
    poll_ms: u64,
) -> Result<(f64, JobRun)> {
    // Give the previous job's tasks a moment to finish so "before" is idle.
    std::thread::sleep(Duration::from_millis(200));
    if !conductor.reset_peak_rss() {
        return Err(BenchError::Io {
            action: "resetting the peak RSS (clear_refs) of",
            path: PathBuf::from(format!("/proc/{}", conductor.pid)),
            source: std::io::Error::other("clear_refs not writable"),
        });
    }
    let before = conductor.rss_mib();
    let mut run = env.run_job(w, rep, conductor, Via::Rpc, poll_ms)?;
    run.peak_rss_mib = conductor.peak_rss_mib().max(run.peak_rss_mib);
    Ok(((run.peak_rss_mib - before) * MIB_IN_MB, run))
}

/// MiB expressed in MB (10^6 bytes): issue 4's memory bar is in MB.
const MIB_IN_MB: f64 = 1.048_576;

/// The `shell` profile's driver script (its `auto_approve_flag`, a folded YAML scalar: the
/// lines joined by single spaces), so the direct run is exactly the conductor's command line
/// `sh -c <driver> mozart-shell <prompt>` (crates/backends/profiles/shell.yaml).
fn shell_driver() -> Result<String> {
    let mut lines = SHELL_PROFILE.lines();
    let mut driver = Vec::new();
    if lines.any(|l| l.trim() == "auto_approve_flag: >-") {
        for line in lines {
            let indent = line.len() - line.trim_start().len();
            if indent <= 4 || line.trim().is_empty() {
                break;
            }
            driver.push(line.trim());
        }
    }
    if driver.is_empty() {
        return Err(BenchError::ShellDirect {
            index: 0,
            detail: "cannot find the shell profile's driver script (auto_approve_flag: >-)".into(),
        });
    }
    Ok(driver.join(" "))
}

/// `calls` runs of the shell instrument's command line with the prompt `RUN: true`, one after
/// another, output captured through pipes as the backend does: the program's own runtime.
fn shell_alone(driver: &str, workspace: &Path, calls: u32) -> Result<Duration> {
    let started = Instant::now();
    for index in 1..=calls {
        let out = Command::new("sh")
            .args(["-c", driver, "mozart-shell", "RUN: true\n"])
            .current_dir(workspace)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| BenchError::ShellDirect {
                index,
                detail: e.to_string(),
            })?;
        if !out.status.success() || !out.stdout.is_empty() {
            return Err(BenchError::ShellDirect {
                index,
                detail: format!(
                    "{}, stdout {:?}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout)
                ),
            });
        }
    }
    Ok(started.elapsed())
}

/// How a benchmark job is submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// `mozart run SCORE`: what a user waits for, CLI included.
    Cli,
    /// `job.submit` straight to the socket: the conductor alone (upstream's "inside the
    /// conductor" figure), without the CLI's early-failure watch (cli.md §3.1 step 8).
    Rpc,
}

/// Which prompt the floor renders: the fan-out scores' or the sequential scores' template.
#[derive(Clone, Copy)]
enum Prompt {
    FanOut,
    Sequential,
}

impl Prompt {
    fn render(self, sheet: u32, total: u32, workspace: &Path) -> String {
        let ws = workspace.display();
        match self {
            Prompt::FanOut => format!(
                "Benchmark voice {sheet} of {total} (sheet {sheet}).\nRUN: echo \"sheet {sheet}\" > \"{ws}/out-{sheet}.txt\"\n"
            ),
            Prompt::Sequential => format!(
                "Benchmark sheet {sheet} of {total}.\nRUN: echo \"sheet {sheet}\" > \"{ws}/out-{sheet}.txt\"\n"
            ),
        }
    }
}

/// The floor: `calls` invocations of the instant instrument by `workers` threads, each call
/// followed by the same `file_exists` check the scores' validation makes — what any
/// orchestrator must at least spend.
fn floor(
    env: &Env,
    workspace: &Path,
    calls: u32,
    workers: u32,
    prompt: Prompt,
) -> Result<FloorRun> {
    if workspace.exists() {
        std::fs::remove_dir_all(workspace).map_err(io_err("clearing", workspace))?;
    }
    std::fs::create_dir_all(workspace).map_err(io_err("creating", workspace))?;
    let instrument = env.bin.join("mozart-instant");
    let next = AtomicU32::new(1);
    let cpu_before = proc_cpu_ms(std::process::id());
    let started = Instant::now();
    let (results, _) = sampling_peaks(std::process::id(), 0, || -> Vec<Result<()>> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    scope.spawn(|| -> Result<()> {
                        loop {
                            let sheet = next.fetch_add(1, Ordering::Relaxed);
                            if sheet > calls {
                                return Ok(());
                            }
                            let status = Command::new(&instrument)
                                .arg(prompt.render(sheet, calls, workspace))
                                .current_dir(workspace)
                                .stdout(Stdio::null())
                                .stderr(Stdio::null())
                                .status()
                                .map_err(|e| BenchError::Floor {
                                    index: sheet,
                                    detail: e.to_string(),
                                })?;
                            if !status.success()
                                || !workspace.join(format!("out-{sheet}.txt")).exists()
                            {
                                return Err(BenchError::Floor {
                                    index: sheet,
                                    detail: format!("{status}, or no output file"),
                                });
                            }
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(BenchError::Floor {
                            index: 0,
                            detail: "worker panicked".into(),
                        })
                    })
                })
                .collect()
        })
    });
    let wall = started.elapsed();
    results.into_iter().collect::<Result<Vec<()>>>()?;
    Ok(FloorRun {
        wall,
        children_cpu_ms: proc_cpu_ms(std::process::id()).children - cpu_before.children,
    })
}

/// What one floor run measured.
struct FloorRun {
    wall: Duration,
    /// CPU of the instrument processes (reaped children of this process).
    children_cpu_ms: f64,
}

/// Registers `jobs` finished jobs with a small checkpoint each, as a long-lived conductor's
/// registry holds them (mostly completed, some failed / cancelled).
fn seed_registry(db: &Path, jobs: u32) -> Result<()> {
    let state_err = |source| BenchError::State {
        path: db.to_path_buf(),
        source: Box::new(source),
    };
    let registry = Registry::open(db).map_err(state_err)?;
    let now = mozart_state::epoch_now();
    for i in 0..jobs {
        let id = format!("seeded-job-{i:04}");
        let mut record = JobRecord::new(
            &id,
            format!("/srv/scores/{id}.yaml"),
            format!("/srv/ws/{id}"),
        );
        record.status = match i % 20 {
            0 => DaemonJobStatus::Failed,
            1 => DaemonJobStatus::Cancelled,
            _ => DaemonJobStatus::Completed,
        };
        let submitted = now - f64::from(jobs - i) * 60.0;
        record.submitted_at = submitted;
        record.started_at = Some(submitted + 1.0);
        record.completed_at = Some(submitted + 30.0);
        record.total_sheets = Some(5);
        registry.create_job(&record).map_err(state_err)?;
        let mut checkpoint = CheckpointState::new(&id, &id, 5);
        for sheet in 1..=5 {
            checkpoint.mark_sheet_started(sheet);
            checkpoint.mark_sheet_completed(sheet, true, None, Some(5.0));
        }
        registry.save_checkpoint(&checkpoint).map_err(state_err)?;
    }
    Ok(())
}

// ---------------------------------------------------------------- environment and processes

/// How to run `mozart`: this executable in multicall mode, or another build.
#[derive(Debug, Clone)]
struct MozartExe {
    path: PathBuf,
    multicall: bool,
}

impl MozartExe {
    fn resolve(other: Option<&Path>) -> Result<MozartExe> {
        match other {
            Some(path) => Ok(MozartExe {
                path: path.to_path_buf(),
                multicall: false,
            }),
            None => {
                let path = std::env::current_exe()
                    .map_err(io_err("locating", Path::new("mozart-bench")))?;
                Ok(MozartExe {
                    path,
                    multicall: true,
                })
            }
        }
    }
}

/// An isolated Mozart home, short socket path, workspace root and `PATH` with the instant
/// instrument (the shape of `mozart_tests::TestEnv`, plus the benchmark's fixtures).
struct Env {
    _root: tempfile::TempDir,
    home: PathBuf,
    socket: PathBuf,
    bin: PathBuf,
    work: PathBuf,
    path_var: std::ffi::OsString,
    mozart: MozartExe,
}

impl Env {
    fn new(mozart: &MozartExe) -> Result<Env> {
        // /tmp, not $TMPDIR: the socket path must fit in sun_path.
        let root = tempfile::Builder::new()
            .prefix("mzb")
            .tempdir_in("/tmp")
            .map_err(io_err(
                "creating a temporary directory in",
                Path::new("/tmp"),
            ))?;
        let home = root.path().join("home");
        let bin = root.path().join("bin");
        let work = root.path().join("work");
        for dir in [home.join("instruments"), bin.clone(), work.clone()] {
            std::fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
        }
        write_file(&home.join("instruments/instant.yaml"), INSTANT_PROFILE)?;
        write_file(&home.join("instruments/json-sh.yaml"), JSON_SH_PROFILE)?;
        write_file(&home.join("instruments/jsonl-sh.yaml"), JSONL_SH_PROFILE)?;
        write_file(&home.join("conductor.yaml"), CONDUCTOR_YAML)?;
        let script = bin.join("mozart-instant");
        write_file(&script, INSTANT_SCRIPT)?;
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .map_err(io_err("making executable", &script))?;
        let mut paths = vec![bin.clone()];
        if let Some(old) = std::env::var_os("PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        let path_var = std::env::join_paths(paths).unwrap_or_default();
        Ok(Env {
            socket: root.path().join("m.sock"),
            _root: root,
            home,
            bin,
            work,
            path_var,
            mozart: mozart.clone(),
        })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.mozart.path);
        cmd.args(args)
            .current_dir(&self.work)
            .env("MOZART_HOME", &self.home)
            .env("MOZART_SOCKET", &self.socket)
            .env("PATH", &self.path_var)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null());
        if self.mozart.multicall {
            cmd.env(AS_MOZART, "1");
        } else {
            cmd.env_remove(AS_MOZART);
        }
        cmd
    }

    /// Wall time of `mozart <args>` with output discarded (as when piped to a file);
    /// a failure is an error, reported with its output from a second, captured run.
    fn time_ok(&self, args: &[&str]) -> Result<Duration> {
        let started = Instant::now();
        let status = self
            .command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(io_err("running", &self.mozart.path))?;
        let took = started.elapsed();
        if status.success() {
            return Ok(took);
        }
        let output = self
            .command(args)
            .output()
            .map_err(io_err("running", &self.mozart.path))?;
        Err(BenchError::Mozart {
            args: args.join(" "),
            status: status.to_string(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        })
    }

    /// Runs one benchmark score from `mozart run` until the conductor reports it finished,
    /// sampling the conductor's RSS and its instrument processes on every poll.
    /// A failed `mozart run` is an error of the benchmark, with the job's status as output.
    fn check_run_exit(
        &self,
        exit: std::process::ExitStatus,
        job: &str,
        score_arg: &str,
    ) -> Result<()> {
        if exit.success() {
            return Ok(());
        }
        let output = self
            .command(&["status", job])
            .output()
            .map_err(io_err("running", &self.mozart.path))?;
        Err(BenchError::Mozart {
            args: format!("run {score_arg}"),
            status: exit.to_string(),
            output: String::from_utf8_lossy(&output.stdout).into_owned(),
        })
    }

    /// Wait for `job` to end and return its status: through `mozart run`, first until the
    /// conductor has the job (a `mozart run` that fails before is reported), then with
    /// `job.watch` calls that answer when it ends.
    fn wait_for_end(
        &self,
        job: &str,
        score_arg: &str,
        started: Instant,
        submit: &mut Option<Child>,
        client: &mut BlockingClient,
    ) -> Result<String> {
        let give_up = |submit: &mut Option<Child>| {
            if let Some(child) = submit.as_mut() {
                let _ = child.kill();
            }
            BenchError::Timeout {
                what: format!("job '{job}' to finish"),
                secs: JOB_DEADLINE.as_secs(),
            }
        };
        // A short poll, only while `mozart run` is handing the job over.
        while let Some(child) = submit.as_mut() {
            if let Some(exit) = child
                .try_wait()
                .map_err(io_err("waiting for", &self.mozart.path))?
            {
                self.check_run_exit(exit, job, score_arg)?;
                *submit = None;
                break;
            }
            if job_list_status(client, job)?.is_some() {
                break;
            }
            if started.elapsed() > JOB_DEADLINE {
                return Err(give_up(submit));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        loop {
            let seen = client
                .call_value(
                    methods::JOB_WATCH,
                    json!({"job_id": job, "timeout_ms": 5000, "until_done": true}),
                )
                .map_err(|source| BenchError::Ipc {
                    method: methods::JOB_WATCH,
                    source,
                })?;
            let status = seen
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if matches!(status, "completed" | "failed" | "cancelled") {
                return Ok(status.to_string());
            }
            if started.elapsed() > JOB_DEADLINE {
                return Err(give_up(submit));
            }
        }
    }

    fn run_job(
        &self,
        w: &Workload,
        rep: usize,
        conductor: &Conductor,
        via: Via,
        poll_ms: u64,
    ) -> Result<JobRun> {
        // Own directory per run: the score's workspace is relative to the score, so every run
        // starts from an empty workspace; the job id is the file stem.
        let job = match via {
            Via::Cli => format!("{}-{rep}", w.key),
            Via::Rpc => format!("{}-rpc-{rep}", w.key),
        };
        let dir = self.work.join(&job);
        std::fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
        let score = dir.join(format!("{job}.yaml"));
        write_file(&score, w.yaml)?;
        let score_arg = score.display().to_string();
        let ipc = |method: &'static str| move |source| BenchError::Ipc { method, source };
        let pid = conductor.pid;
        let cpu_before = proc_cpu_ms(pid);
        let mut run = JobRun::default();

        let (started, mut submit, mut client) = match via {
            Via::Cli => {
                // Connected before the clock starts: the job is watched from the moment
                // `mozart run` has handed it over, not only after the command exits (it
                // lingers to report an early failure, cli.md §3.1 step 8).
                let client =
                    BlockingClient::connect(&self.socket).map_err(ipc(methods::JOB_LIST))?;
                let started = Instant::now();
                let child = self
                    .command(&["run", &score_arg])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(io_err("running", &self.mozart.path))?;
                (started, Some(child), client)
            }
            Via::Rpc => {
                let mut client =
                    BlockingClient::connect(&self.socket).map_err(ipc(methods::JOB_SUBMIT))?;
                let started = Instant::now();
                submit_score(&mut client, &score_arg)?;
                (started, None, client)
            }
        };
        // The job is waited for with `job.watch` (`until_done`), not by polling its status:
        // each `job.list` costs the conductor ~80 µs of CPU, and a (Python) client polling it
        // every millisecond slowed seq-20 by ~1.4 ms a sheet on two cores. The peaks are
        // sampled on a thread of their own meanwhile, every `--poll-ms`.
        let (status, peaks) = sampling_peaks(pid, poll_ms, || {
            let status = self.wait_for_end(&job, &score_arg, started, &mut submit, &mut client);
            status.map(|s| (s, started.elapsed()))
        });
        let (status, wall) = status?;
        run.peak_rss_mib = peaks.0;
        run.peak_in_flight = peaks.1;
        run.wall = wall;
        // `mozart run` must still succeed; its lingering after the job ended is not timed.
        if let Some(mut child) = submit.take() {
            let exit = child
                .wait()
                .map_err(io_err("waiting for", &self.mozart.path))?;
            self.check_run_exit(exit, &job, &score_arg)?;
        }
        // What the conductor still does for the job after reporting it completed (the
        // learning writer's job-end rows, freeing memory) belongs to this run: wait for it,
        // so its CPU is counted here and it does not slow the next run or the floor.
        settle(pid);
        let cpu_after = proc_cpu_ms(pid);
        run.conductor_cpu_ms = cpu_after.own - cpu_before.own;
        run.children_cpu_ms = cpu_after.children - cpu_before.children;
        let workspace = dir.join(format!("ws-{}", w.key));
        if status != "completed" {
            return Err(BenchError::JobFailed {
                job,
                status,
                workspace,
            });
        }
        if w.outputs {
            check_outputs(&workspace, &job, w.sheets)?;
        }
        Ok(run)
    }
}

/// Run `work` while a thread samples `pid`'s resident memory and its threads' children
/// every `poll_ms` (0: no sampling, peaks 0); `work`'s answer and the peaks (MiB, processes).
///
/// The sampling is not free for what it watches: each look reads every thread's `children`
/// file under the kernel's task-list lock, which the instruments' forks and exits must take
/// too. The runs that give the fan-out's ratio to the floor (job.submit) and the floor itself
/// are therefore not sampled; the `mozart run` runs, whose peaks are reported, are (their
/// ratio charges the sampling to the conductor).
fn sampling_peaks<T>(pid: u32, poll_ms: u64, work: impl FnOnce() -> T) -> (T, (f64, u32)) {
    if poll_ms == 0 {
        return (work(), (0.0, 0));
    }
    let sample_every = Duration::from_millis(poll_ms);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut peaks = (0.0_f64, 0_u32);
            while !done.load(Ordering::Relaxed) {
                peaks.0 = peaks.0.max(proc_status_mib(pid, "VmRSS:"));
                peaks.1 = peaks.1.max(count_children(pid));
                std::thread::sleep(sample_every);
            }
            peaks
        });
        let answer = work();
        done.store(true, Ordering::Relaxed);
        (answer, sampler.join().unwrap_or_default())
    })
}

/// What one job run measured.
#[derive(Debug, Default)]
struct JobRun {
    wall: Duration,
    peak_rss_mib: f64,
    peak_in_flight: u32,
    /// The conductor's own CPU (user + system) during the run.
    conductor_cpu_ms: f64,
    /// CPU of the conductor's reaped children (instrument processes and their wrappers).
    children_cpu_ms: f64,
}

/// `job.submit` of `score`; any answer but `accepted` is an error.
fn submit_score(client: &mut BlockingClient, score: &str) -> Result<()> {
    let answer = client
        .call_value(
            methods::JOB_SUBMIT,
            json!({ "config_path": score, "fresh": false }),
        )
        .map_err(|source| BenchError::Ipc {
            method: methods::JOB_SUBMIT,
            source,
        })?;
    if answer.get("status").and_then(Value::as_str) != Some("accepted") {
        return Err(BenchError::Mozart {
            args: format!("(job.submit) {score}"),
            status: "not accepted".into(),
            output: answer.to_string(),
        });
    }
    Ok(())
}

/// The timed run of one score through the conductor: `job.submit` on `client` (connected
/// before the clock starts), then `job.list` every `poll` until `job` ended. The wall time
/// from the submission to the end, and the final status.
fn submit_and_wait(
    client: &mut BlockingClient,
    score: &Path,
    job: &str,
    poll: Duration,
) -> Result<(Duration, String)> {
    let started = Instant::now();
    submit_score(client, &score.display().to_string())?;
    let status = loop {
        if let Some(status) = job_list_status(client, job)? {
            if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
                break status;
            }
        }
        if started.elapsed() > JOB_DEADLINE {
            return Err(BenchError::Timeout {
                what: format!("job '{job}' to finish"),
                secs: JOB_DEADLINE.as_secs(),
            });
        }
        std::thread::sleep(poll);
    };
    Ok((started.elapsed(), status))
}

/// Validation is success (architecture invariant 3): every sheet's `out-N.txt` must be in
/// `workspace`.
fn check_outputs(workspace: &Path, job: &str, sheets: u32) -> Result<()> {
    let missing = (1..=sheets)
        .filter(|n| !workspace.join(format!("out-{n}.txt")).exists())
        .count();
    if missing > 0 {
        return Err(BenchError::MissingOutput {
            job: job.to_string(),
            missing,
            sheets,
        });
    }
    Ok(())
}

/// The job's status as `job.list` reports it — a small answer, unlike `job.status`, whose
/// full checkpoint of 1,000 sheets would make the poll itself a load on the conductor.
fn job_list_status(client: &mut BlockingClient, job: &str) -> Result<Option<String>> {
    let list = client
        .call_value(methods::JOB_LIST, json!({}))
        .map_err(|source| BenchError::Ipc {
            method: methods::JOB_LIST,
            source,
        })?;
    Ok(list.as_array().and_then(|jobs| {
        jobs.iter()
            .find(|j| j.get("job_id").and_then(Value::as_str) == Some(job))
            .and_then(|j| j.get("status").and_then(Value::as_str))
            .map(str::to_owned)
    }))
}

/// A running conductor (`mozart start --foreground`, our child) and how long it took to
/// answer `daemon.ready`.
struct Conductor {
    child: Child,
    pid: u32,
    ready_in: Duration,
}

impl Conductor {
    fn start(env: &Env) -> Result<Conductor> {
        Self::start_with(env, &[])
    }

    /// [`Self::start`], reporting its start → ready time as row `key`, then 300 ms of idling
    /// so what is measured next (idle RSS, commands) does not see the start-up.
    fn start_timed(env: &Env, report: &mut Report, key: &str, what: &str) -> Result<Conductor> {
        let conductor = Self::start(env)?;
        report.add(Row::ms(key, what, conductor.ready_in, 1));
        std::thread::sleep(Duration::from_millis(300));
        Ok(conductor)
    }

    /// [`Self::start`] with extra variables in the conductor's (and instruments') environment.
    fn start_with(env: &Env, vars: &[(String, String)]) -> Result<Conductor> {
        let log = env.home.join("foreground.log");
        let out = std::fs::File::create(&log).map_err(io_err("creating", &log))?;
        let err = out.try_clone().map_err(io_err("opening", &log))?;
        let started = Instant::now();
        // Foreground, so the process we time is the conductor itself and `mozart start`'s
        // own 50 ms readiness poll does not round the figure.
        // With the allocator setting that `mozart start` and the systemd unit give the
        // conductor (crates/cli/src/commands/start.rs), so the figures are a deployed one's.
        let child = env
            .command(&["start", "--foreground"])
            .env("MALLOC_ARENA_MAX", "1")
            .env("MOZART_MALLOC_ARENA_MAX_SET", "1")
            .envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(io_err("starting the conductor with", &env.mozart.path))?;
        let pid = child.id();
        let mut conductor = Conductor {
            child,
            pid,
            ready_in: Duration::ZERO,
        };
        let deadline = Duration::from_secs(30);
        loop {
            if let Ok(mut client) = BlockingClient::connect(&env.socket) {
                if let Ok(ready) = client.call_value(methods::DAEMON_READY, json!({})) {
                    if ready.get("status").and_then(Value::as_str) == Some("ready") {
                        conductor.ready_in = started.elapsed();
                        return Ok(conductor);
                    }
                }
            }
            if let Ok(Some(status)) = conductor.child.try_wait() {
                let output = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(BenchError::Mozart {
                    args: "start --foreground".into(),
                    status: status.to_string(),
                    output,
                });
            }
            if started.elapsed() > deadline {
                return Err(BenchError::Timeout {
                    what: "the conductor to become ready".into(),
                    secs: deadline.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn rss_mib(&self) -> f64 {
        proc_status_mib(self.pid, "VmRSS:")
    }

    fn peak_rss_mib(&self) -> f64 {
        proc_status_mib(self.pid, "VmHWM:")
    }

    /// Resets VmHWM (proc(5), clear_refs "5") so the next peak is this run's alone.
    fn reset_peak_rss(&self) -> bool {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid), "5").is_ok()
    }

    fn stop(mut self, env: &Env) -> Result<()> {
        env.time_ok(&["stop"])?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(BenchError::Timeout {
            what: "the conductor to exit after `mozart stop`".into(),
            secs: 20,
        })
    }
}

impl Drop for Conductor {
    fn drop(&mut self) {
        // Only our own child, and only if `stop` did not already end it.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A `/proc/<pid>/status` memory line (kB) in MiB; 0 when unreadable.
fn proc_status_mib(pid: u32, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// CPU used by a process, from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, Default)]
struct CpuMs {
    /// utime + stime.
    own: f64,
    /// cutime + cstime: children already waited for.
    children: f64,
}

/// CPU times of `pid` in ms; zero when unreadable. The kernel reports them in USER_HZ ticks,
/// which Linux fixes at 100 per second for this interface (proc(5)).
/// Wait until the conductor's own CPU time stops moving (no tick in 150 ms), at most 5 s.
fn settle(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = proc_cpu_ms(pid).own;
    let mut quiet = 0;
    while quiet < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let now = proc_cpu_ms(pid).own;
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
    }
}

fn proc_cpu_ms(pid: u32) -> CpuMs {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return CpuMs::default();
    };
    // Fields after the parenthesised command name; utime is field 14 overall, i.e. index 11.
    let fields: Vec<f64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .map(|f| f.parse().unwrap_or(0.0))
                .collect()
        })
        .unwrap_or_default();
    let tick = |i: usize| fields.get(i).copied().unwrap_or(0.0) * 10.0;
    CpuMs {
        own: tick(11) + tick(12),
        children: tick(13) + tick(14),
    }
}

/// Live child processes of `pid` (instrument processes of the conductor), over all threads.
fn count_children(pid: u32) -> u32 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .map(|c| c.split_whitespace().count() as u32)
        .sum()
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(io_err("writing", path))
}

fn median_of(reps: usize, mut sample: impl FnMut() -> Result<Duration>) -> Result<Duration> {
    let samples = (0..reps.max(1))
        .map(|_| sample())
        .collect::<Result<Vec<_>>>()?;
    Ok(median(samples))
}

fn median_f64(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    match samples.len() {
        0 => 0.0,
        n if n % 2 == 1 => samples[n / 2],
        n => (samples[n / 2 - 1] + samples[n / 2]) / 2.0,
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    match samples.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => samples[n / 2],
        n => (samples[n / 2 - 1] + samples[n / 2]) / 2,
    }
}

// ---------------------------------------------------------------- the table

/// One measured figure.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    key: String,
    what: String,
    value: f64,
    unit: String,
    /// Samples behind the figure (medians).
    n: usize,
    higher_is_better: bool,
    /// The bar from the issues, e.g. "< 20" (same unit), if there is one.
    bar: Option<String>,
    met: Option<bool>,
}

impl Row {
    fn new(key: &str, what: &str, value: f64, unit: &str, n: usize) -> Row {
        Row {
            key: key.to_owned(),
            what: what.to_owned(),
            value,
            unit: unit.to_owned(),
            n,
            higher_is_better: false,
            bar: None,
            met: None,
        }
    }

    fn ms(key: &str, what: &str, d: Duration, n: usize) -> Row {
        Row::new(key, what, d.as_secs_f64() * 1000.0, "ms", n)
    }

    fn higher_is_better(mut self) -> Row {
        self.higher_is_better = true;
        self
    }

    fn bar_below(mut self, limit: f64) -> Row {
        self.bar = Some(format!("≤ {limit}"));
        self.met = Some(self.value <= limit);
        self
    }

    fn bar_above(mut self, limit: f64) -> Row {
        self.bar = Some(format!("> {limit}"));
        self.met = Some(self.value > limit);
        self
    }
}

/// The rows of this run, in order.
#[derive(Debug, Default)]
struct Report {
    rows: Vec<Row>,
}

impl Report {
    fn add(&mut self, row: Row) {
        eprintln!(
            "  {:<62} {:>12} {}",
            row.what,
            fmt_value(row.value),
            row.unit
        );
        self.rows.push(row);
    }
}

/// A run as `--save` writes it and `--baseline` reads it.
#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    date: String,
    commit: String,
    cpus: usize,
    load_avg: String,
    total_seconds: f64,
    rows: Vec<Row>,
}

impl Saved {
    fn new(report: &Report, took: Duration) -> Saved {
        Saved {
            date: mozart_state::Timestamp::now().as_str().to_owned(),
            commit: git_commit(),
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            load_avg: std::fs::read_to_string("/proc/loadavg")
                .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
            total_seconds: took.as_secs_f64(),
            rows: report.rows.clone(),
        }
    }

    fn load(path: &Path) -> Result<Saved> {
        let text = std::fs::read_to_string(path).map_err(io_err("reading", path))?;
        serde_json::from_str(&text).map_err(|source| BenchError::Baseline {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The table as Markdown, ready to paste into docs/performance.md.
    fn table(&self, baseline: Option<&Saved>) -> String {
        let mut out = Vec::new();
        let _ = writeln!(
            out,
            "\nmozart-bench — {} — commit {} — {} CPUs, load {} — {:.0} s\n",
            self.date, self.commit, self.cpus, self.load_avg, self.total_seconds
        );
        let base: BTreeMap<&str, &Row> = baseline
            .map(|b| b.rows.iter().map(|r| (r.key.as_str(), r)).collect())
            .unwrap_or_default();
        if let Some(b) = baseline {
            let _ = writeln!(out, "baseline: {} — commit {}\n", b.date, b.commit);
            let _ = writeln!(
                out,
                "| what | value | unit | n | bar | met | baseline | this ÷ baseline |"
            );
            let _ = writeln!(out, "|---|---:|---|---:|---|---|---:|---:|");
        } else {
            let _ = writeln!(out, "| what | value | unit | n | bar | met |");
            let _ = writeln!(out, "|---|---:|---|---:|---|---|");
        }
        for row in &self.rows {
            let met = match row.met {
                Some(true) => "yes",
                Some(false) => "**NO**",
                None => "",
            };
            let _ = write!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                row.what,
                fmt_value(row.value),
                row.unit,
                row.n,
                row.bar.as_deref().unwrap_or(""),
                met
            );
            if baseline.is_some() {
                match base.get(row.key.as_str()) {
                    Some(b) if b.value != 0.0 => {
                        let ratio = row.value / b.value;
                        let better = if row.higher_is_better {
                            ratio > 1.0
                        } else {
                            ratio < 1.0
                        };
                        let _ = write!(
                            out,
                            " {} | {:.2}× {} |",
                            fmt_value(b.value),
                            ratio,
                            if (ratio - 1.0).abs() < 0.05 {
                                "≈"
                            } else if better {
                                "better"
                            } else {
                                "worse"
                            }
                        );
                    }
                    _ => {
                        let _ = write!(out, " – | – |");
                    }
                }
            }
            let _ = writeln!(out);
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

fn fmt_value(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `HEAD`, marked `+uncommitted` when the sources under test have local changes (then the
/// binary may contain code no commit has).
fn git_commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    match git(&[
        "status",
        "--porcelain",
        "--",
        "../crates",
        "../Cargo.toml",
        "src",
    ]) {
        Some(changes) if !changes.is_empty() => format!("{head}+uncommitted"),
        _ => head,
    }
}
