//! Every errno case of the RDS socket API (issue 3 item 4), with the kernel's values
//! (`rds-core/src/errno.rs`, `af_rds.c`, `bind.c`, `send.c`, `recv.c`): bind rules, default
//! destination, zero-length and oversized messages, a full send buffer, a congested
//! destination, timeouts, peek and truncation, `RDS_CANCEL_SENT_TO`, `RDS_RECVERR`,
//! `SO_RDS_TRANSPORT`, timestamps and poll readiness.
//!
//! Addresses: 127.3.6.0/24. 127.3.6.50 has no node: messages to it stay queued (RDS retries
//! connecting forever), which is how a send buffer is filled without a slow peer.

use std::io;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::{Duration, SystemTime};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rds_core::proto::TransportKind;
use rds_core::stats::Counter;
use rds_core::{CtlMode, Node, NodeConfig, RecvFlags, Socket};

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn node(ips: &[&str]) -> Node {
    let mut cfg = NodeConfig::new(ips.iter().map(|i| i.parse().unwrap()));
    cfg.ctl = CtlMode::Off;
    cfg.name = format!("socket-errno-{}", ips[0]);
    Node::start(cfg).unwrap()
}

fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    r.expect_err("expected an error")
        .raw_os_error()
        .expect("an errno")
}

fn bound(n: &Node, addr: &str) -> Socket {
    let s = Socket::with_node(n);
    s.bind(a(addr)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10)));
    s.set_write_timeout(Some(Duration::from_secs(10)));
    s
}

const DONTWAIT: RecvFlags = RecvFlags {
    peek: false,
    trunc: false,
    dontwait: true,
};

/// Whether `fd` polls readable within `ms` milliseconds.
fn readable_within(fd: i32, ms: u16) -> bool {
    // SAFETY: the socket that owns the descriptor outlives this call.
    let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut fds = [PollFd::new(bfd, PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::from(ms)).unwrap() == 1
}

#[test]
fn bind_rules() {
    let n = node(&["127.3.6.1"]);
    // No wildcard, broadcast or multicast bind.
    for bad in ["0.0.0.0:4000", "255.255.255.255:4000", "224.0.0.1:4000"] {
        assert_eq!(
            errno(Socket::with_node(&n).bind(a(bad))),
            libc::EINVAL,
            "{bad}"
        );
    }
    // Port 1 is the multipath probe port.
    assert_eq!(
        errno(Socket::with_node(&n).bind(a("127.3.6.1:1"))),
        libc::EINVAL
    );
    // A taken port (taken first, so that no pick of port 0 below can take it).
    let s1 = bound(&n, "127.3.6.1:4000");
    assert_eq!(
        errno(Socket::with_node(&n).bind(a("127.3.6.1:4000"))),
        libc::EADDRINUSE
    );
    // Port 0 picks a free port >= 2, a different one each time.
    let socks: Vec<Socket> = (0..50).map(|_| Socket::with_node(&n)).collect();
    let mut ports: Vec<u16> = socks
        .iter()
        .map(|s| s.bind(a("127.3.6.1:0")).unwrap().port())
        .collect();
    assert!(ports.iter().all(|&p| p >= 2), "{ports:?}");
    for (s, &p) in socks.iter().zip(&ports) {
        assert_eq!(s.local_addr().unwrap(), SocketAddr::new(n.addrs()[0], p));
    }
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 50);
    assert!(!ports.contains(&4000), "{ports:?}");
    // Binding twice.
    assert_eq!(errno(s1.bind(a("127.3.6.1:4001"))), libc::EINVAL);
    // An address the node does not own.
    assert_eq!(
        errno(Socket::with_node(&n).bind(a("127.3.6.99:4000"))),
        libc::EADDRNOTAVAIL
    );
    // Closing frees the port.
    drop(s1);
    let _s2 = bound(&n, "127.3.6.1:4000");
    // An unbound socket has no name.
    assert_eq!(errno(Socket::with_node(&n).local_addr()), libc::ENOTCONN);
    n.shutdown();
}

