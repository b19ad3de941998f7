//! The real-CLI row of `mozart-bench` (issue 13; docs/performance.md "Real Claude Code"):
//! one sheet through the real `claude` (installed by tests/real-cli/setup.sh) under the
//! conductor, against the local mock API, versus the same `claude -p` call made directly.
//! The conductor's cost per sheet (submit, prompt, spawn, parse, validation, checkpoint) is
//! the job's submit → completed time minus the lifetime of the `claude` process it ran, both
//! measured in the same run: `claude` is reached through a small wrapper that notes when the
//! process started and ended. The bar is 5 % of the CLI's own (direct) time. The difference
//! of the two medians is reported too; it carries the CLI's own run-to-run spread (±20 %
//! between two identical calls on a 2-core machine), which hides a 5 % bar.

use super::*;
use mozart_tests::mock_api::MockApi;

/// The installed `claude`, next to the target directory of this executable.
fn real_claude() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("MOZART_REAL_CLI_DIR") {
        return Some(PathBuf::from(dir).join("claude")).filter(|p| p.exists());
    }
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/mozart-bench → target/real-cli/node_modules/.bin/claude
    let path = exe
        .parent()?
        .parent()?
        .join("real-cli/node_modules/.bin/claude");
    path.exists().then_some(path)
}

