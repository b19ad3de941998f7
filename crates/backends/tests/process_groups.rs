//! Real child processes: cancellation, timeout and big outputs (architecture invariant 5).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use mozart_backends::process::group_alive;
use mozart_backends::{
    Backend, ExecutionRequest, ExitReason, FailureKind, InstrumentProfile, ProfileBackend,
};

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
    assert_eq!(result.error_type.map(FailureKind::as_str), Some("timeout"));
    // The message says it timed out; the command's stderr holds only what it printed.
    assert_eq!(
        result.error_message.as_deref(),
        Some("Timed out after 0.5s")
    );
    assert!(!result.stderr.contains("timed out"), "{}", result.stderr);
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
    req.output_log_base =
        Some(mozart_backends::output_log::LogBase::at(&dir.path().join("sheet-1")).unwrap());
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
    // `${VAR:-x}` takes the default when the variable is unset (ours; upstream's expander
    // left it verbatim).
    assert_eq!(result.stdout.trim(), format!("hello x {home}|score|unset"));

    let yaml = "name: ghost\ndisplay_name: Ghost\nkind: cli\ncli:\n  command:\n    executable: mozart-no-such-binary\n";
    let ghost =
        ProfileBackend::new(Arc::new(InstrumentProfile::from_yaml(yaml, "t").unwrap())).unwrap();
    let result = ghost
        .execute(request("x", dir.path(), Duration::from_secs(5)))
        .await;
    assert_eq!(
        (result.exit_code, result.error_type.map(FailureKind::as_str)),
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
    // Only what the RUN: lines print (here nothing): the instrument adds no words of its own.
    assert_eq!(r.stdout, "");
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

/// The variables of `env -0` output.
fn parse_env0(stdout: &[u8]) -> std::collections::BTreeMap<String, String> {
    stdout
        .split(|&b| b == 0)
        .filter(|entry| !entry.is_empty())
        .filter_map(|entry| {
            let text = String::from_utf8_lossy(entry);
            let (k, v) = text.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// Every instrument carries its attempt's tag (`MOZART_ATTEMPT=<our pid>.<n>`), by which
/// the processes it detaches are found (mozart_backends::descendants).
fn assert_attempt_tag(seen: &std::collections::BTreeMap<String, String>) {
    let tag = seen
        .get(mozart_backends::descendants::ATTEMPT_VAR)
        .map(String::as_str);
    let prefix = format!("{}.", std::process::id());
    assert!(
        tag.is_some_and(|t| t.starts_with(&prefix)),
        "attempt tag: {tag:?}"
    );
}

/// The instrument's environment is the conductor's, minus the nesting guard, plus the
/// profile's and the score's variables — on the first spawn of a backend and on later ones
/// (which reuse what the first worked out), with or without score variables.
#[tokio::test]
async fn the_childs_environment_is_the_conductors_with_the_profile_and_score_changes() {
    let dir = tempfile::tempdir().unwrap();
    let plain_yaml = "name: envdump\ndisplay_name: Env\nkind: cli\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n";
    let plain = ProfileBackend::new(Arc::new(
        InstrumentProfile::from_yaml(plain_yaml, "t").unwrap(),
    ))
    .unwrap();
    let mut expected: std::collections::BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k != "CLAUDECODE")
        .collect();
    for round in 0..2 {
        // `env -0` in the log file: the child's whole environment, byte for byte.
        let mut req = request("env -0 > env.out", dir.path(), Duration::from_secs(10));
        if round == 1 {
            req.env.push(("FROM_SCORE".into(), "a b".into()));
            expected.insert("FROM_SCORE".into(), "a b".into());
        }
        let result = plain.execute(req).await;
        assert!(result.success, "{:?}", result.error_message);
        let seen = parse_env0(&std::fs::read(dir.path().join("env.out")).unwrap());
        assert_attempt_tag(&seen);
        // `sh` itself may add PWD / SHLVL / `_`; everything else must match exactly.
        let seen: std::collections::BTreeMap<String, String> = seen
            .into_iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "PWD" | "SHLVL" | "_" | "OLDPWD" | mozart_backends::descendants::ATTEMPT_VAR
                )
            })
            .collect();
        let want: std::collections::BTreeMap<String, String> = expected
            .clone()
            .into_iter()
            .filter(|(k, _)| !matches!(k.as_str(), "PWD" | "SHLVL" | "_" | "OLDPWD"))
            .collect();
        assert_eq!(seen, want, "round {round}");
    }

    // A restricted profile: system variables plus the required ones, nothing else.
    let restricted_yaml = "name: envdump2\ndisplay_name: Env\nkind: cli\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n    required_env: [MOZART_TEST_NOT_SET]\n    env: {EXTRA: '$HOME/x'}\n";
    let restricted = ProfileBackend::new(Arc::new(
        InstrumentProfile::from_yaml(restricted_yaml, "t").unwrap(),
    ))
    .unwrap();
    for _ in 0..2 {
        let result = restricted
            .execute(request(
                "env -0 > env.out",
                dir.path(),
                Duration::from_secs(10),
            ))
            .await;
        assert!(result.success, "{:?}", result.error_message);
        let seen = parse_env0(&std::fs::read(dir.path().join("env.out")).unwrap());
        assert_attempt_tag(&seen);
        let mut want: std::collections::BTreeMap<String, String> =
            mozart_backends::env::SYSTEM_VARS
                .iter()
                .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
                .collect();
        let home = std::env::var("HOME").unwrap_or_else(|_| "$HOME".into());
        want.insert("EXTRA".into(), format!("{home}/x"));
        let seen: std::collections::BTreeMap<String, String> = seen
            .into_iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "PWD" | "SHLVL" | "_" | "OLDPWD" | mozart_backends::descendants::ATTEMPT_VAR
                )
            })
            .collect();
        want.retain(|k, _| !matches!(k.as_str(), "PWD" | "SHLVL" | "_" | "OLDPWD"));
        assert_eq!(seen, want);
    }
}