#[test]
fn destinations_and_sizes() {
    let n = node(&["127.3.6.2"]);
    let tx = bound(&n, "127.3.6.2:4000");
    let rx = bound(&n, "127.3.6.2:4001");
    tx.set_send_buffer_size(4 << 20);
    rx.set_recv_buffer_size(4 << 20);
    let mut buf = vec![0u8; (1 << 20) + 1];
    // No destination: ENOTCONN (bound or not).
    assert_eq!(errno(tx.send(b"x")), libc::ENOTCONN);
    assert_eq!(
        errno(Socket::with_node(&n).send_to(b"x", a("127.3.6.2:4001"))),
        libc::ENOTCONN
    );
    assert_eq!(errno(tx.peer_addr()), libc::ENOTCONN);
    // Bad destinations.
    assert_eq!(errno(tx.connect(a("0.0.0.0:4001"))), libc::EDESTADDRREQ);
    assert_eq!(
        errno(tx.send_to(b"x", a("255.255.255.255:4001"))),
        libc::EINVAL
    );
    assert_eq!(errno(tx.send_to(b"x", a("[::1]:4001"))), libc::EOPNOTSUPP);
    // connect() sets the default destination; nothing is sent.
    tx.connect(a("127.3.6.2:4001")).unwrap();
    assert_eq!(tx.peer_addr().unwrap(), a("127.3.6.2:4001"));
    assert_eq!(errno(rx.recv_msg(&mut buf, DONTWAIT)), libc::EAGAIN);
    assert_eq!(tx.send(b"hello").unwrap(), 5);
    let (len, from) = rx.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..len], from), (&b"hello"[..], a("127.3.6.2:4000")));
    // Zero-length messages.
    assert_eq!(tx.send(&[]).unwrap(), 0);
    let m = rx.recv_msg(&mut buf, RecvFlags::default()).unwrap();
    assert_eq!(
        (m.len, m.full_len, m.from),
        (0, 0, Some(a("127.3.6.2:4000")))
    );
    // 1 MiB is the largest message; one byte more is EMSGSIZE.
    let big = vec![0x5au8; 1 << 20];
    assert_eq!(tx.send(&big).unwrap(), 1 << 20);
    let (len, _) = rx.recv_from(&mut buf).unwrap();
    assert!(len == 1 << 20 && buf[..len].iter().all(|&b| b == 0x5a));
    assert_eq!(errno(tx.send(&vec![0u8; (1 << 20) + 1])), libc::EMSGSIZE);
    // A message larger than the send buffer is EMSGSIZE too.
    tx.set_send_buffer_size(3000);
    assert_eq!(
        tx.send_buffer_size(),
        6000,
        "getsockopt reports twice the usable size"
    );
    assert_eq!(errno(tx.send(&[0u8; 3001])), libc::EMSGSIZE);
    assert_eq!(tx.send(&[7u8; 3000]).unwrap(), 3000);
    assert_eq!(rx.recv_from(&mut buf).unwrap(), (3000, a("127.3.6.2:4000")));
    rx.set_recv_buffer_size(3000);
    assert_eq!(rx.recv_buffer_size(), 6000);
    // Below the kernel's floor (SOCK_MIN_SNDBUF 4608, SOCK_MIN_RCVBUF 2304, RDS using half of
    // each): the floor.
    tx.set_send_buffer_size(256);
    assert_eq!(tx.send_buffer_size(), 4608);
    assert_eq!(errno(tx.send(&[0u8; 2305])), libc::EMSGSIZE);
    assert_eq!(tx.send(&[8u8; 2304]).unwrap(), 2304);
    assert_eq!(rx.recv_from(&mut buf).unwrap(), (2304, a("127.3.6.2:4000")));
    rx.set_recv_buffer_size(1);
    assert_eq!(rx.recv_buffer_size(), 2304);
    n.shutdown();
}

#[test]
fn full_send_buffer_eagain_timeout_cancel_and_poll() {
    let n = node(&["127.3.6.3"]);
    let s = bound(&n, "127.3.6.3:4000");
    let nobody = a("127.3.6.50:4000");
    s.set_send_buffer_size(10_000);
    let wfd = s.send_fd().unwrap();
    assert!(readable_within(wfd, 0), "writable when empty");
    // Admitted while the queued bytes are below sndbuf (the last one may overshoot).
    for i in 0..3 {
        assert_eq!(
            s.send_bytes(vec![i; 4096].into(), Some(nobody), true)
                .unwrap(),
            4096
        );
    }
    assert_eq!(
        errno(s.send_bytes(vec![9; 4096].into(), Some(nobody), true)),
        libc::EAGAIN
    );
    s.set_nonblocking(true);
    assert_eq!(errno(s.send_to(&[1; 10], nobody)), libc::EAGAIN);
    s.set_nonblocking(false);
    assert!(!s.writable());
    assert!(!readable_within(wfd, 0), "not writable when full");
    // A blocking send waits for room until SO_SNDTIMEO, then ETIMEDOUT.
    s.set_write_timeout(Some(Duration::from_millis(200)));
    let t0 = std::time::Instant::now();
    assert_eq!(errno(s.send_to(&[1; 10], nobody)), libc::ETIMEDOUT);
    assert!(t0.elapsed() >= Duration::from_millis(200));
    // The messages wait in the queues.
    let queued = n.send_queue().len() + n.retrans_queue().len();
    assert_eq!(queued, 3);
    // RDS_CANCEL_SENT_TO drops them: room again, POLLOUT again.
    assert_eq!(
        s.cancel_sent_to(a("127.3.6.50:4001")).unwrap(),
        0,
        "other port"
    );
    assert_eq!(s.cancel_sent_to(nobody).unwrap(), 3);
    assert_eq!(n.send_queue().len() + n.retrans_queue().len(), 0);
    assert!(s.writable());
    assert!(readable_within(wfd, 0));
    assert_eq!(s.send_to(&[1; 10], nobody).unwrap(), 10);
    assert_eq!(s.cancel_sent_to(nobody).unwrap(), 1);
    // Unbound: ENOTCONN.
    assert_eq!(
        errno(Socket::with_node(&n).cancel_sent_to(nobody)),
        libc::ENOTCONN
    );
    n.shutdown();
}

