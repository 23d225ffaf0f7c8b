//! The tables the tools print: comfy-table's default style, never wrapped to the terminal's
//! width (a script reads the same lines as a person). Help text made for a person checks
//! [`too_wide`] and prints a list of [`wrap`]ped lines instead.

use comfy_table::{ContentArrangement, Row, Table};

/// An empty table with `header`, its columns as wide as their widest cell.
pub fn table<T: Into<Row>>(header: T) -> Table {
    let mut t = Table::new();
    t.set_content_arrangement(ContentArrangement::Disabled);
    t.set_header(header);
    t
}

/// The width set in `COLUMNS`, when it holds a number of at least 20.
pub fn columns() -> Option<u16> {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|&w| w >= 20)
}

/// The width of the terminal text for a person goes to: [`columns`], else the width of
/// standard output when it is a terminal, else none (no limit).
pub fn terminal_width() -> Option<u16> {
    columns().or_else(|| Table::new().width())
}

/// Whether `t`, printed as it is, is wider than [`terminal_width`].
pub fn too_wide(t: &Table) -> bool {
    terminal_width().is_some_and(|w| widest_line(&t.to_string()) > usize::from(w))
}

/// The number of characters of the longest line of `s`.
pub fn widest_line(s: &str) -> usize {
    s.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

/// `text` cut at spaces into lines of at most `width` characters (a longer word stands alone).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_rows_are_not_wrapped() {
        let mut t = table(vec!["A", "B"]);
        t.add_row(vec!["x".repeat(300), "y".into()]);
        let s = t.to_string();
        assert!(s.lines().all(|l| l.chars().count() > 300), "{s}");
        assert!(s.contains("| A"));
    }

    #[test]
    fn wrap_cuts_at_spaces_within_the_width() {
        assert_eq!(
            wrap("request an acknowledgement at least every", 16),
            ["request an", "acknowledgement", "at least every"]
        );
        assert_eq!(wrap("", 10), Vec::<String>::new());
        assert_eq!(
            wrap("averyveryverylongword x", 5),
            ["averyveryverylongword", "x"]
        );
    }
}
