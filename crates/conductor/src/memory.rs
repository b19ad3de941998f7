//! Giving freed heap memory back to the system between jobs.
//!
//! A conductor runs for days. After a large job ends, glibc keeps the pages its allocations
//! used (freed chunks spread through its arenas are not returned on their own), so the
//! resident size stays at the job's peak and the next job grows it further. `malloc_trim`
//! hands every wholly free page back; the next job starts from what is really in use.

use std::time::Duration;

/// How long after a job ends the heap is trimmed: the learning writer and the status
/// readers are done with the job's data by then.
const SETTLE: Duration = Duration::from_millis(500);

/// Trim the heap a moment from now, off the runtime's worker threads.
pub fn trim_after_job() {
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    tokio::spawn(async {
        tokio::time::sleep(SETTLE).await;
        let _ = tokio::task::spawn_blocking(trim).await;
    });
}

/// Return wholly free heap pages to the system (glibc only; elsewhere the allocator's own
/// policy stands).
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers and only reorganises glibc's own free lists;
    // it is safe to call from any thread at any time.
    #[allow(unsafe_code)]
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// Tune glibc for a long-running conductor. One heap arena (unless the user chose
/// `MALLOC_ARENA_MAX`): a conductor's threads hand data to each other, so with an arena per
/// thread memory freed in one arena stays resident while another grows; one arena keeps the
/// peak over three 1,000-sheet jobs several MiB lower, at no measurable CPU cost (tcache
/// serves most allocations without the arena lock). Fixed mmap / trim thresholds, so large
/// buffers are returned when freed (docs/performance.md). Call it before the runtime starts
/// its threads.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes plain integers and only changes glibc's allocator settings.
    #[allow(unsafe_code)]
    unsafe {
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            nix::libc::mallopt(nix::libc::M_ARENA_MAX, 1);
        }
        // Fixed thresholds: glibc otherwise raises them after the first large block is freed
        // (up to 32 MiB), after which big buffers come from the heap and stay resident.
        nix::libc::mallopt(nix::libc::M_MMAP_THRESHOLD, 256 * 1024);
        nix::libc::mallopt(nix::libc::M_TRIM_THRESHOLD, 512 * 1024);
    }
}
