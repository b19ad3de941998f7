//! Wording shared by every message the CLI and the conductor print.

use std::fmt::Display;

/// A count and its noun agreeing in number: `plural(1, "sheet", "sheets")` is `1 sheet`,
/// `plural(0, "sheet", "sheets")` and `plural(2, …)` are `0 sheets` and `2 sheets`.
pub fn plural<N: Display + PartialEq + From<u8>>(n: N, one: &str, many: &str) -> String {
    format!("{n} {}", noun(&n, one, many))
}

/// The noun alone, for a count printed another way (`1,024 sheets`, `1 running sheet
/// finishes`): `one` for exactly 1, else `many`.
pub fn noun<'a, N: PartialEq + From<u8>>(n: &N, one: &'a str, many: &'a str) -> &'a str {
    if *n == N::from(1) {
        one
    } else {
        many
    }
}

#[cfg(test)]
mod tests {
    use super::plural;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(plural(1usize, "item", "items"), "1 item");
        assert_eq!(plural(0u32, "item", "items"), "0 items");
        assert_eq!(plural(2u64, "entry", "entries"), "2 entries");
        assert_eq!(plural(-1i64, "job", "jobs"), "-1 jobs");
        assert_eq!(super::noun(&1u32, "is", "are"), "is");
    }
}
