//! `mozart-bench` rows of the views at 100× scale (issue 24): `status` of a 100,000- and a
//! 10,000-sheet job, `status --json` and its size, a page of sheets, upstream's plain
//! `job.status`, the dashboard's job page, and `list` / `status` / the dashboard's jobs page
//! with 1,000 jobs × 10 sheets in the registry; then one real 10,000-sheet run, timing
//! `status` while it runs.
//!
//! The large jobs are written with `mozart_state::Registry` before the conductor starts (as
//! the 1,000-job registry is): a job of 100,000 sheets cannot be submitted while
//! `MAX_SHEETS` is 10,000, and writing it takes seconds where running it takes minutes.
//! They are *paused* mid-way (70 % completed, 0.3 % failed, 20 in progress, the rest
//! pending), so the conductor loads them at start and answers from the registry.

use super::*;
use mozart_state::{JobStatus as CpStatus, SheetState, SheetStatus};

/// Sheets of the largest seeded job.
const HUGE: u32 = 100_000;
/// Sheets of the second seeded job, and of the real run.
const BIG: u32 = 10_000;
/// Jobs × sheets of the busy registry.
const MANY_JOBS: u32 = 1_000;
const MANY_SHEETS: u32 = 10;

/// The fan-out of the real run: `BIG` instant voices, 20 at a time.
fn fanout_score(sheets: u32) -> String {
    SCORE_FANOUT_1000
        .replace("bench-fanout-1000", &format!("bench-fanout-{sheets}"))
        .replace("1: 1000", &format!("1: {sheets}"))
        .replace("1000 independent", &format!("{sheets} independent"))
}

/// A paused job of `sheets` sheets: movement 1 is sheet 1, movement 2 fans out to every
/// sheet but the last, movement 3 is the last sheet.
fn seed_big_job(registry: &Registry, id: &str, sheets: u32, submitted: f64) -> Result<()> {
    let state_err = |source| BenchError::State {
        path: registry.path().to_path_buf(),
        source: Box::new(source),
    };
    let mut record = JobRecord::new(
        id,
        format!("/srv/scores/{id}.yaml"),
        format!("/srv/ws/{id}"),
    );
    record.status = DaemonJobStatus::Paused;
    record.submitted_at = submitted;
    record.started_at = Some(submitted + 1.0);
    record.total_sheets = Some(sheets);
    registry.create_job(&record).map_err(state_err)?;
    let mut cp = CheckpointState::new(id, id, sheets);
    cp.status = CpStatus::Paused;
    cp.total_movements = Some(3);
    let completed = sheets / 10 * 7;
    for n in 1..=sheets {
        let mut s = SheetState::new(n);
        s.movement = Some(if n == 1 {
            1
        } else if n == sheets {
            3
        } else {
            2
        });
        s.voice = (s.movement == Some(2)).then_some(n - 1);
        s.instrument_name = Some("instant".into());
        if n <= completed {
            s.status = SheetStatus::Completed;
            s.attempt_count = 1;
            s.validation_passed = Some(true);
            s.execution_duration_seconds = Some(0.05 + f64::from(n % 13) / 100.0);
        } else if n % 333 == 0 {
            s.status = SheetStatus::Failed;
            s.attempt_count = 1;
            s.error_message = Some(format!("sheet {n}: instrument exited with code 3"));
        } else if n <= completed + 20 {
            s.status = SheetStatus::InProgress;
            s.attempt_count = 1;
        }
        cp.sheets.insert(n, s);
    }
    cp.last_completed_sheet = completed;
    registry.save_checkpoint(&cp).map_err(state_err)
}

/// `MANY_JOBS` finished jobs of `MANY_SHEETS` sheets each.
fn seed_many_jobs(registry: &Registry, now: f64) -> Result<()> {
    let state_err = |source| BenchError::State {
        path: registry.path().to_path_buf(),
        source: Box::new(source),
    };
    for i in 0..MANY_JOBS {
        let id = format!("many-{i:04}");
        let mut record = JobRecord::new(
            &id,
            format!("/srv/scores/{id}.yaml"),
            format!("/srv/ws/{id}"),
        );
        record.status = if i % 20 == 0 {
            DaemonJobStatus::Failed
        } else {
            DaemonJobStatus::Completed
        };
        let submitted = now - f64::from(MANY_JOBS - i) * 60.0;
        record.submitted_at = submitted;
        record.started_at = Some(submitted + 1.0);
        record.completed_at = Some(submitted + 30.0);
        record.total_sheets = Some(MANY_SHEETS);
        registry.create_job(&record).map_err(state_err)?;
        let mut cp = CheckpointState::new(&id, &id, MANY_SHEETS);
        for sheet in 1..=MANY_SHEETS {
            cp.mark_sheet_started(sheet);
            cp.mark_sheet_completed(sheet, true, None, Some(5.0));
        }
        registry.save_checkpoint(&cp).map_err(state_err)?;
    }
    Ok(())
}

