//! Identity and hashing (learning.md §5). These must match upstream exactly so an upstream
//! learning DB keeps deduplicating against what we write.

use std::path::Path;

use sha2::{Digest, Sha256};

/// The first `len` hex characters (lowercase) of the SHA-256 of `text`.
pub fn sha256_hex_prefix(text: &str, len: usize) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(text.as_bytes());
    // Two table lookups per byte: a `format!` per byte was most of the hashing cost.
    let mut hex = String::with_capacity(len.min(64));
    for byte in digest.iter().take(len.div_ceil(2)) {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex.truncate(len);
    hex
}

/// First 16 hex chars of SHA-256 of the resolved absolute workspace path.
pub fn hash_workspace(path: &Path) -> String {
    hash_workspace_resolving(path).0
}

/// [`hash_workspace`], and whether the path resolved to an existing directory (only then is
/// the hash stable enough to remember: a missing path hashes its unresolved absolute form).
pub(crate) fn hash_workspace_resolving(path: &Path) -> (String, bool) {
    // Python's `Path.resolve()` is non-strict: a missing path is still made absolute.
    let (resolved, exists) = match std::fs::canonicalize(path) {
        Ok(p) => (p, true),
        Err(_) => (
            std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
            false,
        ),
    };
    (sha256_hex_prefix(&resolved.to_string_lossy(), 16), exists)
}

/// First 16 hex chars of SHA-256 of `"{job_id}:"` (no caller passes a config hash, §5).
pub fn hash_job(job_id: &str) -> String {
    sha256_hex_prefix(&format!("{job_id}:"), 16)
}

/// Lowercase, whitespace runs collapsed to single spaces, trimmed.
pub fn normalize_pattern_name(name: &str) -> String {
    name.to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// `patterns.id`: 16 hex chars of SHA-256 of `"{type}:{normalized name}"`.
pub fn pattern_id(pattern_type: &str, pattern_name: &str) -> String {
    sha256_hex_prefix(
        &format!("{pattern_type}:{}", normalize_pattern_name(pattern_name)),
        16,
    )
}

/// `patterns.content_hash`: 32 hex chars of SHA-256 of `"{type}:{normalized name}:{description}"`.
pub fn content_hash(pattern_type: &str, pattern_name: &str, description: Option<&str>) -> String {
    sha256_hex_prefix(
        &format!(
            "{pattern_type}:{}:{}",
            normalize_pattern_name(pattern_name),
            description.unwrap_or("")
        ),
        32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_match_sha256_prefixes() {
        // Expected values computed independently with coreutils `sha256sum`.
        assert_eq!(hash_job("job-1"), "9af12d10801c5d48");
        assert_eq!(
            pattern_id("validation_failure", "File  Not Created"),
            "5d4dc4465839e7be"
        );
        assert_eq!(
            sha256_hex_prefix("abc", 64),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            pattern_id("validation_failure", "File  Not Created"),
            pattern_id("validation_failure", "file not created")
        );
        assert_ne!(
            pattern_id("validation_failure", "x"),
            pattern_id("retry_success", "x")
        );
        assert_eq!(content_hash("t", "n", None).len(), 32);
        assert_eq!(
            normalize_pattern_name("  File \t Not\nCreated "),
            "file not created"
        );
    }
}
