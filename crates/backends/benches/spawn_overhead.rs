//! Issue 4's command-instrument bars at the backend level (docs/performance.md,
//! "Instruments (issue 4)"):
//!
//! - spawn-to-result overhead under 5 ms per call beyond the program's own runtime: the
//!   time from `Backend::execute` to its `ExecutionResult`, against the same argv spawned
//!   directly with `std::process::Command::output()` (pipes captured, stdin `/dev/null`),
//!   interleaved call by call so machine load hits both alike;
//! - capturing 100 MB of output with under 20 MB of memory: the process's peak RSS
//!   (`VmHWM`, reset through `clear_refs` first) minus its RSS before the call.
//!
//! `cargo bench -p mozart-backends --bench spawn_overhead [-- --n 200]`
//! Not a timed test: it prints a table and never fails on a missed bar.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mozart_backends::{Backend, ExecutionRequest, InstrumentProfile, InstrumentRegistry};
use mozart_backends::{ExecutionResult, ProfileBackend};

/// The bar on spawn-to-result overhead, per call (issue 4).
const OVERHEAD_BAR_MS: f64 = 5.0;
/// The bar on memory while capturing 100 MB (issue 4).
const CAPTURE_BAR_MIB: f64 = 20.0;
/// Bytes the capture cases print.
const CAPTURE_BYTES: u64 = 100_000_000;

/// A generic `kind: cli` instrument: `<executable> <prompt>` (the prompt is the last
/// argument, instruments.md §4.3), nothing else on the command line.
fn generic(executable: &str) -> ProfileBackend {
    let yaml = format!(
        "name: bench-{executable}\ndisplay_name: bench {executable}\nkind: cli\ncli:\n  command:\n    executable: '{executable}'\n  output:\n    format: text\n"
    );
    let profile = InstrumentProfile::from_yaml(&yaml, "spawn_overhead bench")
        .unwrap_or_else(|e| panic!("bench profile for {executable}: {e}"));
    ProfileBackend::new(Arc::new(profile)).unwrap_or_else(|e| panic!("backend: {e}"))
}

/// The built-in `shell` instrument, exactly as the conductor runs it.
fn builtin_shell() -> ProfileBackend {
    let registry = InstrumentRegistry::builtin().unwrap_or_else(|e| panic!("registry: {e}"));
    let profile = registry
        .get("shell")
        .unwrap_or_else(|| panic!("no built-in shell profile"))
        .clone();
    ProfileBackend::new(profile).unwrap_or_else(|e| panic!("backend: {e}"))
}

/// One case: a backend, the prompt it is given, and the argv that the backend spawns.
struct Case {
    name: &'static str,
    backend: ProfileBackend,
    prompt: &'static str,
}

impl Case {
    fn request(&self, dir: &std::path::Path) -> ExecutionRequest {
        ExecutionRequest::new(self.prompt, dir, Duration::from_secs(60))
    }

    /// The exact argv the backend would run, for the direct spawn.
    fn argv(&self, dir: &std::path::Path) -> (String, Vec<String>) {
        let req = self.request(dir);
        let exe = self
            .backend
            .profile()
            .cli
            .as_ref()
            .map(|c| c.command.executable.clone())
            .unwrap_or_default();
        (exe, self.backend.build_args(&req, None))
    }
}

/// What one case measured (ms).
struct Timing {
    backend: Vec<f64>,
    direct: Vec<f64>,
}

fn main() {
    let mut n = 200usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        // `cargo bench` adds `--bench`; anything but `--n N` is ignored.
        if arg == "--n" {
            n = args
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("--n needs a number"));
        }
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    spawn_table(&rt, dir.path(), n);
    println!();
    capture_table(&rt, dir.path());
}

/// The spawn overhead table: each case `n` times through the backend and directly.
fn spawn_table(rt: &tokio::runtime::Runtime, dir: &std::path::Path, n: usize) {
    let cases = [
        Case {
            name: "`true` (generic kind: cli)",
            backend: generic("true"),
            prompt: "a prompt",
        },
        Case {
            name: "`sleep 0.02` (generic kind: cli, fixed 20 ms runtime)",
            backend: generic("sleep"),
            prompt: "0.02",
        },
        Case {
            name: "shell instrument, prompt `RUN: true`",
            backend: builtin_shell(),
            prompt: "RUN: true",
        },
    ];

    println!(
        "spawn_overhead — N = {n} per case, {} CPUs, load {}",
        cpus(),
        loadavg()
    );
    println!();
    println!("| what | direct median | backend median | overhead median | overhead mean | backend p90 | bar | met |");
    println!("|---|---:|---:|---:|---:|---:|---|---|");
    for case in &cases {
        // Warm-up: first spawns pay page faults, PATH lookup caching, runtime thread start.
        for _ in 0..5 {
            time_backend(rt, case, dir);
            time_direct(case, dir);
        }
        let mut t = Timing {
            backend: Vec::with_capacity(n),
            direct: Vec::with_capacity(n),
        };
        for i in 0..n {
            // Alternate which goes first so neither always follows the other.
            if i % 2 == 0 {
                t.backend.push(time_backend(rt, case, dir));
                t.direct.push(time_direct(case, dir));
            } else {
                t.direct.push(time_direct(case, dir));
                t.backend.push(time_backend(rt, case, dir));
            }
        }
        let (bm, dm) = (median(&t.backend), median(&t.direct));
        let overhead = bm - dm;
        let mean_over = mean(&t.backend) - mean(&t.direct);
        println!(
            "| {} | {dm:.2} ms | {bm:.2} ms | {overhead:.2} ms | {mean_over:.2} ms | {:.2} ms | < {OVERHEAD_BAR_MS} ms | {} |",
            case.name,
            percentile(&t.backend, 0.9),
            met(overhead < OVERHEAD_BAR_MS),
        );
    }
}