/// Bytes `mozart <args>` prints.
fn output_bytes(env: &Env, args: &[&str]) -> Result<usize> {
    let out = env
        .command(args)
        .output()
        .map_err(io_err("running", &env.mozart.path))?;
    Ok(out.stdout.len())
}

/// `job.status` as upstream's client sends it (no sheet query): wall time and bytes.
fn plain_job_status(env: &Env, job: &str) -> Result<(Duration, usize)> {
    let mut client = BlockingClient::connect(&env.socket).map_err(|source| BenchError::Ipc {
        method: methods::JOB_STATUS,
        source,
    })?;
    let started = Instant::now();
    let value = client
        .call_value(methods::JOB_STATUS, json!({ "job_id": job }))
        .map_err(|source| BenchError::Ipc {
            method: methods::JOB_STATUS,
            source,
        })?;
    let took = started.elapsed();
    Ok((took, value.to_string().len()))
}

/// A `mozart dashboard` of this environment (our child), logged in.
struct Web {
    child: Child,
    addr: String,
    cookie: String,
}

impl Web {
    fn start(env: &Env) -> Result<Web> {
        use std::io::BufRead as _;
        let mut child = env
            .command(&["dashboard", "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io_err("running", &env.mozart.path))?;
        let mut out = std::io::BufReader::new(
            child
                .stdout
                .take()
                .ok_or_else(|| BenchError::Dashboard("no stdout".into()))?,
        );
        let mut line = String::new();
        out.read_line(&mut line)
            .map_err(io_err("reading the dashboard's URL from", &env.mozart.path))?;
        // Keep its stdout open: it dies of SIGPIPE when it prints into a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let url = line
            .trim()
            .trim_start_matches("Mozart dashboard: ")
            .to_string();
        let addr = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or("")
            .to_string();
        if !addr.starts_with("127.0.0.1:") {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BenchError::Dashboard(format!("printed {line:?}")));
        }
        let cookie = mozart_tests::web::login(&addr, &url);
        Ok(Web {
            child,
            addr,
            cookie,
        })
    }

    /// Wall time of one GET and the body's size; an answer other than 200 is an error.
    fn get(&self, path: &str) -> Result<(Duration, usize)> {
        let started = Instant::now();
        let resp = mozart_tests::web::http_with(
            &self.addr,
            "GET",
            path,
            &[("Cookie", &self.cookie)],
            "",
            None,
        );
        let took = started.elapsed();
        if resp.status != 200 {
            return Err(BenchError::Dashboard(format!(
                "GET {path}: {}",
                resp.raw.chars().take(300).collect::<String>()
            )));
        }
        Ok((took, resp.body.len()))
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Median wall time and size of `reps` GETs.
fn median_get(web: &Web, path: &str, reps: usize) -> Result<(Duration, usize)> {
    let mut size = 0;
    let took = median_of(reps, || {
        let (t, n) = web.get(path)?;
        size = n;
        Ok(t)
    })?;
    Ok((took, size))
}

/// Every row of the 100× views.
pub(crate) fn view_rows(mozart: &MozartExe, args: &Args, report: &mut Report) -> Result<()> {
    let reps = args.reps.min(10);
    let env = Env::new(mozart)?;
    let db = env.home.join("registry.db");
    {
        let registry = Registry::open(&db).map_err(|source| BenchError::State {
            path: db.clone(),
            source: Box::new(source),
        })?;
        let now = mozart_state::epoch_now();
        let seeding = Instant::now();
        seed_many_jobs(&registry, now - 3600.0)?;
        seed_big_job(&registry, "big-10k", BIG, now - 120.0)?;
        seed_big_job(&registry, "huge-100k", HUGE, now - 60.0)?;
        progress(&format!(
            "views: seeded 1,000 × 10 + 10,000 + 100,000 sheets in {:.1} s",
            seeding.elapsed().as_secs_f64()
        ));
    }
    let conductor = Conductor::start_timed(
        &env,
        report,
        "views_start_ready",
        "conductor start → ready, 1,000 jobs + a 10k- and a 100k-sheet job",
    )?;
    report.add(Row::new(
        "views_idle_rss",
        "conductor RSS after start, same registry",
        conductor.rss_mib(),
        "MiB",
        1,
    ));
    for (key, job, what) in [
        ("100k", "huge-100k", "100,000"),
        ("10k", "big-10k", "10,000"),
    ] {
        let took = median_of(reps, || env.time_ok(&["status", job]))?;
        report.add(
            Row::ms(
                &format!("views_status_{key}"),
                &format!("`mozart status JOB`, {what}-sheet job"),
                took,
                reps,
            )
            .bar_below(100.0),
        );
        report.add(Row::new(
            &format!("views_status_{key}_lines"),
            &format!("`mozart status JOB`, {what}-sheet job: lines printed"),
            String::from_utf8_lossy(
                &env.command(&["status", job])
                    .output()
                    .map_err(io_err("running", &env.mozart.path))?
                    .stdout,
            )
            .lines()
            .count() as f64,
            "lines",
            1,
        ));
        let took = median_of(reps, || env.time_ok(&["status", job, "--json"]))?;
        report.add(
            Row::ms(
                &format!("views_status_json_{key}"),
                &format!("`mozart status JOB --json`, {what}-sheet job"),
                took,
                reps,
            )
            .bar_below(100.0),
        );
        report.add(Row::new(
            &format!("views_status_json_{key}_kb"),
            &format!("`mozart status JOB --json`, {what}-sheet job: size"),
            output_bytes(&env, &["status", job, "--json"])? as f64 / 1024.0,
            "KiB",
            1,
        ));
        let page = [
            "status", job, "--sheets", "--state", "failed", "--limit", "100",
        ];
        let took = median_of(reps, || env.time_ok(&page))?;
        report.add(
            Row::ms(
                &format!("views_status_page_{key}"),
                &format!(
                    "`mozart status JOB --sheets --state failed --limit 100`, {what}-sheet job"
                ),
                took,
                reps,
            )
            .bar_below(100.0),
        );
        let mut size = 0;
        let took = median_of(reps.min(5), || {
            let (t, n) = plain_job_status(&env, job)?;
            size = n;
            Ok(t)
        })?;
        report.add(Row::ms(
            &format!("views_plain_job_status_{key}"),
            &format!("`job.status` without a sheet query (upstream's client), {what}-sheet job"),
            took,
            reps.min(5),
        ));
        report.add(Row::new(
            &format!("views_plain_job_status_{key}_kb"),
            &format!("`job.status` without a sheet query, {what}-sheet job: size"),
            size as f64 / 1024.0,
            "KiB",
            1,
        ));
    }
    for (key, cmd, what) in [
        ("list", vec!["list"], "`mozart list`"),
        ("overview", vec!["status"], "`mozart status` (overview)"),
        (
            "list_page_json",
            vec!["list", "--all", "--json", "--limit", "50"],
            "`mozart list --all --json --limit 50`",
        ),
    ] {
        let took = match median_of(reps, || env.time_ok(&cmd)) {
            Ok(t) => t,
            Err(e) => {
                progress(&format!("views: {what} skipped: {e}"));
                continue;
            }
        };
        report.add(
            Row::ms(
                &format!("views_{key}_1000x10"),
                &format!("{what}, 1,000 jobs × 10 sheets + the large jobs"),
                took,
                reps,
            )
            .bar_below(100.0),
        );
    }
    let web = Web::start(&env)?;
    let (took, size) = median_get(&web, "/jobs/huge-100k", reps.min(5))?;
    report.add(
        Row::ms(
            "views_dashboard_job_100k",
            "dashboard job page over HTTP, 100,000-sheet job",
            took,
            reps.min(5),
        )
        .bar_below(1000.0),
    );
    report.add(Row::new(
        "views_dashboard_job_100k_kb",
        "dashboard job page, 100,000-sheet job: size",
        size as f64 / 1024.0,
        "KiB",
        1,
    ));
    let (took, _) = median_get(&web, "/jobs/huge-100k?state=failed&offset=100", reps.min(5))?;
    report.add(
        Row::ms(
            "views_dashboard_job_page_100k",
            "dashboard job page, a page of failed sheets, 100,000-sheet job",
            took,
            reps.min(5),
        )
        .bar_below(1000.0),
    );
    let (took, _) = median_get(&web, "/", reps.min(5))?;
    report.add(
        Row::ms(
            "views_dashboard_list_1000x10",
            "dashboard jobs page over HTTP, 1,000 jobs × 10 sheets + the large jobs",
            took,
            reps.min(5),
        )
        .bar_below(100.0),
    );
    drop(web);
    conductor.stop(&env)?;
    drop(env);
    if !args.quick {
        live_run(mozart, args, report)?;
    }
    Ok(())
}

/// One real run of `BIG` instant sheets, 20 at a time; `status` timed while it runs.
fn live_run(mozart: &MozartExe, args: &Args, report: &mut Report) -> Result<()> {
    progress("views: a real 10,000-sheet run, status while it runs");
    let env = Env::new(mozart)?;
    let conductor = Conductor::start(&env)?;
    let dir = env.work.join("live");
    std::fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
    let job = format!("bench-fanout-{BIG}");
    let score = dir.join(format!("{job}.yaml"));
    write_file(&score, &fanout_score(BIG))?;
    let mut client = BlockingClient::connect(&env.socket).map_err(|source| BenchError::Ipc {
        method: methods::JOB_SUBMIT,
        source,
    })?;
    let started = Instant::now();
    submit_score(&mut client, &score.display().to_string())?;
    let (mut human, mut json_runs, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    let mut peak = 0.0f64;
    let status = loop {
        if let Some(status) = job_list_status(&mut client, &job)? {
            if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
                break status;
            }
            if status == "running" {
                human.push(env.time_ok(&["status", &job])?);
                json_runs.push(env.time_ok(&["status", &job, "--json"])?);
                // What starting any `mozart` costs meanwhile (the run keeps both cores busy).
                bare.push(env.time_ok(&["--version"])?);
            }
        }
        peak = peak.max(conductor.rss_mib());
        if started.elapsed() > Duration::from_secs(600) {
            return Err(BenchError::Timeout {
                what: format!("job '{job}' to finish"),
                secs: 600,
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let took = started.elapsed();
    if status != "completed" {
        return Err(BenchError::JobFailed {
            job,
            status,
            workspace: dir,
        });
    }
    let n = human.len();
    report.add(Row::ms(
        "views_live_10k_wall",
        "real run, 10,000 instant sheets, 20 at a time (status polled throughout)",
        took,
        1,
    ));
    if n > 0 {
        report.add(
            Row::ms(
                "views_live_status_10k",
                "`mozart status JOB` while the 10,000-sheet job runs, median",
                median(human),
                n,
            )
            .bar_below(100.0),
        );
        report.add(Row::ms(
            "views_live_version_10k",
            "`mozart --version` (no conductor) while the 10,000-sheet job runs, median",
            median(bare),
            n,
        ));
        report.add(
            Row::ms(
                "views_live_status_json_10k",
                "`mozart status JOB --json` while the 10,000-sheet job runs, median",
                median(json_runs),
                n,
            )
            .bar_below(100.0),
        );
    }
    report.add(Row::new(
        "views_live_peak_rss_10k",
        "conductor RSS, largest seen during the 10,000-sheet run",
        peak,
        "MiB",
        1,
    ));
    let _ = args;
    conductor.stop(&env)?;
    drop(env);
    many_live(mozart, report)
}

/// Jobs still queued or running, from one `job.list_page` row.
fn active_jobs(client: &mut BlockingClient) -> Result<u64> {
    let page = client
        .call_value(
            methods::JOB_LIST_PAGE,
            json!({"statuses": ["queued", "running"], "limit": 1}),
        )
        .map_err(|source| BenchError::Ipc {
            method: methods::JOB_LIST_PAGE,
            source,
        })?;
    Ok(page.get("total").and_then(Value::as_u64).unwrap_or(0))
}

/// The conductor's part of a dashboard jobs page: the one `job.list_page` it asks (a page
/// of 100 rows, the counts and the loaded rows' progress), on a fresh connection as the
/// dashboard makes one a call. Timed beside the page, it says where the page's time goes.
fn page_call(socket: &Path) -> Result<Duration> {
    let started = Instant::now();
    let mut client = BlockingClient::connect(socket).map_err(|source| BenchError::Ipc {
        method: methods::JOB_LIST_PAGE,
        source,
    })?;
    client
        .call_value(
            methods::JOB_LIST_PAGE,
            json!({"limit": 100, "offset": 0, "counts": true, "progress": true}),
        )
        .map_err(|source| BenchError::Ipc {
            method: methods::JOB_LIST_PAGE,
            source,
        })?;
    Ok(started.elapsed())
}

/// 1,000 jobs × 10 instant sheets submitted at once (straight to the socket); `list`,
/// `status` and the dashboard's jobs page timed while they run.
pub(crate) fn many_live(mozart: &MozartExe, report: &mut Report) -> Result<()> {
    progress("views: 1,000 jobs × 10 sheets submitted at once, list/status while they run");
    let env = Env::new(mozart)?;
    let conductor = Conductor::start(&env)?;
    let dir = env.work.join("many");
    std::fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
    let mut scores = Vec::new();
    for i in 0..MANY_JOBS {
        let name = format!("many-live-{i:04}");
        let text = SCORE_FANOUT_50
            .replace("bench-fanout-50", &name)
            .replace("1: 50", &format!("1: {MANY_SHEETS}"));
        let path = dir.join(format!("{name}.yaml"));
        write_file(&path, &text)?;
        scores.push(path);
    }
    let mut client = BlockingClient::connect(&env.socket).map_err(|source| BenchError::Ipc {
        method: methods::JOB_SUBMIT,
        source,
    })?;
    let web = Web::start(&env)?;
    let started = Instant::now();
    // Submitted from a second thread, so the views are timed while jobs arrive too.
    let mut submitter = BlockingClient::connect(&env.socket).map_err(|source| BenchError::Ipc {
        method: methods::JOB_SUBMIT,
        source,
    })?;
    let submitting = std::thread::spawn(move || -> Result<Duration> {
        for path in &scores {
            submit_score(&mut submitter, &path.display().to_string())?;
        }
        Ok(started.elapsed())
    });
    let (mut list, mut overview, mut page) = (Vec::new(), Vec::new(), Vec::new());
    let mut call = Vec::new();
    loop {
        let active = active_jobs(&mut client)?;
        if active == 0 && submitting.is_finished() {
            break;
        }
        list.push(env.time_ok(&["list"])?);
        overview.push(env.time_ok(&["status"])?);
        page.push(web.get("/")?.0);
        call.push(page_call(&env.socket)?);
        if started.elapsed() > Duration::from_secs(900) {
            return Err(BenchError::Timeout {
                what: format!("{active} of the 1,000 jobs to finish"),
                secs: 900,
            });
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let took = started.elapsed();
    drop(web);
    let submitted = submitting
        .join()
        .map_err(|_| BenchError::Dashboard("the submitting thread panicked".into()))??;
    report.add(Row::ms(
        "views_many_submit",
        "1,000 `job.submit` (10-sheet scores) straight to the socket, in a row (views polled meanwhile)",
        submitted,
        1,
    ));
    report.add(Row::ms(
        "views_many_wall",
        "1,000 jobs × 10 instant sheets: first submission → all finished",
        took,
        1,
    ));
    for (key, what, samples) in [
        ("list", "`mozart list`", list),
        ("overview", "`mozart status` (overview)", overview),
        ("dashboard", "dashboard jobs page over HTTP", page),
        (
            "dashboard_call",
            "the jobs page's `job.list_page` alone (its conductor part)",
            call,
        ),
    ] {
        let n = samples.len();
        if n == 0 {
            continue;
        }
        let worst = samples.iter().max().copied().unwrap_or_default();
        report.add(
            Row::ms(
                &format!("views_many_live_{key}"),
                &format!("{what} while 1,000 jobs × 10 sheets run, median"),
                median(samples),
                n,
            )
            .bar_below(100.0),
        );
        report.add(Row::ms(
            &format!("views_many_live_{key}_max"),
            &format!("{what} while 1,000 jobs × 10 sheets run, worst"),
            worst,
            n,
        ));
    }
    conductor.stop(&env)?;
    Ok(())
}
