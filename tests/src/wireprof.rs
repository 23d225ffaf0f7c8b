//! Where the time of a depth-1 request/response exchange goes, seen from the wire: a packet
//! capture on the lab's bridge (`tshark` in the lab's namespace, [`Capture`]) and its reading
//! ([`profile`]). For each round trip between a requester A and a responder B it splits the
//! time from one request to the next into
//! - the responder's turnaround: from the last packet of the request on the bridge to the
//!   first packet of the answer (B's receive path, its stack, its application, its send path),
//! - the requester's turnaround: from the last packet of the answer to the first packet of the
//!   next request (the same on A),
//! - the rest: the messages' own time on the wire (zero for one-packet messages),
//!
//! and counts the packets per round trip, with data and without (TCP's pure acks, RoCE's RC
//! acks, RDS headers alone). Used by the lab benchmarks, whose guests are emulated: where a
//! row is slower than the kernel's, this says on which host and in how many packets.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

/// What the captured exchange runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// TCP: the payload of every segment counts.
    Tcp,
    /// RoCE v2 (UDP 4791): RC SEND packets count (their UDP payload); an RDS header alone
    /// (a header-only SEND: an RDS ack) and RC acks count as packets without data.
    Roce,
}

/// One captured packet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pkt {
    /// Capture time, seconds.
    pub t: f64,
    pub from: Ipv4Addr,
    pub to: Ipv4Addr,
    /// Bytes of data it carries (0: a pure ack and the like).
    pub bytes: usize,
}

/// The profile of the longest run of alike round trips: a turn of A (data packets from A to
/// B, up to B's first) answered by a turn of B, no turn more than [`ALIKE`] times the
/// smallest of the run's first two.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// Round trips in the run.
    pub rounds: usize,
    /// Packets between A and B per round trip (both directions), with data and without.
    pub with_data: f64,
    pub without: f64,
    /// Medians, microseconds: a turn of A to A's next turn, and the two turnarounds.
    pub round_us: f64,
    pub responder_us: f64,
    pub requester_us: f64,
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} round trips on the wire: p50 {:.0} us = responder {:.0} us + requester {:.0} us \
             + {:.0} us on the wire; {:.1} packets per round trip ({:.1} with data, {:.1} \
             without)",
            self.rounds,
            self.round_us,
            self.responder_us,
            self.requester_us,
            (self.round_us - self.responder_us - self.requester_us).max(0.0),
            self.with_data + self.without,
            self.with_data,
            self.without
        )
    }
}

/// A turn: consecutive data packets of one direction (true = A to B), the times of its first
/// and last packet and its bytes.
#[derive(Clone, Copy, Debug)]
struct Turn {
    a_to_b: bool,
    first: f64,
    last: f64,
    bytes: usize,
}

/// Groups the data packets between `a` and `b` (in capture order) into turns.
fn turns(pkts: &[Pkt], a: Ipv4Addr, b: Ipv4Addr) -> Vec<Turn> {
    let mut out: Vec<Turn> = Vec::new();
    for p in pkts.iter().filter(|p| p.bytes > 0) {
        let a_to_b = match (p.from, p.to) {
            (f, t) if f == a && t == b => true,
            (f, t) if f == b && t == a => false,
            _ => continue,
        };
        match out.last_mut() {
            Some(l) if l.a_to_b == a_to_b => {
                l.last = p.t;
                l.bytes += p.bytes;
            }
            _ => out.push(Turn {
                a_to_b,
                first: p.t,
                last: p.t,
                bytes: p.bytes,
            }),
        }
    }
    out
}

