//! Benchmark (not a CI test; run by `scripts/bench-ib.sh`): RDS over soft-RoCE (`rxe0`) in
//! the lab, three contenders on the same two guests, same message sizes, one lab boot:
//!
//! 1. perftest `ib_send_bw` / `ib_send_lat` (RC SEND; server in g1, client in g2), with
//!    `-e` (completion events instead of busy polling: each guest has one vCPU under TCG, and
//!    a spinning poller starves the kernel's rxe work; `BENCH_PERFTEST_ARGS` overrides);
//! 2. our RDS over rxe: this test executable copied into both guests, the kernel's `rds_rdma`
//!    not loaded (the lab boots with `--ib=0`), our node with the IB transport only, Rust guest
//!    roles: per size, g1 sends a 1-byte "go" to g2, which then sends N messages with
//!    blocking sends (4 MiB sndbuf); g1 times from its go to the N-th message; then g2 runs
//!    ping-pong rounds against g1's echo socket;
//! 3. the kernel's RDS over rxe: `rds_rdma` inserted in both guests (`insmod`, our nodes are
//!    gone by then) and removed again afterwards (`rmmod` works on 6.1): `rdstool send
//!    --wait-go` / `recv --go --no-verify` (4 MiB sndbuf/rcvbuf; the same go-to-last-message
//!    time, `go_ms`) and `rdstool echo` / `rr` for latency.
//!
//! Timing from a go sent by the receiver (instead of from the first message) matters: with a
//! 4 MiB receive buffer a descheduled receiver can find the whole stream queued and read it
//! in a few ms. Each round runs all three (order rotated per round, `BENCH_ROUNDS`, default
//! 3); the table shows per-round figures and the medians. Connections are warmed up first
//! (perftest by its own handshake, RDS by 3 pings). Latency is round trip / 2 (what perftest
//! reports): median and p99. MB/s is 10^6 bytes/s of payload (perftest's MB/sec is MiB/s and
//! is converted). Emulated (TCG), so the ratios are the result, not the absolute numbers.
//!
//! Counts (env, `SIZE:COUNT,…`): `BENCH_TPUT` (default 64:1000,4096:500,65536:100) and
//! `BENCH_RR` (default 64:300,4096:200,65536:50).
//!
//! Each contender's run is captured on the lab bridge (`udp port 4791`; `BENCH_CAPTURES=DIR`
//! keeps the files) and its longest run of alike round trips (the size with the most rounds)
//! is profiled (`rds_tests::wireprof`): each guest's turnaround and the packets per round
//! trip, printed before the tables.
//!
//! Results (2026-11-23, commit 9f80ba3 + this comment; 2-core host shared with other builds,
//! TCG, 1 vCPU per guest; medians of 3 rounds, default counts; latency = RTT/2, µs):
//!
//! ```text
//!   size  who          msgs/s      MB/s lat p50 us lat p99 us   msgs/s ours/   p50 ours/   p99 ours/
//!     64  ib_send      4696.0     0.301      984.9     3590.9           0.46        2.15        2.00
//!     64  kernel       1897.9     0.121     1247.2     4042.6           1.15        1.70        1.78
//!     64  ours         2175.2     0.139     2120.4     7184.5
//!   4096  ib_send      1295.0     5.304     1786.2     4470.9           0.89        1.59        1.60
//!   4096  kernel        843.3     3.454     2311.9     5069.9           1.37        1.23        1.41
//!   4096  ours         1156.4     4.737     2846.8     7140.1
//!  65536  ib_send       130.7     8.567     9153.0    16746.0           0.59        2.14        1.65
//!  65536  kernel         82.5     5.409    13232.4    24760.9           0.93        1.48        1.11
//!  65536  ours           76.6     5.018    19585.7    27586.0
//! ```
//!
//! Ratio columns: ours / the row's contender (msgs/s above 1 = ours faster; latency below 1 =
//! ours faster). Per round, ours/kernel msgs/s was 1.14-1.27 (64 B), 1.13-1.45 (4 KiB),
//! 0.80-0.93 (64 KiB), and p50 latency 1.34-1.80 / 1.12-1.62 / 1.43-1.53 times the kernel's.
//! An earlier run under heavier host load (same code but for inf handling) gave medians
//! ours/kernel msgs/s 0.72 / 0.59 / 0.71 and p50 latency 2.18 / 1.60 / 1.30: the host's load
//! moves the ratios by tens of percent; read them per round. A second run right after
//! (commit 849a24d) gave medians ours/kernel msgs/s 1.21 / 1.25 / 0.87, p50 latency
//! 1.46 / 1.28 / 1.47, ours/ib_send msgs/s 0.60 / 0.65 / 0.49, p50 2.56 / 1.70 / 2.08; no
//! path of ours went down in either run (one conn_reset=1 on our receiver in the
//! heavier-load run, not reproduced). A third run (with the ping row, commit 10e2ba4,
//! busier host again): ours/kernel msgs/s 0.88 / 0.88 / 0.62, p50 1.55 / 1.29 / 1.26; RDS
//! ping RTT/2 p50: ours 2330 µs, kernel 3850 µs (the kernel answers pings from a worker),
//! against ours 3045 µs and the kernel's 1959 µs for a 64 B echo through the application:
//! our stack alone (ping) already takes longer than the kernel's stack plus its
//! application (rr), so most of the latency gap is inside our stack's per-message path,
//! about 0.7 ms of RTT/2 is the hand-off to and from our application thread.
//!
//! 2026-11-26, two runs in a row on an otherwise idle host, before and after the sender posts
//! its own SENDs, one data SEND in 17 is signaled and receive buffers are reposted in one
//! chain (commit 9d1f66d, then that change); medians of 3 rounds, ours/kernel:
//!
//! ```text
//!   size   msgs/s before  after   p50 before  after   ours msgs/s before  after
//!     64         0.18     1.06          2.39   1.53             1101.0  4978.6
//!   4096         0.49     1.12          2.17   1.15             1046.1  2184.5
//!  65536         0.38     0.85          3.49   1.26               67.5   149.7
//! ```
//!
//! The RDS ping row (our stack alone) went from 0.31 to 0.18 of the kernel's RTT/2.

