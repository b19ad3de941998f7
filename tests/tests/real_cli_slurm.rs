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

/// Job `id`'s sheet really was submitted to Slurm (the placement was not ignored): its
/// workspace has the Slurm state directory the attempt's files were written under.
fn assert_placed(rc: &RealCliEnv, id: &str) {
    let state = rc.env.work.join(format!("{id}-ws/.mozart-slurm"));
    assert!(
        state.is_dir(),
        "the attempt ran on Slurm: no {}",
        state.display()
    );
}
