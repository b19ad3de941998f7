//! `mozart dashboard` in a real browser: a real conductor runs a slow score while headless
//! Debian chromium (driven by npm's playwright-core, tests/web/browser.mjs) watches the jobs
//! list update live, pauses, resumes and (after its confirmation) cancels the job from its
//! page, and uses the validator, with nothing blocked by the pages' Content-Security-Policy.
//! Screenshots land in `target/tmp/web-dashboard/`. Skips when chromium or playwright-core
//! is absent (tests/web/setup.sh installs them).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mozart_tests::{sleepy_shell_score, TestEnv};

/// A child killed when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn web_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web")
}

fn missing_tools() -> Option<String> {
    if !std::path::Path::new("/usr/bin/chromium").exists() {
        return Some("chromium is not installed (tests/web/setup.sh installs it)".into());
    }
    if !web_dir()
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        return Some("playwright-core is not installed (run tests/web/setup.sh)".into());
    }
    if Command::new("node").arg("--version").output().is_err() {
        return Some("node is not installed".into());
    }
    None
}

/// Lines of a child's stdout, on a channel.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Wait for a line starting with one of `wanted`, collecting everything seen.
fn wait_for(
    rx: &mpsc::Receiver<String>,
    wanted: &[&str],
    seen: &mut Vec<String>,
    limit: Duration,
) -> Option<String> {
    let deadline = Instant::now() + limit;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                seen.push(line.clone());
                if wanted.iter().any(|w| line.starts_with(w)) {
                    return Some(line);
                }
            }
            Err(_) => return None,
        }
    }
    None
}

#[test]
fn the_dashboard_updates_live_and_pauses_and_resumes_a_job_in_a_real_browser() {
    if let Some(why) = missing_tools() {
        mozart_tests::users::missing(&why, "run tests/web/setup.sh");
        return;
    }
    let env = TestEnv::new();
    env.start_conductor();

    let mut dashboard = env.command(&["dashboard", "--port", "0"]);
    dashboard.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut dashboard = Reaped(dashboard.spawn().expect("start mozart dashboard"));
    let dash_lines = lines_of(&mut dashboard.0);
    let mut seen = Vec::new();
    let line = wait_for(
        &dash_lines,
        &["Mozart dashboard: "],
        &mut seen,
        Duration::from_secs(30),
    )
    .unwrap_or_else(|| panic!("the dashboard printed no URL: {seen:?}"));
    let url = line
        .trim_start_matches("Mozart dashboard: ")
        .trim()
        .to_string();

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-dashboard");
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    let mut browser = Command::new("node");
    browser
        .arg(web_dir().join("browser.mjs"))
        .args([url.as_str(), "live", &shots.display().to_string()])
        .current_dir(web_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut browser = Reaped(browser.spawn().expect("start node"));
    let browser_lines = lines_of(&mut browser.0);
    let mut log = Vec::new();
    assert!(
        wait_for(
            &browser_lines,
            &["READY", "FAIL"],
            &mut log,
            Duration::from_secs(90)
        )
        .is_some_and(|l| l == "READY"),
        "the browser did not open the jobs page: {log:#?}"
    );

    // Submitted only now: the open page must show it without a reload.
    let score = env.write_score("live", &sleepy_shell_score("live", 6, 1.5));
    let out = env.mozart(&["run", &score.display().to_string()]);
    assert!(out.status.success(), "mozart run: {out:?}");

    let end = wait_for(
        &browser_lines,
        &["OK", "FAIL"],
        &mut log,
        Duration::from_secs(150),
    );
    println!("{}", log.join("\n"));
    assert_eq!(
        end.as_deref(),
        Some("OK"),
        "browser run failed:\n{}",
        log.join("\n")
    );
    for name in ["jobs.png", "job.png", "validate.png", "learning.png"] {
        let size = std::fs::metadata(shots.join(name))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(size > 10_000, "{name} is missing or empty ({size} bytes)");
    }
    println!("screenshots: {}", shots.display());
    let _ = env.mozart(&["cancel", "live"]);
}
