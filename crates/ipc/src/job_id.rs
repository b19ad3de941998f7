//! The job IDs a new submission may take (issue 21): `^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`.
//!
//! A job ID is the stem of the submitted score file (conductor.md §6.3), and upstream's
//! conductor takes any stem, quotes and angle brackets included, although its own CLI only
//! addresses IDs of this alphabet (cli.md §1.7, a [QUIRK]). A job ID ends up in web pages,
//! URLs, shell hints, file names and log lines; restricting new IDs to the CLI's alphabet
//! keeps every one of those places safe and every job addressable. The conductor enforces it
//! at submission (`job.submit`, hooks); the CLI and the MCP server check it earlier for a
//! message before anything is written.

/// Longest job ID (the CLI's limit for score IDs, cli.md §1.7).
pub const MAX_LEN: usize = 100;

/// The rule, in words, for error messages.
pub const RULE: &str = "a job ID (the score file's name without .yaml) must start with a \
letter or digit and contain only letters, digits, '.', '_' and '-', at most 100 characters";

/// Whether `id` is a job ID a new submission may take.
pub fn is_valid(id: &str) -> bool {
    let mut bytes = id.bytes();
    let first = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric());
    first
        && id.len() <= MAX_LEN
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A name of the allowed alphabet close to `id` (for the "rename it to" hint): every other
/// character becomes `-`, runs of `-` shrink to one, and leading or trailing punctuation
/// goes. `score` when nothing usable is left.
pub fn suggestion(id: &str) -> String {
    let mut out = String::new();
    for c in id.chars() {
        let keep = c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        let c = if keep { c } else { '-' };
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    let trimmed = out
        .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
        .trim_end_matches(['-', '.', '_']);
    let mut s: String = trimmed.chars().take(MAX_LEN).collect();
    while s.ends_with(['-', '.', '_']) {
        s.pop();
    }
    if s.is_empty() {
        "score".to_string()
    } else {
        s
    }
}

/// Why a new job cannot take the ID `id`, or `None` when it can: the ID (quoted and
/// escaped) and the rule.
pub fn refusal(id: &str) -> Option<String> {
    (!is_valid(id)).then(|| format!("Job ID {id:?} is not allowed: {RULE}."))
}

/// [`refusal`] for an ID taken from a score file's name, with the fix: rename the file.
pub fn file_refusal(id: &str) -> Option<String> {
    refusal(id).map(|m| {
        format!(
            "{m} Rename the score file (for example to {}.yaml) and submit it again.",
            suggestion(id)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clis_alphabet_and_nothing_else() {
        for ok in [
            "a",
            "hello-mozart",
            "Review-2.v1_x",
            "9lives",
            &"x".repeat(100),
        ] {
            assert!(is_valid(ok), "{ok}");
            assert_eq!(refusal(ok), None);
            assert_eq!(file_refusal(ok), None);
        }
        for bad in [
            "",
            "-x",
            ".hidden",
            "_a",
            "a b",
            "a/b",
            "é",
            "q'+alert(document.domain)+'",
            "<script>",
            "a\"b",
            &"x".repeat(101),
        ] {
            assert!(!is_valid(bad), "{bad}");
            assert!(refusal(bad).is_some());
            let msg = file_refusal(bad).unwrap_or_default();
            assert!(msg.contains("must start with a letter or digit"), "{msg}");
            assert!(msg.contains("Rename the score file"), "{msg}");
            assert!(is_valid(&suggestion(bad)), "{bad} -> {}", suggestion(bad));
        }
        assert_eq!(
            suggestion("q'+alert(document.domain)+'"),
            "q-alert-document.domain"
        );
        assert_eq!(suggestion("<>"), "score");
    }
}
