//! Python `re` patterns checked with the `regex` crate (score.md §3.7, §3.9, §3.15).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use regex::Regex;

/// Why a pattern cannot be used.
pub type PatternError = String;

/// Translate the few Python-only spellings the `regex` crate lacks (`\Z`).
pub fn translate(pattern: &str) -> String {
    pattern.replace("\\Z", "\\z")
}

/// Compile a Python regex. Look-around and back-references (valid in Python, unsupported by
/// the `regex` crate) are accepted here as `Ok(None)` so a valid upstream score still loads;
/// the runtime matcher reports them when it meets them.
pub fn compile(pattern: &str) -> Result<Option<Regex>, PatternError> {
    // Scores repeat the same few patterns across hundreds of validations (the 516-sheet
    // corpus score has 161 content_regex rules and 2 distinct patterns), and compiling a
    // regex costs far more than looking one up.
    type Compiled = Result<Option<Regex>, PatternError>;
    static CACHE: LazyLock<Mutex<HashMap<String, Compiled>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    if let Ok(cache) = CACHE.lock() {
        if let Some(hit) = cache.get(pattern) {
            return hit.clone();
        }
    }
    let result = compile_uncached(pattern);
    if let Ok(mut cache) = CACHE.lock() {
        if cache.len() >= 1024 {
            cache.clear();
        }
        cache.insert(pattern.to_string(), result.clone());
    }
    result
}

fn compile_uncached(pattern: &str) -> Result<Option<Regex>, PatternError> {
    match Regex::new(&translate(pattern)) {
        Ok(re) => Ok(Some(re)),
        Err(err) => {
            let text = err.to_string();
            if text.contains("look-around") || text.contains("backreferences") {
                Ok(None)
            } else {
                Err(text
                    .lines()
                    .last()
                    .unwrap_or("invalid pattern")
                    .trim_start_matches("error: ")
                    .to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_patterns() {
        assert!(compile("(?i)done").unwrap().is_some());
        assert!(compile("(?P<x>a)").unwrap().is_some());
        assert!(compile("foo(?=bar)").unwrap().is_none());
        assert!(compile("[unclosed").is_err());
    }
}