/// The output capture table: 100 MB through each output format, with the peak memory.
fn capture_table(rt: &tokio::runtime::Runtime, dir: &std::path::Path) {
    println!("| what | bytes counted | tail kept | wall | RSS before | peak RSS | peak − before | bar | met |");
    println!("|---|---:|---:|---:|---:|---:|---:|---|---|");
    let shell = builtin_shell();
    let json = sh_profile("format: json\n    result_path: result");
    let jsonl =
        sh_profile("format: jsonl\n    completion_event_type: result\n    result_path: result");
    // 100 MB in one JSON document / one JSONL line: a `format: json` profile keeps stdout
    // whole for parsing, a JSONL one buffers the current line (see docs/performance.md).
    let big_doc = "printf '{\"type\":\"result\",\"result\":\"'; head -c 100000000 /dev/zero | tr '\\0' x; printf '\"}\\n'";
    // Just under the JSON limit: the largest document that is parsed (held ~4 times).
    let parsed_doc = big_doc.replace("100000000", "4000000");
    let cases: [(&str, &ProfileBackend, String); 5] = [
        (
            "100 MB to stdout (shell, text)",
            &shell,
            "RUN: head -c 100000000 /dev/zero | tr '\\0' x".to_string(),
        ),
        (
            "100 MB to stderr (shell, text)",
            &shell,
            "RUN: head -c 100000000 /dev/zero | tr '\\0' x >&2".to_string(),
        ),
        (
            "one 100 MB JSON document (format: json)",
            &json,
            big_doc.to_string(),
        ),
        (
            "one 4 MB JSON document, parsed (format: json)",
            &json,
            parsed_doc,
        ),
        (
            "one 100 MB JSONL line (format: jsonl)",
            &jsonl,
            big_doc.to_string(),
        ),
    ];
    for (name, backend, prompt) in cases {
        let before = proc_status_mib("VmRSS:");
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let started = Instant::now();
        let result = rt.block_on(backend.execute(ExecutionRequest::new(
            prompt,
            dir,
            Duration::from_secs(120),
        )));
        let wall = started.elapsed();
        let peak = if reset {
            proc_status_mib("VmHWM:")
        } else {
            f64::NAN
        };
        let counted = result.stdout_bytes + result.stderr_bytes;
        assert!(result.success, "{name}: {:?}", result.error_message);
        let expected = if name.contains("4 MB") {
            4_000_000
        } else {
            CAPTURE_BYTES
        };
        assert!(counted >= expected, "{name}: counted only {counted} bytes");
        let delta = peak - before;
        println!(
            "| {name} | {counted} | {} B | {:.0} ms | {before:.1} MiB | {peak:.1} MiB | {delta:.1} MiB | < {CAPTURE_BAR_MIB} MB | {} |",
            result.stdout.len() + result.stderr.len(),
            wall.as_secs_f64() * 1000.0,
            met(delta * 1.048_576 < CAPTURE_BAR_MIB),
        );
    }
}

/// `sh -c <prompt>` as a generic `kind: cli` profile with the given `output:` settings.
fn sh_profile(output: &str) -> ProfileBackend {
    let yaml = format!(
        "name: bench-sh\ndisplay_name: bench sh\nkind: cli\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n  output:\n    {output}\n"
    );
    let profile = InstrumentProfile::from_yaml(&yaml, "spawn_overhead bench")
        .unwrap_or_else(|e| panic!("bench sh profile: {e}"));
    ProfileBackend::new(Arc::new(profile)).unwrap_or_else(|e| panic!("backend: {e}"))
}

fn time_backend(rt: &tokio::runtime::Runtime, case: &Case, dir: &std::path::Path) -> f64 {
    let req = case.request(dir);
    let started = Instant::now();
    let result: ExecutionResult = rt.block_on(case.backend.execute(req));
    let took = started.elapsed();
    assert!(
        result.success,
        "{}: backend run failed: {:?} {}",
        case.name, result.error_message, result.stderr
    );
    took.as_secs_f64() * 1000.0
}

fn time_direct(case: &Case, dir: &std::path::Path) -> f64 {
    let (exe, argv) = case.argv(dir);
    let started = Instant::now();
    let out = Command::new(&exe)
        .args(&argv)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{}: spawning {exe}: {e}", case.name));
    let took = started.elapsed();
    assert!(out.status.success(), "{}: direct run failed", case.name);
    took.as_secs_f64() * 1000.0
}

fn median(v: &[f64]) -> f64 {
    percentile(v, 0.5)
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    let idx = ((s.len() - 1) as f64 * p).round() as usize;
    s[idx.min(s.len() - 1)]
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn met(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "**NO**"
    }
}

/// A `/proc/self/status` memory line (kB) in MiB; NaN when unreadable.
fn proc_status_mib(key: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
