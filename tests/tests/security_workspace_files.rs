//! Files Mozart writes or reads in a workspace another local user can write
//! (docs/security.md "Files"): what is there, or swapped in while a job runs — a symbolic
//! link, another user's directory, a FIFO — never has Mozart write through it, delete
//! through it, or wait on it.

use crate::harness;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use mozart_tests::{stdout, TestEnv};

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The sheet's `logs` directory is checked when its attempt starts; while the sheet runs, it
/// is swapped for a link to a directory whose `sheet-01.stdout.log` links to a file of the
/// owner's (what another user who can write the workspace can do). The owner's file keeps
/// its text and its mode, and the output goes to the directory that was checked.
#[test]
fn a_logs_directory_swapped_for_a_link_while_the_sheet_runs_gets_nothing_through_it() {
    let env = TestEnv::new();
    env.start_conductor();
    let ws = env.work.join("swap-ws");
    let victim = env.work.join("victim.conf");
    std::fs::write(&victim, "precious = true\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let w = ws.display();
    // The sheet says when it runs, waits for the swap, and prints after the log-free window
    // (a second), so its output goes to a log file.
    let yaml = format!(
        "name: swap\nworkspace: {w}\ninstrument: shell\nsheet: {{size: 1, total_items: 1}}\n\
         prompt:\n  template: \"RUN: touch {w}/started; while [ ! -e {w}/go ]; do sleep 0.1; done; \
         sleep 2; echo INSTRUMENT OUTPUT\"\n"
    );
    let score = env.write_score("swap", &yaml);
    let out = env.mozart(&["run", score.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    harness::poll(&env, 60.0, "the sheet to start", || {
        ws.join("started").exists().then_some(())
    });
    std::fs::rename(ws.join("logs"), ws.join("logs.real")).unwrap();
    std::fs::create_dir(ws.join("evil")).unwrap();
    std::os::unix::fs::symlink(&victim, ws.join("evil/sheet-01.stdout.log")).unwrap();
    std::os::unix::fs::symlink(ws.join("evil"), ws.join("logs")).unwrap();
    std::fs::write(ws.join("go"), "").unwrap();
    env.wait_completed("swap");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious = true\n",
        "the sheet's output was written through the link"
    );
    assert_eq!(mode(&victim), 0o644, "the link's target was made private");
    let log = ws.join("logs.real/sheet-01.stdout.log");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    assert!(
        text.starts_with("INSTRUMENT OUTPUT\n"),
        "the output is not in the directory that was checked: {text:?}"
    );
    assert_eq!(mode(&log), 0o600);
}
