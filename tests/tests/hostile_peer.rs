//! A hostile peer (issue 3 item 2 and 5): a raw TCP client connects to a node's
//! `addr:16385` and sends malformed RDS/TCP streams. The node must drop that connection, count
//! it (`conn_drop_oversize`, `conn_drop_bad_cong_map`, `conn_drop_bad_frame`), keep serving a
//! good peer, never crash and never allocate without bound.
//!
//! Addresses: 127.3.7.0/24. The node under attack is 127.3.7.200; the raw clients use smaller
//! addresses (127.3.7.10 + case) so that the node accepts their connections (a larger address
//! may not own an RDS/TCP connection), from a source port ≡ 0 (mod 8) (lane 0).
//!
//! Connection and descriptor limits (issue 17 item 4, the transport's caps documented in
//! `rds-core/src/node/tcp/mod.rs`): the per-address cap (node 127.3.7.201-205, attacker
//! 127.3.7.190); the waiting caps (node 127.37.3.200, attackers 127.37.3.1-33); 10,000 connections that send nothing (node 127.37.1.200, legitimate peer
//! 127.37.1.1, attackers 127.37.0.1-64), with the node in this process so that its
//! descriptors are counted in `/proc/self/fd`; descriptor exhaustion of an `rds-ctrl daemon`
//! child whose `RLIMIT_NOFILE` is lowered with `prlimit` once it runs (daemon 127.37.2.200,
//! attackers 127.37.2.1-80, `rds-ping` from 127.37.2.150); the node cap of a daemon under
//! `ulimit -n 64` (daemon 127.37.4.200, attackers 127.37.4.1-40, `rds-ping` from
//! 127.37.4.150). The cases run one at a time
//! (descriptor counts are per process). Figures go to stderr.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::socket::{
    bind, connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn,
};
use rds_core::stats::Counter;
use rds_core::wire::{flags, ExtHeader, HeaderRepr, PROBE_PORT};
use rds_core::{CtlMode, Node, NodeConfig, Socket};
use rds_tests::raw;
use rds_tests::workspace_bin as bin;

const TARGET: &str = "127.3.7.200";

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn node(ip: &str) -> Node {
    let mut cfg = NodeConfig::new([ip.parse().unwrap()]);
    cfg.ctl = CtlMode::Off;
    cfg.name = format!("hostile-{ip}");
    cfg.seed = Some(7);
    Node::start(cfg).unwrap()
}

/// Cases run one at a time: they count this process's descriptors.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    raise_nofile();
    g
}

/// Raises this process's soft descriptor limit to its hard limit (64 Ki at most): the
/// in-process cases hold both ends of several hundred connections, more than the usual soft
/// limit of 1,024, and a node sizes its connection cap from the limit when it starts.
fn raise_nofile() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let want = hard.min(65_536);
        if soft < want {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, want, hard);
        }
    }
}

/// A raw TCP connection from `src` (source port ≡ 0 mod 8) to the target's RDS port.
fn raw_connect(src: Ipv4Addr) -> TcpStream {
    raw_connect_lane(src, TARGET.parse().unwrap(), 0)
}

/// A raw TCP connection from `src` to `dst:16385` from a source port ≡ `lane` (mod 8), reads
/// timing out after 200 ms.
fn raw_connect_lane(src: Ipv4Addr, dst: Ipv4Addr, lane: u16) -> TcpStream {
    let s = raw::connect_lane(src, dst, lane, None);
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s
}

/// Reads (and discards what the node sends) until the node closes the connection; returns
/// whether it did within `within`.
fn closed_by_node(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 65536];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true, // reset
        }
    }
    false
}

fn data_frame(seq: u64, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = HeaderRepr::data(seq, sport, dport, payload.len() as u32)
        .to_bytes()
        .to_vec();
    v.extend_from_slice(payload);
    v
}

fn stat(n: &Node, name: &str) -> u64 {
    n.stats()
        .into_iter()
        .find(|(k, _)| *k == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A good node exchanges a message each way with the target.
fn good_peer_still_served(target: &Node, tsock: &Socket, good: &Socket, round: u32) {
    let msg = format!("round {round}");
    good.send_to(msg.as_bytes(), a("127.3.7.200:6000")).unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = tsock.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (msg.as_bytes(), a("127.3.7.1:6001")));
    tsock.send_to(&buf[..n], from).unwrap();
    let (n, from) = good.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (msg.as_bytes(), a("127.3.7.200:6000")));
    assert!(target.is_running());
}

