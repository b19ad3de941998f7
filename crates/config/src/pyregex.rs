//! Python `re` patterns checked with the `regex` crate (score.md §3.7, §3.9, §3.15).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use regex::Regex;

/// Why a pattern cannot be used.
pub type PatternError = String;

/// Translate the few Python-only spellings the `regex` crate lacks (`\Z`, Python's end of
/// text, is the crate's `\z`); an escaped backslash before a `Z` is left alone.
pub fn translate(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '\\' {
            match chars.next() {
                Some('Z') => out.push('z'),
                Some(next) => out.push(next),
                None => {}
            }
        }
    }
    out
}

/// Compile a `content_regex` pattern as the check runs it (multi-line, `\Z` read as `\z`).
/// Unlike [`compile`], look-around and back-references are refused, with what to write
/// instead: the check's engine has neither, and a score using them would fail every attempt.
pub fn compile_content_regex(pattern: &str) -> Result<Regex, PatternError> {
    // Cached as [`compile`] is: the 516-sheet corpus score's 161 rules (2 distinct patterns)
    // are each checked twice by `validate`, and compiling one is ~350 k instructions.
    static CACHE: Cache<Result<Regex, PatternError>> = LazyLock::new(Default::default);
    cached(&CACHE, pattern, compile_content_regex_uncached)
}

/// Compiled patterns by their text.
type Cache<T> = LazyLock<Mutex<HashMap<String, T>>>;

/// `compile(pattern)`, from `cache` when it was compiled before (at most 1,024 kept).
fn cached<T: Clone>(cache: &Cache<T>, pattern: &str, compile: fn(&str) -> T) -> T {
    if let Ok(cache) = cache.lock() {
        if let Some(hit) = cache.get(pattern) {
            return hit.clone();
        }
    }
    let result = compile(pattern);
    if let Ok(mut cache) = cache.lock() {
        if cache.len() >= 1024 {
            cache.clear();
        }
        cache.insert(pattern.to_string(), result.clone());
    }
    result
}

fn compile_content_regex_uncached(pattern: &str) -> Result<Regex, PatternError> {
    regex::RegexBuilder::new(&translate(pattern))
        .multi_line(true)
        .build()
        .map_err(|err| {
            let text = err.to_string();
            if text.contains("look-around") {
                "look-around ((?=…), (?!…), (?<=…), (?<!…)) is not supported by Mozart's regex \
                 engine: match the text itself instead (e.g. '^verdict: pass' for \
                 '^verdict: (?=pass)')"
                    .to_string()
            } else if text.contains("backreferences") {
                "back-references (\\1, (?P=name)) are not supported by Mozart's regex engine: \
                 write the repeated text out instead (e.g. '(a)a' for '(a)\\1')"
                    .to_string()
            } else {
                last_line(&text)
            }
        })
}

fn last_line(text: &str) -> String {
    text.lines()
        .last()
        .unwrap_or("invalid pattern")
        .trim_start_matches("error: ")
        .to_string()
}

/// Compile a Python regex. Look-around and back-references (valid in Python, unsupported by
/// the `regex` crate) are accepted here as `Ok(None)` so a valid upstream score still loads;
/// the runtime matcher reports them when it meets them.
pub fn compile(pattern: &str) -> Result<Option<Regex>, PatternError> {
    // Scores repeat the same few patterns across hundreds of validations (the 516-sheet
    // corpus score has 161 content_regex rules and 2 distinct patterns), and compiling a
    // regex costs far more than looking one up.
    static CACHE: Cache<Result<Option<Regex>, PatternError>> = LazyLock::new(Default::default);
    cached(&CACHE, pattern, compile_uncached)
}

fn compile_uncached(pattern: &str) -> Result<Option<Regex>, PatternError> {
    match Regex::new(&translate(pattern)) {
        Ok(re) => Ok(Some(re)),
        Err(err) => {
            let text = err.to_string();
            if text.contains("look-around") || text.contains("backreferences") {
                Ok(None)
            } else {
                Err(last_line(&text))
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

    #[test]
    fn content_regex_patterns_are_those_the_check_can_run() {
        assert!(compile_content_regex("pass\\Z")
            .unwrap()
            .is_match("verdict: pass"));
        assert_eq!(translate("a\\\\Z"), "a\\\\Z");
        let e = compile_content_regex("^verdict: (?=pass)").unwrap_err();
        assert!(e.contains("look-around") && e.contains("instead"), "{e}");
        let e = compile_content_regex("(a)\\1").unwrap_err();
        assert!(e.contains("back-references"), "{e}");
    }
}
