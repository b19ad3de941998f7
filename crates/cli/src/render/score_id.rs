//! Score-ID syntax check shared by every command taking a score ID (cli.md §1.7).

/// Longest accepted score ID.
pub const MAX_SCORE_ID_LEN: usize = 100;

/// Check a score ID; the error is the spec's message, which callers report as
/// `Invalid value: <message>` with exit code 2.
pub fn validate_score_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("Score ID cannot be empty".to_string());
    }
    let len = id.chars().count();
    if len > MAX_SCORE_ID_LEN {
        return Err(format!(
            "Score ID too long ({len} chars, max {MAX_SCORE_ID_LEN})"
        ));
    }
    // ^[a-zA-Z0-9][a-zA-Z0-9._-]{0,99}$ — a hand check is exact here and keeps regex
    // compilation off the `mozart status` start-up path.
    let mut chars = id.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if first_ok && rest_ok {
        Ok(())
    } else {
        Err(format!(
            "Invalid score ID '{id}'. Must start with a letter or digit and contain only \
             letters, digits, hyphens, underscores, and dots."
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn score_ids_are_checked_with_the_spec_messages() {
        for ok in ["a", "demo", "Review-2.v1_x", "9lives", &"x".repeat(100)] {
            assert_eq!(validate_score_id(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            validate_score_id(""),
            Err("Score ID cannot be empty".to_string())
        );
        assert_eq!(
            validate_score_id(&"x".repeat(101)),
            Err("Score ID too long (101 chars, max 100)".to_string())
        );
        for bad in ["-x", ".hidden", "a b", "a/b", "é", "_a"] {
            assert_eq!(
                validate_score_id(bad),
                Err(format!(
                    "Invalid score ID '{bad}'. Must start with a letter or digit and contain \
                     only letters, digits, hyphens, underscores, and dots."
                )),
                "{bad}"
            );
        }
    }
}
