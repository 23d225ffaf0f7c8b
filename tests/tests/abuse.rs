//! The hostile-peer and abuse suite (issue 17 item 6): a host daemon (`rds-ctrl daemon tcp`,
//! a process of its own with a private runtime directory) under attack from remote RDS/TCP
//! peers and from local control clients, with its resident memory, CPU time, threads and
//! descriptors read from `/proc/<pid>`. Each case prints its figures on stderr (lines starting
//! with `FIGURE`, for docs/limits.md) and asserts the hard bounds of the issue:
//!
//! - a. 1,000,000 pings from a peer that never reads: RSS growth under 64 MiB; once the peer
//!   is gone its queued pongs are freed within seconds.
//! - b. a peer that ignores the congestion map, sending to a socket that never reads: RSS
//!   growth under 64 MiB, the socket's queue at most its cap, every message past it dropped
//!   and counted (`recv_drop_rcvq_full`).
//! - c. 10,000 TCP connections that send nothing: descriptors within the per-address caps,
//!   threads unchanged, a legitimate `rds-ping` answered meanwhile, everything released after.
//! - d. descriptor exhaustion (the daemon runs with `ulimit -n 64`): under 5% of a core while
//!   every descriptor is taken, and `rds-ping` works once the flood ends.
//! - e. 500 idle control connections from uid 65534: threads bounded by the control server's
//!   workers, the uid held to its connection cap, other users still answered.
//! - f. slowloris control clients (part of a frame, then silence): closed by the daemon after
//!   its request timeout, other requests answered meanwhile.
//!
//! The cross-user socket attack is in `ctl_security.rs`.
//!
//! Addresses: 127.171.N.0/24 for case N (1 = a, ..., 6 = f); the daemon is 127.171.N.200,
//! attackers use smaller addresses (so that the daemon accepts their RDS/TCP connections) and
//! a legitimate embedded `rds-ping` uses 127.171.N.1. Cases run one at a time (their figures
//! are per process, the machine is shared). Needs the release binaries next to this test's
//! executable (`cargo test --workspace --release` builds them), `python3` (the flooding
//! clients), and root for case e (children as uids 65534 and 65533; without root it fails).
//! What those uids run starts in `/`, and a workspace binary they run is copied out of the
//! workspace first (`rds_tests::users`): the clone may sit below a directory only root can
//! enter.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rds_core::ctl::client::CtlClient;
use rds_core::node::admin::{CONNS_PER_UID, REQUEST_TIMEOUT, WORKERS};
use rds_core::wire::HeaderRepr;
use rds_tests::hostdaemon::{run_bounded, wait_for, HostDaemon, RssSampler};
use rds_tests::raw;
use rds_tests::workspace_bin as bin;

const MIB: u64 = 1 << 20;
/// The RSS growth bound of the issue.
const GROWTH_MAX_KIB: u64 = 64 * 1024;
/// `/proc/<pid>/stat` reports CPU time in USER_HZ, 100 per second on Linux.
const TICKS_PER_SEC: f64 = 100.0;

/// Cases run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn ip(case: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 171, case, host)
}

/// A legitimate peer: `rds-ping -c 3` from an embedded node on `from` to the daemon `d`.
/// Returns its output.
fn ping_from(d: &HostDaemon, from: Ipv4Addr) -> Output {
    let mut c = Command::new(bin("rds-ping"));
    c.args(["-c", "3", "-i", "0.2", "-W", "5", "-I"])
        .arg(from.to_string())
        .arg(d.addr.to_string())
        .env("RDS_RUNTIME_DIR", d.dir().join("peer-run"))
        .env("RDS_NO_DAEMON", "1");
    run_bounded(c, Duration::from_secs(60), "rds-ping")
}