/// The start time a spawn reports is the one `/proc` has for the process (the in-flight
/// journal and the watchdog compare it with `/proc` later to recognise the group).
#[tokio::test]
async fn a_reported_start_time_is_the_one_proc_shows() {
    let dir = tempfile::tempdir().unwrap();
    let mut known = 0;
    for _ in 0..20 {
        let req = request("sleep 0.3", dir.path(), Duration::from_secs(10));
        let progress = Arc::clone(&req.progress);
        let run = tokio::spawn(async move { shell().execute(req).await });
        let pid = tokio::time::timeout(Duration::from_secs(5), progress.started_pid())
            .await
            .unwrap();
        let from_proc = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let rest = stat.rsplit_once(')')?.1.to_string();
                rest.split_whitespace().nth(19)?.parse::<u64>().ok()
            })
            .expect("the sleeping instrument is still there");
        if let Some(ticks) = progress.start_ticks() {
            assert_eq!(ticks, from_proc);
            known += 1;
        }
        assert!(run.await.unwrap().success);
        assert_eq!(
            progress.start_ticks(),
            None,
            "forgotten once the process ended"
        );
    }
    assert!(known > 0, "the spawn never knew the start time");
}

/// A program whose cached location vanished is looked up again; stdin is `/dev/null`.
#[tokio::test]
async fn a_stale_cached_program_path_is_looked_up_again() {
    use mozart_backends::process::{run_process, ProcessSpec};
    let mut spec = ProcessSpec::new("cat", Vec::new(), Duration::from_secs(10));
    spec.program_path = Some("/nonexistent/mozart/cat".into());
    let (outcome, _) = run_process(spec, Arc::new(mozart_backends::Progress::new()), None).await;
    assert!(outcome.spawn_error.is_none(), "{:?}", outcome.spawn_error);
    assert_eq!(
        outcome.exit_code,
        Some(0),
        "cat read end-of-file from /dev/null"
    );
    assert_eq!(outcome.stdout.total, 0);
}

/// A process the instrument forks with `CLONE_PARENT` is a child of the conductor's thread
/// that spawned the instrument, not of the instrument; once it leaves the group (`setsid`)
/// only its attempt tag ties it to the sheet. It still ends with the attempt (issue 21).
#[tokio::test]
async fn a_clone_parent_sibling_that_left_the_group_ends_with_the_attempt() {
    if mozart_backends::process::which("python3").is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 is needed to fork with CLONE_PARENT"
        );
        eprintln!("skipped: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // clone(CLONE_PARENT | SIGCHLD): the new process's parent is the instrument's parent.
    let script = r#"
import ctypes, os, sys
nr = {'x86_64': 56, 'aarch64': 220}[os.uname().machine]
pid = ctypes.CDLL(None, use_errno=True).syscall(nr, 0x8000 | 17, 0, 0, 0, 0)
if pid == 0:
    os.setsid()
    os.execvp('sleep', ['sleep', '300'])
print(pid)
sys.stdout.flush()
"#;
    // `exec`: python is the instrument itself, so its sibling is the conductor's child.
    let prompt = format!("exec python3 -c '{}'", script.replace('\'', "'\\''"));
    let req = request(&prompt, dir.path(), Duration::from_secs(30));
    let result = shell().execute(req).await;
    assert!(result.success, "{result:?}");
    let sibling: i32 = result.stdout.trim().parse().unwrap();
    assert!(sibling > 1);
    let parent = std::fs::read_to_string(format!("/proc/{sibling}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse::<u32>()
                .ok()
        });
    let alive = || {
        std::fs::read_to_string(format!("/proc/{sibling}/stat")).is_ok_and(|s| {
            let state = s
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start().chars().next());
            !matches!(state, Some(Some('Z' | 'X')))
        })
    };
    let ended = wait_until(Duration::from_secs(5), || !alive()).await;
    if !ended {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(sibling),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        ended,
        "the CLONE_PARENT sibling (parent {parent:?}, we are {}) outlived its attempt",
        std::process::id()
    );
}

