//! `mozart-bench --only-scale`: the rows of issue 24's engine half — one job of 1,000 /
//! 10,000 / 100,000 sheets (how wall time, conductor CPU, peak memory and disk grow with
//! the sheets a job plans), 1,000 jobs of 10 sheets submitted at once, and 1,000 scores
//! submitted from a shell loop of `mozart run`. Method: docs/performance.md, "session 8".

use super::*;

/// A fan-out score of `sheets` voices in one movement through the instant instrument, the
/// same prompt and validation as `bench-fanout-1000.yaml`.
fn fanout_score(name: &str, sheets: u32) -> String {
    format!(
        "name: {name}\n\
         workspace: \"./ws-{name}\"\n\
         instrument: instant\n\
         instrument_config:\n  timeout_seconds: 60\n\
         sheet:\n  size: 1\n  total_items: 1\n  fan_out:\n    1: {sheets}\n\
         parallel:\n  enabled: true\n  max_concurrent: 20\n\
         pause_between_sheets_seconds: 0\n\
         prompt:\n  template: |\n    Benchmark voice {{{{ instance }}}} of {{{{ fan_count }}}} (sheet {{{{ sheet_num }}}}).\n    \
         RUN: echo \"sheet {{{{ sheet_num }}}}\" > \"{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt\"\n\
         retry:\n  max_retries: 0\n\
         validations:\n  - type: file_exists\n    path: \"{{workspace}}/out-{{sheet_num}}.txt\"\n    \
         description: \"sheet output file exists\"\n"
    )
}

/// Bytes and files under `dir` (0 when it does not exist).
fn tree_size(dir: &Path) -> (u64, u64) {
    let mut bytes = 0;
    let mut files = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                bytes += meta.len();
                files += 1;
            }
        }
    }
    (bytes, files)
}

fn file_mb(path: &Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / 1e6)
}

