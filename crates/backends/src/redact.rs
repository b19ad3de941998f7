//! Credential redaction for captured output and error messages (execution.md §9.13).

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Regex, RegexSet};

static RULES: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    let rules: [(&str, &str); 12] = [
        (r"sk-ant-api\S{10,}", "[REDACTED_ANTHROPIC_KEY]"),
        (r"sk-proj-[a-zA-Z0-9_-]{20,}", "[REDACTED_OPENAI_KEY]"),
        (r"sk-[a-zA-Z0-9]{40,}", "[REDACTED_OPENAI_KEY]"),
        (r"AIzaSy[a-zA-Z0-9_-]{28,}", "[REDACTED_GOOGLE_KEY]"),
        (r"AKIA[A-Z0-9]{16}", "[REDACTED_AWS_KEY]"),
        // Rust's regex has no look-behind: keep the `Bearer ` prefix through a capture.
        (
            r"(Bearer\s)[a-zA-Z0-9._-]{20,}",
            "${1}[REDACTED_BEARER_TOKEN]",
        ),
        (r"ghp_[a-zA-Z0-9]{36,}", "[REDACTED_GITHUB_TOKEN]"),
        (r"gho_[a-zA-Z0-9]{36,}", "[REDACTED_GITHUB_TOKEN]"),
        (r"github_pat_[a-zA-Z0-9_]{36,}", "[REDACTED_GITHUB_TOKEN]"),
        (
            r"xox[bp]-[a-zA-Z0-9-]{20,}|xapp-[a-zA-Z0-9-]{20,}",
            "[REDACTED_SLACK_TOKEN]",
        ),
        (r"hf_[a-zA-Z0-9]{20,}", "[REDACTED_HF_TOKEN]"),
        // Userinfo in URLs (`https://user:secret@host`): keep scheme and host.
        (
            r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@",
            "${1}[REDACTED_CREDENTIALS]@",
        ),
    ];
    rules
        .into_iter()
        .map(|(p, r)| {
            let re = Regex::new(p)
                .unwrap_or_else(|err| panic!("built-in redaction pattern does not compile: {err}"));
            (re, r)
        })
        .collect()
});

/// All patterns at once: most texts (every captured output tail, every error message)
/// hold no credential at all, and one pass over the text tells so.
static ANY: LazyLock<RegexSet> = LazyLock::new(|| {
    RegexSet::new(RULES.iter().map(|(re, _)| re.as_str()))
        .unwrap_or_else(|err| panic!("built-in redaction patterns do not compile: {err}"))
});

/// [`redact`] of an owned text, handed back as it is when it holds nothing to redact.
pub fn redact_owned(text: String) -> String {
    if ANY.is_match(&text) {
        redact(&text)
    } else {
        text
    }
}

/// Replace API keys, tokens and URL credentials with `[REDACTED_…]` markers.
pub fn redact(text: &str) -> String {
    // No rule matches the text as given: no rule rewrites it, so none matches afterwards.
    if !ANY.is_match(text) {
        return text.to_string();
    }
    let mut out = Cow::Borrowed(text);
    for (re, replacement) in RULES.iter() {
        if re.is_match(&out) {
            out = Cow::Owned(re.replace_all(&out, *replacement).into_owned());
        }
    }
    out.into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::redact;

    #[test]
    fn redacts_each_kind_and_keeps_the_rest() {
        let cases = [
            (
                "key sk-ant-api03-abcdefghijklmnop end",
                "key [REDACTED_ANTHROPIC_KEY] end",
            ),
            ("sk-proj-abcdefghijklmnopqrstuvwx", "[REDACTED_OPENAI_KEY]"),
            (
                "AIzaSyABCDEFGHIJKLMNOPQRSTUVWXYZ0123",
                "[REDACTED_GOOGLE_KEY]",
            ),
            ("id AKIAABCDEFGHIJKLMNOP", "id [REDACTED_AWS_KEY]"),
            (
                "Authorization: Bearer abcdefghijklmnopqrstuvwxyz",
                "Authorization: Bearer [REDACTED_BEARER_TOKEN]",
            ),
            (
                "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                "[REDACTED_GITHUB_TOKEN]",
            ),
            ("xoxb-1234567890-abcdefghij", "[REDACTED_SLACK_TOKEN]"),
            ("hf_abcdefghijklmnopqrstuv", "[REDACTED_HF_TOKEN]"),
            (
                "git clone https://bob:hunter2@example.com/x.git",
                "git clone https://[REDACTED_CREDENTIALS]@example.com/x.git",
            ),
            (
                "nothing secret here: sk-short",
                "nothing secret here: sk-short",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(redact(input), want, "input: {input}");
            assert_eq!(
                super::redact_owned(input.to_string()),
                want,
                "input: {input}"
            );
        }
    }
}