#[test]
fn congested_destination_enobufs() {
    let n = node(&["127.3.6.4"]);
    let tx = bound(&n, "127.3.6.4:4000");
    let rx = bound(&n, "127.3.6.4:4001");
    rx.set_recv_buffer_size(1000);
    let to = a("127.3.6.4:4001");
    // The first message takes the receiver over its rcvbuf: its port becomes congested.
    assert_eq!(tx.send_to(&[1; 2000], to).unwrap(), 2000);
    let before = n.counter(Counter::CongSendError);
    assert_eq!(
        errno(tx.send_bytes(vec![2; 10].into(), Some(to), true)),
        libc::ENOBUFS
    );
    assert_eq!(n.counter(Counter::CongSendError), before + 1);
    // Another port of the same node is not congested.
    let other = bound(&n, "127.3.6.4:4002");
    assert_eq!(
        tx.send_to(&[3; 10], other.local_addr().unwrap()).unwrap(),
        10
    );
    // A blocking send with a timeout waits for the port, then ETIMEDOUT.
    tx.set_write_timeout(Some(Duration::from_millis(100)));
    assert_eq!(errno(tx.send_to(&[2; 10], to)), libc::ETIMEDOUT);
    // Reading uncongests it.
    let mut buf = [0u8; 4096];
    assert_eq!(rx.recv_from(&mut buf).unwrap(), (2000, a("127.3.6.4:4000")));
    assert_eq!(
        tx.send_bytes(vec![2; 10].into(), Some(to), true).unwrap(),
        10
    );
    assert_eq!(rx.recv_from(&mut buf).unwrap(), (10, a("127.3.6.4:4000")));
    n.shutdown();
}

#[test]
fn receive_timeouts_peek_and_truncation() {
    let n = node(&["127.3.6.5"]);
    let tx = bound(&n, "127.3.6.5:4000");
    let rx = bound(&n, "127.3.6.5:4001");
    let to = a("127.3.6.5:4001");
    let mut buf = [0u8; 256];
    // Nothing queued: EAGAIN non-blocking (flag or O_NONBLOCK), ETIMEDOUT blocking.
    assert_eq!(errno(rx.recv_msg(&mut buf, DONTWAIT)), libc::EAGAIN);
    rx.set_nonblocking(true);
    assert_eq!(errno(rx.recv_from(&mut buf)), libc::EAGAIN);
    rx.set_nonblocking(false);
    rx.set_read_timeout(Some(Duration::from_millis(150)));
    let t0 = std::time::Instant::now();
    assert_eq!(errno(rx.recv_from(&mut buf)), libc::ETIMEDOUT);
    assert!(t0.elapsed() >= Duration::from_millis(150));
    rx.set_read_timeout(Some(Duration::from_secs(10)));
    let msg: Vec<u8> = (0..100u8).collect();
    tx.send_to(&msg, to).unwrap();
    tx.send_to(b"second", to).unwrap();
    // MSG_PEEK into a short buffer: 10 bytes, truncated, still queued.
    let peek = RecvFlags {
        peek: true,
        ..Default::default()
    };
    let m = rx.recv_msg(&mut buf[..10], peek).unwrap();
    assert_eq!((m.len, m.full_len, m.truncated), (10, 100, true));
    assert_eq!(&buf[..10], &msg[..10]);
    let m = rx.recv_msg(&mut buf, peek).unwrap();
    assert_eq!((m.len, m.truncated), (100, false));
    assert_eq!(&buf[..100], &msg[..]);
    // MSG_TRUNC: the return value is the full length; the rest is discarded.
    let trunc = RecvFlags {
        trunc: true,
        ..Default::default()
    };
    buf.fill(0);
    let m = rx.recv_msg(&mut buf[..10], trunc).unwrap();
    assert_eq!((m.len, m.full_len, m.truncated), (100, 100, true));
    assert_eq!(&buf[..10], &msg[..10]);
    assert_eq!(buf[10], 0, "nothing copied past the buffer");
    // A plain short receive: the bytes copied, the rest discarded, the next message intact.
    tx.send_to(&msg, to).unwrap();
    assert_eq!(
        rx.recv_from(&mut buf[..4]).unwrap(),
        (4, a("127.3.6.5:4000"))
    );
    assert_eq!(&buf[..4], b"seco");
    assert_eq!(
        rx.recv_from(&mut buf[..4]).unwrap(),
        (4, a("127.3.6.5:4000"))
    );
    assert_eq!(&buf[..4], &msg[..4]);
    assert_eq!(errno(rx.recv_msg(&mut buf, DONTWAIT)), libc::EAGAIN);
    n.shutdown();
}