/// How much larger than the smallest of a run's first turns a turn of the run may be.
const ALIKE: usize = 4;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The profile of the longest run of alike round trips that A starts (at least
/// `min_rounds`), or `None`.
pub fn profile(pkts: &[Pkt], a: Ipv4Addr, b: Ipv4Addr, min_rounds: usize) -> Option<Profile> {
    let all = turns(pkts, a, b);
    // Longest [s, e) of turns alike: none larger than ALIKE times the smaller of the run's
    // first two (depth 1 turns carry one or two messages; a stream or another size ends it).
    let small = |s: usize| all[s].bytes.min(all[s + 1].bytes);
    let pair =
        |s: usize| s + 1 < all.len() && all[s].bytes.max(all[s + 1].bytes) <= ALIKE * small(s);
    let (mut best, mut s) = ((0, 0), 0);
    for i in 0..=all.len() {
        if i < all.len() && (i == s || (pair(s) && all[i].bytes <= ALIKE * small(s))) {
            continue;
        }
        if i - s > best.1 - best.0 {
            best = (s, i);
        }
        // The next run starts with the pair that broke this one, if it is alike.
        s = if i > s && pair(i - 1) { i - 1 } else { i };
    }
    let mut run = &all[best.0..best.1];
    if run.first().is_some_and(|t| !t.a_to_b) {
        run = &run[1..];
    }
    let rounds = run.len() / 2;
    if rounds < min_rounds.max(2) {
        return None;
    }
    let (mut responder, mut requester, mut round) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..rounds {
        let (req, ans) = (run[2 * k], run[2 * k + 1]);
        responder.push((ans.first - req.last) * 1e6);
        if let Some(next) = run.get(2 * k + 2) {
            requester.push((next.first - ans.last) * 1e6);
            round.push((next.first - req.first) * 1e6);
        }
    }
    let (t0, t1) = (run[0].first, run[2 * rounds - 1].last);
    let between = |p: &&Pkt| {
        p.t >= t0 && p.t <= t1 && ((p.from == a && p.to == b) || (p.from == b && p.to == a))
    };
    let with_data = pkts.iter().filter(between).filter(|p| p.bytes > 0).count();
    let total = pkts.iter().filter(between).count();
    Some(Profile {
        rounds,
        with_data: with_data as f64 / rounds as f64,
        without: (total - with_data) as f64 / rounds as f64,
        round_us: median(&mut round),
        responder_us: median(&mut responder),
        requester_us: median(&mut requester),
    })
}

/// Whether a RoCE v2 BTH opcode is an RC SEND (FIRST, MIDDLE, LAST, LAST with immediate,
/// ONLY, ONLY with immediate: IBTA RC opcodes 0x00-0x05).
fn is_send(op: u8) -> bool {
    op <= 0x05
}

/// UDP payload of a header-only RDS SEND: BTH (12) + RDS header (48) + ICRC (4).
const RDS_HEADER_ONLY: usize = 12 + 48 + 4;

/// Parses one line of `tshark -T fields -E separator=, -e frame.time_epoch -e ip.src -e ip.dst
/// -e tcp.len -e udp.length -e udp.payload` (the payload truncated by the snap length).
pub fn parse_line(proto: Proto, line: &str) -> Option<Pkt> {
    let f: Vec<&str> = line.split(',').collect();
    let [t, from, to, tcp_len, udp_len, payload] = f[..] else {
        return None;
    };
    let (t, from, to) = (t.parse().ok()?, from.parse().ok()?, to.parse().ok()?);
    let bytes = match proto {
        Proto::Tcp => tcp_len.parse::<usize>().ok()?,
        Proto::Roce => {
            let len = udp_len.parse::<usize>().ok()?.checked_sub(8)?;
            let op = u8::from_str_radix(payload.get(..2)?, 16).ok()?;
            // An RDS header alone (an ack, a ping) is not data of the exchange.
            if is_send(op) && len > RDS_HEADER_ONLY {
                len
            } else {
                0
            }
        }
    };
    Some(Pkt { t, from, to, bytes })
}

/// A running capture on the lab bridge (`br0` in the lab's namespace) into a pcap file.
pub struct Capture {
    child: Child,
    file: PathBuf,
    proto: Proto,
}

/// Bytes kept per packet: enough for the headers and a RoCE BTH.
const SNAPLEN: &str = "128";

impl Capture {
    /// Starts `tshark` on `br0` in network namespace `netns` with capture filter `filter`,
    /// writing `file`; returns once it captures. `limit` bounds the capture (it stops by
    /// itself then).
    pub fn start(
        netns: &str,
        proto: Proto,
        filter: &str,
        file: &Path,
        limit: Duration,
    ) -> Result<Capture> {
        let mut child = Command::new("ip")
            .args([
                "netns", "exec", netns, "tshark", "-i", "br0", "-s", SNAPLEN, "-q",
            ])
            .args(["-f", filter, "-w"])
            .arg(file)
            .arg("-a")
            .arg(format!("duration:{}", limit.as_secs().max(1)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting tshark (the Debian package tshark)")?;
        let stderr = child.stderr.take().context("tshark's stderr")?;
        if let Err(e) = wait_capturing(stderr) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        Ok(Capture {
            child,
            file: file.to_path_buf(),
            proto,
        })
    }

    /// Stops the capture and reads its packets.
    pub fn finish(mut self) -> Result<Vec<Pkt>> {
        // SIGINT: tshark flushes the file and exits (`ip netns exec` exec'd it in place).
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let t0 = Instant::now();
        while self.child.try_wait()?.is_none() {
            if t0.elapsed() > Duration::from_secs(20) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("tshark did not stop within 20 s of SIGINT");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        read_pcap(self.proto, &self.file)
    }

    /// Stops the capture and profiles its round trips ([`profile_packets`]; `a` asks, `b`
    /// answers).
    pub fn profile(self, a: Ipv4Addr, b: Ipv4Addr, min_rounds: usize) -> Result<Profile> {
        profile_packets(&self.finish()?, a, b, min_rounds)
    }
}

/// [`profile`], or an error that says how many packets held fewer than `min_rounds` round
/// trips.
pub fn profile_packets(
    pkts: &[Pkt],
    a: Ipv4Addr,
    b: Ipv4Addr,
    min_rounds: usize,
) -> Result<Profile> {
    profile(pkts, a, b, min_rounds)
        .with_context(|| format!("no {min_rounds} round trips in {} packets", pkts.len()))
}

/// Where a benchmark's captures go: the directory `BENCH_CAPTURES` names (kept), else a
/// temporary one, removed when the returned guard drops.
pub fn captures_dir() -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    Ok(match std::env::var_os("BENCH_CAPTURES") {
        Some(d) => (PathBuf::from(d), None),
        None => {
            let t = tempfile::tempdir().context("a temporary directory for the captures")?;
            (t.path().to_path_buf(), Some(t))
        }
    })
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits (at most 30 s) for tshark's "Capturing on" line; a thread drains the rest.
fn wait_capturing(stderr: ChildStderr) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut said = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !said {
                let ok = line.contains("Capturing on");
                let _ = tx.send((ok, line));
                said = ok;
            }
        }
    });
    let t0 = Instant::now();
    let mut seen = Vec::new();
    while let Some(left) = Duration::from_secs(30).checked_sub(t0.elapsed()) {
        match rx.recv_timeout(left) {
            Ok((true, _)) => return Ok(()),
            Ok((false, l)) => seen.push(l),
            Err(_) => break,
        }
    }
    bail!(
        "tshark did not start capturing on br0: {}",
        seen.join(" | ")
    )
}

