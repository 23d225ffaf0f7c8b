//! The Prometheus text exposition format, version 0.0.4 (`Content-Type: text/plain;
//! version=0.0.4`): what Prometheus scrapes and node_exporter's textfile collector reads.
//!
//! Each metric family is written as `# HELP name text`, `# TYPE name counter|gauge`, then its
//! samples `name{label="value",...} value`, one family after the other, every line ending in
//! `\n`. HELP text escapes `\` and the newline; label values escape `\`, `"` and the newline.
//! No timestamps (the textfile collector refuses them) and no `# EOF` (that line belongs to
//! OpenMetrics, which this is not).

use std::fmt::Write as _;

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (and back to zero when its source restarts).
    Counter,
    /// Goes up and down.
    Gauge,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// One sample: its labels in order, and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// `(label name, value)`; names must be valid label names.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: u64,
}

/// A metric family: a name, its type, its help text and its samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    /// The metric name (see [`metric_name`] for names from elsewhere).
    pub name: String,
    /// Counter or gauge.
    pub kind: Kind,
    /// What it measures (one line; escaped when written).
    pub help: String,
    /// Its samples, written in this order.
    pub samples: Vec<Sample>,
}

impl Family {
    /// An empty family.
    pub fn new(name: impl Into<String>, kind: Kind, help: impl Into<String>) -> Family {
        Family {
            name: name.into(),
            kind,
            help: help.into(),
            samples: Vec::new(),
        }
    }

    /// Adds a sample.
    pub fn sample(&mut self, labels: &[(&'static str, &str)], value: u64) -> &mut Family {
        self.samples.push(Sample {
            labels: labels.iter().map(|&(n, v)| (n, v.to_string())).collect(),
            value,
        });
        self
    }
}

/// A valid metric name made of `raw`: every character outside `[a-zA-Z0-9_:]` becomes `_`,
/// and a leading digit gets a `_` in front.
pub fn metric_name(raw: &str) -> String {
    let mut s: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// HELP text escaped: `\` as `\\`, a newline as `\n`.
pub fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A label value escaped: `\` as `\\`, `"` as `\"`, a newline as `\n`.
pub fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The families as exposition text. A family whose name came before is left out (a name
/// appears once in an exposition).
pub fn render(families: &[Family]) -> String {
    let mut out = String::new();
    let mut seen: Vec<&str> = Vec::new();
    for f in families {
        if seen.contains(&f.name.as_str()) {
            continue;
        }
        seen.push(&f.name);
        let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.name());
        for s in &f.samples {
            out.push_str(&f.name);
            if !s.labels.is_empty() {
                out.push('{');
                for (i, (n, v)) in s.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{n}=\"{}\"", escape_label(v));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", s.value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_made_valid() {
        assert_eq!(metric_name("rds_conn_reset_total"), "rds_conn_reset_total");
        assert_eq!(metric_name("a-b.c d:e"), "a_b_c_d:e");
        assert_eq!(metric_name("9lives"), "_9lives");
        assert_eq!(metric_name(""), "_");
        assert_eq!(metric_name("é"), "_");
    }

    #[test]
    fn escapes() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        assert_eq!(escape_help("say \"hi\"\\\n"), "say \"hi\"\\\\\\n");
    }

    #[test]
    fn exposition_text() {
        let mut c = Family::new("x_total", Kind::Counter, "Things\nseen \\ here.");
        c.sample(&[("node", "n\"1")], 7);
        let mut g = Family::new("y", Kind::Gauge, "Now.");
        g.sample(&[], 0)
            .sample(&[("a", "1"), ("b", "")], 18446744073709551615);
        let dup = Family::new("x_total", Kind::Gauge, "again");
        let empty = Family::new("z", Kind::Gauge, "None yet.");
        assert_eq!(
            render(&[c, g, dup, empty]),
            "# HELP x_total Things\\nseen \\\\ here.\n\
             # TYPE x_total counter\n\
             x_total{node=\"n\\\"1\"} 7\n\
             # HELP y Now.\n\
             # TYPE y gauge\n\
             y 0\n\
             y{a=\"1\",b=\"\"} 18446744073709551615\n\
             # HELP z None yet.\n\
             # TYPE z gauge\n"
        );
    }
}
