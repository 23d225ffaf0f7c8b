//! What rds-ping prints: the original's reply lines, and the summary and JSON it adds.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use serde::Serialize;

/// One event for the output: a reply, or a send that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reply {
    /// Number of the ping (from 1).
    pub seq: u64,
    /// Round-trip time in microseconds: of a reply, or the time to a receive error (none for
    /// a failed send).
    pub rtt_us: Option<u64>,
    /// Where the reply came from, when that is not the destination.
    pub from: Option<IpAddr>,
    /// A second reply to the same ping.
    pub dup: bool,
    /// The error text (`strerror`), for a failed send or receive.
    pub error: Option<String>,
}

impl Reply {
    /// A failed send of ping `seq` (the `strerror` text of `errno`); a failed receive adds
    /// its time.
    pub fn error(seq: u64, errno: i32) -> Reply {
        Reply {
            seq,
            rtt_us: None,
            from: None,
            dup: false,
            error: Some(rds_core::errno::strerror(errno)),
        }
    }
}

/// The original's line: `" %3u:"`, `" %ld usec"`, `" (%s)"`, `" DUP!"`, `" ERROR: %s"`.
pub fn line(r: &Reply) -> String {
    let mut s = format!(" {:>3}:", r.seq);
    if let Some(us) = r.rtt_us {
        let _ = write!(s, " {us} usec");
    }
    if let Some(f) = r.from {
        let _ = write!(s, " ({f})");
    }
    if r.dup {
        s.push_str(" DUP!");
    }
    if let Some(e) = &r.error {
        let _ = write!(s, " ERROR: {e}");
    }
    s
}

/// The hint the original prints once after the first EINVAL from a send.
pub const EINVAL_HINT: &str = "      Maybe your kernel does not support rds ping yet";

/// Totals of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Destination as given on the command line.
    pub destination: String,
    /// Its address.
    pub address: String,
    /// Source address used.
    pub source: String,
    /// Pings sent (including failed sends).
    pub transmitted: u64,
    /// Pings answered (first replies only).
    pub received: u64,
    /// Extra replies to a ping already answered.
    pub duplicates: u64,
    /// Sends or receives that failed.
    pub errors: u64,
    /// Pings declared lost after the reply timeout.
    pub timed_out: u64,
    /// Share of pings without a reply, in percent.
    pub loss_percent: f64,
    /// Time from the first ping to the end, in milliseconds.
    pub time_ms: u64,
    /// Round-trip times of the first replies, in microseconds.
    pub rtt_us: Option<Rtt>,
    /// Why the run stopped before its count, if it did ("deadline", "interrupted",
    /// "no reply").
    pub stopped: Option<String>,
    /// Every reply and error, in order.
    pub replies: Vec<Reply>,
}

/// Round-trip statistics (microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rtt {
    /// Smallest.
    pub min: u64,
    /// Mean.
    pub avg: f64,
    /// Largest.
    pub max: u64,
    /// Mean deviation as iputils computes it: sqrt(mean(x²) - mean(x)²).
    pub mdev: f64,
}

impl Rtt {
    /// Statistics of `samples` (none when empty).
    pub fn of(samples: &[u64]) -> Option<Rtt> {
        if samples.is_empty() {
            return None;
        }
        let n = samples.len() as f64;
        let sum: f64 = samples.iter().map(|&x| x as f64).sum();
        let sum2: f64 = samples.iter().map(|&x| (x as f64) * (x as f64)).sum();
        let avg = sum / n;
        let var = (sum2 / n - avg * avg).max(0.0);
        Some(Rtt {
            min: *samples.iter().min().expect("not empty"),
            avg,
            max: *samples.iter().max().expect("not empty"),
            mdev: var.sqrt(),
        })
    }
}

/// Loss in percent, rounded to 4 decimals (as `%g` shows it).
pub fn loss_percent(transmitted: u64, received: u64) -> f64 {
    if transmitted == 0 {
        return 0.0;
    }
    let lost = transmitted.saturating_sub(received) as f64;
    (lost * 100.0 / transmitted as f64 * 1e4).round() / 1e4
}

/// The iputils-style summary block (starts with an empty line).
pub fn summary_text(s: &Summary) -> String {
    let mut o = format!("\n--- {} rds-ping statistics ---\n", s.destination);
    let _ = write!(
        o,
        "{} packets transmitted, {} received",
        s.transmitted, s.received
    );
    if s.duplicates > 0 {
        let _ = write!(o, ", +{} duplicates", s.duplicates);
    }
    if s.errors > 0 {
        let _ = write!(o, ", +{} errors", s.errors);
    }
    let _ = writeln!(o, ", {}% packet loss, time {}ms", s.loss_percent, s.time_ms);
    if let Some(r) = s.rtt_us {
        let _ = writeln!(
            o,
            "rtt min/avg/max/mdev = {}/{:.1}/{}/{:.1} usec",
            r.min, r.avg, r.max, r.mdev
        );
    }
    o
}

/// Milliseconds of a duration, rounded down.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(seq: u64) -> Reply {
        Reply {
            seq,
            rtt_us: Some(123),
            from: None,
            dup: false,
            error: None,
        }
    }

    #[test]
    fn lines_as_the_original() {
        assert_eq!(line(&r(1)), "   1: 123 usec");
        assert_eq!(line(&r(1234)), " 1234: 123 usec");
        let mut x = r(2);
        x.from = Some("10.0.0.2".parse().unwrap());
        assert_eq!(line(&x), "   2: 123 usec (10.0.0.2)");
        x.dup = true;
        assert_eq!(line(&x), "   2: 123 usec (10.0.0.2) DUP!");
        let e = Reply {
            seq: 3,
            rtt_us: None,
            from: None,
            dup: false,
            error: Some("Invalid argument".into()),
        };
        assert_eq!(line(&e), "   3: ERROR: Invalid argument");
    }

    #[test]
    fn summary_block() {
        let s = Summary {
            destination: "peer".into(),
            transmitted: 3,
            received: 2,
            duplicates: 1,
            loss_percent: loss_percent(3, 2),
            time_ms: 2003,
            rtt_us: Rtt::of(&[100, 200]),
            ..Summary::default()
        };
        assert_eq!(
            summary_text(&s),
            "\n--- peer rds-ping statistics ---\n\
             3 packets transmitted, 2 received, +1 duplicates, 33.3333% packet loss, time 2003ms\n\
             rtt min/avg/max/mdev = 100/150.0/200/50.0 usec\n"
        );
        let s = Summary {
            destination: "peer".into(),
            transmitted: 2,
            loss_percent: loss_percent(2, 0),
            time_ms: 10,
            ..Summary::default()
        };
        assert_eq!(
            summary_text(&s),
            "\n--- peer rds-ping statistics ---\n\
             2 packets transmitted, 0 received, 100% packet loss, time 10ms\n"
        );
    }

    #[test]
    fn loss_rounding() {
        assert_eq!(loss_percent(0, 0), 0.0);
        assert_eq!(loss_percent(4, 4), 0.0);
        assert_eq!(loss_percent(3, 1), 66.6667);
        assert_eq!(loss_percent(8, 0), 100.0);
    }
}