/// Reads the packets of a pcap written by [`Capture`].
pub fn read_pcap(proto: Proto, file: &Path) -> Result<Vec<Pkt>> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-T", "fields", "-E", "separator=,"])
        .args(["-e", "frame.time_epoch", "-e", "ip.src", "-e", "ip.dst"])
        .args(["-e", "tcp.len", "-e", "udp.length", "-e", "udp.payload"])
        .output()
        .context("running tshark -r")?;
    if !out.status.success() {
        bail!(
            "tshark -r {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| parse_line(proto, l))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    fn near(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    fn p(t_us: u64, from: Ipv4Addr, bytes: usize) -> Pkt {
        Pkt {
            t: t_us as f64 / 1e6,
            from,
            to: if from == A { B } else { A },
            bytes,
        }
    }

    #[test]
    fn splits_round_trips_into_turnarounds_and_counts_packets() {
        // Round trips every 1000 us: request at 0, its pure ack at 100, the answer at 300,
        // the answer's ack at 350.
        let mut pkts = Vec::new();
        for k in 0..10 {
            let t = k * 1000;
            pkts.extend([
                p(t, A, 112),
                p(t + 100, B, 0),
                p(t + 300, B, 112),
                p(t + 350, A, 0),
            ]);
        }
        let pr = profile(&pkts, A, B, 5).expect("a profile");
        assert_eq!(pr.rounds, 10);
        assert!(near(pr.round_us, 1000.0), "{pr:?}");
        assert!(near(pr.responder_us, 300.0), "{pr:?}");
        assert!(near(pr.requester_us, 700.0), "{pr:?}");
        assert!(near(pr.with_data, 2.0), "{pr:?}");
        // The last round's ack at 9350 is past the run's last answer (9300): 19 of 20 counted.
        assert!(near(pr.without, 1.9), "{pr:?}");
        assert_eq!(
            pr.to_string(),
            "10 round trips on the wire: p50 1000 us = responder 300 us + requester 700 us \
             + 0 us on the wire; 3.9 packets per round trip (2.0 with data, 1.9 without)"
        );
    }

    #[test]
    fn takes_the_longest_run_of_alike_turns() {
        // A start that is not alike, then ten round trips of a request in three packets
        // (two messages and a part) and an answer of one, from 1000 us on.
        let mut pkts = vec![p(0, B, 10), p(10, B, 10), p(20, A, 10), p(30, B, 100)];
        for k in 0..10 {
            let t = 1000 + k * 100;
            pkts.extend([
                p(t, A, 112),
                p(t + 5, A, 112),
                p(t + 10, A, 20),
                p(t + 40, B, 224),
            ]);
        }
        // A stream before a run does not join it.
        let mut streamed: Vec<Pkt> = (0..50).map(|i| p(i, A, 1000)).collect();
        streamed.extend((0..10).flat_map(|k| [p(100 + k * 10, B, 8), p(105 + k * 10, A, 8)]));
        let pr = profile(&streamed, A, B, 5).expect("a profile");
        assert_eq!(pr.rounds, 9, "{pr:?}");
        assert!(near(pr.with_data, 2.0), "{pr:?}");
        // A stream afterwards: one long turn that ends the run.
        pkts.extend((0..50).map(|i| p(5000 + i, A, 1000)));
        pkts.push(p(6000, B, 224));
        let pr = profile(&pkts, A, B, 5).expect("a profile");
        assert_eq!(pr.rounds, 10);
        assert!(near(pr.responder_us, 30.0), "{pr:?}");
        assert!(near(pr.requester_us, 60.0), "{pr:?}");
        assert!(near(pr.round_us, 100.0), "{pr:?}");
        assert!(near(pr.with_data, 4.0), "{pr:?}");
        assert!(profile(&pkts, A, B, 11).is_none());
        // Packets of other hosts do not count.
        let mut other = pkts.clone();
        other.push(Pkt {
            to: Ipv4Addr::new(10, 0, 0, 9),
            ..p(1001, A, 112)
        });
        assert_eq!(profile(&other, A, B, 5), Some(pr));
        // A run that B starts is taken from A's first turn.
        let from_b: Vec<Pkt> = (0..10)
            .flat_map(|k| [p(k * 100, B, 8), p(k * 100 + 50, A, 8)])
            .collect();
        let pr = profile(&from_b, A, B, 5).expect("a profile");
        assert_eq!(pr.rounds, 9);
        assert!(near(pr.responder_us, 50.0), "{pr:?}");
    }

    #[test]
    fn parses_tshark_fields() {
        let tcp = parse_line(Proto::Tcp, "1700000000.000100,10.0.0.1,10.0.0.2,112,,").unwrap();
        assert_eq!((tcp.bytes, tcp.from, tcp.to), (112, A, B));
        assert!((tcp.t - 1_700_000_000.000_1).abs() < 1e-6);
        let ack = parse_line(Proto::Tcp, "1.0,10.0.0.2,10.0.0.1,0,,").unwrap();
        assert_eq!(ack.bytes, 0);
        // RoCE: SEND ONLY with a 64-byte RDS payload (8 + 12 + 48 + 64 + 4 = 136).
        let send = parse_line(Proto::Roce, "1.0,10.0.0.1,10.0.0.2,,136,04ff").unwrap();
        assert_eq!(send.bytes, 128);
        // A header-only RDS SEND (an ack): no data. An RC ACK (0x11): no data.
        let hdr = parse_line(Proto::Roce, "1.0,10.0.0.1,10.0.0.2,,72,0400").unwrap();
        assert_eq!(hdr.bytes, 0);
        let rc_ack = parse_line(Proto::Roce, "1.0,10.0.0.1,10.0.0.2,,28,11").unwrap();
        assert_eq!(rc_ack.bytes, 0);
        let first = parse_line(Proto::Roce, "1.0,10.0.0.1,10.0.0.2,,1044,00").unwrap();
        assert_eq!(first.bytes, 1036);
        assert!(parse_line(Proto::Roce, "garbage").is_none());
        assert!(parse_line(Proto::Roce, "1.0,10.0.0.1,10.0.0.2,,4,04").is_none());
    }
}
