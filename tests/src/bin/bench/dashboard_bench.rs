//! mozart-bench's dashboard figures (issue 16): the jobs page rendered server-side with
//! 1,000 jobs, and how long after a sheet's transition the live jobs list (SSE) shows it.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The access token of the benchmark's dashboard.
const BENCH_TOKEN: &str = "mozart-bench-token-0123456789";

/// Epoch seconds now.
fn epoch() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `n` `job.list` rows (live jobs), of every status.
pub fn synthetic_jobs(n: usize) -> Vec<mozart_ipc::status::JobListEntry> {
    let statuses = [
        "running",
        "completed",
        "failed",
        "queued",
        "paused",
        "cancelled",
    ];
    let now = epoch();
    (0..n)
        .map(|i| {
            let status = statuses[i % statuses.len()];
            json!({
                "job_id": format!("bench-job-{i:04}"),
                "status": status,
                "config_path": format!("/home/user/scores/bench-job-{i:04}.yaml"),
                "workspace": format!("/home/user/work/bench-job-{i:04}-ws"),
                "submitted_at": now - 3600.0 + i as f64,
                "started_at": now - 3600.0 + i as f64 + 0.5,
                "completed_at": if status == "completed" { json!(now - 10.0) } else { Value::Null },
                "total_sheets": 10 + i % 7,
                "error_message": if status == "failed" { json!("sheet 3 failed validation") } else { Value::Null },
            })
        })
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

/// Median time to render the jobs page for 1,000 jobs.
pub fn jobs_page_render(reps: usize) -> Result<Duration, String> {
    let jobs = synthetic_jobs(1_000);
    if jobs.len() != 1_000 {
        return Err("the synthetic job rows do not parse as job.list rows".into());
    }
    let page = mozart_dashboard::render_jobs_page_for_bench(&jobs).map_err(|e| e.to_string())?;
    if page.matches("<tr data-job=").count() != 1_000 {
        return Err("the bench page does not show 1,000 rows".into());
    }
    let mut samples: Vec<Duration> = (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            let html = mozart_dashboard::render_jobs_page_for_bench(&jobs);
            let took = t.elapsed();
            drop(html);
            took
        })
        .collect();
    samples.sort();
    Ok(samples[samples.len() / 2])
}

/// Latency figures of the live jobs list.
#[derive(Debug, Clone, Copy)]
pub struct SseLatency {
    /// Median over the sheet completions seen.
    pub median: Duration,
    /// Worst one.
    pub max: Duration,
    /// Completions measured.
    pub samples: usize,
}

/// Start a dashboard on this conductor, follow its jobs stream, run `submit` (which starts
/// a job `job_id` of `sheets` sheets), and time each "k/N sheets done" update against the
/// sheet's `completed_at` in the checkpoint.
pub fn sse_latency(
    socket: &Path,
    learning_db: &Path,
    job_id: &str,
    sheets: u32,
    submit: impl FnOnce() -> Result<(), String>,
) -> Result<SseLatency, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let options = mozart_dashboard::Options {
        host: std::net::IpAddr::from([127, 0, 0, 1]),
        port: 0,
        // The bench's own token, sent as a header (the page is served only with it).
        token: Some(BENCH_TOKEN.to_string()),
        home: std::env::temp_dir(),
        socket: socket.to_path_buf(),
        learning_db: learning_db.to_path_buf(),
    };
    let dashboard = runtime
        .block_on(mozart_dashboard::Dashboard::bind(options))
        .map_err(|e| e.to_string())?;
    let addr = dashboard.addr();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    runtime.spawn(dashboard.serve_until(async {
        let _ = stop_rx.await;
    }));

    let mut stream = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(90)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET /events/jobs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {BENCH_TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let reader = BufReader::new(stream);
    let (tx, rx) = std::sync::mpsc::channel::<(u32, f64)>();
    let job = job_id.to_string();
    std::thread::spawn(move || {
        let mut in_row = false;
        for line in reader.lines().map_while(Result::ok) {
            let at = epoch();
            if line.contains("<tr data-job=") {
                in_row = line.contains(&format!("data-job=\"{job}\""));
            }
            let Some(rest) = line.split("class=\"sub\">").nth(1) else {
                continue;
            };
            if !in_row {
                continue;
            }
            let done = rest
                .split("&#x2f;")
                .next()
                .and_then(|k| k.parse::<u32>().ok());
            if let Some(k) = done {
                if tx.send((k, at)).is_err() {
                    break;
                }
            }
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    submit()?;
    let mut first_seen: Vec<Option<f64>> = vec![None; sheets as usize + 1];
    let deadline = Instant::now() + Duration::from_secs(120);
    while first_seen[sheets as usize].is_none() {
        let left = deadline
            .checked_duration_since(Instant::now())
            .ok_or("the live list never showed the job finished")?;
        let (k, at) = rx.recv_timeout(left).map_err(|e| e.to_string())?;
        if let Some(slot) = first_seen.get_mut(k as usize) {
            slot.get_or_insert(at);
        }
    }
    let _ = stop_tx.send(());

    let mut client = mozart_ipc::BlockingClient::connect(socket).map_err(|e| e.to_string())?;
    let status: Value = client
        .call_value(mozart_ipc::methods::JOB_STATUS, json!({ "job_id": job_id }))
        .map_err(|e| e.to_string())?;
    let state: mozart_state::CheckpointState =
        serde_json::from_value(status).map_err(|e| e.to_string())?;
    let mut done_at: Vec<f64> = state
        .sheets
        .values()
        .filter_map(|s| s.completed_at.as_ref()?.to_epoch())
        .collect();
    done_at.sort_by(f64::total_cmp);
    let mut latencies: Vec<Duration> = done_at
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let seen = first_seen.get(i + 1).copied().flatten()?;
            Some(Duration::from_secs_f64((seen - t).max(0.0)))
        })
        .collect();
    if latencies.is_empty() {
        return Err("no sheet transition was measured".into());
    }
    latencies.sort();
    Ok(SseLatency {
        median: latencies[latencies.len() / 2],
        max: latencies[latencies.len() - 1],
        samples: latencies.len(),
    })
}
