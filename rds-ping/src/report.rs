//! What rds-ping prints: the original's reply lines, and the summary and JSON it adds; with
//! several destinations, one line (or one JSON object) per destination ([`multi_lines`],
//! [`Totals`]).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use serde::Serialize;

use crate::opts::Show;

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
    /// "no reply", "refused").
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

/// Whether a destination answered: at least one of its pings had a reply.
pub fn answered(s: &Summary) -> bool {
    s.received > 0
}

/// One destination of the several-destination form's JSON: the totals of [`Summary`]
/// without the replies, and whether it answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Totals {
    /// Destination as given.
    pub destination: String,
    /// Its address.
    pub address: String,
    /// Source address used.
    pub source: String,
    /// Pings sent.
    pub transmitted: u64,
    /// Pings answered.
    pub received: u64,
    /// Extra replies.
    pub duplicates: u64,
    /// Sends or receives that failed.
    pub errors: u64,
    /// Pings declared lost after the reply timeout.
    pub timed_out: u64,
    /// Share of pings without a reply, in percent.
    pub loss_percent: f64,
    /// Time from the first ping to this destination's end, in milliseconds.
    pub time_ms: u64,
    /// Round-trip times of the first replies, in microseconds.
    pub rtt_us: Option<Rtt>,
    /// Why pinging this destination stopped before its count.
    pub stopped: Option<String>,
    /// At least one ping had a reply ([`answered`]).
    pub answered: bool,
}

impl From<&Summary> for Totals {
    fn from(s: &Summary) -> Totals {
        Totals {
            destination: s.destination.clone(),
            address: s.address.clone(),
            source: s.source.clone(),
            transmitted: s.transmitted,
            received: s.received,
            duplicates: s.duplicates,
            errors: s.errors,
            timed_out: s.timed_out,
            loss_percent: s.loss_percent,
            time_ms: s.time_ms,
            rtt_us: s.rtt_us,
            stopped: s.stopped.clone(),
            answered: answered(s),
        }
    }
}

/// Whether `show` lists this destination.
pub fn shown(show: Show, s: &Summary) -> bool {
    match show {
        Show::All => true,
        Show::Alive => answered(s),
        Show::Unreachable => !answered(s),
    }
}

/// What the several-destination form prints on stdout: one line per destination, its name
/// padded to the longest, `xmt/rcv/%loss` and the round-trip range of the replies (left out
/// when none came); with `-a` or `-u` only the names of those that answered, or did not:
///
/// ```text
/// 10.0.0.2  : xmt/rcv/%loss = 5/5/0%, min/avg/max = 61/74.2/89 usec
/// 10.0.0.13 : xmt/rcv/%loss = 3/0/100%
/// ```
pub fn multi_lines(sums: &[Summary], show: Show) -> String {
    let mut o = String::new();
    if show != Show::All {
        for s in sums.iter().filter(|s| shown(show, s)) {
            let _ = writeln!(o, "{}", s.destination);
        }
        return o;
    }
    let width = sums
        .iter()
        .map(|s| s.destination.chars().count())
        .max()
        .unwrap_or(0);
    for s in sums {
        let _ = write!(
            o,
            "{:<width$} : xmt/rcv/%loss = {}/{}/{}%",
            s.destination, s.transmitted, s.received, s.loss_percent
        );
        if s.duplicates > 0 {
            let _ = write!(o, ", +{} duplicates", s.duplicates);
        }
        if s.errors > 0 {
            let _ = write!(o, ", +{} errors", s.errors);
        }
        if let Some(r) = s.rtt_us {
            let _ = write!(o, ", min/avg/max = {}/{:.1}/{} usec", r.min, r.avg, r.max);
        }
        o.push('\n');
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

    fn dest(name: &str, sent: u64, rtts: &[u64]) -> Summary {
        let received = rtts.len() as u64;
        Summary {
            destination: name.into(),
            address: name.into(),
            transmitted: sent,
            received,
            loss_percent: loss_percent(sent, received),
            rtt_us: Rtt::of(rtts),
            ..Summary::default()
        }
    }

    #[test]
    fn one_line_per_destination() {
        let mut b = dest("peer-b.example", 3, &[100, 150, 200]);
        b.duplicates = 1;
        let mut c = dest("10.0.0.13", 3, &[]);
        c.errors = 2;
        let sums = [dest("10.0.0.2", 3, &[61, 89]), b, c];
        assert_eq!(
            multi_lines(&sums, Show::All),
            "10.0.0.2       : xmt/rcv/%loss = 3/2/33.3333%, min/avg/max = 61/75.0/89 usec\n\
             peer-b.example : xmt/rcv/%loss = 3/3/0%, +1 duplicates, min/avg/max = 100/150.0/200 usec\n\
             10.0.0.13      : xmt/rcv/%loss = 3/0/100%, +2 errors\n"
        );
        assert_eq!(
            multi_lines(&sums, Show::Alive),
            "10.0.0.2\npeer-b.example\n"
        );
        assert_eq!(multi_lines(&sums, Show::Unreachable), "10.0.0.13\n");
        assert_eq!(multi_lines(&[], Show::All), "");
        let t = Totals::from(&sums[2]);
        assert!(!t.answered);
        assert_eq!((t.transmitted, t.received, t.errors), (3, 0, 2));
        assert!(Totals::from(&sums[0]).answered);
    }

    #[test]
    fn loss_rounding() {
        assert_eq!(loss_percent(0, 0), 0.0);
        assert_eq!(loss_percent(4, 4), 0.0);
        assert_eq!(loss_percent(3, 1), 66.6667);
        assert_eq!(loss_percent(8, 0), 100.0);
    }
}
