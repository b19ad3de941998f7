//! `memory::trim` against the real allocator, alone in its own test process so no other
//! test's allocations move the resident size it measures.
#![cfg(all(target_os = "linux", target_env = "gnu"))]
#![allow(clippy::unwrap_used)]

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Memory freed in the middle of the heap (held in place by small live blocks, as a
/// finished job's data is by the conductor's long-lived state) goes back to the system,
/// and the live blocks are untouched.
#[test]
fn trimming_returns_freed_pages_and_keeps_live_data() {
    let mut keep = Vec::new();
    let mut freed = Vec::new();
    for i in 0..512u32 {
        freed.push(vec![1u8; 60 * 1024]);
        keep.push(vec![u8::try_from(i % 251).unwrap_or(0); 32]);
    }
    drop(freed);
    let before = rss_kib();
    mozart_conductor::memory::trim();
    let after = rss_kib();
    assert!(
        before.saturating_sub(after) > 8 * 1024,
        "RSS before trim {before} KiB, after {after} KiB"
    );
    for (i, block) in keep.iter().enumerate() {
        assert!(block.iter().all(|b| usize::from(*b) == i % 251));
    }
}
