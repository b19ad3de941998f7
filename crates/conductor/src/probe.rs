//! Cheap resource probes for `daemon.status` / `daemon.ready` (sysinfo).

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System, UpdateKind};

/// Resident memory of `pid` in MB, rounded to one decimal; 0.0 if the probe fails (§8.13).
pub fn rss_mb(pid: u32) -> f64 {
    let mut system = System::new();
    let pid = Pid::from_u32(pid);
    system.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[pid]),
        true,
        ProcessRefreshKind::nothing().with_memory(),
    );
    system
        .process(pid)
        .map(|p| round1(p.memory() as f64 / (1024.0 * 1024.0)))
        .unwrap_or(0.0)
}

/// Live direct children of `pid`.
pub fn child_count(pid: u32) -> u64 {
    let mut system = System::new();
    system.refresh_processes_specifics(
        ProcessesToUpdate::All,
        true,
        ProcessRefreshKind::nothing().with_exe(UpdateKind::Never),
    );
    let me = Pid::from_u32(pid);
    system
        .processes()
        .values()
        // sysinfo lists threads as tasks too; only real child processes count.
        .filter(|p| p.parent() == Some(me) && p.thread_kind().is_none())
        .count() as u64
}

/// Round to one decimal, as upstream reports floats.
pub fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

/// Below this much free space in the conductor's home, new jobs are refused.
pub const MIN_FREE_BYTES: u64 = 512 * 1024;

/// Bytes an unprivileged writer can still use on `dir`'s filesystem (`None` if unknown).
// The statvfs field types are u64 here but narrower on other targets.
#[allow(clippy::useless_conversion)]
pub fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    let stat = nix::sys::statvfs::statvfs(dir).ok()?;
    Some(u64::from(stat.blocks_available()).saturating_mul(u64::from(stat.fragment_size())))
}

/// Why new jobs are refused for lack of space in `home`, or `None` while there is room.
pub fn disk_full(home: &std::path::Path) -> Option<String> {
    let free = free_bytes(home).filter(|free| *free < MIN_FREE_BYTES)?;
    Some(format!(
        "the disk is full ({} has {} KiB free): new jobs are refused until space is freed",
        home.display(),
        free / 1024
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_memory_is_measured() {
        assert!(rss_mb(std::process::id()) > 0.0);
    }
}
