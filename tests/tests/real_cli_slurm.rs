//! The real CLIs placed on Slurm (`placement: slurm`, issue 22): the conductor reads a
//! placed CLI's output as the Slurm job writes it, so a refused key or a rate limit stops the
//! job (`scancel`) within seconds, as it stops a local CLI, instead of leaving the CLI to
//! retry for minutes on the cluster. Each test skips with a printed reason when the CLI or
//! Slurm is missing (`tests/real-cli/setup.sh`, `tests/slurm/setup.sh`); with `CI` set it
//! fails instead.

use crate::slurm_placement::slurm_up;

use mozart_tests::real_cli::{RealCli, RealCliEnv, CLAUDE, CODEX, GEMINI};

/// The placement lines a [`RealCli`]'s scores get (after their `backend:` block).
const ON_SLURM: &str = "\nplacement: {type: slurm, poll_interval_seconds: 0.2}";

/// Claude Code as a new user runs it (no instrument named: `claude_cli`, stream-json; its
/// retry announcements are on stdout), placed on Slurm.
const CLAUDE_ON_SLURM: RealCli = RealCli {
    backend: ON_SLURM,
    ..CLAUDE
};

/// Gemini CLI (`gemini-cli`; its retry announcements are on stderr), placed on Slurm.
const GEMINI_ON_SLURM: RealCli = RealCli {
    backend: ON_SLURM,
    ..GEMINI
};

/// Codex (`codex-cli`; its retry announcements are JSONL events on stdout), placed on Slurm.
const CODEX_ON_SLURM: RealCli = RealCli {
    backend: ON_SLURM,
    ..CODEX
};

/// The CLI and the cluster, with the cluster held (shared) for the test; `None` (printed
/// why) when either is missing.
fn start(cli: &RealCli) -> Option<(mozart_tests::SlurmCluster, RealCliEnv)> {
    let cluster = mozart_tests::slurm_shared();
    if !slurm_up() {
        return None;
    }
    let rc = RealCliEnv::start(cli)?;
    Some((cluster, rc))
}

#[test]
fn a_placed_claude_with_a_refused_key_is_stopped_and_fails_as_auth() {
    let Some((_cluster, rc)) = start(&CLAUDE_ON_SLURM) else {
        return;
    };
    rc.check_bad_key_fails_fast(&CLAUDE_ON_SLURM);
    assert_placed(&rc, "rc-401");
}

#[test]
fn a_placed_claude_hitting_a_429_waits_it_out_without_spending_an_attempt() {
    let Some((_cluster, rc)) = start(&CLAUDE_ON_SLURM) else {
        return;
    };
    rc.check_rate_limit_waited_out(&CLAUDE_ON_SLURM, 4000);
    assert_placed(&rc, "rc-429");
}

#[test]
fn a_placed_gemini_with_a_refused_key_is_stopped_and_fails_as_auth() {
    let Some((_cluster, rc)) = start(&GEMINI_ON_SLURM) else {
        return;
    };
    rc.check_bad_key_fails_fast(&GEMINI_ON_SLURM);
    assert_placed(&rc, "rc-401");
}

#[test]
fn a_placed_gemini_hitting_a_429_waits_it_out_without_spending_an_attempt() {
    let Some((_cluster, rc)) = start(&GEMINI_ON_SLURM) else {
        return;
    };
    rc.check_rate_limit_waited_out(&GEMINI_ON_SLURM, 4000);
    assert_placed(&rc, "rc-429");
}

#[test]
fn a_placed_codex_with_a_refused_key_is_stopped_and_fails_as_auth() {
    let Some((_cluster, rc)) = start(&CODEX_ON_SLURM) else {
        return;
    };
    rc.check_bad_key_fails_fast(&CODEX_ON_SLURM);
    assert_placed(&rc, "rc-401");
}

/// Job `id`'s sheet really was submitted to Slurm (the placement was not ignored): Slurm's
/// accounting (the test cluster keeps one) lists a job of ours that ran in its workspace.
/// (Its attempt files in the workspace's `.mozart-slurm` are gone once the job ends.)
fn assert_placed(rc: &RealCliEnv, id: &str) {
    let ws = rc.env.work.join(format!("{id}-ws"));
    let ws = ws.display().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let out = std::process::Command::new("sacct")
            .args([
                "-n",
                "-X",
                "-P",
                "-S",
                "now-2hours",
                "-o",
                "JobName,WorkDir",
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let placed = out.lines().any(|l| {
            l.split_once('|')
                .is_some_and(|(name, dir)| name.starts_with("mozart-") && dir.trim() == ws)
        });
        if placed {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the attempt ran on Slurm: Slurm's accounting has no job of ours in {ws}:\n{out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}