#[test]
fn malformed_streams_drop_only_that_connection() {
    let _g = serial();
    let t = node(TARGET);
    let g = node("127.3.7.1");
    let tsock = Socket::with_node(&t);
    tsock.bind(a("127.3.7.200:6000")).unwrap();
    tsock.set_read_timeout(Some(Duration::from_secs(10)));
    let good = Socket::with_node(&g);
    good.bind(a("127.3.7.1:6001")).unwrap();
    good.set_read_timeout(Some(Duration::from_secs(10)));
    good_peer_still_served(&t, &tsock, &good, 0);
    let rss0 = rss_kib();
    let wait = Duration::from_secs(10);

    // 1. h_len over 1 MiB.
    let mut s = raw_connect(Ipv4Addr::new(127, 3, 7, 10));
    s.write_all(&HeaderRepr::data(1, 9, 6000, (1 << 20) + 1).to_bytes())
        .unwrap();
    assert!(
        closed_by_node(&mut s, wait),
        "oversize h_len: connection dropped"
    );
    assert_eq!(stat(&t, "conn_drop_oversize"), 1);
    good_peer_still_served(&t, &tsock, &good, 1);

    // 2. A congestion map of the wrong size.
    let mut s = raw_connect(Ipv4Addr::new(127, 3, 7, 11));
    let mut hdr = HeaderRepr::cong_map();
    hdr.len = 100;
    let mut f = hdr.to_bytes().to_vec();
    f.extend_from_slice(&[0xff; 100]);
    s.write_all(&f).unwrap();
    assert!(
        closed_by_node(&mut s, wait),
        "short congestion map: dropped"
    );
    assert_eq!(t.counter(Counter::ConnDropBadCongMap), 1);
    assert_eq!(stat(&t, "conn_drop_bad_cong_map"), 1);
    good_peer_still_served(&t, &tsock, &good, 2);

    // 3. Junk: the first "header" announces 0xffffffff bytes.
    let mut s = raw_connect(Ipv4Addr::new(127, 3, 7, 12));
    let junk: Vec<u8> = (0..4096u32)
        .map(|i| {
            if i < 48 {
                0xff
            } else {
                ((i * 7919) >> 3) as u8
            }
        })
        .collect();
    s.write_all(&junk).unwrap();
    assert!(closed_by_node(&mut s, wait), "junk: dropped");
    assert_eq!(stat(&t, "conn_drop_oversize"), 2);
    good_peer_still_served(&t, &tsock, &good, 3);

    // 4. A bad header checksum: RDS/TCP never checks h_csum (tcp_recv.c), so, as with the
    // kernel, the message is delivered and the connection stays.
    let mut s = raw_connect(Ipv4Addr::new(127, 3, 7, 13));
    let mut f = data_frame(1, 4444, 6000, b"checksum");
    f[30] = 0x12;
    f[31] = 0x34;
    s.write_all(&f).unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = tsock.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"checksum"[..], a("127.3.7.13:4444")));
    assert_eq!(t.counter(Counter::RecvDropBadChecksum), 0);
    assert!(!closed_by_node(&mut s, Duration::from_millis(300)));
    drop(s);
    good_peer_still_served(&t, &tsock, &good, 4);

    // 5. A truncated header, then close: nothing delivered, the connection goes away.
    let delivered = t.counter(Counter::RecvQueued);
    let mut s = raw_connect(Ipv4Addr::new(127, 3, 7, 14));
    s.write_all(&data_frame(1, 4444, 6000, b"xx")[..20])
        .unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(closed_by_node(&mut s, wait), "truncated header: closed");
    assert_eq!(t.counter(Counter::RecvQueued), delivered);
    good_peer_still_served(&t, &tsock, &good, 5);

    // 6. Valid frames, then garbage: the valid ones are delivered in order, then the
    // connection is dropped and counted.
    let mut s = raw_connect(Ipv4Addr::new(127, 3, 7, 15));
    let mut stream = Vec::new();
    for i in 1..=5u64 {
        stream.extend(data_frame(i, 5555, 6000, format!("valid {i}").as_bytes()));
    }
    stream.extend_from_slice(&[0xee; 256]);
    s.write_all(&stream).unwrap();
    for i in 1..=5u64 {
        let (n, from) = tsock.recv_from(&mut buf).unwrap();
        assert_eq!(from, a("127.3.7.15:5555"));
        assert_eq!(&buf[..n], format!("valid {i}").as_bytes());
    }
    assert!(
        closed_by_node(&mut s, wait),
        "garbage after valid frames: dropped"
    );
    assert_eq!(stat(&t, "conn_drop_oversize"), 3);
    good_peer_still_served(&t, &tsock, &good, 6);

    // 7. A frame with flags it may not carry: a congestion map flagged on a short data
    // message of a valid size is still a wrong-size map.
    let mut s = raw_connect(Ipv4Addr::new(127, 3, 7, 16));
    let mut h = HeaderRepr::data(1, 1, 6000, 8);
    h.flags = flags::CONG_BITMAP;
    let mut f = h.to_bytes().to_vec();
    f.extend_from_slice(&[0; 8]);
    s.write_all(&f).unwrap();
    assert!(closed_by_node(&mut s, wait));
    assert_eq!(t.counter(Counter::ConnDropBadCongMap), 2);
    good_peer_still_served(&t, &tsock, &good, 7);

    // 8. Memory stays bounded: 40 connections each announcing a maximal (1 MiB) message and
    // then stalling, and 40 announcing 4 GiB.
    let mut held = Vec::new();
    for k in 0..40u8 {
        let mut s = raw_connect(Ipv4Addr::new(127, 3, 7, 100 + k));
        s.write_all(&HeaderRepr::data(1, 7, 6000, 1 << 20).to_bytes())
            .unwrap();
        s.write_all(&[0xab; 1000]).unwrap();
        held.push(s);
        let mut s = raw_connect(Ipv4Addr::new(127, 3, 7, 150 + k));
        s.write_all(&HeaderRepr::data(1, 7, 6000, u32::MAX).to_bytes())
            .unwrap();
        assert!(closed_by_node(&mut s, wait));
    }
    assert_eq!(stat(&t, "conn_drop_oversize"), 43);
    good_peer_still_served(&t, &tsock, &good, 8);
    let grown = rss_kib().saturating_sub(rss0);
    assert!(grown < 128 * 1024, "RSS grew by {grown} KiB");
    drop(held);
    good_peer_still_served(&t, &tsock, &good, 9);
    // Nothing was delivered from the stalled connections or the dropped ones.
    let mut nb = [0u8; 8];
    let r = tsock.recv_msg(
        &mut nb,
        rds_core::RecvFlags {
            dontwait: true,
            ..Default::default()
        },
    );
    assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EAGAIN));
    t.shutdown();
    g.shutdown();
}

