//! The tables the tools print: comfy-table's default style, never wrapped to the terminal's
//! width (a script reads the same lines as a person).

use comfy_table::{ContentArrangement, Row, Table};

/// An empty table with `header`, its columns as wide as their widest cell.
pub fn table<T: Into<Row>>(header: T) -> Table {
    let mut t = Table::new();
    t.set_content_arrangement(ContentArrangement::Disabled);
    t.set_header(header);
    t
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
}