use anyhow::{bail, ensure, Context, Result};
use rds_core::Socket;
use rds_tests::ib::{
    guest_cmd, ib_socket, install_self, ip_env, load_kernel_rds_rdma, nonzero_stats, start_ib_node,
    step, GUEST_ENV,
};
use rds_tests::interop::{errno_of, field_u64, fields, ok_line, send_queue_wait, MAX_MSG};
use rds_tests::lab::{guest_addr, GuestJob, Lab, NETNS};
use rds_tests::wireprof::{captures_dir, Capture, Proto};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Our ports: g1's sink and echo, g2's sender and ping-pong socket.
const SINK: u16 = 7300;
const ECHO: u16 = 7301;
const SEND: u16 = 7400;
const RR: u16 = 7401;
/// The kernel's ports (same roles).
const K_SINK: u16 = 7500;
const K_ECHO: u16 = 7501;
const K_SEND: u16 = 7600;
const K_RR: u16 = 7601;
/// Send and receive buffers of every RDS contender.
const BUF: usize = 4 << 20;
/// Time limit of one measurement (a stream or a ping-pong series).
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// RDS pings (zero-length to port 0, answered inside the peer's RDS stack) per round.
const PINGS: u64 = 200;

const DEFAULT_TPUT: &str = "64:1000,4096:500,65536:100";
const DEFAULT_RR: &str = "64:300,4096:200,65536:50";

fn parse_plan(s: &str) -> Result<Vec<(usize, u64)>> {
    let mut v = Vec::new();
    for item in s.split(',').filter(|i| !i.is_empty()) {
        let (a, b) = item
            .split_once(':')
            .with_context(|| format!("bad plan item {item:?} (SIZE:COUNT)"))?;
        let size: usize = a
            .trim()
            .parse()
            .with_context(|| format!("bad size {a:?}"))?;
        let n: u64 = b
            .trim()
            .parse()
            .with_context(|| format!("bad count {b:?}"))?;
        ensure!(
            (8..=MAX_MSG).contains(&size) && (1..=1_000_000).contains(&n),
            "plan item {item:?}: size 8..=1 MiB, count 1..=1000000"
        );
        v.push((size, n));
    }
    ensure!(!v.is_empty(), "empty plan {s:?}");
    Ok(v)
}

fn plan_env(name: &str, default: &str) -> Result<(String, Vec<(usize, u64)>)> {
    let s = std::env::var(name).unwrap_or_else(|_| default.to_string());
    let p = parse_plan(&s).with_context(|| format!("{name}={s}"))?;
    Ok((s, p))
}

