//! `command_succeeds`: `bash -c` in its own process group, killed as a group on timeout
//! (architecture invariant 5).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;

/// How a command check ended.
#[derive(Debug)]
pub(super) enum CommandOutcome {
    /// The command exited with this code (`None` when killed by a signal).
    Exited { code: Option<i32>, output: String },
    /// The timeout expired and the group was killed.
    TimedOut,
    /// The command could not be started.
    SpawnFailed(std::io::Error),
}

/// Grace between SIGTERM and SIGKILL when a command times out.
const KILL_GRACE: Duration = Duration::from_millis(500);

pub(super) async fn run_command(command: &str, cwd: &Path, timeout: Duration) -> CommandOutcome {
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return CommandOutcome::SpawnFailed(e),
    };
    let _watched = child.id().and_then(|pid| {
        super::WATCH_GROUPS
            .try_with(|watch| watch(pid, timeout))
            .ok()
    });
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let collect = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let read_out = async {
            if let Some(s) = stdout.as_mut() {
                let _ = s.read_to_end(&mut out).await;
            }
        };
        let read_err = async {
            if let Some(s) = stderr.as_mut() {
                let _ = s.read_to_end(&mut err).await;
            }
        };
        tokio::join!(read_out, read_err);
        let status = child.wait().await;
        (status, out, err)
    };
    match tokio::time::timeout(timeout, collect).await {
        Ok((Ok(status), out, err)) => {
            let mut output = String::from_utf8_lossy(&out).into_owned();
            output.push_str(&String::from_utf8_lossy(&err));
            CommandOutcome::Exited {
                code: status.code(),
                output,
            }
        }
        Ok((Err(e), _, _)) => CommandOutcome::SpawnFailed(e),
        Err(_) => {
            if let Some(pgid) = pgid {
                // The whole group: `bash -c` children (e.g. `sleep`) must not outlive the check.
                let _ = killpg(pgid, Signal::SIGTERM);
                tokio::time::sleep(KILL_GRACE).await;
                let _ = killpg(pgid, Signal::SIGKILL);
            }
            CommandOutcome::TimedOut
        }
    }
}

/// Combined output truncated to 500 characters plus a total count (§6.3).
pub(super) fn truncate_output(output: &str) -> String {
    let total = output.chars().count();
    if total <= 500 {
        output.to_owned()
    } else {
        let head: String = output.chars().take(500).collect();
        format!("{head}\n... ({total} chars total)")
    }
}
