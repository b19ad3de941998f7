//! Python `re` patterns checked with the `regex` crate (score.md §3.7, §3.9, §3.15).

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