/// Median and p99 of `v` (sorted in place), as rdstool rr computes them.
fn p50_p99(v: &mut [f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    (v[n / 2], v[((n * 99) / 100).min(n - 1)])
}

// ---------------------------------------------------------------------------------------------
// Guest side (our node)

/// The guest roles (run inside a lab guest by [`bench_ib`]; do nothing elsewhere).
#[test]
#[ignore = "runs inside a lab guest, started by bench_ib"]
fn guest_side() {
    let Ok(role) = std::env::var(GUEST_ENV) else {
        return;
    };
    let r = match role.as_str() {
        "server" => guest_server(),
        "client" => guest_client(),
        other => Err(anyhow::anyhow!("unknown role {other}")),
    };
    if let Err(e) = r {
        step("failed", &format!("{e:#}"));
        panic!("guest side: {e:#}");
    }
}

fn buffered_socket(node: &rds_core::Node, addr: SocketAddr) -> Result<Socket> {
    let s = ib_socket(node, addr)?;
    s.set_send_buffer_size(BUF);
    s.set_recv_buffer_size(BUF);
    Ok(s)
}

/// Receives one message (data only; congestion notifications skipped) before `deadline`.
fn recv_one(s: &Socket, buf: &mut [u8], deadline: Instant) -> Result<(usize, SocketAddr)> {
    loop {
        let now = Instant::now();
        ensure!(now < deadline, "time limit waiting for a message");
        s.set_read_timeout(Some((deadline - now).min(Duration::from_millis(500))));
        match s.recv_msg(buf, Default::default()) {
            Ok(m) => {
                if let Some(from) = m.from {
                    ensure!(!m.truncated, "truncated message of {} bytes", m.full_len);
                    return Ok((m.len, from));
                }
            }
            Err(e) if matches!(errno_of(&e), libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR) => {}
            Err(e) => return Err(e).context("recv"),
        }
    }
}

/// Our connections: peer, state and how often each path came up (a reset shows as ups > 1).
fn conn_summary(node: &rds_core::Node) -> String {
    node.connections()
        .iter()
        .map(|c| {
            let p: Vec<String> = c
                .paths
                .iter()
                .map(|p| format!("{:?}/ups={}", p.state, p.ups))
                .collect();
            format!("{}->{} {:?} {}", c.laddr, c.faddr, c.kind, p.join(","))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// g1: the sink (times each size's stream, answers "done") and, on a thread, the echo.
fn guest_server() -> Result<()> {
    let ours = ip_env("IB_OURS")?;
    let peer = ip_env("IB_PEER")?;
    let (_, tput) = plan_env("BENCH_TPUT", DEFAULT_TPUT)?;
    let (_, rr) = plan_env("BENCH_RR", DEFAULT_RR)?;
    let node = start_ib_node(ours, 0xbe01)?;
    let at = |p| SocketAddr::new(IpAddr::V4(ours), p);
    let r = (|| -> Result<()> {
        let sink = buffered_socket(&node, at(SINK))?;
        let echo = buffered_socket(&node, at(ECHO))?;
        step("ready", &format!("sink={} echo={}", at(SINK), at(ECHO)));
        let rounds: u64 = rr.iter().map(|(_, n)| n).sum();
        let total_limit = RUN_LIMIT * (tput.len() + rr.len() + 1) as u32;
        let dl = Instant::now() + total_limit;
        std::thread::scope(|sc| -> Result<()> {
            let eh = sc.spawn(|| -> Result<u64> {
                let mut buf = vec![0u8; MAX_MSG];
                let mut n = 0u64;
                while n < rounds {
                    let (len, from) = recv_one(&echo, &mut buf, dl)
                        .with_context(|| format!("echo: {n} of {rounds} rounds"))?;
                    echo.set_write_timeout(Some(dl.saturating_duration_since(Instant::now())));
                    echo.send_to(&buf[..len], from).context("echo send")?;
                    n += 1;
                }
                Ok(n)
            });
            let mut buf = vec![0u8; MAX_MSG];
            // The client's hello: its connection is up (warmed by pings) and it listens.
            let (len, from) = recv_one(&sink, &mut buf, dl).context("waiting for hello")?;
            ensure!(
                len == 1 && buf[0] == b'h',
                "not the hello: {len} B from {from}"
            );
            for &(size, count) in &tput {
                let sdl = Instant::now() + RUN_LIMIT;
                let mut first = None;
                let mut bad = 0u64;
                // The start signal: the client streams when it has it (as rdstool's
                // `recv --go` / `send --wait-go`); the rate counts from here.
                let go = Instant::now();
                sink.set_write_timeout(Some(Duration::from_secs(30)));
                sink.send_to(b"g", SocketAddr::new(IpAddr::V4(peer), SEND))
                    .context("sending go")?;
                for i in 0..count {
                    let (len, f) = recv_one(&sink, &mut buf, sdl)
                        .with_context(|| format!("sink: size {size}, {i} of {count}"))?;
                    first.get_or_insert_with(Instant::now);
                    if len != size
                        || f != SocketAddr::new(IpAddr::V4(peer), SEND)
                        || buf[..8] != i.to_le_bytes()
                    {
                        bad += 1;
                    }
                }
                let data = first.map_or(Duration::ZERO, |t| t.elapsed());
                step(
                    "tput",
                    &format!(
                        "size={size} received={count} bad={bad} go_us={} data_us={}",
                        go.elapsed().as_micros(),
                        data.as_micros()
                    ),
                );
                ensure!(
                    bad == 0,
                    "{bad} messages of size {size} with the wrong length, source or index"
                );
            }
            let echoed = eh
                .join()
                .map_err(|_| anyhow::anyhow!("echo thread panicked"))??;
            // The client's "bye" (after its last echo), answered; then wait until the answer
            // has left the send queue (on IB the retransmit queue empties only when the peer
            // happens to acknowledge, which a peer that exits never does).
            let (len, from) = recv_one(&sink, &mut buf, dl).context("waiting for bye")?;
            ensure!(
                len == 1 && buf[0] == b'b',
                "not the bye: {len} B from {from}"
            );
            sink.send_to(b"a", from).context("answering bye")?;
            send_queue_wait(&node, at(SINK), Instant::now() + Duration::from_secs(60))?;
            step("stats", &nonzero_stats(&node));
            step("conns", &conn_summary(&node));
            step("done", &format!("echoed={echoed}"));
            Ok(())
        })
    })();
    node.shutdown();
    r
}

/// g2: warm-up pings, the streams (blocking sends), then the ping-pong series.
fn guest_client() -> Result<()> {
    let ours = ip_env("IB_OURS")?;
    let peer = ip_env("IB_PEER")?;
    let (_, tput) = plan_env("BENCH_TPUT", DEFAULT_TPUT)?;
    let (_, rr) = plan_env("BENCH_RR", DEFAULT_RR)?;
    let node = start_ib_node(ours, 0xbe02)?;
    let at = |p| SocketAddr::new(IpAddr::V4(ours), p);
    let pa = |p| SocketAddr::new(IpAddr::V4(peer), p);
    let r = (|| -> Result<()> {
        let snd = buffered_socket(&node, at(SEND))?;
        let rrs = buffered_socket(&node, at(RR))?;
        let mut buf = vec![0u8; MAX_MSG];
        // Warm-up: the connection comes up on the first ping; then the hello to the sink.
        for i in 0..3 {
            rrs.send_to(&[], pa(0)).context("ping")?;
            let (len, from) = recv_one(&rrs, &mut buf, Instant::now() + Duration::from_secs(60))
                .with_context(|| format!("pong {i}"))?;
            ensure!(
                len == 0 && from == pa(0),
                "not a pong: {len} bytes from {from}"
            );
        }
        snd.send_to(b"h", pa(SINK)).context("hello")?;
        step("warm", "3 pings");
        for &(size, count) in &tput {
            let mut msg = vec![0xa5u8; size];
            let dl = Instant::now() + RUN_LIMIT;
            let (len, from) = recv_one(&snd, &mut buf, dl)
                .with_context(|| format!("size {size}: waiting for the sink's go"))?;
            ensure!(
                len == 1 && from == pa(SINK),
                "not the go message: {len} B from {from}"
            );
            let t0 = Instant::now();
            for i in 0..count {
                msg[..8].copy_from_slice(&i.to_le_bytes());
                let now = Instant::now();
                ensure!(
                    now < dl,
                    "size {size}: sent {i} of {count} at the time limit"
                );
                snd.set_write_timeout(Some(dl - now));
                snd.send_to(&msg, pa(SINK))
                    .with_context(|| format!("size {size}: send {i}"))?;
            }
            step(
                "sent",
                &format!(
                    "size={size} sent={count} send_us={}",
                    t0.elapsed().as_micros()
                ),
            );
        }
        for &(size, rounds) in &rr {
            let mut msg = vec![0x5au8; size];
            let dl = Instant::now() + RUN_LIMIT;
            let mut rtts = Vec::with_capacity(rounds as usize);
            for i in 0..rounds {
                msg[..8].copy_from_slice(&i.to_le_bytes());
                let t = Instant::now();
                ensure!(
                    t < dl,
                    "size {size}: {i} of {rounds} rounds at the time limit"
                );
                rrs.set_write_timeout(Some(dl - t));
                rrs.send_to(&msg, pa(ECHO)).context("rr send")?;
                let (len, from) = recv_one(&rrs, &mut buf, dl)
                    .with_context(|| format!("size {size}: reply {i}"))?;
                ensure!(
                    len == size && from == pa(ECHO) && buf[..len] == msg[..],
                    "size {size}: round {i}: bad reply ({len} B from {from})"
                );
                rtts.push(t.elapsed().as_secs_f64() * 1e6);
            }
            let avg = rtts.iter().sum::<f64>() / rtts.len() as f64;
            let (p50, p99) = p50_p99(&mut rtts);
            step(
                "rr",
                &format!(
                    "size={size} rounds={rounds} avg_us={avg:.1} p50_us={p50:.1} p99_us={p99:.1}"
                ),
            );
        }
        // RDS pings (zero-length to port 0): the peer's stack answers without its
        // application, so the gap to the rr latency is the application's part.
        let mut rtts = Vec::with_capacity(PINGS as usize);
        let dl = Instant::now() + RUN_LIMIT;
        for i in 0..PINGS {
            let t = Instant::now();
            rrs.send_to(&[], pa(0)).context("ping")?;
            let (len, from) = recv_one(&rrs, &mut buf, dl).with_context(|| format!("pong {i}"))?;
            ensure!(
                len == 0 && from == pa(0),
                "not a pong: {len} bytes from {from}"
            );
            rtts.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let (p50, p99) = p50_p99(&mut rtts);
        step(
            "rr",
            &format!("size=0 rounds={PINGS} p50_us={p50:.1} p99_us={p99:.1} (ping)"),
        );
        // Bye (the server exits on it), answered once it arrived.
        snd.send_to(b"b", pa(SINK)).context("bye")?;
        let (len, from) = recv_one(&snd, &mut buf, Instant::now() + Duration::from_secs(60))
            .context("waiting for the answer to bye")?;
        ensure!(
            len == 1 && from == pa(SINK),
            "not the bye answer: {len} B from {from}"
        );
        step("stats", &nonzero_stats(&node));
        step("conns", &conn_summary(&node));
        step("done", "");
        Ok(())
    })();
    node.shutdown();
    r
}

// ---------------------------------------------------------------------------------------------
// Host side

#[derive(Clone, Debug, Default)]
struct Row {
    /// Messages per second and payload MB/s (10^6) of the one-way stream.
    msgs_s: Option<f64>,
    mb_s: Option<f64>,
    /// One-way latency (round trip / 2), µs: median and p99.
    lat_p50: Option<f64>,
    lat_p99: Option<f64>,
}

const CONTENDERS: [&str; 3] = ["ib_send", "kernel", "ours"];

/// Median of the values present.
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

struct Results {
    sizes: Vec<usize>,
    /// The round being measured.
    round: usize,
    /// (size, contender index, round) -> that round's figures.
    rows: std::collections::BTreeMap<(usize, usize, usize), Row>,
    notes: Vec<String>,
    /// Wire profile of each contender's longest run of round trips, per round.
    profiles: Vec<String>,
}

impl Results {
    fn row(&mut self, size: usize, c: usize) -> &mut Row {
        if !self.sizes.contains(&size) {
            self.sizes.push(size);
            self.sizes.sort_unstable();
        }
        self.rows.entry((size, c, self.round)).or_default()
    }

    fn tput(&mut self, size: usize, c: usize, count: u64, secs: f64) {
        if secs > 0.0 {
            self.rate(size, c, count as f64 / secs);
        }
    }

    fn rate(&mut self, size: usize, c: usize, msgs_s: f64) {
        let r = self.row(size, c);
        r.msgs_s = Some(msgs_s);
        r.mb_s = Some(msgs_s * size as f64 / 1e6);
    }

    fn lat(&mut self, size: usize, c: usize, p50: f64, p99: f64) {
        let r = self.row(size, c);
        r.lat_p50 = Some(p50);
        r.lat_p99 = Some(p99);
    }

    /// The figures of (size, contender): one round's, or the median over all rounds.
    fn get(&self, size: usize, c: usize, round: Option<usize>) -> Row {
        let rows: Vec<&Row> = self
            .rows
            .iter()
            .filter(|((s, k, r), _)| *s == size && *k == c && round.is_none_or(|x| x == *r))
            .map(|(_, v)| v)
            .collect();
        let m = |f: fn(&Row) -> Option<f64>| median(rows.iter().filter_map(|r| f(r)).collect());
        Row {
            msgs_s: m(|r| r.msgs_s),
            mb_s: m(|r| r.mb_s),
            lat_p50: m(|r| r.lat_p50),
            lat_p99: m(|r| r.lat_p99),
        }
    }

    fn table(&self, round: Option<usize>) -> String {
        let f = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |x| format!("{x:.prec$}"));
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "-".to_string(),
        };
        let mut s = format!(
            "{:>6}  {:<8} {:>10} {:>9} {:>10} {:>10}   {:>12} {:>11} {:>11}\n",
            "size",
            "who",
            "msgs/s",
            "MB/s",
            "lat p50 us",
            "lat p99 us",
            "msgs/s ours/",
            "p50 ours/",
            "p99 ours/"
        );
        for &size in &self.sizes {
            let ours = self.get(size, 2, round);
            for (c, name) in CONTENDERS.iter().enumerate() {
                let r = self.get(size, c, round);
                let (rm, r50, r99) = if c == 2 {
                    (String::new(), String::new(), String::new())
                } else {
                    (
                        ratio(ours.msgs_s, r.msgs_s),
                        ratio(ours.lat_p50, r.lat_p50),
                        ratio(ours.lat_p99, r.lat_p99),
                    )
                };
                s += &format!(
                    "{:>6}  {:<8} {:>10} {:>9} {:>10} {:>10}   {:>12} {:>11} {:>11}\n",
                    if size == 0 {
                        "ping".to_string()
                    } else {
                        size.to_string()
                    },
                    name,
                    f(r.msgs_s, 1),
                    f(r.mb_s, 3),
                    f(r.lat_p50, 1),
                    f(r.lat_p99, 1),
                    rm,
                    r50,
                    r99
                );
            }
        }
        s
    }
}

const T: Duration = Duration::from_secs(120);

fn job_out(job: GuestJob, what: &str) -> Result<String> {
    Ok(job.wait()?.check(what)?.stdout)
}

/// The data line of a perftest report: the line after the `#bytes` header.
fn perftest_line(out: &str) -> Result<Vec<String>> {
    let mut it = out.lines();
    while let Some(l) = it.next() {
        if l.trim_start().starts_with("#bytes") {
            let d = it.next().context("no line after the #bytes header")?;
            return Ok(d.split_whitespace().map(str::to_string).collect());
        }
    }
    bail!("no #bytes header in:\n{out}")
}

fn perftest(
    lab: &Lab,
    res: &mut Results,
    tput: &[(usize, u64)],
    rr: &[(usize, u64)],
) -> Result<()> {
    let srv = guest_addr(1);
    let extra = std::env::var("BENCH_PERFTEST_ARGS").unwrap_or_else(|_| "-e".to_string());
    let base = format!("-d rxe0 -x 1 -F -c RC {extra}");
    // (client's data line, server's data line)
    type Lines = (Vec<String>, Option<Vec<String>>);
    let run = |prog: &str, size: usize, n: u64| -> Result<Lines> {
        let args = format!("{prog} {base} -s {size} -n {n}");
        let server = lab.spawn(1, &args, RUN_LIMIT)?;
        // The server listens on TCP 18515 for the exchange; the client retries briefly.
        std::thread::sleep(Duration::from_millis(1500));
        let out = lab.exec(2, &format!("{args} {srv}"), RUN_LIMIT)?;
        let sout = server.wait()?;
        let out = out.check(&format!("g2: {args}"))?;
        let sout = sout.check(&format!("g1: {args}"))?;
        Ok((
            perftest_line(&out.stdout).with_context(|| args.to_string())?,
            perftest_line(&sout.stdout).ok(),
        ))
    };
    // A usable figure: finite and positive (perftest prints inf / -nan at times).
    let col = |v: &[String], i: usize| -> Option<f64> {
        v.get(i)
            .and_then(|x| x.parse::<f64>().ok())
            .filter(|x| x.is_finite() && *x > 0.0)
    };
    for &(size, n) in tput {
        // #bytes #iterations BW-peak BW-average[MiB/s] MsgRate[Mpps]
        let (v, _) = run("ib_send_bw", size, n)?;
        let bw = col(&v, 3).unwrap_or(0.0);
        let mpps = col(&v, 4).unwrap_or(0.0);
        // Whichever has more significant digits: the rate for small messages, else BW.
        let msgs = if mpps * 1e6 >= 1000.0 {
            mpps * 1e6
        } else {
            bw * 1048576.0 / size as f64
        };
        if msgs > 0.0 {
            res.rate(size, 0, msgs);
        }
        res.notes
            .push(format!("ib_send_bw {size}: {}", v.join(" ")));
    }
    for &(size, n) in rr {
        // #bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9 (one-way, µs);
        // the client's figures, or the server's where the client printed inf.
        let (v, sv) = run("ib_send_lat", size, n)?;
        let pick = [Some(v.clone()), sv]
            .into_iter()
            .flatten()
            .find(|l| col(l, 4).is_some() && col(l, 7).is_some());
        match pick {
            Some(l) => {
                res.lat(
                    size,
                    0,
                    col(&l, 4).unwrap_or(0.0),
                    col(&l, 7).unwrap_or(0.0),
                );
                res.notes
                    .push(format!("ib_send_lat {size}: {}", l.join(" ")));
            }
            None => res.notes.push(format!(
                "ib_send_lat {size}: no usable figures: {}",
                v.join(" ")
            )),
        }
    }
    Ok(())
}

fn ours(lab: &Lab, res: &mut Results, plans: (&str, &str), jobs: &mut Vec<GuestJob>) -> Result<()> {
    let (a, b) = (guest_addr(1), guest_addr(2));
    for g in 1..=2 {
        lab.exec_ok(g, "! grep -q '^rds_rdma ' /proc/modules", T)
            .context("rds_rdma must not be loaded for our node")?;
    }
    let p1 = install_self(lab, 1, "bench_ib")?;
    let p2 = install_self(lab, 2, "bench_ib")?;
    // RDS_IB_DEBUG=1 on the host: the transport's CM log in the guest output.
    let debug = std::env::var_os("RDS_IB_DEBUG").is_some();
    let env = |me, peer| {
        format!(
            "IB_OURS={me} IB_PEER={peer} BENCH_TPUT={} BENCH_RR={}{}",
            plans.0,
            plans.1,
            if debug { " RDS_IB_DEBUG=1" } else { "" }
        )
    };
    let redir = if debug { " 2>&1" } else { "" };
    let limit = RUN_LIMIT * 8;
    jobs.push(lab.spawn(
        1,
        &(guest_cmd(&p1, "guest_side", "server", &env(a, b)) + redir),
        limit,
    )?);
    jobs[0].wait_for_output("IBSTEP ready", Duration::from_secs(120))?;
    jobs.push(lab.spawn(
        2,
        &(guest_cmd(&p2, "guest_side", "client", &env(b, a)) + redir),
        limit,
    )?);
    jobs[1].wait_for_output("IBSTEP done", limit)?;
    jobs[0].wait_for_output("IBSTEP done", Duration::from_secs(120))?;
    let server = job_out(jobs.remove(0), "g1 our server")?;
    let client = job_out(jobs.remove(0), "g2 our client")?;
    for l in server.lines().chain(client.lines()) {
        let Some(rest) = l.strip_prefix("IBSTEP ") else {
            continue;
        };
        res.notes.push(format!("ours: {rest}"));
        let fl = fields(rest);
        let num = |k: &str| -> Result<f64> {
            fl.get(k)
                .with_context(|| format!("no {k} in {l:?}"))?
                .parse::<f64>()
                .with_context(|| format!("bad {k} in {l:?}"))
        };
        if rest.starts_with("tput ") {
            let size = num("size")? as usize;
            res.tput(size, 2, num("received")? as u64, num("go_us")? / 1e6);
        } else if rest.starts_with("rr ") {
            let size = num("size")? as usize;
            res.lat(size, 2, num("p50_us")? / 2.0, num("p99_us")? / 2.0);
        }
    }
    Ok(())
}

fn kernel(lab: &Lab, res: &mut Results, tput: &[(usize, u64)], rr: &[(usize, u64)]) -> Result<()> {
    let (a, b) = (guest_addr(1), guest_addr(2));
    let limit = RUN_LIMIT.as_secs();
    load_kernel_rds_rdma(lab, 1).context("loading rds_rdma in g1")?;
    load_kernel_rds_rdma(lab, 2).context("loading rds_rdma in g2")?;
    let ping = lab
        .exec(
            2,
            &format!("rdstool ping -t ib -b {b} -d {a} -c 3 -i 20 -W 30000"),
            T,
        )?
        .check("kernel warm-up ping")?;
    res.notes
        .push(format!("kernel: {}", ok_line(&ping.stdout, "ping")?));
    for &(size, n) in tput {
        // The sender binds and waits for the receiver's go; the rate counts from the go
        // (`go_ms`) to the last message, as on our side.
        let send = lab.spawn(
            2,
            &format!(
                "rdstool send -t ib -b {b}:{K_SEND} -d {a}:{K_SINK} -n {n} -s {size} --sndbuf {BUF} --wait-go --timeout {limit}"
            ),
            RUN_LIMIT + Duration::from_secs(20),
        )?;
        send.wait_for_output("send: waiting for go", Duration::from_secs(60))?;
        let recv = lab.spawn(
            1,
            &format!(
                "rdstool recv -t ib -b {a}:{K_SINK} -n {n} --no-verify --rcvbuf {BUF} --go {b}:{K_SEND} --timeout {limit}"
            ),
            RUN_LIMIT + Duration::from_secs(20),
        )?;
        let out = job_out(recv, "kernel recv")?;
        let sout = job_out(send, "kernel send")?;
        let l = ok_line(&out, "recv")?.to_string();
        ensure!(field_u64(&l, "received")? == n, "kernel recv: {l}");
        let go_ms: f64 = fields(&l)
            .get("go_ms")
            .with_context(|| format!("no go_ms in {l:?} (rebuild rdstool: lab.sh setup)"))?
            .parse()?;
        res.tput(size, 1, n, go_ms / 1e3);
        res.notes.push(format!("kernel {size}: {l}"));
        res.notes
            .push(format!("kernel {size}: {}", ok_line(&sout, "send")?));
    }
    for &(size, n) in rr {
        let echo = lab.spawn(
            1,
            &format!("rdstool echo -t ib -b {a}:{K_ECHO} -n {n} --timeout {limit}"),
            RUN_LIMIT + Duration::from_secs(20),
        )?;
        echo.wait_for_output("echo: bound", Duration::from_secs(60))?;
        let out = lab
            .exec(
                2,
                &format!(
                    "rdstool rr -t ib -b {b}:{K_RR} -d {a}:{K_ECHO} -n {n} -s {size} --wait-ms 30000 --timeout {limit}"
                ),
                RUN_LIMIT + Duration::from_secs(20),
            )?
            .check("kernel rr")?;
        job_out(echo, "kernel echo")?;
        let l = ok_line(&out.stdout, "rr")?.to_string();
        let fl = fields(&l);
        let num = |k: &str| -> Result<f64> {
            Ok(fl
                .get(k)
                .with_context(|| format!("no {k} in {l}"))?
                .parse()?)
        };
        res.lat(size, 1, num("p50_us")? / 2.0, num("p99_us")? / 2.0);
        res.notes.push(format!("kernel {size}: {l}"));
    }
    let out = lab
        .exec(
            2,
            &format!("rdstool ping -t ib -b {b} -d {a} -c {PINGS} -i 0 -W 5000"),
            RUN_LIMIT,
        )?
        .check("kernel pings")?;
    let mut rtts: Vec<f64> = out
        .stdout
        .lines()
        .filter_map(|l| {
            l.strip_prefix("seq=")?
                .split_once(" rtt_us=")?
                .1
                .parse()
                .ok()
        })
        .collect();
    ensure!(
        rtts.len() as u64 == PINGS,
        "kernel pings: {} of {PINGS} answered",
        rtts.len()
    );
    let (p50, p99) = p50_p99(&mut rtts);
    res.lat(0, 1, p50 / 2.0, p99 / 2.0);
    res.notes
        .push(format!("kernel ping: {}", ok_line(&out.stdout, "ping")?));
    if res.round == 0 {
        for g in 1..=2 {
            let c = lab.exec_ok(g, "rdstool info counters", T)?.stdout;
            let nz: Vec<String> = c
                .lines()
                .filter(|l| !l.ends_with(" 0"))
                .map(|l| l.replace(' ', "="))
                .collect();
            res.notes
                .push(format!("kernel g{g} counters: {}", nz.join(" ")));
        }
    }
    // Unload it again (our node must be the only RDS/IB listener in the next round).
    for g in 1..=2 {
        lab.exec_ok(g, "rmmod rds_rdma", T)
            .with_context(|| format!("rmmod rds_rdma in g{g}"))?;
    }
    Ok(())
}

/// The benchmark: perftest, our RDS and the kernel's RDS over rxe in one lab boot; prints the
/// table. Needs root; run by `scripts/bench-ib.sh`.
#[test]
#[ignore = "benchmark: scripts/bench-ib.sh"]
fn bench_ib() {
    if std::env::var_os(GUEST_ENV).is_some() {
        return;
    }
    let (tput_s, tput) = plan_env("BENCH_TPUT", DEFAULT_TPUT).expect("BENCH_TPUT");
    let (rr_s, rr) = plan_env("BENCH_RR", DEFAULT_RR).expect("BENCH_RR");
    let t0 = Instant::now();
    let lab = Lab::boot_without_rds_rdma(2);
    let mut res = Results {
        sizes: Vec::new(),
        round: 0,
        rows: Default::default(),
        notes: Vec::new(),
        profiles: Vec::new(),
    };
    let (captures, _tmp) = captures_dir().unwrap_or_else(|e| panic!("{e:#}"));
    let mut jobs = Vec::new();
    let phase = |name: &str, r: Result<()>| rds_tests::report_phase(name, t0, r);
    let rounds: usize = match std::env::var("BENCH_ROUNDS") {
        Ok(v) => v
            .parse()
            .ok()
            .filter(|n| (1..=20).contains(n))
            .expect("BENCH_ROUNDS: 1..=20"),
        Err(_) => 3,
    };
    // Each round runs every contender, in a rotated order (drift in the host's load then
    // does not always hit the same contender); the table shows the medians over the rounds.
    let mut r = Ok(());
    for round in 0..rounds {
        res.round = round;
        for k in 0..3 {
            let which = (round + k) % 3;
            let name = format!("round {} {}", round + 1, CONTENDERS[which]);
            // The capture on the lab bridge: where each round trip's time goes (g2 asks,
            // g1 answers, for all three).
            let file = captures.join(format!("ib-{}-{}.pcap", round + 1, CONTENDERS[which]));
            let cap = Capture::start(NETNS, Proto::Roce, "udp port 4791", &file, RUN_LIMIT * 8);
            let pr = match which {
                0 => perftest(&lab, &mut res, &tput, &rr),
                1 => kernel(&lab, &mut res, &tput, &rr),
                _ => ours(&lab, &mut res, (&tput_s, &rr_s), &mut jobs),
            };
            let prof = cap.and_then(|c| c.profile(guest_addr(2), guest_addr(1), 10));
            res.profiles.push(match prof {
                Ok(p) => format!("{name}: {p}"),
                Err(e) => format!("{name}: no wire profile: {e:#}"),
            });
            r = phase(&name, pr);
            if r.is_err() {
                break;
            }
        }
        if r.is_err() {
            break;
        }
    }
    if let Err(e) = &r {
        eprintln!("FAILED: {e:#}");
        for j in &jobs {
            eprintln!("--- guest g{} so far ---\n{}", j.guest(), j.stdout_so_far());
            j.kill();
        }
        for g in 1..=2 {
            if let Ok(o) = lab.exec(g, "dmesg | tail -n 20; rdstool info conns", T) {
                eprintln!("--- g{g} ---\n{}{}", o.stdout, o.stderr);
            }
        }
    }
    lab.stop().expect("lab stop");
    for n in &res.notes {
        println!("{n}");
    }
    println!(
        "\nfrom a capture on the lab bridge, each contender's longest run of round trips (the \
         {} B rounds; g2 asks, g1 answers; a turnaround is the time from the last packet in to \
         the first packet out of that guest):",
        rr.iter().max_by_key(|r| r.1).map_or(0, |r| r.0)
    );
    for p in &res.profiles {
        println!("  {p}");
    }
    let done_rounds = res.rows.keys().map(|k| k.2 + 1).max().unwrap_or(0);
    for round in 0..done_rounds {
        println!("\nround {}:\n{}", round + 1, res.table(Some(round)));
    }
    println!(
        "\nRDS over rxe (TCG, 1 vCPU per guest), medians of {done_rounds} round(s); latency = \
         round trip / 2; total {:.1} s\n{}\
         ratio columns: ours / that row's contender (msgs/s: above 1 = ours faster; latency:\n\
         below 1 = ours faster); ib_send = ib_send_bw / ib_send_lat; ping = RDS ping\n\
         (zero-length to port 0, answered inside the peer's RDS stack, no application)",
        t0.elapsed().as_secs_f64(),
        res.table(None)
    );
    if let Err(e) = r {
        panic!("bench_ib failed: {e:#}");
    }
}