/// Polls `f` every 10 ms until it holds; fails naming `what` after `limit`.
fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < end, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `s` (non-blocking) is still open: no end of stream and no reset yet. What the node
/// sent on it is read and discarded.
fn still_open(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// Closes with a reset (no TIME_WAIT left behind for the next run's source ports).
fn reset_close(s: TcpStream) {
    let _ = setsockopt(
        &s,
        sockopt::Linger,
        &libc::linger {
            l_onoff: 1,
            l_linger: 0,
        },
    );
    drop(s);
}

/// Open descriptors of a process (`"self"` or a pid).
fn fd_count(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Counters of the node's TCP transport that count a connection it reset or closed.
const TCP_CLOSE_COUNTERS: [&str; 7] = [
    "tcp_accept_addr_limit",
    "tcp_accept_node_limit",
    "tcp_wait_addr_evicted",
    "tcp_wait_node_evicted",
    "tcp_wait_expired",
    "tcp_listen_closed_stale",
    "tcp_connect_raced",
];

fn counters_line(n: &Node) -> String {
    TCP_CLOSE_COUNTERS
        .iter()
        .chain(&["tcp_accept_emfile", "tcp_listen_paused"])
        .map(|c| format!("{c} {}", stat(n, c)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A node on several local addresses (the transport's caps are per remote address).
fn multi_node(name: &str, addrs: &[Ipv4Addr]) -> Node {
    let mut cfg = NodeConfig::new(addrs.iter().map(|&a| std::net::IpAddr::V4(a)));
    cfg.ctl = CtlMode::Off;
    cfg.name = name.to_string();
    cfg.seed = Some(7);
    Node::start(cfg).unwrap()
}

/// Per-address cap (`TCP_CONNS_PER_ADDR`, 32): one remote address holds 8 lanes to each of
/// four of the node's addresses; its 33rd connection, to a fifth, is reset at once and
/// counted, the 32 others stay, and once one of them ends the address is served again.
#[test]
fn per_address_cap_resets_the_33rd_connection() {
    let _g = serial();
    let locals: Vec<Ipv4Addr> = (201..=205).map(|h| Ipv4Addr::new(127, 3, 7, h)).collect();
    let t = multi_node("hostile-per-addr", &locals);
    let src = Ipv4Addr::new(127, 3, 7, 190);
    let mut held = Vec::new();
    for &dst in &locals[..4] {
        held.extend(eight_lanes(&t, src, dst));
    }
    wait_until("32 lanes adopted", Duration::from_secs(10), || {
        t.tcp_connection_count() == 32
    });
    let mut s = raw_connect_lane(src, locals[4], 0);
    assert!(
        closed_by_node(&mut s, Duration::from_secs(10)),
        "the 33rd connection of one address is reset"
    );
    assert_eq!(stat(&t, "tcp_accept_addr_limit"), 1);
    assert_eq!(t.tcp_connection_count(), 32);
    for s in &mut held {
        s.set_nonblocking(true).unwrap();
        assert!(still_open(s), "the first 32 connections stay");
    }
    // One lane ends: the address may connect again.
    reset_close(held.pop().unwrap());
    wait_until("the ended lane to go", Duration::from_secs(10), || {
        t.tcp_connection_count() == 31
    });
    let mut again = raw_connect_lane(src, locals[4], 0);
    wait_until(
        "the new connection adopted",
        Duration::from_secs(10),
        || t.tcp_connection_count() == 32,
    );
    again.set_nonblocking(true).unwrap();
    assert!(still_open(&mut again));
    assert_eq!(stat(&t, "tcp_accept_addr_limit"), 1);
    assert_eq!(t.tcp_waiting_and_cap().0, 0);
    eprintln!(
        "per-address cap: 32 connections from {src} held, the 33rd reset; {}",
        counters_line(&t)
    );
    for s in held {
        reset_close(s);
    }
    reset_close(again);
    t.shutdown();
}

/// Opens lane 0 from `src` to `dst` (announcing 8 lanes in a probe ping, as a base kernel
/// does) and lanes 1..7, each taking a free slot; returns them once the node has all 8.
fn eight_lanes(t: &Node, src: Ipv4Addr, dst: Ipv4Addr) -> Vec<TcpStream> {
    let before = t.tcp_connection_count();
    let mut s0 = raw_connect_lane(src, dst, 0);
    let mut probe = HeaderRepr::data(1, PROBE_PORT, 0, 0);
    probe.push_ext(ExtHeader::Npaths(8)).unwrap();
    s0.write_all(&probe.to_bytes()).unwrap();
    wait_until("the probe's lane count", Duration::from_secs(10), || {
        t.connections().iter().any(|c| {
            c.laddr == std::net::IpAddr::V4(dst)
                && c.faddr == std::net::IpAddr::V4(src)
                && c.npaths == 8
        })
    });
    let mut v = vec![s0];
    for lane in 1..8 {
        v.push(raw_connect_lane(src, dst, lane));
    }
    wait_until("8 lanes adopted", Duration::from_secs(10), || {
        t.tcp_connection_count() == before + 8
    });
    v
}

/// Waiting caps (`TCP_WAIT_PER_ADDR` 8, `TCP_WAIT_MAX` 256): 33 addresses each hold their 8
/// lanes, so that every further connection of theirs waits for a slot. 32 addresses fill the
/// node's waiting cap with 8 each; each of the 33rd address's first 8 waiting connections
/// evicts the oldest of an address holding the most (8), its 9th evicts its own oldest.
/// Then every waiting connection expires after `STASH_MAX`.
#[test]
fn waiting_caps_evict_fairly_and_expire() {
    let _g = serial();
    let dst = Ipv4Addr::new(127, 37, 3, 200);
    let t = multi_node("hostile-waiting", &[dst]);
    let src = |k: u8| Ipv4Addr::new(127, 37, 3, k);
    let mut lanes = Vec::new();
    let mut waiting: Vec<(u8, TcpStream)> = Vec::new();
    for k in 1..=32u8 {
        lanes.extend(eight_lanes(&t, src(k), dst));
        for _ in 0..8 {
            waiting.push((k, raw_connect_lane(src(k), dst, 1)));
        }
        wait_until(
            "the extra connections to wait",
            Duration::from_secs(10),
            || t.tcp_waiting_and_cap().0 == 8 * usize::from(k),
        );
    }
    assert_eq!(stat(&t, "tcp_wait_node_evicted"), 0);
    assert_eq!(stat(&t, "tcp_wait_addr_evicted"), 0);
    lanes.extend(eight_lanes(&t, src(33), dst));
    for n in 1..=9u64 {
        waiting.push((33, raw_connect_lane(src(33), dst, 1)));
        wait_until("an eviction", Duration::from_secs(10), || {
            stat(&t, "tcp_wait_node_evicted") + stat(&t, "tcp_wait_addr_evicted") == n
        });
        assert_eq!(t.tcp_waiting_and_cap().0, 256);
    }
    assert_eq!(stat(&t, "tcp_wait_node_evicted"), 8);
    assert_eq!(stat(&t, "tcp_wait_addr_evicted"), 1);
    // The node reset exactly the evicted ones: one of each of 8 other addresses and the
    // 33rd address's oldest.
    let mut reset_of = std::collections::BTreeMap::new();
    for (k, s) in &mut waiting {
        s.set_nonblocking(true).unwrap();
        if !still_open(s) {
            *reset_of.entry(*k).or_insert(0) += 1;
        }
    }
    assert_eq!(reset_of.len(), 9, "{reset_of:?}");
    assert!(reset_of.values().all(|&n| n == 1), "{reset_of:?}");
    assert!(reset_of.contains_key(&33));
    let t0 = Instant::now();
    let cpu0 = cpu_ticks(std::process::id());
    wait_until(
        "the waiting connections to expire",
        rds_core::proto::stack::STASH_MAX + Duration::from_secs(10),
        || t.tcp_waiting_and_cap().0 == 0,
    );
    let cpu = (cpu_ticks(std::process::id()) - cpu0) as f64
        / clock_ticks_per_sec()
        / t0.elapsed().as_secs_f64()
        * 100.0;
    assert_eq!(stat(&t, "tcp_wait_expired"), 256);
    assert_eq!(t.tcp_connection_count(), 33 * 8);
    for (_, s) in &mut waiting {
        assert!(!still_open(s), "a waiting connection was reset");
    }
    for s in &mut lanes {
        s.set_nonblocking(true).unwrap();
        assert!(still_open(s), "the lanes stay");
    }
    eprintln!(
        "waiting caps: 33 addresses × 8 lanes; 256 waiting (cap), 8 evicted for the 33rd \
         address, 1 by its own cap, all expired {:.1} s later (process CPU meanwhile \
         {cpu:.1}% of a core); {}",
        t0.elapsed().as_secs_f64(),
        counters_line(&t)
    );
    for s in lanes {
        reset_close(s);
    }
    for (_, s) in waiting {
        reset_close(s);
    }
    t.shutdown();
}

/// A TCP connection from `src:port` to `dst:16385`, closed with a reset when dropped.
fn connect_from(src: Ipv4Addr, port: u16, dst: Ipv4Addr) -> TcpStream {
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::empty(),
        None,
    )
    .unwrap();
    setsockopt(&fd, sockopt::ReuseAddr, &true).unwrap();
    setsockopt(
        &fd,
        sockopt::Linger,
        &libc::linger {
            l_onoff: 1,
            l_linger: 0,
        },
    )
    .unwrap();
    bind(
        fd.as_raw_fd(),
        &SockaddrIn::from(SocketAddrV4::new(src, port)),
    )
    .unwrap_or_else(|e| panic!("bind {src}:{port}: {e}"));
    connect(
        fd.as_raw_fd(),
        &SockaddrIn::from(SocketAddrV4::new(dst, 16385)),
    )
    .unwrap_or_else(|e| panic!("connect {src}:{port} -> {dst}: {e}"));
    TcpStream::from(fd)
}

/// The good peer and the target exchange a message each way.
fn exchange(t: &Node, tsock: &Socket, good: &Socket, round: u32) {
    let msg = format!("round {round}");
    good.send_to(msg.as_bytes(), a("127.37.1.200:6000"))
        .unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = tsock.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (msg.as_bytes(), a("127.37.1.1:6001")));
    tsock.send_to(&buf[..n], from).unwrap();
    let (n, from) = good.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (msg.as_bytes(), a("127.37.1.200:6000")));
    assert!(t.is_running());
}

/// 10,000 connections that send nothing, from 64 addresses, from source ports that do not
/// say "lane 0" (so that each waits for a lane, the costliest case). At every sample the
/// node's descriptors and its waiting connections stay within the caps; every connection
/// the node closed is counted; a legitimate peer keeps exchanging messages throughout.
#[test]
fn ten_thousand_silent_connects_stay_within_the_caps() {
    let _g = serial();
    const CONNS: usize = 10_000;
    const SOURCES: usize = 64;
    /// `TCP_WAIT_MAX` of the transport.
    const WAIT_MAX: usize = 256;
    let dst = Ipv4Addr::new(127, 37, 1, 200);
    let t = node("127.37.1.200");
    let g = node("127.37.1.1");
    let tsock = Socket::with_node(&t);
    tsock.bind(a("127.37.1.200:6000")).unwrap();
    tsock.set_read_timeout(Some(Duration::from_secs(10)));
    let good = Socket::with_node(&g);
    good.bind(a("127.37.1.1:6001")).unwrap();
    good.set_read_timeout(Some(Duration::from_secs(10)));
    exchange(&t, &tsock, &good, 0);
    let (_, cap) = t.tcp_waiting_and_cap();
    let live0 = t.tcp_connection_count();
    let fds0 = fd_count("self");
    // Descriptors the node may hold for the flood: a connection adopted as each address's
    // path 0 and the one it superseded, still being read to its end (a newcomer for a lane
    // that is up waits until that ends), the waiting ones, and a batch accepted but not yet
    // handed on.
    let fd_bound = 2 * SOURCES + WAIT_MAX + 64;
    let mut held: Vec<TcpStream> = Vec::new();
    let mut closed = 0usize;
    let sweep = |held: &mut Vec<TcpStream>, closed: &mut usize| {
        held.retain_mut(|s| {
            let open = still_open(s);
            *closed += usize::from(!open);
            open
        });
    };
    let (mut max_extra, mut max_wait, mut samples) = (0i64, 0usize, 0);
    let t0 = Instant::now();
    for i in 0..CONNS {
        let k = i % SOURCES;
        let c = (i / SOURCES) as u16;
        let src = Ipv4Addr::new(127, 37, 0, 1 + k as u8);
        let s = connect_from(src, 20000 + (c / 7) * 8 + 1 + c % 7, dst);
        s.set_nonblocking(true).unwrap();
        held.push(s);
        if i % 100 == 99 {
            sweep(&mut held, &mut closed);
        }
        if i % 250 == 249 {
            let (waiting, _) = t.tcp_waiting_and_cap();
            let live = t.tcp_connection_count();
            let extra = fd_count("self") as i64 - fds0 as i64 - held.len() as i64;
            max_extra = max_extra.max(extra);
            max_wait = max_wait.max(waiting);
            samples += 1;
            assert!(waiting <= WAIT_MAX, "{waiting} connections waiting");
            assert!(
                live + waiting <= cap,
                "{live} + {waiting} over the cap {cap}"
            );
            assert!(
                extra <= fd_bound as i64,
                "the node holds {extra} descriptors for the flood (bound {fd_bound})"
            );
        }
        if i % 2500 == 2499 {
            exchange(&t, &tsock, &good, 1 + i as u32 / 2500);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "the flood is bounded in time"
        );
    }
    let flood_secs = t0.elapsed().as_secs_f64();
    exchange(&t, &tsock, &good, 100);
    // Waiting connections expire after STASH_MAX; then every connection was either closed
    // by the node (and counted) or adopted and still open.
    let resets = |t: &Node| TCP_CLOSE_COUNTERS.iter().map(|c| stat(t, c)).sum::<u64>();
    let settle = rds_core::proto::stack::STASH_MAX + Duration::from_secs(10);
    wait_until("the waiting connections to expire", settle, || {
        sweep(&mut held, &mut closed);
        t.tcp_waiting_and_cap().0 == 0 && resets(&t) == closed as u64
    });
    eprintln!(
        "FIGURE silent connects: {CONNS} connects from {SOURCES} addresses in {flood_secs:.2} s \
         ({:.0}/s); node descriptors for the flood at most {max_extra} (bound {fd_bound}), \
         waiting at most {max_wait} (cap {WAIT_MAX}) over {samples} samples; node cap {cap}; \
         {closed} closed by the node, {} adopted and open; {}",
        CONNS as f64 / flood_secs,
        held.len(),
        counters_line(&t)
    );
    assert_eq!(closed + held.len(), CONNS);
    assert_eq!(stat(&t, "tcp_accept_node_limit"), 0);
    for s in held.drain(..) {
        reset_close(s);
    }
    wait_until(
        "the flood's connections to go",
        Duration::from_secs(10),
        || t.tcp_connection_count() == live0,
    );
    exchange(&t, &tsock, &good, 101);
    t.shutdown();
    g.shutdown();
}

/// User plus system CPU time of a process, in clock ticks (`/proc/<pid>/stat` fields 14, 15).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap()
}

fn clock_ticks_per_sec() -> f64 {
    let o = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

/// An `rds-ctrl daemon tcp` child with a private runtime directory; stopped (SIGTERM, then
/// SIGKILL) when the test ends, failed or not.
struct Daemon {
    child: std::process::Child,
    pid: u32,
    dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts the daemon on `addr` (under `ulimit -n nofile` when given) and waits until its
    /// control socket answers.
    fn start(addr: &str, nofile: Option<u64>) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let mut c = rds_tests::daemon_command(dir.path(), addr, nofile);
        c.stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("daemon.log")).unwrap());
        let child = c.spawn().unwrap();
        let pid = child.id();
        let mut d = Daemon { child, pid, dir };
        wait_until(
            "the daemon's control socket",
            Duration::from_secs(15),
            || {
                assert!(d.alive(), "the daemon exited:\n{}", d.log());
                d.ctl(&["stats", "--json"]).status.success()
            },
        );
        d
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// Runs `rds-ctrl args` against this daemon.
    fn ctl(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin("rds-ctrl"))
            .args(args)
            .env("RDS_RUNTIME_DIR", self.dir.path().join("run"))
            .env("RDS_CONFIG", self.dir.path().join("rds.conf"))
            .env_remove("RDS_NO_DAEMON")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// The daemon's counters (`rds-ctrl stats --json`).
    fn stats(&self) -> serde_json::Value {
        let o = self.ctl(&["stats", "--json"]);
        assert!(o.status.success(), "rds-ctrl stats:\n{}", self.log());
        serde_json::from_slice(&o.stdout).unwrap()
    }

    fn fds(&self) -> usize {
        fd_count(&self.pid.to_string())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.pid as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let end = Instant::now() + Duration::from_secs(5);
        while self.alive() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Node cap (`TCP_CONNS_MAX`, at most half the soft `RLIMIT_NOFILE`): a daemon started under
/// `ulimit -n 64` keeps at most 32 TCP connections; 40 addresses' lane-0 connections leave
/// 32 held and 8 reset at once (`tcp_accept_node_limit`), without running out of
/// descriptors; once the flood is gone a legitimate `rds-ping` is answered.
#[test]
fn node_cap_follows_the_descriptor_limit() {
    let _g = serial();
    let mut d = Daemon::start("127.37.4.200", Some(64));
    let dst = Ipv4Addr::new(127, 37, 4, 200);
    let fds0 = d.fds();
    let mut held: Vec<TcpStream> = (1..=40u8)
        .map(|h| raw_connect_lane(Ipv4Addr::new(127, 37, 4, h), dst, 0))
        .collect();
    wait_until("the flood's resets", Duration::from_secs(10), || {
        d.stats()["tcp_accept_node_limit"].as_u64() == Some(8)
    });
    let fds = d.fds();
    let mut open = 0;
    for s in &mut held {
        s.set_nonblocking(true).unwrap();
        open += usize::from(still_open(s));
    }
    let st = d.stats();
    eprintln!(
        "node cap: daemon under ulimit -n 64: fds {fds0} at start, {fds} with 40 connections \
         offered, {open} held; tcp_accept_node_limit {}, tcp_accept_emfile {}",
        st["tcp_accept_node_limit"], st["tcp_accept_emfile"]
    );
    assert_eq!(open, 32);
    assert_eq!(st["tcp_accept_emfile"].as_u64(), Some(0));
    for s in held {
        reset_close(s);
    }
    wait_until(
        "the daemon's descriptors to return",
        Duration::from_secs(30),
        || d.fds() <= fds0 + 2,
    );
    let ping = ping_from(&d, "127.37.4.150", "127.37.4.200");
    assert!(
        ping.contains("3 packets transmitted, 3 received"),
        "rds-ping:\n{ping}"
    );
    assert!(d.alive(), "daemon alive");
}

/// The non-zero counters of a `stats` reply, `name value` pairs on one line.
fn nonzero(v: &serde_json::Value) -> String {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, x)| x.as_u64().is_some_and(|n| n > 0))
                .map(|(k, x)| format!("{k} {x}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// `rds-ping -c 3` from an embedded node on `from` to `to`; returns its standard output
/// (with standard error after it when it failed).
fn ping_from(d: &Daemon, from: &str, to: &str) -> String {
    let o = Command::new(bin("rds-ping"))
        .args(["-c", "3", "-i", "0.2", "-W", "5", "-I", from, to])
        .env("RDS_RUNTIME_DIR", d.dir.path().join("peer-run"))
        .env("RDS_NO_DAEMON", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let mut out = String::from_utf8_lossy(&o.stdout).into_owned();
    if !o.status.success() {
        out += &format!("\n{}\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    }
    out
}

/// Descriptor exhaustion: an `rds-ctrl daemon` whose descriptor limit is lowered (with
/// `prlimit`, once it runs, to 24 above what it uses) gets more RDS/TCP connections than
/// it has descriptors. Its listener must back off instead of spinning on EMFILE (CPU time
/// under 5% of a core over 3 s while connections wait in the backlog), count it, reset none
/// of the waiting connections (their data is already acknowledged by TCP), and answer a
/// legitimate `rds-ping` once the flood is gone, even when stale connections of the flood
/// still fill the backlog ahead of it.
#[test]
fn descriptor_exhaustion_backs_off_and_recovers() {
    let _g = serial();
    let mut daemon = Daemon::start("127.37.2.200", None);
    let pid = daemon.pid;
    let fds0 = fd_count(&pid.to_string());
    let limit = fds0 + 24;
    let st = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={limit}:{limit}"))
        .status()
        .expect("prlimit (util-linux) is needed");
    assert!(st.success(), "prlimit failed");

    // Each attacker address's lane-0 connection is adopted and held: one descriptor each.
    let dst = Ipv4Addr::new(127, 37, 2, 200);
    let mut held: Vec<TcpStream> = (1..=80u8)
        .map(|h| raw_connect_lane(Ipv4Addr::new(127, 37, 2, h), dst, 0))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let fds_full = fd_count(&pid.to_string());
    assert!(
        fds_full + 1 >= limit,
        "the flood takes every descriptor: {fds_full} of {limit}"
    );
    let hz = clock_ticks_per_sec();
    let c0 = cpu_ticks(pid);
    let w0 = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let ticks = cpu_ticks(pid) - c0;
    let secs = w0.elapsed().as_secs_f64();
    let cpu = ticks as f64 / hz / secs * 100.0;
    let mut reset_by_node = 0;
    for s in &mut held {
        s.set_nonblocking(true).unwrap();
        reset_by_node += usize::from(!still_open(s));
    }
    for s in held.drain(..) {
        reset_close(s);
    }

    // The flood is gone: descriptors come back and a legitimate peer is answered.
    wait_until(
        "the daemon's descriptors to return",
        Duration::from_secs(30),
        || fd_count(&pid.to_string()) <= fds0 + 2,
    );
    let ping_out = ping_from(&daemon, "127.37.2.150", "127.37.2.200");
    let v = daemon.stats();
    let c = |n: &str| {
        v[n].as_u64()
            .unwrap_or_else(|| panic!("no counter {n}: {v}"))
    };
    eprintln!(
        "FIGURE fd exhaustion: daemon fds {fds0} at start, RLIMIT_NOFILE lowered to {limit}, \
         {fds_full} fds with 80 connections offered ({reset_by_node} reset by the daemon); CPU \
         {cpu:.2}% of a core over {secs:.1} s at EMFILE ({ticks} ticks); tcp_accept_emfile {}, \
         tcp_listen_paused {}; rds-ping after the flood: {}",
        c("tcp_accept_emfile"),
        c("tcp_listen_paused"),
        ping_out.lines().last().unwrap_or("")
    );
    assert!(cpu < 5.0, "CPU {cpu:.2}% of a core at EMFILE (bound 5%)");
    assert!(c("tcp_accept_emfile") >= 1);
    // A connection that finds no descriptor waits in the backlog: its bytes are already
    // acknowledged by TCP, so a reset would lose them.
    assert_eq!(reset_by_node, 0, "connections reset at EMFILE");
    assert!(c("tcp_listen_paused") >= c("tcp_accept_emfile"));
    assert!(
        ping_out.contains("3 packets transmitted, 3 received"),
        "rds-ping after the flood:\n{ping_out}\ndaemon counters: {}",
        nonzero(&v)
    );
    assert!(daemon.alive(), "daemon alive");
}
