//! Plain aligned columns (no box drawing): widths from content, colour applied after
//! padding so escape codes never skew the alignment.

use super::style::{Color, Style};

/// One table cell: its text and an optional colour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// Visible text.
    pub text: String,
    /// Colour applied when the style allows it.
    pub color: Option<Color>,
}

impl Cell {
    /// A cell in a colour.
    pub fn colored(text: impl Into<String>, color: Color) -> Self {
        Cell {
            text: text.into(),
            color: Some(color),
        }
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Cell { text, color: None }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Self {
        Cell::from(text.to_string())
    }
}

fn width(text: &str) -> usize {
    text.chars().count()
}

/// Lay out `headers` and `rows` left-aligned, columns separated by `gap`, each line
/// prefixed by `indent`; trailing spaces are trimmed. Headers are bold.
pub fn render(
    headers: &[&str],
    rows: &[Vec<Cell>],
    indent: &str,
    gap: &str,
    style: &Style,
) -> Vec<String> {
    let columns = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| width(h)).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(width(&cell.text));
        }
    }
    let line = |cells: Vec<(String, Option<Color>)>| -> String {
        let last = cells.len().saturating_sub(1);
        let mut out = String::from(indent);
        for (i, (text, color)) in cells.into_iter().enumerate() {
            if i > 0 {
                out.push_str(gap);
            }
            let pad = if i == last {
                String::new()
            } else {
                " ".repeat(widths[i].saturating_sub(width(&text)))
            };
            match color {
                Some(c) => out.push_str(&style.paint(&text, c)),
                None => out.push_str(&text),
            }
            out.push_str(&pad);
        }
        out.trim_end().to_string()
    };
    let mut lines = Vec::with_capacity(rows.len() + 1);
    lines.push(line(
        headers
            .iter()
            .map(|h| (h.to_string(), Some(Color::Bold)))
            .collect(),
    ));
    for row in rows {
        lines.push(line(
            row.iter()
                .take(columns)
                .map(|c| (c.text.clone(), c.color))
                .collect(),
        ));
    }
    lines
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let rows = vec![
            vec![Cell::from("demo"), Cell::from("running"), Cell::from("/w")],
            vec![
                Cell::from("a-much-longer-id"),
                Cell::colored("failed", Color::Red),
                Cell::from(""),
            ],
        ];
        let lines = render(&["ID", "STATUS", "WS"], &rows, "", "   ", &Style::plain());
        assert_eq!(
            lines,
            vec![
                "ID                 STATUS    WS",
                "demo               running   /w",
                "a-much-longer-id   failed",
            ]
        );
    }

    #[test]
    fn multibyte_marks_count_as_one_column() {
        let rows = vec![vec![Cell::from("✓ Pass"), Cell::from("x")]];
        let lines = render(&["Validation", "E"], &rows, "  ", "  ", &Style::plain());
        assert_eq!(lines, vec!["  Validation  E", "  ✓ Pass      x"]);
    }
}
