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