/// The status of every job `job.list` names.
fn statuses(client: &mut BlockingClient) -> Result<BTreeMap<String, String>> {
    let list = client
        .call_value(methods::JOB_LIST, json!({}))
        .map_err(|source| BenchError::Ipc {
            method: methods::JOB_LIST,
            source,
        })?;
    Ok(list
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .filter_map(|j| {
                    Some((
                        j.get("job_id")?.as_str()?.to_owned(),
                        j.get("status")?.as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default())
}

/// How often `mozart status JOB` is timed while a one-job row's job runs.
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// What [`wait_all`] saw while it waited.
#[derive(Default)]
struct Watched {
    /// The largest conductor RSS sampled (MiB).
    peak_rss: f64,
    /// Wall time of each `mozart status JOB` timed while the job ran.
    status: Vec<Duration>,
    /// Lines `mozart status JOB` printed, fewest and most.
    status_lines: (usize, usize),
}

/// Polls `job.list` until every job of `jobs` ended, sampling the conductor's RSS; with
/// `status_of`, also times `mozart status <job>` (a whole process, as a user runs it)
/// every [`STATUS_EVERY`] while that job is `running`. Any job that ended other than
/// `completed` is an error.
fn wait_all(
    env: &Env,
    conductor: &Conductor,
    jobs: &[String],
    deadline: Duration,
    started: Instant,
    status_of: Option<&str>,
) -> Result<Watched> {
    let mut client = BlockingClient::connect(&env.socket).map_err(|source| BenchError::Ipc {
        method: methods::JOB_LIST,
        source,
    })?;
    let mut watched = Watched {
        status_lines: (usize::MAX, 0),
        ..Watched::default()
    };
    let mut last_status = Instant::now();
    loop {
        watched.peak_rss = watched.peak_rss.max(conductor.rss_mib());
        let now = statuses(&mut client)?;
        if let Some(job) = status_of {
            if now.get(job).map(String::as_str) == Some("running")
                && last_status.elapsed() >= STATUS_EVERY
            {
                last_status = Instant::now();
                let begun = Instant::now();
                let out = env
                    .command(&["status", job])
                    .stderr(Stdio::null())
                    .output()
                    .map_err(io_err("running", Path::new("mozart status")))?;
                let took = begun.elapsed();
                let text = String::from_utf8_lossy(&out.stdout);
                // Timed only while the answer still says the job runs (it may end between
                // the poll and the call).
                if out.status.success() && text.contains("RUNNING") {
                    watched.status.push(took);
                    let lines = text.lines().count();
                    watched.status_lines.0 = watched.status_lines.0.min(lines);
                    watched.status_lines.1 = watched.status_lines.1.max(lines);
                }
            }
        }
        let mut open = 0;
        for job in jobs {
            match now.get(job).map(String::as_str) {
                Some("completed") => {}
                Some(status @ ("failed" | "cancelled")) => {
                    return Err(BenchError::JobFailed {
                        job: job.clone(),
                        status: status.to_owned(),
                        workspace: env.work.clone(),
                    })
                }
                _ => open += 1,
            }
        }
        if open == 0 {
            return Ok(watched);
        }
        if started.elapsed() > deadline {
            return Err(BenchError::Timeout {
                what: format!("{open} of {} jobs to finish", jobs.len()),
                secs: deadline.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What a finished scale phase left on disk, as rows.
fn disk_rows(env: &Env, key: &str, what: &str, report: &mut Report) {
    let (home, _) = tree_size(&env.home);
    report.add(Row::new(
        &format!("{key}_home_mb"),
        &format!("{what}: Mozart home after it"),
        home as f64 / 1e6,
        "MB",
        1,
    ));
    report.add(Row::new(
        &format!("{key}_wal_mb"),
        &format!("{what}: registry WAL after it"),
        file_mb(&env.home.join("registry.db-wal")),
        "MB",
        1,
    ));
    let (logs, _) = tree_size(&env.home.join("logs"));
    report.add(Row::new(
        &format!("{key}_logs_mb"),
        &format!("{what}: the home's logs/ after it"),
        logs as f64 / 1e6,
        "MB",
        1,
    ));
    let learning: u64 = std::fs::read_dir(&env.home)
        .map(|dir| {
            dir.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("global-learning")
                })
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    report.add(Row::new(
        &format!("{key}_learning_mb"),
        &format!("{what}: the learning store after it"),
        learning as f64 / 1e6,
        "MB",
        1,
    ));
    report.add(Row::new(
        &format!("{key}_registry_mb"),
        &format!("{what}: registry.db after it"),
        file_mb(&env.home.join("registry.db")),
        "MB",
        1,
    ));
}

/// One job of `sheets` sheets on a fresh conductor.
fn big_job(mozart: &MozartExe, sheets: u32, report: &mut Report) -> Result<()> {
    let env = Env::new(mozart)?;
    let conductor = Conductor::start(&env)?;
    std::thread::sleep(Duration::from_millis(300));
    let idle = conductor.rss_mib();
    let name = format!("scale-{sheets}");
    let dir = env.work.join(&name);
    std::fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
    let score = dir.join(format!("{name}.yaml"));
    write_file(&score, &fanout_score(&name, sheets))?;
    let mut client = BlockingClient::connect(&env.socket).map_err(|source| BenchError::Ipc {
        method: methods::JOB_SUBMIT,
        source,
    })?;
    let cpu_before = proc_cpu_ms(conductor.pid);
    let started = Instant::now();
    submit_score(&mut client, &score.display().to_string())?;
    // Generous: the instant instrument runs ~500 sheets/s on the 2-core machine.
    let deadline = Duration::from_secs(60 + u64::from(sheets) / 100);
    let watched = wait_all(
        &env,
        &conductor,
        std::slice::from_ref(&name),
        deadline,
        started,
        Some(&name),
    )?;
    let peak_seen = watched.peak_rss;
    let wall = started.elapsed();
    settle(conductor.pid);
    let cpu = proc_cpu_ms(conductor.pid);
    let what = format!("one job of {sheets} sheets");
    let key = format!("scale_{sheets}");
    let n = f64::from(sheets);
    report.add(Row::ms(
        &format!("{key}_wall"),
        &format!("{what}: job.submit → completed"),
        wall,
        1,
    ));
    report.add(Row::new(
        &format!("{key}_cpu_per_sheet"),
        &format!("{what}: conductor CPU per sheet"),
        (cpu.own - cpu_before.own) / n,
        "ms",
        1,
    ));
    report.add(Row::new(
        &format!("{key}_idle_rss"),
        &format!("{what}: conductor RSS before it"),
        idle,
        "MiB",
        1,
    ));
    report.add(Row::new(
        &format!("{key}_peak_rss"),
        &format!("{what}: conductor whole-life peak RSS (VmHWM)"),
        conductor.peak_rss_mib().max(peak_seen),
        "MiB",
        1,
    ));
    let samples = watched.status.len();
    if samples > 0 {
        let mut sorted = watched.status.clone();
        sorted.sort();
        let p90 = sorted[(samples * 9 / 10).min(samples - 1)];
        report.add(
            Row::ms(
                &format!("{key}_status_running"),
                &format!(
                    "{what}: `mozart status JOB` while it runs, median ({}–{} lines)",
                    watched.status_lines.0, watched.status_lines.1
                ),
                median(watched.status),
                samples,
            )
            .bar_below(100.0),
        );
        report.add(Row::ms(
            &format!("{key}_status_running_p90"),
            &format!("{what}: `mozart status JOB` while it runs, 90th percentile"),
            p90,
            samples,
        ));
        report.add(Row::ms(
            &format!("{key}_status_running_max"),
            &format!("{what}: `mozart status JOB` while it runs, slowest"),
            sorted[samples - 1],
            samples,
        ));
    }
    report.add(Row::new(
        &format!("{key}_after_rss"),
        &format!("{what}: conductor RSS after it"),
        conductor.rss_mib(),
        "MiB",
        1,
    ));
    let workspace = dir.join(format!("ws-{name}"));
    check_outputs(&workspace, &name, sheets)?;
    let (_, files) = tree_size(&workspace.join("logs"));
    report.add(Row::new(
        &format!("{key}_log_files"),
        &format!("{what}: files in the workspace's logs/"),
        files as f64,
        "files",
        1,
    ));
    disk_rows(&env, &key, &what, report);
    // After the conductor stopped: what its shutdown checkpoint leaves.
    conductor.stop(&env)?;
    report.add(Row::new(
        &format!("{key}_wal_stopped_mb"),
        &format!("{what}: registry WAL after the conductor stopped"),
        file_mb(&env.home.join("registry.db-wal")),
        "MB",
        1,
    ));
    Ok(())
}

/// `jobs` scores of `sheets` sheets each, written into their own directories.
fn write_scores(env: &Env, prefix: &str, jobs: u32, sheets: u32) -> Result<Vec<(String, PathBuf)>> {
    (0..jobs)
        .map(|i| {
            let name = format!("{prefix}-{i:04}");
            let dir = env.work.join(prefix).join(&name);
            std::fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
            let score = dir.join(format!("{name}.yaml"));
            write_file(&score, &fanout_score(&name, sheets))?;
            Ok((name, score))
        })
        .collect()
}

/// `jobs` jobs of `sheets` sheets, all submitted at once with `job.submit`.
fn many_jobs(mozart: &MozartExe, jobs: u32, sheets: u32, report: &mut Report) -> Result<()> {
    let env = Env::new(mozart)?;
    let conductor = Conductor::start(&env)?;
    std::thread::sleep(Duration::from_millis(300));
    let scores = write_scores(&env, "many", jobs, sheets)?;
    let mut client = BlockingClient::connect(&env.socket).map_err(|source| BenchError::Ipc {
        method: methods::JOB_SUBMIT,
        source,
    })?;
    let cpu_before = proc_cpu_ms(conductor.pid);
    let started = Instant::now();
    for (_, score) in &scores {
        submit_score(&mut client, &score.display().to_string())?;
    }
    let submitted = started.elapsed();
    let names: Vec<String> = scores.into_iter().map(|(n, _)| n).collect();
    let deadline = Duration::from_secs(60 + u64::from(jobs * sheets) / 50);
    let peak_seen = wait_all(&env, &conductor, &names, deadline, started, None)?.peak_rss;
    let wall = started.elapsed();
    settle(conductor.pid);
    let cpu = proc_cpu_ms(conductor.pid);
    let what = format!("{jobs} jobs × {sheets} sheets at once");
    let key = format!("jobs_{jobs}x{sheets}");
    report.add(Row::ms(
        &format!("{key}_submit"),
        &format!("{what}: {jobs} job.submit calls"),
        submitted,
        1,
    ));
    report.add(Row::ms(
        &format!("{key}_wall"),
        &format!("{what}: first submit → all completed"),
        wall,
        1,
    ));
    report.add(Row::new(
        &format!("{key}_cpu_per_sheet"),
        &format!("{what}: conductor CPU per sheet"),
        (cpu.own - cpu_before.own) / f64::from(jobs * sheets),
        "ms",
        1,
    ));
    report.add(Row::new(
        &format!("{key}_peak_rss"),
        &format!("{what}: conductor whole-life peak RSS (VmHWM)"),
        conductor.peak_rss_mib().max(peak_seen),
        "MiB",
        1,
    ));
    disk_rows(&env, &key, &what, report);
    conductor.stop(&env)
}

/// `jobs` scores submitted by a shell loop of `mozart run`, as a user would.
fn shell_loop(mozart: &MozartExe, jobs: u32, sheets: u32, report: &mut Report) -> Result<()> {
    // A failing `mozart run` stops the loop with its output, for the error below.
    let script = |dir: &Path| {
        format!(
            "for f in {}/*/*.yaml; do out=$(\"$MOZART\" run \"$f\" 2>&1) || \
             {{ printf '%s: %s\\n' \"$f\" \"$out\"; exit 1; }}; done",
            dir.display()
        )
    };
    let how = Submitting {
        what: "a shell loop of `mozart run`",
        key: "loop",
        per: "per `mozart run`",
    };
    submit_from_shell(mozart, jobs, sheets, &how, &script, report)
}

/// `jobs` scores submitted by one `mozart run` of every file (ours: upstream's `run` takes
/// one). A binary that refuses several files (an older one) gives no rows.
fn one_command(mozart: &MozartExe, jobs: u32, sheets: u32, report: &mut Report) -> Result<()> {
    let script = |dir: &Path| {
        format!(
            "out=$(\"$MOZART\" run {}/*/*.yaml 2>&1) || {{ printf '%s\\n' \"$out\" | tail -n 20; exit 1; }}",
            dir.display()
        )
    };
    let how = Submitting {
        what: "one `mozart run` of every score",
        key: "one_run",
        per: "per score",
    };
    match submit_from_shell(mozart, jobs, sheets, &how, &script, report) {
        Err(BenchError::Mozart { output, .. }) if output.contains("unexpected argument") => {
            progress("this mozart takes one score per `run`: no one-command rows");
            Ok(())
        }
        other => other,
    }
}

/// How a shell submits the scores, for the rows' names.
struct Submitting {
    what: &'static str,
    key: &'static str,
    per: &'static str,
}

/// Write `jobs` scores, submit them with the shell script `script(dir)` gives (it runs with
/// `$MOZART` set), wait for every job to complete, and report the submission's time.
fn submit_from_shell(
    mozart: &MozartExe,
    jobs: u32,
    sheets: u32,
    how: &Submitting,
    script: &dyn Fn(&Path) -> String,
    report: &mut Report,
) -> Result<()> {
    let env = Env::new(mozart)?;
    let conductor = Conductor::start(&env)?;
    std::thread::sleep(Duration::from_millis(300));
    let scores = write_scores(&env, how.key, jobs, sheets)?;
    let dir = env.work.join(how.key);
    let script = script(&dir);
    let started_loop = Instant::now();
    // `env.command` gives the environment every `mozart` of the benchmark gets; the loop
    // runs in sh with that environment.
    let cmd = env.command(&[]);
    let program = cmd.get_program().to_owned();
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(&script)
        .current_dir(&env.work)
        .env("MOZART", program)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .stdin(Stdio::null());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    let done = sh.output().map_err(io_err("running", Path::new("sh")))?;
    let loop_took = started_loop.elapsed();
    if !done.status.success() {
        return Err(BenchError::Mozart {
            args: format!("run ({} of {jobs})", how.what),
            status: done.status.to_string(),
            output: String::from_utf8_lossy(&done.stdout).into_owned(),
        });
    }
    let names: Vec<String> = scores.into_iter().map(|(n, _)| n).collect();
    let deadline = Duration::from_secs(120 + u64::from(jobs * sheets) / 50);
    wait_all(&env, &conductor, &names, deadline, started_loop, None)?;
    let wall = started_loop.elapsed();
    let what = format!("{jobs} scores of {sheets} sheets from {}", how.what);
    let key = format!("{}_{jobs}", how.key);
    report.add(
        Row::ms(
            &format!("{key}_submit"),
            &format!("{what}: submitting"),
            loop_took,
            1,
        )
        .bar_below(60_000.0),
    );
    report.add(Row::ms(
        &format!("{key}_wall"),
        &format!("{what}: start → all completed"),
        wall,
        1,
    ));
    report.add(Row::ms(
        &format!("{key}_per_run"),
        &format!("{what}: {}", how.per),
        loop_took / jobs.max(1),
        1,
    ));
    conductor.stop(&env)
}

/// `--only-scale`.
pub(crate) fn only_scale(args: &Args, mozart: &MozartExe, report: &mut Report) -> Result<()> {
    // `--scale-sheets 0` measures only the many-jobs rows.
    for &sheets in args.scale_sheets.iter().filter(|n| **n > 0) {
        progress(&format!("one job of {sheets} sheets"));
        big_job(mozart, sheets, report)?;
    }
    if args.scale_jobs > 0 {
        progress(&format!("{} jobs × 10 sheets at once", args.scale_jobs));
        many_jobs(mozart, args.scale_jobs, 10, report)?;
        progress(&format!(
            "{} scores from a shell loop of `mozart run`",
            args.scale_jobs
        ));
        shell_loop(mozart, args.scale_jobs, 10, report)?;
        progress(&format!(
            "{} scores from one `mozart run` of them all",
            args.scale_jobs
        ));
        one_command(mozart, args.scale_jobs, 10, report)?;
    }
    Ok(())
}
