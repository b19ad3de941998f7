//! The Slurm placement rows of `mozart-bench` (issues 17 and 25; docs/performance.md "Slurm
//! placement"): the per-sheet overhead of placing sheets on Slurm beyond Slurm's own
//! submit-to-end latency, split into submit → the command starts in its job → the job is
//! completed; the same score placed locally; and the conductor's CPU per remote sheet. Run only when a Slurm
//! node answers (`tests/slurm/setup.sh` starts one).

use super::*;

const SCORE_SLURM_1: &str = include_str!("../../../bench/bench-slurm-1.yaml");
const SCORE_SLURM_FANOUT_20: &str = include_str!("../../../bench/bench-slurm-fanout-20.yaml");

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
/// Also: from the first submission until the last command began (`start-N.txt`).
fn sbatch_floor(env: &Env, key: &str, rep: usize, sheets: u32) -> Result<(Duration, f64)> {
    let dir = env.work.join(format!("{key}-floor-{rep}"));
    std::fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
    let submitted = epoch_secs();
    let started = Instant::now();
    let children: Vec<Child> = (1..=sheets)
        .map(|n| {
            Command::new("sbatch")
                .arg("--parsable")
                .arg(format!("--chdir={}", dir.display()))
                .arg("--output=/dev/null")
                .arg(format!(
                    "--wrap=date +%s.%N > start-{n}.txt; echo \"sheet {n}\" > out-{n}.txt"
                ))
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
    Ok((wall, last_start(&dir, sheets)? - submitted))
}

/// Seconds since the epoch, as `date +%s.%N` writes them.
fn epoch_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The latest `start-N.txt` of the sheets (when the last command began), epoch seconds.
fn last_start(dir: &Path, sheets: u32) -> Result<f64> {
    let mut last = 0.0f64;
    for n in 1..=sheets {
        let path = dir.join(format!("start-{n}.txt"));
        let text = std::fs::read_to_string(&path).map_err(io_err("reading", &path))?;
        let at: f64 = text.trim().parse().map_err(|_| BenchError::MissingOutput {
            job: format!("{} (start time {text:?})", path.display()),
            missing: 1,
            sheets,
        })?;
        last = last.max(at);
    }
    Ok(last)
}

/// One run of a Slurm-placed (or local) score through `job.submit`: wall time from the
/// submission to `completed`, from the submission until the last sheet's command began, and
/// the conductor's CPU (its own plus its reaped children: `sbatch`, `scontrol`, `squeue`)
/// over the run. Polled every 20 ms (a finer poll would itself load
/// the conductor whose CPU is measured).
fn placed_run(
    env: &Env,
    conductor: &Conductor,
    key: &str,
    yaml: &str,
    rep: usize,
    sheets: u32,
) -> Result<Placed> {
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
    let submitted = epoch_secs();
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
    Ok(Placed {
        wall,
        to_start: last_start(&workspace, sheets)? - submitted,
        own,
        children,
    })
}

/// What one run of a score measured.
struct Placed {
    /// Submission → `completed`.
    wall: Duration,
    /// Submission → the last sheet's command began, seconds.
    to_start: f64,
    /// The conductor's own CPU, ms.
    own: f64,
    /// Its children's CPU (Slurm commands), ms.
    children: f64,
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
            "{key} ×{reps} on Slurm, interleaved with plain sbatch and a local run"
        ));
        // The same score with the default placement: what leaving the machine costs.
        let local_yaml = yaml
            .replace("placement:\n  type: slurm", "placement:\n  type: local")
            .replace(&format!("ws-{key}"), &format!("ws-{key}-local"));
        let local_key = format!("{key}-local");
        // The same fan-out as one job array (`array: true`): one sbatch and one release
        // for the sheets dispatched together instead of one each.
        let array_yaml = (sheets > 1).then(|| {
            yaml.replace(
                "placement:\n  type: slurm",
                "placement:\n  type: slurm\n  array: true",
            )
            .replace(&format!("ws-{key}"), &format!("ws-{key}-array"))
        });
        let array_key = format!("{key}-array");
        let (mut array_walls, mut array_starts, mut array_owns, mut array_kids) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut floors, mut walls, mut owns, mut kids, mut overheads) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut floor_starts, mut starts, mut after_starts, mut locals) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for rep in 0..reps {
            // Interleaved, so load from other work on a shared machine hits all alike.
            let (floor, floor_start) = sbatch_floor(env, key, rep, sheets)?;
            let placed = placed_run(env, conductor, key, yaml, rep, sheets)?;
            let local = placed_run(env, conductor, &local_key, &local_yaml, rep, sheets)?;
            if let Some(array_yaml) = &array_yaml {
                let a = placed_run(env, conductor, &array_key, array_yaml, rep, sheets)?;
                array_walls.push(a.wall);
                array_starts.push(a.to_start * 1000.0);
                array_owns.push(a.own / f64::from(sheets));
                array_kids.push(a.children / f64::from(sheets));
            }
            floors.push(floor);
            floor_starts.push(floor_start * 1000.0);
            walls.push(placed.wall);
            starts.push(placed.to_start * 1000.0);
            after_starts.push((placed.wall.as_secs_f64() - placed.to_start) * 1000.0);
            locals.push(local.wall);
            owns.push(placed.own / f64::from(sheets));
            kids.push(placed.children / f64::from(sheets));
            overheads.push(
                (placed.wall.as_secs_f64() - floor.as_secs_f64()) * 1000.0 / f64::from(sheets),
            );
        }
        let what = if sheets == 1 {
            "1 sheet".to_string()
        } else {
            format!("{sheets}-sheet fan-out")
        };
        let last = if sheets == 1 { "its" } else { "the last" };
        report.add(Row::ms(
            &format!("{key}_sbatch"),
            &format!("{what}: plain `sbatch` submit → all jobs ended (Slurm's own latency)"),
            median(floors),
            reps,
        ));
        report.add(Row::new(
            &format!("{key}_sbatch_start"),
            &format!("{what}: plain `sbatch` submit → {last} command starts"),
            median_f64(floor_starts),
            "ms",
            reps,
        ));
        report.add(Row::ms(
            &format!("{key}_mozart"),
            &format!("{what} placed on Slurm: submit → job completed"),
            median(walls),
            reps,
        ));
        report.add(Row::new(
            &format!("{key}_mozart_start"),
            &format!("{what} placed on Slurm: submit → {last} command starts in its job"),
            median_f64(starts),
            "ms",
            reps,
        ));
        report.add(Row::new(
            &format!("{key}_mozart_after_start"),
            &format!("{what} placed on Slurm: {last} command starts → job completed"),
            median_f64(after_starts),
            "ms",
            reps,
        ));
        if array_yaml.is_some() {
            report.add(Row::ms(
                &format!("{key}_array_mozart"),
                &format!("{what} placed on Slurm as one job array: submit → job completed"),
                median(array_walls),
                reps,
            ));
            report.add(Row::new(
                &format!("{key}_array_mozart_start"),
                &format!("{what} as one job array: submit → {last} command starts in its task"),
                median_f64(array_starts),
                "ms",
                reps,
            ));
            report.add(Row::new(
                &format!("{key}_array_cpu_per_sheet"),
                &format!("{what} as one job array: conductor's own CPU per remote sheet"),
                median_f64(array_owns),
                "ms",
                reps,
            ));
            report.add(Row::new(
                &format!("{key}_array_slurm_cmd_cpu_per_sheet"),
                &format!("{what} as one job array: CPU of its sbatch/scontrol/squeue per sheet"),
                median_f64(array_kids),
                "ms",
                reps,
            ));
        }
        report.add(Row::ms(
            &format!("{key}_local"),
            &format!("{what}, same score placed locally: submit → job completed"),
            median(locals),
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
