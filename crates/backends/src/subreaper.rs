//! The conductor as the child subreaper of everything its instruments start (issue 21: no
//! process outlives its sheet).
//!
//! With `PR_SET_CHILD_SUBREAPER`, a process whose parent dies is re-parented to the
//! conductor instead of init: a daemon an instrument starts with `setsid cmd &`, a double
//! fork or `nohup cmd &` stays a descendant of the conductor, where the attempt's clean-up
//! finds it by its tag ([`crate::descendants`]). A subreaper must also reap what it adopts,
//! or the adopted processes stay zombies for the conductor's life.
//!
//! Reaping must not take the exit status of a child the conductor spawned itself: tokio and
//! std wait for their own children by pid, and a status taken from under them would turn an
//! instrument's exit code into an error. So there is no `waitpid(-1)`: on every SIGCHLD the
//! conductor's zombie children are looked at one by one, and only those it cannot have
//! spawned are reaped, by pid. Every child the conductor spawns keeps the conductor's
//! session and is either in the conductor's process group or leads its own
//! (`process_group(0)`: instruments, hooks, validation commands, the watchdog), and none
//! calls `setsid()` or `setpgid()` in place. So a zombie child is reaped when
//!
//! - it is in another session (it or an ancestor called `setsid`), or
//! - it is in a process group it does not lead that is not the conductor's (it was forked
//!   inside an instrument's group, and its parent died), or
//! - it was seen alive carrying the tag of a running attempt without being that attempt's
//!   instrument (a job-control shell's background job leads its own group in our session,
//!   like a spawned child; its tag tells it apart).
//!
//! Two kinds stay zombies until the conductor exits (harmless: a zombie holds a pid, no
//! memory): a process of the last kind that ends before the conductor ever saw it alive,
//! and a daemon that a tool the conductor runs itself (git, gh) leaves behind in the
//! conductor's own process group without a session of its own.

use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::{getpgrp, getsid, Pid};
use tokio::signal::unix::{signal, SignalKind};

use crate::descendants::{
    adopted, child_tag, forget_children_except, me, read_stat, registered_root, spawned_child,
    Stat, Tree,
};

/// Pause after a SIGCHLD before looking at the children, so a burst of exits costs one look.
const REAP_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// Whether a zombie direct child with `stat` was adopted rather than spawned by a conductor
/// in session `our_sid` and process group `our_pgid` (see the module documentation).
fn adopted_by_ids(stat: &Stat, our_sid: i32, our_pgid: i32) -> bool {
    stat.sid != our_sid || (stat.pgid != stat.pid && stat.pgid != our_pgid)
}

/// Make this process the child subreaper of its descendants; false (logged) where the
/// kernel refuses.
pub fn become_subreaper() -> bool {
    match nix::sys::prctl::set_child_subreaper(true) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "cannot become the child subreaper: processes an instrument detaches (setsid, double fork) may outlive their sheet");
            false
        }
    }
}

/// Reap every adopted child that has ended, and note the adopted children still alive that
/// look like spawned ones; returns how many were reaped.
pub fn reap_adopted() -> usize {
    let (Ok(sid), pgid) = (getsid(None), getpgrp()) else {
        return 0;
    };
    let (sid, pgid) = (sid.as_raw(), pgid.as_raw());
    let children = Tree::new().children(me());
    let mut reaped = Vec::new();
    for &pid in &children {
        // An instrument we spawned and have not reaped is never adopted, alive or a zombie
        // (its waiter reaps it): no `/proc` read for the ones in flight.
        if spawned_child(pid) {
            continue;
        }
        let Some(stat) = read_stat(pid) else { continue };
        if !stat.zombie {
            // A group leader in our session: adopted only if it carries the tag of a running
            // attempt whose instrument it is not. (An attempt not registered yet may be the
            // one just spawned: left alone.)
            if stat.pgid == pid && stat.sid == sid && !adopted().contains(&(pid, stat.start)) {
                let tag_root = child_tag(pid)
                    .and_then(|(_, tag)| tag)
                    .and_then(|t| registered_root(&t));
                if let Some(root) = tag_root {
                    if root != Some(pid) {
                        adopted().insert((pid, stat.start));
                    }
                }
            }
            continue;
        }
        let noted = adopted().remove(&(pid, stat.start));
        if noted || adopted_by_ids(&stat, sid, pgid) {
            // By pid, not -1: only this zombie's status is taken.
            if waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)).is_ok() {
                reaped.push(pid);
            }
        }
    }
    // Forget what is no longer our child (reaped now, or gone another way).
    let still: Vec<i32> = children
        .into_iter()
        .filter(|p| !reaped.contains(p))
        .collect();
    adopted().retain(|(pid, _)| still.contains(pid));
    forget_children_except(&still);
    reaped.len()
}

/// Become the subreaper and reap adopted children as they end (a task on the current
/// runtime, woken by SIGCHLD). Call once, at daemon start, before any instrument runs.
pub fn install() {
    if !become_subreaper() {
        return;
    }
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGCHLD: adopted processes stay zombies until the conductor exits");
            return;
        }
    };
    tokio::spawn(async move {
        while sigchld.recv().await.is_some() {
            // One look per burst of exits (instruments end by the hundred per second in a
            // busy conductor): the signals of the pause are taken by the next `recv`.
            tokio::time::sleep(REAP_PAUSE).await;
            // Off the async workers: a look at /proc per wake-up.
            let reaped = tokio::task::spawn_blocking(reap_adopted).await.unwrap_or(0);
            if reaped > 0 {
                tracing::debug!(reaped, "reaped adopted processes");
            }
        }
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_children_we_cannot_have_spawned_count_as_adopted_by_ids() {
        let (sid, pgid) = (100, 100);
        let stat = |pgid, sid| Stat {
            pid: 200,
            zombie: true,
            pgid,
            sid,
            start: 1,
        };
        // Spawned into our group, or leading its own (process_group(0)): ours.
        assert!(!adopted_by_ids(&stat(100, 100), sid, pgid));
        assert!(!adopted_by_ids(&stat(200, 100), sid, pgid));
        // setsid: another session.
        assert!(adopted_by_ids(&stat(200, 200), sid, pgid));
        // Forked inside an instrument's group (300), its parent gone.
        assert!(adopted_by_ids(&stat(300, 100), sid, pgid));
    }

    /// A zombie's `/proc` entry keeps its group and session, what the reaper decides on;
    /// and a zombie we spawned is left to whoever waits for it.
    #[test]
    fn a_spawned_zombie_is_left_to_its_waiter() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let stat = loop {
            let stat = read_stat(pid).unwrap();
            if stat.zombie {
                break stat;
            }
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(stat.pgid, getpgrp().as_raw());
        assert_eq!(stat.sid, getsid(None).unwrap().as_raw());
        assert!(Tree::new().children(me()).contains(&pid));
        reap_adopted();
        assert!(child.wait().unwrap().success(), "its status is still there");
    }
}
