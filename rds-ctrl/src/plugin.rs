//! The monitoring-plugin convention (Nagios, Icinga, Naemon, Sensu, Zabbix and others run
//! checks this way): the exit status says OK (0), WARNING (1), CRITICAL (2) or UNKNOWN (3),
//! and the first line of standard output is `SERVICE STATUS - summary | perfdata`, where
//! perfdata is `label=value[UOM];[warn];[crit];[min];[max]` items separated by spaces. Lines
//! after the first are the check's long output; no `|` may appear there (it would start more
//! perfdata), nor in the summary.

use std::fmt::Write as _;

/// A check's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Everything is fine.
    Ok,
    /// Something needs attention.
    Warning,
    /// Something is broken.
    Critical,
    /// The check could not tell (no node to ask, an unreadable state).
    Unknown,
}

impl Status {
    /// The exit status: 0, 1, 2 or 3.
    pub fn code(self) -> u8 {
        match self {
            Status::Ok => 0,
            Status::Warning => 1,
            Status::Critical => 2,
            Status::Unknown => 3,
        }
    }

    /// `OK`, `WARNING`, `CRITICAL` or `UNKNOWN`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warning => "WARNING",
            Status::Critical => "CRITICAL",
            Status::Unknown => "UNKNOWN",
        }
    }
}

/// One perfdata item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Perf {
    /// Label: letters, digits and `_` (no quoting needed).
    pub label: &'static str,
    /// Value.
    pub value: u64,
    /// Unit: `""` (a number), `s` (seconds) or `c` (a counter that only goes up).
    pub uom: &'static str,
    /// Warning range (`"0"`: warn above 0), or empty.
    pub warn: &'static str,
    /// Critical range, or empty.
    pub crit: &'static str,
}

impl Perf {
    /// A value with no thresholds.
    pub fn new(label: &'static str, value: u64, uom: &'static str) -> Perf {
        Perf {
            label,
            value,
            uom,
            warn: "",
            crit: "",
        }
    }

    /// With a warning range.
    pub fn warn(mut self, range: &'static str) -> Perf {
        self.warn = range;
        self
    }

    /// With a critical range.
    pub fn crit(mut self, range: &'static str) -> Perf {
        self.crit = range;
        self
    }
}

/// `text` fit for the status line or the long output: `|` becomes `/`, line breaks become
/// spaces.
pub fn clean(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '|' => '/',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

/// `text` fit for the long output: every `|` becomes `/` (line breaks stay).
pub fn clean_lines(text: &str) -> String {
    text.replace('|', "/")
}

/// The status line: `SERVICE STATUS - summary | perfdata` (no `|` part without perfdata).
/// Every item's minimum is 0.
pub fn line(service: &str, status: Status, summary: &str, perf: &[Perf]) -> String {
    let mut s = format!("{service} {} - {}", status.name(), clean(summary));
    if !perf.is_empty() {
        s.push_str(" |");
        for p in perf {
            let _ = write!(
                s,
                " {}={}{};{};{};0",
                p.label, p.value, p.uom, p.warn, p.crit
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines() {
        assert_eq!(
            line(
                "RDS",
                Status::Warning,
                "a|b\nc",
                &[
                    Perf::new("sockets", 3, ""),
                    Perf::new("resets", 7, "c").warn("0"),
                    Perf::new("stalled", 1, "").crit("0"),
                    Perf::new("uptime", 61, "s"),
                ]
            ),
            "RDS WARNING - a/b c | sockets=3;;;0 resets=7c;0;;0 stalled=1;;0;0 uptime=61s;;;0"
        );
        assert_eq!(
            line("RDS", Status::Unknown, "no node", &[]),
            "RDS UNKNOWN - no node"
        );
        let codes: Vec<u8> = [
            Status::Ok,
            Status::Warning,
            Status::Critical,
            Status::Unknown,
        ]
        .map(Status::code)
        .to_vec();
        assert_eq!(codes, [0, 1, 2, 3]);
        assert!(Status::Critical > Status::Warning && Status::Warning > Status::Ok);
    }
}
