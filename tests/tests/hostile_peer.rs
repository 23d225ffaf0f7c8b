//! A hostile peer (issue 3 item 2 and 5): a raw TCP client connects to a node's
//! `addr:16385` and sends malformed RDS/TCP streams. The node must drop that connection, count
//! it (`conn_drop_oversize`, `conn_drop_bad_cong_map`, `conn_drop_bad_frame`), keep serving a
//! good peer, never crash and never allocate without bound.
//!
//! Addresses: 127.3.7.0/24. The node under attack is 127.3.7.200; the raw clients use smaller
//! addresses (127.3.7.10 + case) so that the node accepts their connections (a larger address
//! may not own an RDS/TCP connection), from a source port ≡ 0 (mod 8) (lane 0).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use nix::sys::socket::{
    bind, connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn,
};
use rds_core::stats::Counter;
use rds_core::wire::{flags, HeaderRepr};
use rds_core::{CtlMode, Node, NodeConfig, Socket};

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

static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A raw TCP connection from `src` (source port ≡ 0 mod 8) to the target's RDS port.
fn raw_connect(src: Ipv4Addr) -> TcpStream {
    let target = SockaddrIn::from(SocketAddrV4::new(TARGET.parse().unwrap(), 16385));
    for _ in 0..256 {
        let k = NEXT_PORT.fetch_add(1, Ordering::Relaxed) + (std::process::id() % 500) as u16;
        let port = 40000 + (k % 2000) * 8;
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )
        .unwrap();
        setsockopt(&fd, sockopt::ReuseAddr, &true).unwrap();
        if bind(
            fd.as_raw_fd(),
            &SockaddrIn::from(SocketAddrV4::new(src, port)),
        )
        .is_err()
        {
            continue;
        }
        connect(fd.as_raw_fd(), &target).unwrap();
        let s = TcpStream::from(fd);
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        return s;
    }
    panic!("no free source port on {src}");
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
