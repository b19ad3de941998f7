//! The pattern sets of execution.md §7.2, each compiled case-insensitive as one alternation.

use std::sync::LazyLock;

use regex::{Regex, RegexBuilder};

/// Compile a set of patterns into one case-insensitive alternation.
pub fn alternation(patterns: &[&str]) -> Regex {
    let joined = patterns
        .iter()
        .map(|p| format!("(?:{p})"))
        .collect::<Vec<_>>()
        .join("|");
    // The sets are constants of this module; a failure is a programming error caught by
    // the unit test that forces every set.
    RegexBuilder::new(&joined)
        .case_insensitive(true)
        .build()
        .unwrap_or_else(|err| panic!("built-in pattern set does not compile: {err}"))
}

macro_rules! pattern_set {
    ($(#[$doc:meta])* $name:ident = [$($p:literal),* $(,)?]) => {
        $(#[$doc])*
        pub static $name: LazyLock<Regex> = LazyLock::new(|| alternation(&[$($p),*]));
    };
}

pattern_set!(
    /// Rate limit (the classifier's 11-pattern default; status codes only as whole numbers, so
    /// a request id like `req_0114290` is not a rate limit).
    RATE_LIMIT = [
        r"rate.?limit", r"usage.?limit", r"quota", r"too many requests", r"\b429\b", r"capacity",
        r"try again later", r"overloaded", r"hit.{0,10}limit", r"limit.{0,10}resets?",
        r"daily.{0,10}limit",
    ]
);
pattern_set!(
    /// Operating-system errors that hold a rate-limit word but are no rate limit: `EDQUOT`'s
    /// "Disk quota exceeded" is a full disk quota of the local user (a failing `cp` in a
    /// `shell` sheet), not a service asking to wait. Waiting it out never ends, since there
    /// is no cap on waits; as a failure it is retried with backoff and then fails.
    NOT_RATE_LIMIT = [r"disk quota exceeded"]
);

pattern_set!(
    /// What a `shell` command's output must also say to be taken as a rate limit: a service's
    /// own words. The command is the user's, and its output names anything: a CSV's line 429,
    /// a test called `test_rate_limit_backoff`, a job's item 429. Read as rate limits, those
    /// waited for ever (no retry spent, no cap) and held back the whole job.
    SHELL_RATE_LIMIT = [
        r"\brate[ -]?limit(?:ed|s|ing)?\b", r"\btoo many requests\b",
        r"\b(?:http|status|code|error)\W{0,3}429\b", r"\b429\W{0,3}(?:too many|rate)",
        r"\(429\)", r"\busage[ -]limit\b", r"\bquota (?:exceeded|exhausted)\b",
        r"\btry again later\b", r"\bretry[ -]after\b",
    ]
);

/// Whether `text` reads as a rate limit ([`RATE_LIMIT`]), leaving out the OS errors of
/// [`NOT_RATE_LIMIT`] that merely contain one of its words.
pub fn mentions_rate_limit(text: &str) -> bool {
    if !RATE_LIMIT.is_match(text) {
        return false;
    }
    if !NOT_RATE_LIMIT.is_match(text) {
        return true;
    }
    RATE_LIMIT.is_match(&NOT_RATE_LIMIT.replace_all(text, " "))
}

pattern_set!(
    /// Authentication failures.
    AUTH = [
        r"unauthorized", r"authentication", r"invalid.?api.?key", r"permission.?denied",
        r"access.?denied", r"\b401\b", r"\b403\b",
    ]
);
pattern_set!(
    /// Network failures.
    NETWORK = [
        r"connection.?refused", r"connection.?reset", r"connection.?timeout",
        r"network.?unreachable", r"ECONNREFUSED", r"ETIMEDOUT",
    ]
);
pattern_set!(
    /// DNS failures.
    DNS = [
        r"dns.?resolution", r"name.?resolution", r"getaddrinfo", r"could not resolve",
        r"ENOTFOUND",
    ]
);
pattern_set!(
    /// TLS failures.
    SSL = [r"ssl.?error", r"tls.?error", r"certificate", r"SSL_ERROR", r"handshake.?failed"]
);
pattern_set!(
    /// Capacity / overload.
    CAPACITY = [r"capacity", r"try again later", r"overloaded", r"service.?unavailable"]
);
pattern_set!(
    /// Quota exhaustion with a reset.
    QUOTA_EXHAUSTION = [
        r"token.{0,10}exhausted",
        r"token.{0,10}budget.{0,10}(used|exhausted|depleted)",
        r"usage.{0,10}(will\s+)?reset.{0,10}(at|in)",
        r"resets?.{0,10}\d+\s*[ap]m",
        r"resets?.{0,10}in\s+\d+\s*(hour|minute|min|hr)",
        r"daily.{0,10}(token|usage).{0,10}limit",
        r"hourly.{0,10}(token|usage).{0,10}limit",
        r"(used|consumed).{0,10}all.{0,10}(token|credit)",
        r"no.{0,10}(token|credit).{0,10}(left|remaining)",
        r"token.{0,10}allowance.{0,10}(used|exhausted)",
        r"recharge.{0,10}(at|in)",
    ]
);
pattern_set!(
    /// MCP configuration problems.
    MCP = [
        r"MCP server error", r"mcp-config-invalid", r"Missing environment variables:",
        r"Plugin MCP server", r"MCP server .+ invalid",
    ]
);
pattern_set!(
    /// CLI mode misuse.
    CLI_MODE = [
        r"only prompt commands are supported in streaming mode",
        r"streaming mode.*not supported", r"output format.*not compatible",
    ]
);
pattern_set!(
    /// Binary not found.
    ENOENT = [
        r"ENOENT", r"spawn .+ ENOENT", r"no such file or directory", r"command not found",
        r"not found in PATH",
    ]
);
pattern_set!(
    /// Ours: the API does not know the model the score names (a typo in
    /// `instrument_config.model`), in each CLI's words: Claude Code's, the Gemini API's and
    /// the OpenAI API's. Retrying cannot help.
    MODEL_NOT_FOUND = [
        r"There's an issue with the selected model", r"\[claude-code:unrecognized_model\]",
        r"models/\S+ is not found for API version",
        r"The model `[^`]+` does not exist",
    ]
);
pattern_set!(
    /// Stale execution (detected via exit_reason; kept for completeness).
    STALE = [r"[Ss]tale execution", r"no output for \d+s", r"idle.{0,10}timeout"]
);

/// Lower-cased substrings that make an exit 1/2 non-transient.
pub const NON_TRANSIENT: &[&str] = &[
    "permission denied",
    "access denied",
    "not permitted",
    "validation failed",
    "invalid argument",
    "syntax error",
];

/// Lower-cased substrings that hint a SIGKILL was the OOM killer.
pub const OOM_INDICATORS: &[&str] = &[
    "oom",
    "out of memory",
    "oom-killer",
    "cannot allocate memory",
    "memory cgroup",
];

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_set_compiles_and_is_case_insensitive() {
        for set in [
            &RATE_LIMIT,
            &AUTH,
            &NETWORK,
            &DNS,
            &SSL,
            &CAPACITY,
            &QUOTA_EXHAUSTION,
            &MCP,
            &CLI_MODE,
            &ENOENT,
            &STALE,
            &NOT_RATE_LIMIT,
            &MODEL_NOT_FOUND,
        ] {
            assert!(!set.as_str().is_empty());
        }
        assert!(RATE_LIMIT.is_match("RATE LIMIT exceeded"));
        assert!(AUTH.is_match("Invalid API Key"));
        assert!(QUOTA_EXHAUSTION.is_match("You've hit your limit · resets 1am (Europe/Oslo)"));
        assert!(!NETWORK.is_match("all good"));
    }
}
