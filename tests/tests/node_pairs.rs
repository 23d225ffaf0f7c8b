//! Two RDS nodes over real TCP on loopback addresses (issue 3, tests: "two nodes in one process
//! and in two processes"): messages of 0, 1, 4096, 65536 bytes and 1 MiB both ways with
//! content, order and sender address checked, and pings to port 0 answered from port 0.
//!
//! Addresses: 127.3.1.0/24 (this file's block).

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rds_core::stats::Counter;
use rds_core::{CtlMode, Node, NodeConfig, Socket};
use rds_tests::peer::{payload, size_of};

const T: Duration = Duration::from_secs(20);

fn node(ip: &str) -> Node {
    let mut cfg = NodeConfig::new([ip.parse().unwrap()]);
    cfg.ctl = CtlMode::Off;
    cfg.name = format!("node-pairs-{ip}");
    Node::start(cfg).unwrap()
}

fn sock(n: &Node, addr: SocketAddr) -> Socket {
    let s = Socket::with_node(n);
    s.set_send_buffer_size(8 << 20);
    s.set_recv_buffer_size(8 << 20);
    assert_eq!(s.bind(addr).unwrap(), addr);
    s.set_read_timeout(Some(T));
    s.set_write_timeout(Some(T));
    s
}

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Sends `count` pattern messages from `tx` to `to` while `rx` (on the other node) checks each.
fn stream(tx: &Socket, rx: &Socket, to: SocketAddr, from: SocketAddr, count: u64) {
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for i in 0..count {
                let m = payload(i, size_of(i));
                assert_eq!(tx.send_to(&m, to).unwrap(), m.len(), "send {i}");
            }
        });
        let mut buf = vec![0u8; 1 << 20];
        for i in 0..count {
            let (n, src) = rx.recv_from(&mut buf).unwrap();
            assert_eq!(src, from, "sender address of message {i}");
            let want = payload(i, size_of(i));
            assert_eq!(n, want.len(), "length of message {i} ({from} -> {to})");
            assert!(
                buf[..n] == want[..],
                "content of message {i} ({from} -> {to})"
            );
        }
    });
}

#[test]
fn two_nodes_in_one_process() {
    let na = node("127.3.1.1");
    let nb = node("127.3.1.2");
    let (aa, ba) = (a("127.3.1.1:4000"), a("127.3.1.2:5000"));
    let sa = sock(&na, aa);
    let sb = sock(&nb, ba);
    // 4 rounds of the 5 sizes, both directions at once.
    std::thread::scope(|sc| {
        sc.spawn(|| stream(&sa, &sb, ba, aa, 20));
        sc.spawn(|| stream(&sb, &sa, aa, ba, 20));
    });
    // Nothing left over on either side.
    let mut buf = [0u8; 16];
    for s in [&sa, &sb] {
        let e = s
            .recv_msg(
                &mut buf,
                rds_core::RecvFlags {
                    dontwait: true,
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
    }
    // Pings: a zero-length message to port 0 is answered from port 0, by either node.
    for (n, target) in [(&na, "127.3.1.2:0"), (&nb, "127.3.1.1:0")] {
        let p = Socket::with_node(n);
        let me = p.bind(SocketAddr::new(n.addrs()[0], 0)).unwrap();
        assert!(me.port() >= 2);
        p.set_read_timeout(Some(T));
        for _ in 0..3 {
            p.send_to(&[], a(target)).unwrap();
            let (len, from) = p.recv_from(&mut buf).unwrap();
            assert_eq!((len, from), (0, a(target)));
        }
    }
    assert!(
        nb.counter(Counter::RecvPing) >= 3,
        "pings counted by 127.3.1.2"
    );
    assert!(
        na.counter(Counter::RecvPing) >= 3,
        "pings counted by 127.3.1.1"
    );
    assert_eq!(na.counter(Counter::RecvDropNoSock), 0);
    assert_eq!(nb.counter(Counter::RecvDropNoSock), 0);
    // Every message was delivered once: 20 data messages + 3 pongs each way.
    assert_eq!(na.counter(Counter::RecvDelivered), 20 + 3);
    assert_eq!(nb.counter(Counter::RecvDelivered), 20 + 3);
    let conn = na
        .connections()
        .into_iter()
        .find(|c| c.faddr.to_string() == "127.3.1.2")
        .expect("a connection to 127.3.1.2");
    assert_eq!(conn.kind, rds_core::proto::TransportKind::Tcp);
    na.shutdown();
    nb.shutdown();
}

#[test]
fn two_nodes_in_two_processes() {
    let count = 15u64;
    let (me, peer) = (a("127.3.1.3:4100"), a("127.3.1.4:4200"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_rds-test-peer"))
        .args([
            "echo",
            &peer.to_string(),
            &count.to_string(),
            &me.to_string(),
        ])
        .env("RDS_PEER_TIMEOUT", "30")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the peer's READY line (its listener is up then).
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), format!("READY {peer}"));
    let n = node("127.3.1.3");
    let s = sock(&n, me);
    let mut buf = vec![0u8; 1 << 20];
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for i in 0..count {
                let m = payload(i, size_of(i));
                s.send_to(&m, peer).unwrap();
            }
        });
        for i in 0..count {
            let (len, from) = s.recv_from(&mut buf).unwrap();
            assert_eq!(from, peer, "echo {i} sender");
            let want = payload(i, size_of(i));
            assert_eq!(len, want.len(), "echo {i} length");
            assert!(buf[..len] == want[..], "echo {i} content");
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("rds-test-peer did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "peer failed: {status}: {err}");
    assert_eq!(rest.trim(), format!("ECHOED {count}"));
    // The peer went away cleanly; our node saw its connection and every echo exactly once.
    assert_eq!(n.counter(Counter::RecvDelivered), count);
    n.shutdown();
}
