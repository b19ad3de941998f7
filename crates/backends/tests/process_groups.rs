//! Real child processes: cancellation, timeout and big outputs (architecture invariant 5).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use mozart_backends::process::group_alive;
use mozart_backends::{Backend, ExecutionRequest, ExitReason, InstrumentProfile, ProfileBackend};

/// `sh -c <prompt>` as an instrument.
fn shell() -> ProfileBackend {
    let yaml = "name: shell\ndisplay_name: Shell\nkind: cli\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n    env: {GREETING: 'hello ${USER_FOR_TEST:-x} $HOME'}\n";
    ProfileBackend::new(Arc::new(
        InstrumentProfile::from_yaml(yaml, "test").unwrap(),
    ))
    .unwrap()
}

fn request(prompt: &str, dir: &std::path::Path, timeout: Duration) -> ExecutionRequest {
    let mut req = ExecutionRequest::new(prompt, dir, timeout);
    req.kill_grace = Duration::from_secs(1);
    req
}

async fn wait_until(deadline: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

#[tokio::test]
async fn cancelling_an_execution_kills_its_grandchildren() {
    let dir = tempfile::tempdir().unwrap();
    let backend = shell();
    // A grandchild that ignores nothing and would outlive its parent for 5 minutes.
    let req = request(
        "sleep 300 & echo started > started; sleep 300",
        dir.path(),
        Duration::from_secs(60),
    );
    let progress = Arc::clone(&req.progress);
    let fut = backend.execute(req);
    let started = dir.path().join("started");
    let cancelled = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::pin!(fut);
        tokio::select! {
            _ = &mut fut => panic!("the shell should not finish"),
            _ = wait_until(Duration::from_secs(9), || started.exists()) => {}
        }
        let pgid = progress.pid().expect("pid while running") as i32;
        assert!(group_alive(pgid));
        pgid
    })
    .await
    .unwrap();
    // The future was dropped above: the guard sends SIGTERM, then SIGKILL after the grace.
    assert!(
        wait_until(Duration::from_secs(5), || !group_alive(cancelled)).await,
        "process group {cancelled} survived cancellation"
    );
}

#[tokio::test]
async fn timeout_terminates_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let begun = Instant::now();
    let req = request(
        "sleep 300 & trap '' TERM; sleep 300",
        dir.path(),
        Duration::from_millis(500),
    );
    let progress = Arc::clone(&req.progress);
    let result = shell().execute(req).await;
    assert!(result.timed_out && !result.success);
    assert_eq!(result.exit_reason, ExitReason::Timeout);
    assert_eq!(result.error_type.as_deref(), Some("timeout"));
    assert!(
        result.stderr.contains("Command timed out after 0.5s"),
        "{}",
        result.stderr
    );
    // The shell ignores SIGTERM, so SIGKILL had to follow.
    assert_eq!(result.exit_signal, Some(9));
    assert!(
        begun.elapsed() < Duration::from_secs(6),
        "took {:?}",
        begun.elapsed()
    );
    assert!(progress.pid().is_none());
    let c = mozart_backends::classify(&result);
    assert_eq!(c.code, mozart_backends::ErrorCode::E001);
}

#[tokio::test]
async fn hundred_megabytes_are_counted_with_a_bounded_tail_and_teed_to_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut req = request(
        "head -c 104857600 /dev/zero | tr '\\0' a; printf END; head -c 5000000 /dev/zero | tr '\\0' e >&2",
        dir.path(),
        Duration::from_secs(120),
    );
    req.output_log_base = Some(dir.path().join("sheet-1"));
    let progress = Arc::clone(&req.progress);
    let result = shell().execute(req).await;
    assert!(result.success, "{result:?}");
    assert_eq!(result.stdout_bytes, 104_857_603);
    assert_eq!(result.stderr_bytes, 5_000_000);
    assert!(result.stdout.len() <= mozart_backends::process::TAIL_BYTES);
    assert!(result.stdout.ends_with("aaaEND"));
    assert_eq!(progress.bytes_seen(), 109_857_603);
    let log = std::fs::metadata(dir.path().join("sheet-1.stdout.log")).unwrap();
    assert_eq!(log.len(), 104_857_603);
}

#[tokio::test]
async fn leftover_group_members_are_reaped_after_a_normal_exit() {
    let dir = tempfile::tempdir().unwrap();
    let req = request("sleep 300 & echo $$", dir.path(), Duration::from_secs(30));
    let begun = Instant::now();
    let result = shell().execute(req).await;
    assert!(result.success);
    // The shell is the group leader: its pid is the group id.
    let pgid: i32 = result.stdout.trim().parse().unwrap();
    assert!(!group_alive(pgid), "the background sleep survived");
    assert!(begun.elapsed() < Duration::from_secs(8));
}

#[tokio::test]
async fn environment_and_spawn_failures() {
    let dir = tempfile::tempdir().unwrap();
    let mut req = request(
        "echo \"$GREETING|$FROM_SCORE|${CLAUDECODE:-unset}\"",
        dir.path(),
        Duration::from_secs(10),
    );
    req.env.push(("FROM_SCORE".into(), "score".into()));
    let result = shell().execute(req).await;
    let home = std::env::var("HOME").unwrap_or_default();
    // `${VAR:-x}` is not shell syntax for the profile expander: it stays verbatim.
    assert_eq!(
        result.stdout.trim(),
        format!("hello ${{USER_FOR_TEST:-x}} {home}|score|unset")
    );

    let yaml = "name: ghost\ndisplay_name: Ghost\nkind: cli\ncli:\n  command:\n    executable: mozart-no-such-binary\n";
    let ghost =
        ProfileBackend::new(Arc::new(InstrumentProfile::from_yaml(yaml, "t").unwrap())).unwrap();
    let result = ghost
        .execute(request("x", dir.path(), Duration::from_secs(5)))
        .await;
    assert_eq!(
        (result.exit_code, result.error_type.as_deref()),
        (Some(127), Some("not_found"))
    );
    assert_eq!(result.exit_reason, ExitReason::Error);
    assert!(!ghost.health_check().await.ready);
    assert_eq!(
        mozart_backends::classify(&result).code,
        mozart_backends::ErrorCode::E505
    );
}

#[tokio::test]
async fn builtin_shell_instrument_runs_only_the_run_lines() {
    let dir = tempfile::tempdir().unwrap();
    let reg = mozart_backends::InstrumentRegistry::builtin().unwrap();
    let shell = reg.backend("shell").unwrap();
    let prompt =
        "Write a greeting.\nRUN: mkdir -p out\nRUN: echo \"hi $1\" > out/greeting.txt\nThen stop.";
    let r = shell
        .execute(request(prompt, dir.path(), Duration::from_secs(10)))
        .await;
    assert!(r.success, "{r:?}");
    assert_eq!(r.stdout.trim(), "shell: ok");
    // `$1` inside a RUN line belongs to the inner script, not the prompt.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out/greeting.txt")).unwrap(),
        "hi \n"
    );

    let r = shell
        .execute(request(
            "RUN: echo partial > p.txt\nRUN: exit 3\nRUN: echo never > n.txt",
            dir.path(),
            Duration::from_secs(10),
        ))
        .await;
    assert!(!r.success);
    assert_eq!(r.exit_code, Some(3));
    assert!(dir.path().join("p.txt").exists() && !dir.path().join("n.txt").exists());
}