#[test]
fn options_transport_recverr_timestamps() {
    let n = node(&["127.3.6.6"]);
    // SO_RDS_TRANSPORT: none until set or bound; set once, before bind; no loopback.
    let s = Socket::with_node(&n);
    assert_eq!(s.transport(), None);
    assert_eq!(
        errno(s.set_transport(TransportKind::Loopback)),
        libc::EINVAL
    );
    s.set_transport(TransportKind::Tcp).unwrap();
    assert_eq!(s.transport(), Some(TransportKind::Tcp));
    assert_eq!(errno(s.set_transport(TransportKind::Tcp)), libc::EOPNOTSUPP);
    s.bind(a("127.3.6.6:4000")).unwrap();
    assert_eq!(s.transport(), Some(TransportKind::Tcp));
    let t = bound(&n, "127.3.6.6:4001");
    assert_eq!(t.transport(), Some(TransportKind::Tcp));
    assert_eq!(errno(t.set_transport(TransportKind::Tcp)), libc::EOPNOTSUPP);
    // IB is not served by this node: ENOPROTOOPT at bind.
    let ib = Socket::with_node(&n);
    ib.set_transport(TransportKind::Ib).unwrap();
    assert_eq!(errno(ib.bind(a("127.3.6.6:4002"))), libc::ENOPROTOOPT);
    // RDS_RECVERR round trip, before and after bind.
    let r = Socket::with_node(&n);
    assert!(!r.recverr());
    r.set_recverr(true);
    assert!(r.recverr());
    r.bind(a("127.3.6.6:4003")).unwrap();
    assert!(r.recverr());
    r.set_recverr(false);
    assert!(!r.recverr());
    // Timestamps: off by default; on, the wall-clock time the message was queued.
    let mut buf = [0u8; 64];
    s.send_to(b"a", a("127.3.6.6:4001")).unwrap();
    let m = t.recv_msg(&mut buf, RecvFlags::default()).unwrap();
    assert_eq!(m.timestamp, None);
    t.set_timestamps(true);
    let before = SystemTime::now();
    s.send_to(b"b", a("127.3.6.6:4001")).unwrap();
    let m = t.recv_msg(&mut buf, RecvFlags::default()).unwrap();
    let after = SystemTime::now();
    let ts = m.timestamp.expect("a timestamp");
    let slack = Duration::from_millis(5);
    assert!(
        ts + slack >= before && ts <= after + slack,
        "{ts:?} not in [{before:?}, {after:?}]"
    );
    n.shutdown();
}

#[test]
fn receive_readiness_through_poll() {
    let na = node(&["127.3.6.7"]);
    let nb = node(&["127.3.6.8"]);
    let tx = bound(&na, "127.3.6.7:4000");
    let rx = bound(&nb, "127.3.6.8:4000");
    let fd = rx.fd().unwrap();
    assert_eq!(rx.fd().unwrap(), fd, "one descriptor per socket");
    assert!(!readable_within(fd, 0));
    assert!(!rx.readable());
    // A message over TCP from the other node makes it readable.
    tx.send_to(b"ping", a("127.3.6.8:4000")).unwrap();
    assert!(
        readable_within(fd, 10_000),
        "POLLIN after a message arrived"
    );
    assert!(rx.readable());
    let mut buf = [0u8; 16];
    assert_eq!(rx.recv_from(&mut buf).unwrap(), (4, a("127.3.6.7:4000")));
    assert!(!readable_within(fd, 0), "not readable once drained");
    // Two messages: readable until both are read.
    tx.send_to(b"1", a("127.3.6.8:4000")).unwrap();
    tx.send_to(b"2", a("127.3.6.8:4000")).unwrap();
    assert!(readable_within(fd, 10_000));
    rx.recv_from(&mut buf).unwrap();
    if !rx.readable() {
        assert!(readable_within(fd, 10_000));
    }
    assert_eq!(rx.recv_from(&mut buf).unwrap(), (1, a("127.3.6.7:4000")));
    assert_eq!(buf[0], b'2');
    assert!(!readable_within(fd, 0));
    // Unbound: ENOTCONN.
    assert_eq!(errno(Socket::with_node(&na).fd()), libc::ENOTCONN);
    na.shutdown();
    nb.shutdown();
}
