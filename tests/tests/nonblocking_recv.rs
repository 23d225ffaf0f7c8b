//! A non-blocking receive on an embedded node answers from the socket's readiness flags when
//! they say nothing is there (issue 32: without waiting for the engine's lock, which the I/O
//! thread holds while it delivers). These tests hold it to what that must not change: a
//! socket reported readable has its message for a non-blocking receive, a drain until EAGAIN
//! takes every message exactly once and in order, and a receiver that sleeps until readiness
//! says readable is never left asleep with a message queued (its wait is bounded: a readiness
//! flag left stale fails the test by timing out, it does not slow it down).
//!
//! Addresses: 127.3.12.0/24.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rds_core::proto::Received;
use rds_core::stats::Counter;
use rds_core::{CtlMode, Node, NodeConfig, RecvFlags, Socket};

/// How long a receiver waits for readiness before the test calls the wake-up lost.
const WAIT: Duration = Duration::from_secs(5);

fn node(ip: &str) -> Node {
    let mut cfg = NodeConfig::new([ip.parse().unwrap()]);
    cfg.ctl = CtlMode::Off;
    cfg.name = format!("nonblocking-recv-{ip}");
    Node::start(cfg).unwrap()
}

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn sock(n: &Node, addr: SocketAddr) -> Socket {
    let s = Socket::with_node(n);
    s.set_send_buffer_size(4 << 20);
    s.set_recv_buffer_size(4 << 20);
    assert_eq!(s.bind(addr).unwrap(), addr);
    s.set_write_timeout(Some(WAIT));
    s
}

const DONTWAIT: RecvFlags = RecvFlags {
    dontwait: true,
    peek: false,
    trunc: false,
};

/// One non-blocking receive: the message's first 8 bytes as a number, `None` for EAGAIN.
fn take(s: &Socket) -> Option<u64> {
    match s.recv_bytes(64, DONTWAIT) {
        Ok(Received::Data { msg, .. }) => {
            Some(u64::from_be_bytes(msg.payload[..8].try_into().unwrap()))
        }
        Ok(other) => panic!("unexpected {other:?}"),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => None,
        Err(e) => panic!("receive: {e}"),
    }
}

/// Waits until `s` is readable, failing the test after [`WAIT`].
fn wait_readable(s: &Socket, what: &str) {
    let (r, _) = s.wait(true, false, WAIT).unwrap();
    assert!(r, "{what}: not readable after {WAIT:?}");
}

/// Ping-pong over two nodes: after each readiness report the first non-blocking receive has
/// the message (never EAGAIN), and the next one finds nothing.
#[test]
fn a_socket_reported_readable_has_its_message() {
    let na = node("127.3.12.1");
    let nb = node("127.3.12.2");
    let (aa, ba) = (a("127.3.12.1:4000"), a("127.3.12.2:5000"));
    let (sa, sb) = (sock(&na, aa), sock(&nb, ba));
    const ROUNDS: u64 = 2000;
    for i in 0..ROUNDS {
        sa.send_to(&i.to_be_bytes(), ba).unwrap();
        wait_readable(&sb, &format!("request {i}"));
        assert_eq!(take(&sb), Some(i), "request {i}");
        assert_eq!(take(&sb), None, "one request at a time");
        sb.send_to(&(i + ROUNDS).to_be_bytes(), aa).unwrap();
        wait_readable(&sa, &format!("answer {i}"));
        assert_eq!(take(&sa), Some(i + ROUNDS), "answer {i}");
        assert_eq!(take(&sa), None, "one answer at a time");
    }
    assert_eq!(na.counter(Counter::RecvDelivered), ROUNDS);
    assert_eq!(nb.counter(Counter::RecvDelivered), ROUNDS);
    na.shutdown();
    nb.shutdown();
}

/// A sender streams while the receiver sleeps until readable and drains until EAGAIN (the
/// pattern of rds-stress's tasks): every message arrives once and in order, and the receiver
/// is never left asleep with messages queued.
#[test]
fn drains_until_eagain_lose_nothing_and_wake_on_time() {
    let na = node("127.3.12.3");
    let nb = node("127.3.12.4");
    let (aa, ba) = (a("127.3.12.3:4000"), a("127.3.12.4:5000"));
    let (sa, sb) = (sock(&na, aa), sock(&nb, ba));
    const COUNT: u64 = 50_000;
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for i in 0..COUNT {
                sa.send_to(&i.to_be_bytes(), ba).unwrap();
            }
        });
        let mut next = 0;
        // Bounded: every round takes at least one message (a round that finds nothing after
        // readiness said readable fails), and the whole run has a deadline.
        let deadline = Instant::now() + Duration::from_secs(60);
        while next < COUNT {
            assert!(Instant::now() < deadline, "{next} of {COUNT} after 60 s");
            wait_readable(&sb, &format!("message {next} of {COUNT}"));
            let first = next;
            while let Some(n) = take(&sb) {
                assert_eq!(n, next, "order");
                next += 1;
            }
            assert!(next > first, "readable, but message {next} was not there");
        }
    });
    assert_eq!(take(&sb), None);
    assert_eq!(nb.counter(Counter::RecvDelivered), COUNT);
    assert_eq!(nb.counter(Counter::RecvDropRcvqFull), 0);
    na.shutdown();
    nb.shutdown();
}