/// The environment `claude` needs to run offline against the mock (§11 of the spec).
fn claude_env(mock: &MockApi, home: &Path) -> Vec<(String, String)> {
    [
        ("HOME", home.display().to_string()),
        ("ANTHROPIC_BASE_URL", mock.base_url()),
        ("ANTHROPIC_API_KEY", "sk-mock".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("IS_SANDBOX", "1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn prompt(dir: &Path) -> String {
    format!(
        "Write the file. mock-scenario:write mock-file:{}/out-1.txt\n",
        dir.display()
    )
}

/// A `claude` on PATH that runs the real one and appends `start end` (epoch seconds, µs
/// resolution; bash's own clock, no extra process) to `log`: the process's own lifetime.
fn write_timing_wrapper(path: &Path, claude: &Path, log: &Path) -> Result<()> {
    let script = format!(
        "#!/bin/bash\nstart=$EPOCHREALTIME\n'{}' \"$@\"\nrc=$?\necho \"$start $EPOCHREALTIME\" >> '{}'\nexit $rc\n",
        claude.display(),
        log.display()
    );
    write_file(path, &script)?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(io_err("making executable", path))
}

/// The lifetime of the last `claude` process the wrapper saw.
fn last_lifetime(log: &Path) -> Result<Duration> {
    let text = std::fs::read_to_string(log).map_err(io_err("reading", log))?;
    let secs = text.lines().last().and_then(|l| {
        let mut it = l
            .split_whitespace()
            .map(|t| t.replace(',', ".").parse::<f64>());
        match (it.next(), it.next()) {
            (Some(Ok(a)), Some(Ok(b))) if b >= a => Some(b - a),
            _ => None,
        }
    });
    secs.map(Duration::from_secs_f64)
        .ok_or_else(|| BenchError::JobFailed {
            job: "claude wrapper".into(),
            status: "no lifetime recorded".into(),
            workspace: log.to_path_buf(),
        })
}

/// The floor: the same call the conductor makes (claude_cli, stream-json), made directly.
fn direct(claude: &Path, vars: &[(String, String)], dir: &Path) -> Result<Duration> {
    std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
    let started = Instant::now();
    let mut child = Command::new(claude)
        .args([
            "-p",
            "--dangerously-skip-permissions",
            "--output-format",
            "stream-json",
            "--verbose",
            "--strict-mcp-config",
            "--mcp-config",
            r#"{"mcpServers":{}}"#,
        ])
        .current_dir(dir)
        .envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(io_err("running", claude))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(prompt(dir).as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(io_err("waiting for", claude))?;
    let wall = started.elapsed();
    if !out.status.success() || !dir.join("out-1.txt").exists() {
        return Err(BenchError::JobFailed {
            job: "claude -p (direct)".into(),
            status: format!("{} / file missing", out.status),
            workspace: dir.to_path_buf(),
        });
    }
    Ok(wall)
}

/// One 1-sheet score through the conductor: `job.submit` → `completed`, polled every 10 ms
/// (a finer poll of a ~1 s sheet only loads the conductor being measured).
fn through_conductor(env: &Env, rep: usize) -> Result<Duration> {
    let job = format!("bench-claude-{rep}");
    let ws = env.work.join(format!("{job}-ws"));
    let score = env.work.join(format!("{job}.yaml"));
    let yaml = format!(
        "name: {job}\nworkspace: {ws}\ninstrument: claude_cli\nbackend:\n  output_format: stream-json\n  timeout_seconds: 120\npause_between_sheets_seconds: 0\nsheet: {{size: 1, total_items: 1}}\nprompt:\n  template: \"Write the file. mock-scenario:write mock-file:{{{{ workspace }}}}/out-1.txt\"\nvalidations:\n  - type: file_exists\n    path: \"{{workspace}}/out-1.txt\"\n",
        ws = ws.display()
    );
    write_file(&score, &yaml)?;
    let mut client = BlockingClient::connect(&env.socket).map_err(|source| BenchError::Ipc {
        method: methods::JOB_SUBMIT,
        source,
    })?;
    let (wall, status) = submit_and_wait(&mut client, &score, &job, Duration::from_millis(10))?;
    if status != "completed" {
        return Err(BenchError::JobFailed {
            job,
            status,
            workspace: ws,
        });
    }
    Ok(wall)
}

/// The rows, when the real `claude` is installed.
pub(super) fn real_cli_rows(mozart: &MozartExe, reps: usize, report: &mut Report) -> Result<()> {
    let Some(claude) = real_claude() else {
        progress("real Claude Code row skipped: claude is not installed (tests/real-cli/setup.sh)");
        return Ok(());
    };
    let mock =
        MockApi::start().map_err(io_err("starting the mock API on", Path::new("127.0.0.1")))?;
    let env = Env::new(mozart)?;
    let home = env.work.join("claude-home");
    std::fs::create_dir_all(&home).map_err(io_err("creating", &home))?;
    let vars = claude_env(&mock, &home);
    let wrapper = env.bin.join("claude");
    let lifetimes = env.work.join("claude-lifetimes.txt");
    let _ = std::fs::remove_file(&wrapper);
    write_timing_wrapper(&wrapper, &claude, &lifetimes)?;
    let conductor = Conductor::start_with(&env, &vars)?;
    // One unmeasured run each: the first start of the 400 MB binary reads it from disk.
    direct(&wrapper, &vars, &env.work.join("direct-warm"))?;
    through_conductor(&env, 0)?;
    progress(&format!(
        "1 sheet on the real claude ×{reps}, interleaved with `claude -p` run directly"
    ));
    let (mut floors, mut walls, mut costs) = (Vec::new(), Vec::new(), Vec::new());
    let (mut lives_direct, mut lives_under) = (Vec::new(), Vec::new());
    for rep in 1..=reps {
        let floor = direct(&wrapper, &vars, &env.work.join(format!("direct-{rep}")))?;
        lives_direct.push(last_lifetime(&lifetimes)?);
        let wall = through_conductor(&env, rep)?;
        let cli_own = last_lifetime(&lifetimes)?;
        lives_under.push(cli_own);
        costs.push((wall.as_secs_f64() - cli_own.as_secs_f64()) * 1000.0);
        floors.push(floor);
        walls.push(wall);
    }
    conductor.stop(&env)?;
    let floor = median(floors);
    let floor_ms = floor.as_secs_f64() * 1000.0;
    let wall = median(walls);
    let cost = median_f64(costs);
    let (life_direct, life_under) = (median(lives_direct), median(lives_under));
    for (key, what, value) in [
        (
            "real_claude_direct",
            "real `claude -p` (2 API turns, writes a file) run directly, mock API",
            floor,
        ),
        (
            "real_claude_mozart",
            "the same sheet through the conductor: submit → completed",
            wall,
        ),
        (
            "real_claude_life_direct",
            "the claude process's own lifetime, run directly (median)",
            life_direct,
        ),
        (
            "real_claude_life_under",
            "the claude process's own lifetime, run by the conductor (median)",
            life_under,
        ),
    ] {
        report.add(Row::ms(key, what, value, reps));
    }
    report.add(Row::new(
        "real_claude_conductor_ms",
        "conductor's own time per real-claude sheet (submit → completed minus the claude process's lifetime, same run)",
        cost,
        "ms",
        reps,
    ));
    report.add(
        Row::new(
            "real_claude_overhead_pct",
            "conductor's added cost per real-claude sheet, % of the CLI's own time",
            cost / floor_ms * 100.0,
            "%",
            reps,
        )
        .bar_below(5.0),
    );
    report.add(Row::new(
        "real_claude_median_diff_pct",
        "difference of the medians (through the conductor − direct), % (includes the CLI's run-to-run spread)",
        (wall.as_secs_f64() * 1000.0 - floor_ms) / floor_ms * 100.0,
        "%",
        reps,
    ));
    Ok(())
}