/// The descriptors this test process has open without close-on-exec (a terminal's or a CI
/// runner's, inherited by every child whoever spawns it).
fn inherited_fds() -> Vec<i32> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd: &i32| {
            // `flags:` in /proc/self/fdinfo is octal; O_CLOEXEC is 02000000.
            std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
                .ok()
                .and_then(|info| {
                    let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?;
                    u32::from_str_radix(flags.trim(), 8).ok()
                })
                .is_some_and(|flags| flags & 0o2000000 == 0)
        })
        .collect()
}

/// An instrument starts as a process started from a shell would: no descriptor of the
/// conductor's beyond its three standard ones, no signal blocked or ignored (the conductor
/// ignores SIGPIPE itself: an instrument's `yes | head -n 1` must end quietly, not with
/// "Broken pipe"), leading its own process group, in the workspace, with one attempt tag —
/// the conductor's, even when the profile's environment names one (read from its
/// `/proc/<pid>/environ`, as the clean-up reads it: a shell's `env` shows one of two copies).
#[tokio::test]
async fn an_instrument_starts_with_a_clean_process_state() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "name: clean\ndisplay_name: Clean\nkind: cli\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n    env: {MOZART_ATTEMPT: stale.1}\n";
    let backend =
        ProfileBackend::new(Arc::new(InstrumentProfile::from_yaml(yaml, "t").unwrap())).unwrap();
    // `ls` reads the list through its own descriptor 3. The shell's own mask is read with
    // builtins alone: dash blocks every signal around each `vfork` it makes, so a `grep` of
    // `/proc/$$/status` can catch the shell inside that window.
    let script = "echo fds: $(ls /proc/self/fd); \
                  while read -r l; do case $l in SigBlk*|SigIgn*) echo \"$l\";; esac; \
                  done < /proc/$$/status; \
                  yes | head -n 1; \
                  echo pgid: $(cut -d' ' -f5 /proc/$$/stat) pid: $$; \
                  echo cwd: \"$(pwd -P)\"; \
                  cat /proc/$$/environ > env.out";
    let inherited = inherited_fds();
    for round in 0..2 {
        let result = backend
            .execute(request(script, dir.path(), Duration::from_secs(10)))
            .await;
        assert!(result.success, "{:?}", result.error_message);
        let lines: Vec<&str> = result.stdout.lines().collect();
        let extra: Vec<i32> = lines[0]
            .trim_start_matches("fds:")
            .split_whitespace()
            .map(|fd| fd.parse().unwrap())
            .filter(|fd| !(0..=3).contains(fd) && !inherited.contains(fd))
            .collect();
        assert!(extra.is_empty(), "round {round}: {}", result.stdout);
        assert!(lines[1].starts_with("SigBlk:"), "{}", result.stdout);
        assert_eq!(lines[1].split_whitespace().nth(1), Some("0000000000000000"));
        // No standard signal (1–31) ignored; glibc's `posix_spawn` leaves its two internal
        // ones (32, 33) ignored in every child it starts, std's included.
        let ignored = u64::from_str_radix(lines[2].split_whitespace().nth(1).unwrap(), 16);
        assert_eq!(ignored.unwrap() & 0x7fff_ffff, 0, "{}", lines[2]);
        assert_eq!(lines[3], "y");
        assert_eq!(result.stderr, "", "a broken pipe is reported");
        let ids: Vec<&str> = lines[4].split_whitespace().collect();
        assert_eq!(ids[1], ids[3], "not its own group leader: {}", lines[4]);
        let cwd = dir.path().canonicalize().unwrap();
        assert_eq!(lines[5], format!("cwd: {}", cwd.display()));
        let env = std::fs::read(dir.path().join("env.out")).unwrap();
        let tags: Vec<&[u8]> = env
            .split(|&b| b == 0)
            .filter(|e| e.starts_with(b"MOZART_ATTEMPT="))
            .collect();
        assert_eq!(tags.len(), 1, "{tags:?}");
        assert_attempt_tag(&parse_env0(&env));
    }
}
