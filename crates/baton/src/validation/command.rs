//! `command_succeeds`: `bash -c` in its own process group, killed as a group on timeout
//! (architecture invariant 5).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;

pub(super) use super::CommandOutcome;
use super::{CommandRequest, RUN_COMMANDS};

/// Grace between SIGTERM and SIGKILL when a command times out.
const KILL_GRACE: Duration = Duration::from_millis(500);

/// Run a command check: by the conductor's [`super::CommandRunner`] when one is in scope,
/// else in its own process group here.
pub(super) async fn run_command(command: &str, cwd: &Path, timeout: Duration) -> CommandOutcome {
    if let Ok(runner) = RUN_COMMANDS.try_with(std::sync::Arc::clone) {
        return runner(CommandRequest {
            command: command.to_owned(),
            working_dir: cwd.to_path_buf(),
            timeout,
        })
        .await;
    }
    run_in_group(command, cwd, timeout).await
}

async fn run_in_group(command: &str, cwd: &Path, timeout: Duration) -> CommandOutcome {
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
                cut: false,
            }
        }
        Ok((Err(e), _, _)) => CommandOutcome::SpawnFailed(e),
        Err(_) => {
            if let Some(pgid) = pgid {
                // The whole group: `bash -c` children (e.g. `sleep`) must not outlive the check.
                let _ = killpg(pgid, Signal::SIGTERM);
                tokio::time::sleep(KILL_GRACE).await;
                let killed = killpg(pgid, Signal::SIGKILL).is_ok();
                return CommandOutcome::TimedOut { killed };
            }
            CommandOutcome::TimedOut { killed: false }
        }
    }
}

/// Combined output truncated to 500 characters plus a total count (§6.3). `cut`: `output`
/// is only the start of what the command printed.
pub(super) fn truncate_output(output: &str, cut: bool) -> String {
    let total = output.chars().count();
    if total <= 500 && !cut {
        output.to_owned()
    } else if cut {
        let head: String = output.chars().take(500).collect();
        format!("{head}\n... (more than {total} chars total)")
    } else {
        let head: String = output.chars().take(500).collect();
        format!("{head}\n... ({total} chars total)")
    }
}
