//! Amounts of money as every view shows them (`mozart status`, the dashboard, `mozart
//! instruments check`): whole cents from $1 up, and below $1 four significant digits, so a
//! cost that is not zero never reads `$0.00` and a limit or price reads as configured
//! (`$0.003`, `$0.00015`).

/// The smallest amount shown in digits; anything smaller (and not zero) is `<$0.000001`.
const SMALLEST: f64 = 0.000_001;

/// `$12.35`, `$0.50`, `$0.0033`, `$0.00015`; `$0.00` for zero; `<$0.000001` for less.
pub fn usd(amount: f64) -> String {
    let size = amount.abs();
    if !amount.is_finite() || size == 0.0 || size >= 1.0 {
        return format!("${amount:.2}");
    }
    if size < SMALLEST {
        return "<$0.000001".to_string();
    }
    // Four significant digits: the first one sits `floor(-log10(size)) + 1` places in.
    let first = (-size.log10()).floor() as usize + 1;
    let text = format!("{amount:.*}", first + 3);
    let (whole, fraction) = text.split_once('.').unwrap_or((text.as_str(), ""));
    let mut fraction = fraction.trim_end_matches('0').to_string();
    while fraction.len() < 2 {
        fraction.push('0');
    }
    format!("${whole}.{fraction}")
}

#[cfg(test)]
mod tests {
    use super::usd;

    #[test]
    fn small_amounts_keep_their_digits() {
        for (amount, shown) in [
            (0.0, "$0.00"),
            (3.0, "$3.00"),
            (12.345_6, "$12.35"),
            (0.5, "$0.50"),
            (0.1, "$0.10"),
            (0.003, "$0.003"),
            (0.0033, "$0.0033"),
            (0.003_34, "$0.00334"),
            (0.008_2, "$0.0082"),
            (0.000_15, "$0.00015"),
            (0.123_456, "$0.1235"),
            (0.999_99, "$1.00"),
            (0.000_000_1, "<$0.000001"),
        ] {
            assert_eq!(usd(amount), shown, "{amount}");
        }
    }
}