#[track_caller]
fn assert_ping_ok(o: &Output, what: &str) {
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("3 packets transmitted, 3 received"),
        "{what}: rds-ping failed ({}):\n{out}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A raw TCP connection from `src` (source port ≡ 0 mod 8: lane 0) to `dst`'s RDS port, with
/// a receive buffer of `rcvbuf` bytes when given.
fn raw_connect(src: Ipv4Addr, dst: Ipv4Addr, rcvbuf: Option<usize>) -> TcpStream {
    let s = raw::connect_lane(src, dst, 0, rcvbuf);
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    s
}

/// The flooding client, in Python so that it is a process of its own (its own descriptor
/// limit, another uid). `tcp DST N SRC1,SRC2,..` opens N non-blocking TCP connections to
/// DST:16385 from the source addresses in turn; `unix PATH N` opens N connections to a Unix
/// socket. Neither sends anything. After `SETTLE` seconds it prints one line,
/// `MODE issued N refused R open O closed C pending P` (refused: the connect failed at once;
/// closed: the server closed or reset it; pending: a TCP handshake still unanswered), and
/// holds every connection until its standard input reaches end of file.
const FLOOD_PY: &str = r#"
import errno, os, select, socket, sys, time
mode = sys.argv[1]
socks = []
refused = 0
if mode == "tcp":
    dst, n, srcs = sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((srcs[i % len(srcs)], 0))
        except OSError:
            refused += 1
            s.close()
            continue
        r = s.connect_ex((dst, 16385))
        if r in (0, errno.EINPROGRESS):
            socks.append(s)
        else:
            refused += 1
            s.close()
else:
    path, n = sys.argv[2], int(sys.argv[3])
    for i in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        r = s.connect_ex(path)
        if r in (0, errno.EINPROGRESS):
            socks.append(s)
        else:
            refused += 1
            s.close()
print("issued", flush=True)
time.sleep(float(os.environ.get("SETTLE", "3")))
p = select.poll()
by_fd = {}
for s in socks:
    p.register(s, select.POLLIN | select.POLLOUT)
    by_fd[s.fileno()] = s
ev = dict(p.poll(0))
opened = closed = pending = 0
for fd, s in by_fd.items():
    e = ev.get(fd, 0)
    if e & (select.POLLERR | select.POLLHUP):
        closed += 1
    elif e & select.POLLIN:
        try:
            if mode == "tcp":
                d = s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            else:
                while True:
                    d = s.recv(65536, socket.MSG_DONTWAIT)
                    if not d:
                        break
            if d:
                opened += 1
            else:
                closed += 1
        except BlockingIOError:
            opened += 1
        except OSError:
            closed += 1
    elif e & select.POLLOUT:
        opened += 1
    else:
        pending += 1
print(mode, "issued", len(socks) + refused, "refused", refused, "open", opened, "closed",
      closed, "pending", pending, flush=True)
sys.stdin.read()
"#;

/// A running flooding client ([`FLOOD_PY`]); dropping it releases its connections.
struct Flood {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// What a [`Flood`] reported.
#[derive(Debug, Default, Clone, Copy)]
struct FloodReport {
    issued: u64,
    refused: u64,
    open: u64,
    closed: u64,
    pending: u64,
}

impl Flood {
    /// Starts the client: `args` after the script, `nofile` its descriptor limit, `uid` to run
    /// as (with the same gid), `settle` seconds before it reports.
    fn start(args: &[String], nofile: u64, uid: Option<u32>, settle: f64) -> Flood {
        // The system's python3 first: another uid may not reach a user's own install.
        let py = if Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3"
        } else {
            "python3"
        };
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!("ulimit -n {nofile} && exec {py} -c \"$0\" \"$@\""))
            .arg(FLOOD_PY)
            .args(args)
            .env("SETTLE", settle.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(u) = uid {
            // The working directory too: the workspace may be closed to that uid.
            c.uid(u).gid(u).current_dir("/");
        }
        let mut child = c.spawn().expect("python3 is needed for the abuse suite");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut f = Flood {
            child,
            stdin,
            stdout,
        };
        let l = f.line();
        assert_eq!(l, "issued", "flooding client: {l}");
        f
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.stdout.read_line(&mut l).unwrap();
        assert!(!l.is_empty(), "the flooding client exited early");
        l.trim().to_string()
    }

    /// Waits for the report line (after the settle time).
    fn report(&mut self) -> FloodReport {
        let l = self.line();
        let w: Vec<&str> = l.split_whitespace().collect();
        let num = |k: &str| -> u64 {
            w.iter()
                .position(|x| *x == k)
                .and_then(|i| w.get(i + 1))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in {l:?}"))
        };
        FloodReport {
            issued: num("issued"),
            refused: num("refused"),
            open: num("open"),
            closed: num("closed"),
            pending: num("pending"),
        }
    }

    /// Releases every connection and waits for the client to exit.
    fn release(mut self) {
        self.stdin.take();
        let t0 = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stdin.take();
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Queue entries (send and retransmit) of the daemon towards `peer` (and its RDS port
/// `port` when given), plus the entries the snapshot left out (all counted as matching).
fn queued_towards(d: &HostDaemon, peer: Ipv4Addr, port: Option<u16>) -> u64 {
    let s = d.snapshot();
    let p = std::net::IpAddr::V4(peer);
    let listed = s
        .send
        .iter()
        .chain(s.retrans.iter())
        .filter(|m| m.faddr == p && port.is_none_or(|port| m.fport == port))
        .count() as u64;
    listed + s.omitted.send + s.omitted.retrans
}

fn kib_growth(now: u64, start: u64) -> u64 {
    now.saturating_sub(start)
}

/// a. 1,000,000 pings from a peer that never reads its pongs.
#[test]
fn a_million_unread_pings() {
    let _g = serial();
    const PINGS: u64 = 1_000_000;
    const BATCH: u64 = 10_000;
    const PING_PORT: u16 = 4444;
    let mut d = HostDaemon::start(ip(1, 200), None, "");
    let peer = ip(1, 10);
    let start = d.proc();
    let sampler = RssSampler::start(d.pid);
    // A small receive buffer: the peer's window closes after a few hundred pongs, as any
    // peer's does that never reads, only sooner.
    let mut s = raw_connect(peer, d.addr, Some(4096));
    let t0 = Instant::now();
    let mut buf = Vec::with_capacity((BATCH as usize) * 48);
    for b in 0..PINGS / BATCH {
        buf.clear();
        for i in 0..BATCH {
            // A ping: an empty message to RDS port 0, as rds-ping sends.
            buf.extend_from_slice(&HeaderRepr::data(b * BATCH + i + 1, PING_PORT, 0, 0).to_bytes());
        }
        s.write_all(&buf)
            .unwrap_or_else(|e| panic!("writing pings (batch {b}): {e}\n{}", d.log()));
    }
    let sent_in = t0.elapsed();
    let consumed_in = wait_for(
        "the daemon to take every ping",
        Duration::from_secs(120),
        || d.stat("recv_ping") >= PINGS,
    );
    let peak = sampler.stop();
    let during = d.proc();
    let st = d.stats();
    let get = |k: &str| st.get(k).copied().unwrap_or(0);
    assert_eq!(get("recv_ping"), PINGS);
    // Pongs go from port 0 to the ping's port.
    let queued = queued_towards(&d, peer, Some(PING_PORT));
    eprintln!(
        "FIGURE a unread-pings: {PINGS} pings sent in {:.2} s, all taken {:.2} s after the \
         start; daemon RSS {} KiB at start, peak {} KiB (growth {:.1} MiB), {} pongs held for \
         the peer; send_pong {} send_pong_drop_full {} recv_drop_no_mem {}; threads \
         {} -> {}",
        sent_in.as_secs_f64(),
        (sent_in + consumed_in).as_secs_f64(),
        start.rss_kib,
        peak,
        kib_growth(peak, start.rss_kib) as f64 / 1024.0,
        queued,
        get("send_pong"),
        get("send_pong_drop_full"),
        get("recv_drop_no_mem"),
        start.threads,
        during.threads,
    );
    assert!(
        kib_growth(peak, start.rss_kib) < GROWTH_MAX_KIB,
        "RSS grew by {} KiB (bound 64 MiB)",
        kib_growth(peak, start.rss_kib)
    );
    assert!(
        get("send_pong_drop_full") + get("recv_drop_no_mem") > 0,
        "pings beyond the pong cap are dropped and counted"
    );
    // The peer's window is closed: the connection holds as many pongs as it may.
    assert_eq!(queued, rds_core::proto::stack::PONG_QUEUE_MAX as u64);
    // The peer leaves: its pongs are dropped (counted) and their memory returned. (The
    // daemon's own handshake probe stays queued until the connection is freed, 60 s idle.)
    drop(s);
    let freed_in = wait_for(
        "the pongs queued for the peer to be freed",
        Duration::from_secs(20),
        || queued_towards(&d, peer, Some(PING_PORT)) == 0,
    );
    std::thread::sleep(Duration::from_secs(1));
    let after = d.proc();
    let dropped_down = d.stat("send_pong_drop_down");
    eprintln!(
        "FIGURE a unread-pings: peer gone, its queue freed within {:.2} s \
         (send_pong_drop_down {dropped_down}); RSS {} KiB one second later ({:+.1} MiB against \
         the start: the allocator keeps freed pages)",
        freed_in.as_secs_f64(),
        after.rss_kib,
        (after.rss_kib as f64 - start.rss_kib as f64) / 1024.0
    );
    // The pongs held for the peer are what the daemon frees (its RSS is not the measure: the
    // allocator keeps pages it got back); they were dropped and counted.
    assert_eq!(
        dropped_down, queued,
        "{queued} pongs were held for the peer, {dropped_down} dropped when it left"
    );
    assert!(kib_growth(after.rss_kib, start.rss_kib) < GROWTH_MAX_KIB);
    // A legitimate peer still gets its pongs.
    assert_ping_ok(&ping_from(&d, ip(1, 1)), "after the flood");
    d.assert_alive();
}

/// b. A peer that ignores the congestion map floods a socket that never reads.
#[test]
fn b_peer_ignoring_congestion() {
    let _g = serial();
    const SIZE: usize = 64 << 10;
    const MSGS: u64 = 4096; // 256 MiB
    let mut d = HostDaemon::start(ip(2, 200), None, "");
    let peer = ip(2, 10);
    let port = 7000u16;
    let mut idle = idle_sock(&d, &format!("{}:{port}", d.addr))
        .spawn()
        .expect("rds-idle-sock");
    let mut out = BufReader::new(idle.stdout.take().unwrap());
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    let _idle_stdin = idle.stdin.take();
    struct Reap(Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let idle = Reap(idle);
    assert_eq!(
        l.trim(),
        format!("bound {}:{port} daemon", d.addr),
        "the idle socket is the daemon's"
    );
    let start = d.proc();
    let before = d.stats();
    let sampler = RssSampler::start(d.pid);
    let mut s = raw_connect(peer, d.addr, None);
    let payload = vec![0x5a_u8; SIZE];
    let t0 = Instant::now();
    for i in 1..=MSGS {
        s.write_all(&HeaderRepr::data(i, 5000, port, SIZE as u32).to_bytes())
            .and_then(|_| s.write_all(&payload))
            .unwrap_or_else(|e| panic!("writing message {i}: {e}\n{}", d.log()));
    }
    let sent_in = t0.elapsed();
    let queued = |d: &HostDaemon| -> (u64, u64) {
        let snap = d.snapshot();
        let q: Vec<_> = snap.recv.iter().filter(|m| m.lport == port).collect();
        (
            q.len() as u64 + snap.omitted.recv,
            q.iter().map(|m| u64::from(m.len)).sum(),
        )
    };
    let delta = |d: &HostDaemon, k: &str| -> u64 {
        d.stats().get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0)
    };
    wait_for(
        "every message to be queued or dropped",
        Duration::from_secs(60),
        || delta(&d, "recv_drop_rcvq_full") + delta(&d, "recv_drop_no_mem") + queued(&d).0 >= MSGS,
    );
    let peak = sampler.stop();
    let (n_queued, bytes_queued) = queued(&d);
    let drops = delta(&d, "recv_drop_rcvq_full");
    let nomem = delta(&d, "recv_drop_no_mem");
    eprintln!(
        "FIGURE b ignored-congestion: {MSGS} messages of {} KiB ({} MiB) sent in {:.2} s to a \
         socket that never reads; {n_queued} queued ({:.1} MiB), {drops} dropped \
         (recv_drop_rcvq_full), {nomem} (recv_drop_no_mem); daemon RSS {} KiB at start, peak \
         {} KiB (growth {:.1} MiB)",
        SIZE >> 10,
        (MSGS * SIZE as u64) / MIB,
        sent_in.as_secs_f64(),
        bytes_queued as f64 / MIB as f64,
        start.rss_kib,
        peak,
        kib_growth(peak, start.rss_kib) as f64 / 1024.0,
    );
    // The daemon did advertise the port as congested: the peer ignored it.
    assert!(
        congestion_advertised(&mut s, port),
        "the daemon advertised no congestion of port {port}"
    );
    assert_eq!(
        n_queued + drops + nomem,
        MSGS,
        "every message queued or dropped"
    );
    assert!(
        drops > 0,
        "messages past the queue's cap are dropped and counted"
    );
    // The cap: 4 x rcvbuf, at least 32 MiB (rds_core::proto::stack::RCVQ_CAP_*), plus the
    // message that crossed it.
    let cap = (rds_core::proto::stack::RCVQ_CAP_MIN as u64)
        .max(4 * rds_core::tunables::Tunables::default().rcvbuf_default as u64);
    assert!(
        bytes_queued <= cap + SIZE as u64,
        "{bytes_queued} bytes queued, cap {cap}"
    );
    assert!(
        kib_growth(peak, start.rss_kib) < GROWTH_MAX_KIB,
        "RSS grew by {} KiB (bound 64 MiB)",
        kib_growth(peak, start.rss_kib)
    );
    drop(s);
    drop(idle);
    wait_for(
        "the socket's queue to be freed with the socket",
        Duration::from_secs(20),
        || queued(&d).0 == 0,
    );
    d.assert_alive();
}

/// Reads what the daemon sent on a raw RDS/TCP connection until a congestion map update
/// marks `port` congested (true), or for at most 10 s (false).
fn congestion_advertised(s: &mut TcpStream, port: u16) -> bool {
    use rds_core::wire::{flags, CongMap};
    raw::read_until(s, Duration::from_secs(10), |h, payload| {
        h.flags & flags::CONG_BITMAP != 0
            && CongMap::from_bytes(payload).is_ok_and(|m| m.test(port))
    })
    .is_some()
}

/// `rds-idle-sock ADDR:PORT` with the environment of daemon `d`, stdin and stdout piped.
fn idle_sock(d: &HostDaemon, addr: &str) -> Command {
    let mut c = d.tool_at(Path::new(env!("CARGO_BIN_EXE_rds-idle-sock")));
    c.arg(addr)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    c
}

/// Counters of the TCP transport's caps and back-off, for the figures.
const TCP_CAP_COUNTERS: [&str; 7] = [
    "tcp_accept_addr_limit",
    "tcp_accept_node_limit",
    "tcp_wait_addr_evicted",
    "tcp_wait_node_evicted",
    "tcp_wait_expired",
    "tcp_accept_emfile",
    "tcp_listen_paused",
];

fn counters_line(st: &HashMap<String, u64>, names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n} {}", st.get(*n).copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Most TCP connections the node keeps per remote address (`TCP_CONNS_PER_ADDR` in
/// rds-core's `node/tcp/mod.rs`).
const TCP_CONNS_PER_ADDR: u64 = 32;

/// c. 10,000 TCP connections that send nothing, held open.
#[test]
fn c_ten_thousand_silent_connects() {
    let _g = serial();
    const CONNS: u64 = 10_000;
    const SOURCES: u8 = 100;
    // 8192 descriptors: the node's connection cap is then its maximum, 4096.
    let mut d = HostDaemon::start(ip(3, 200), Some(8192), "");
    let start = d.proc();
    let srcs: Vec<String> = (0..SOURCES).map(|k| ip(3, 10 + k).to_string()).collect();
    let t0 = Instant::now();
    let mut flood = Flood::start(
        &[
            "tcp".into(),
            d.addr.to_string(),
            CONNS.to_string(),
            srcs.join(","),
        ],
        CONNS + 1000,
        None,
        3.0,
    );
    let issued_in = t0.elapsed();
    let sampler = RssSampler::start(d.pid);
    let rep = flood.report();
    let early = d.proc();
    // Connections waiting for a lane expire after 5 s (rds_core::proto::stack::STASH_MAX).
    std::thread::sleep(rds_core::proto::stack::STASH_MAX + Duration::from_secs(1));
    let held = d.proc();
    let ping = ping_from(&d, ip(3, 1));
    let peak = sampler.stop();
    let st = d.stats();
    eprintln!(
        "FIGURE c silent-connects: {} connects from {SOURCES} addresses issued in {:.2} s \
         (client's view: {} established, {} reset or closed by the daemon, {} unanswered, {} \
         refused at once; established includes SYN-cookie half-opens the daemon never saw); \
         daemon fds {} at start, {} after 3 s, {} after 9 s; threads {} -> {}; RSS {} -> peak {} KiB; \
         {}",
        rep.issued,
        issued_in.as_secs_f64(),
        rep.open,
        rep.closed,
        rep.pending,
        rep.refused,
        start.fds,
        early.fds,
        held.fds,
        start.threads,
        held.threads,
        start.rss_kib,
        peak,
        counters_line(&st, &TCP_CAP_COUNTERS),
    );
    assert_eq!(rep.issued, CONNS);
    let bound = start.fds + u64::from(SOURCES) * TCP_CONNS_PER_ADDR;
    assert!(
        early.fds <= bound && held.fds <= bound,
        "daemon descriptors {} / {} over the per-address caps ({bound})",
        early.fds,
        held.fds
    );
    assert!(
        held.threads <= start.threads + WORKERS as u64,
        "threads {} -> {}",
        start.threads,
        held.threads
    );
    let capped: u64 = TCP_CAP_COUNTERS[..5].iter().map(|k| st[*k]).sum();
    assert!(
        capped > 0,
        "connections past the caps are reset and counted"
    );
    assert!(kib_growth(peak, start.rss_kib) < GROWTH_MAX_KIB);
    assert_ping_ok(&ping, "during the flood");
    flood.release();
    let released_in = wait_for(
        "the daemon's descriptors to return",
        Duration::from_secs(30),
        || d.proc().fds <= start.fds + 8,
    );
    eprintln!(
        "FIGURE c silent-connects: descriptors back to {} within {:.2} s of the release",
        d.proc().fds,
        released_in.as_secs_f64()
    );
    d.assert_alive();
}

/// d. Descriptor exhaustion: the daemon runs with 64 descriptors; control and TCP
/// connections take them all.
#[test]
fn d_fd_exhaustion() {
    let _g = serial();
    const NOFILE: u64 = 64;
    let mut d = HostDaemon::start(ip(4, 200), Some(NOFILE), "");
    let start = d.proc();
    let sock = d.sock_path().to_string_lossy().into_owned();
    // Control connections first (root has the most of them), then TCP connections: both
    // listeners then find no descriptor for what waits in their backlog.
    let mut ctl_flood = Flood::start(&["unix".into(), sock, "200".into()], 1000, None, 1.0);
    let ctl_rep = ctl_flood.report();
    let srcs: Vec<String> = (0..30).map(|k| ip(4, 10 + k).to_string()).collect();
    let mut tcp_flood = Flood::start(
        &[
            "tcp".into(),
            d.addr.to_string(),
            "300".into(),
            srcs.join(","),
        ],
        1000,
        None,
        1.0,
    );
    let tcp_rep = tcp_flood.report();
    let full = d.proc();
    let window = Duration::from_secs(5);
    let t0 = Instant::now();
    std::thread::sleep(window);
    let end = d.proc();
    let secs = t0.elapsed().as_secs_f64();
    let cpu = (end.cpu_ticks - full.cpu_ticks) as f64 / TICKS_PER_SEC / secs * 100.0;
    // A control request now waits in the backlog; it is not part of the figure.
    ctl_flood.release();
    tcp_flood.release();
    let back_in = wait_for(
        "the control socket to answer again",
        Duration::from_secs(30),
        || CtlClient::connect(&d.sock_path()).is_ok(),
    );
    let st = d.stats();
    let ping = ping_from(&d, ip(4, 1));
    eprintln!(
        "FIGURE d fd-exhaustion: RLIMIT_NOFILE {NOFILE}; daemon fds {} at start, {} with the \
         flood (control: {} open, {} refused; TCP: {} open, {} closed, {} unanswered); CPU \
         {cpu:.2}% of a core over {secs:.1} s at EMFILE; control socket answering {:.2} s \
         after the release; {}",
        start.fds,
        full.fds,
        ctl_rep.open,
        ctl_rep.refused,
        tcp_rep.open,
        tcp_rep.closed,
        tcp_rep.pending,
        back_in.as_secs_f64(),
        counters_line(&st, &TCP_CAP_COUNTERS),
    );
    assert!(
        full.fds + 2 >= NOFILE,
        "the flood takes (nearly) every descriptor: {} of {NOFILE}",
        full.fds
    );
    assert!(cpu < 5.0, "CPU {cpu:.2}% of a core at EMFILE (bound 5%)");
    assert_ping_ok(&ping, "after the flood");
    d.assert_alive();
}

/// e. 500 idle control connections from an unprivileged user.
#[test]
fn e_idle_control_connections_unprivileged() {
    let _g = serial();
    rds_tests::users::require_root("children run as uids 65534 and 65533");
    let mut d = HostDaemon::start(ip(5, 200), None, "");
    let start = d.proc();
    let sock = d.sock_path().to_string_lossy().into_owned();
    let mut flood = Flood::start(&["unix".into(), sock, "500".into()], 1000, Some(65534), 3.0);
    let rep = flood.report();
    let during = d.proc();
    // Root is answered.
    let t0 = Instant::now();
    let o = run_bounded(
        {
            let mut c = d.tool("rds-info");
            c.arg("-c");
            c
        },
        Duration::from_secs(30),
        "rds-info -c",
    );
    let root_in = t0.elapsed();
    assert!(
        o.status.success(),
        "rds-info -c as root: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    // Another unprivileged user is answered too. It runs a copy of rds-ctrl in a directory it
    // can reach: the build tree may sit below a directory that only root can enter (a clone in
    // root's home or in `mktemp -d`, both 0700).
    let other = {
        let reach = rds_tests::users::Reachable::new();
        let mut c = d.tool_at(&reach.copy(&bin("rds-ctrl")));
        c.arg("stats")
            .uid(65533)
            .gid(65533)
            .current_dir("/")
            .env("HOME", "/");
        run_bounded(c, Duration::from_secs(30), "rds-ctrl stats as uid 65533")
    };
    let after = d.proc();
    eprintln!(
        "FIGURE e idle-control: uid 65534 opened {} control connections ({} held open, {} \
         closed by the daemon, {} refused at connect); daemon threads {} -> {}, fds {} -> {}; \
         rds-info -c as root answered in {:.3} s; another uid: {}",
        rep.issued,
        rep.open,
        rep.closed,
        rep.refused,
        start.threads,
        during.threads.max(after.threads),
        start.fds,
        during.fds,
        root_in.as_secs_f64(),
        if other.status.success() {
            "answered".to_string()
        } else {
            format!("failed: {}", String::from_utf8_lossy(&other.stderr).trim())
        }
    );
    assert_eq!(rep.issued, 500);
    assert!(
        rep.open <= CONNS_PER_UID as u64,
        "uid 65534 holds {} control connections (cap {CONNS_PER_UID})",
        rep.open
    );
    assert!(
        during.threads.max(after.threads) <= start.threads + WORKERS as u64,
        "threads {} -> {} (workers {WORKERS})",
        start.threads,
        during.threads.max(after.threads)
    );
    assert!(
        during.fds <= start.fds + CONNS_PER_UID as u64 + 8,
        "fds {} -> {}",
        start.fds,
        during.fds
    );
    assert!(
        other.status.success(),
        "rds-ctrl stats as uid 65533: {}\n{}",
        other.status,
        String::from_utf8_lossy(&other.stderr)
    );
    flood.release();
    d.assert_alive();
}

/// f. Slowloris control clients: part of a frame, then silence.
#[test]
fn f_slowloris_control_client() {
    let _g = serial();
    const CLIENTS: usize = 20;
    let mut d = HostDaemon::start(ip(6, 200), None, "");
    let start = d.proc();
    let t0 = Instant::now();
    let mut slow = Vec::new();
    for k in 0..CLIENTS {
        let mut s = UnixStream::connect(d.sock_path()).unwrap();
        if k % 2 == 0 {
            // Half a frame header.
            s.write_all(&[0, 0, 0, 40]).unwrap();
        } else {
            // A whole header announcing 40 bytes of JSON, and 10 of them.
            let mut f = Vec::new();
            f.extend_from_slice(&40u32.to_be_bytes());
            f.extend_from_slice(&0u32.to_be_bytes());
            f.extend_from_slice(b"{\"op\":\"hel");
            s.write_all(&f).unwrap();
        }
        s.set_read_timeout(Some(REQUEST_TIMEOUT + Duration::from_secs(20)))
            .unwrap();
        slow.push(s);
    }
    // Others are served meanwhile.
    let t1 = Instant::now();
    let st = d.stats();
    let served_in = t1.elapsed();
    assert!(st.contains_key("recv_ping"));
    let during = d.proc();
    let mut closed_after = Vec::new();
    for s in &mut slow {
        let mut b = [0u8; 4096];
        let closed = loop {
            match s.read(&mut b) {
                Ok(0) => break true,
                Ok(_) => continue, // an error reply before the close
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break false,
                Err(_) => break true, // reset
            }
        };
        assert!(
            closed,
            "a stalled control client still open after {:?}",
            t0.elapsed()
        );
        closed_after.push(t0.elapsed());
    }
    let first = closed_after.iter().min().unwrap();
    let last = closed_after.iter().max().unwrap();
    eprintln!(
        "FIGURE f slowloris: {CLIENTS} stalled control clients closed {:.2}-{:.2} s after they \
         connected (REQUEST_TIMEOUT {} s); another request answered in {:.3} s meanwhile; \
         threads {} -> {}",
        first.as_secs_f64(),
        last.as_secs_f64(),
        REQUEST_TIMEOUT.as_secs(),
        served_in.as_secs_f64(),
        start.threads,
        during.threads,
    );
    assert!(
        *last <= REQUEST_TIMEOUT + Duration::from_secs(5),
        "closed after {last:?}"
    );
    assert!(during.threads <= start.threads + WORKERS as u64);
    d.assert_alive();
}
