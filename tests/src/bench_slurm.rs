//! The Slurm placement rows of `mozart-bench` (issue 17; docs/performance.md "Slurm
//! placement"): the per-sheet overhead of placing sheets on Slurm beyond Slurm's own
//! submit-to-end latency, and the conductor's CPU per remote sheet. Run only when a Slurm
//! node answers (`tests/slurm/setup.sh` starts one).

use super::*;

const SCORE_SLURM_1: &str = include_str!("../bench/bench-slurm-1.yaml");
const SCORE_SLURM_FANOUT_20: &str = include_str!("../bench/bench-slurm-fanout-20.yaml");

/// Why the Slurm rows cannot run here, if they cannot.
fn slurm_down() -> Option<String> {
    match Command::new("sinfo").args(["-h", "-o", "%T"]).output() {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let up = ["idle", "mixed", "allocated"]
                .iter()
                .any(|s| text.contains(s));
            (!up).then(|| format!("the Slurm node is not idle ({})", text.trim()))
        }
        _ => Some(
            "Slurm is not running here (sinfo does not answer; tests/slurm/setup.sh starts one)"
                .into(),
        ),
    }
}

/// Ids of our jobs still in the queue.
fn queued() -> Vec<String> {
    Command::new("squeue")
        .args(["-h", "--me", "-o", "%i"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| l.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Slurm's own figure: the sheets' commands submitted with plain `sbatch --wrap` (all at
/// once, as the conductor submits a fan-out), from the first submission until the last
/// job has left the queue (polled every 10 ms).
fn sbatch_floor(env: &Env, key: &str, rep: usize, sheets: u32) -> Result<Duration> {
    let dir = env.work.join(format!("{key}-floor-{rep}"));
    std::fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
    let started = Instant::now();
    let children: Vec<Child> = (1..=sheets)
        .map(|n| {
            Command::new("sbatch")
                .arg("--parsable")
                .arg(format!("--chdir={}", dir.display()))
                .arg("--output=/dev/null")
                .arg(format!("--wrap=echo \"sheet {n}\" > out-{n}.txt"))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(io_err("running", Path::new("sbatch")))
        })
        .collect::<Result<_>>()?;
    let mut ids = Vec::new();
    for child in children {
        let out = child
            .wait_with_output()
            .map_err(io_err("waiting for", Path::new("sbatch")))?;
        ids.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
    }
    loop {
        let q = queued();
        if !ids.iter().any(|id| q.contains(id)) {
            break;
        }
        if started.elapsed() > JOB_DEADLINE {
            return Err(BenchError::Timeout {
                what: format!("{key}: plain sbatch jobs to finish"),
                secs: JOB_DEADLINE.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let wall = started.elapsed();
    check_outputs(&dir, &format!("{key} (plain sbatch)"), sheets)?;
    Ok(wall)
}

/// One run of a Slurm-placed score through `job.submit`: wall time from the submission to
/// `completed`, and the conductor's CPU (its own plus its reaped children: `sbatch`,
/// `scontrol`, `squeue`) over the run. Polled every 20 ms (a finer poll would itself load
/// the conductor whose CPU is measured).
fn placed_run(
    env: &Env,
    conductor: &Conductor,
    key: &str,
    yaml: &str,
    rep: usize,
    sheets: u32,
) -> Result<(Duration, f64, f64)> {
    let job = format!("{key}-{rep}");
    let dir = env.work.join(&job);
    std::fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
    let score = dir.join(format!("{job}.yaml"));
    write_file(&score, yaml)?;
    let mut client = BlockingClient::connect(&env.socket).map_err(|source| BenchError::Ipc {
        method: methods::JOB_SUBMIT,
        source,
    })?;
    let cpu_before = proc_cpu_ms(conductor.pid);
    let (wall, status) = submit_and_wait(&mut client, &score, &job, Duration::from_millis(20))?;
    settle(conductor.pid);
    let cpu_after = proc_cpu_ms(conductor.pid);
    let own = cpu_after.own - cpu_before.own;
    let children = cpu_after.children - cpu_before.children;
    let workspace = dir.join(format!("ws-{key}"));
    if status != "completed" {
        return Err(BenchError::JobFailed {
            job,
            status,
            workspace,
        });
    }
    check_outputs(&workspace, &job, sheets)?;
    Ok((wall, own, children))
}

/// The Slurm placement rows, when Slurm is up.
pub(super) fn slurm_rows(
    env: &Env,
    conductor: &Conductor,
    reps: usize,
    report: &mut Report,
) -> Result<()> {
    if let Some(why) = slurm_down() {
        progress(&format!("Slurm placement rows skipped: {why}"));
        return Ok(());
    }
    for (key, yaml, sheets) in [
        ("bench-slurm-1", SCORE_SLURM_1, 1u32),
        ("bench-slurm-fanout-20", SCORE_SLURM_FANOUT_20, 20),
    ] {
        progress(&format!(
            "{key} ×{reps} on Slurm, interleaved with plain sbatch"
        ));
        let (mut floors, mut walls, mut owns, mut kids, mut overheads) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for rep in 0..reps {
            // Interleaved, so load from other work on a shared machine hits both alike.
            let floor = sbatch_floor(env, key, rep, sheets)?;
            let (wall, own, children) = placed_run(env, conductor, key, yaml, rep, sheets)?;
            floors.push(floor);
            walls.push(wall);
            owns.push(own / f64::from(sheets));
            kids.push(children / f64::from(sheets));
            overheads.push((wall.as_secs_f64() - floor.as_secs_f64()) * 1000.0 / f64::from(sheets));
        }
        let what = if sheets == 1 {
            "1 sheet".to_string()
        } else {
            format!("{sheets}-sheet fan-out")
        };
        report.add(Row::ms(
            &format!("{key}_sbatch"),
            &format!("{what}: plain `sbatch` submit → all jobs ended (Slurm's own latency)"),
            median(floors),
            reps,
        ));
        report.add(Row::ms(
            &format!("{key}_mozart"),
            &format!("{what} placed on Slurm: submit → job completed"),
            median(walls),
            reps,
        ));
        report.add(Row::new(
            &format!("{key}_overhead_per_sheet"),
            &format!("{what} on Slurm: placement overhead per sheet beyond plain sbatch"),
            median_f64(overheads),
            "ms",
            reps,
        ));
        report.add(Row::new(
            &format!("{key}_cpu_per_sheet"),
            &format!("{what} on Slurm: conductor's own CPU per remote sheet"),
            median_f64(owns),
            "ms",
            reps,
        ));
        report.add(Row::new(
            &format!("{key}_slurm_cmd_cpu_per_sheet"),
            &format!("{what} on Slurm: CPU of its sbatch/scontrol/squeue per remote sheet"),
            median_f64(kids),
            "ms",
            reps,
        ));
    }
    Ok(())
}
