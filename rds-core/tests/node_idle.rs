//! A node whose application thread waits long for an answer (it leads: it does the node's
//! I/O while it waits) lets its I/O thread sleep: the I/O thread no longer wakes every
//! millisecond to look whether the leader left, and the answer still comes, read by the
//! waiting thread, and the I/O thread takes over again after it.
//!
//! Counted from the I/O thread's voluntary context switches (`/proc/self/task/TID/status`).
//! One test in this file: the process has these two nodes only.
//!
//! Addresses: 127.94.9.0/24.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rds_core::{CtlMode, Node, NodeConfig, Socket};

/// The thread ids of this process's threads named `rds-io`.
fn io_threads() -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let e = e.expect("task entry");
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == "rds-io" {
            v.push(e.file_name().to_string_lossy().parse().expect("thread id"));
        }
    }
    v
}

/// Voluntary context switches of thread `tid` so far.
fn sleeps_of(tid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
        .expect("the thread's status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .expect("voluntary_ctxt_switches")
        .trim()
        .parse()
        .expect("a count")
}

fn node(ip: IpAddr) -> Node {
    let mut cfg = NodeConfig::new([ip]);
    cfg.ctl = CtlMode::Off;
    Node::start(cfg).expect("node on a loopback address")
}

#[test]
fn the_io_thread_sleeps_while_a_thread_waits_long_for_its_answer() {
    let ip = |h: u8| IpAddr::from([127, 94, 9, h]);
    let before = io_threads();
    let a = node(ip(1));
    // The thread names itself when it starts.
    let start = std::time::Instant::now();
    let io_a = loop {
        let new: Vec<u32> = io_threads()
            .into_iter()
            .filter(|t| !before.contains(t))
            .collect();
        if !new.is_empty() || start.elapsed() > Duration::from_secs(5) {
            break new;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(io_a.len(), 1, "node a's I/O thread: {io_a:?}");
    let io_a = io_a[0];
    let b = node(ip(2));
    let sa = Socket::with_node(&a);
    let sb = Socket::with_node(&b);
    let to_a = sa.bind(SocketAddr::new(ip(1), 4000)).expect("bind");
    let to_b = sb.bind(SocketAddr::new(ip(2), 5000)).expect("bind");
    sa.set_read_timeout(Some(Duration::from_secs(10)));
    sb.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = [0u8; 64];
    sa.send_to(b"first", to_b).expect("send");
    assert_eq!(sb.recv_from(&mut buf).expect("first message").0, 5);
    const WAIT: Duration = Duration::from_millis(400);
    let (asked, woke) = std::thread::scope(|s| {
        let asks = s.spawn(|| {
            let mut buf = [0u8; 64];
            // A socket that sent waits for an answer: a blocking receive leads.
            sa.send_to(b"request", to_b).expect("send");
            let before = sleeps_of(io_a);
            let (n, from) = sa.recv_from(&mut buf).expect("the answer");
            assert_eq!((&buf[..n], from), (&b"answer"[..], to_b));
            (before, sleeps_of(io_a))
        });
        let (n, from) = sb.recv_from(&mut buf).expect("the request");
        assert_eq!((&buf[..n], from), (&b"request"[..], to_a));
        std::thread::sleep(WAIT);
        sb.send_to(b"answer", to_a).expect("send");
        asks.join().expect("asking thread")
    });
    // Waking every millisecond would be about 400; a sleep of at most 50 ms between looks
    // at its timers, about 10.
    let sleeps = woke - asked;
    assert!(
        sleeps <= 40,
        "the I/O thread woke {sleeps} times while a thread waited {WAIT:?} for its answer"
    );
    // The I/O thread reads the next messages itself (a receive by a socket that did not send
    // since its last wait does not lead).
    for i in 0..20u32 {
        sb.send_to(&i.to_be_bytes(), to_a).expect("send");
        let (n, from) = sa.recv_from(&mut buf).expect("a message");
        assert_eq!((&buf[..n], from), (&i.to_be_bytes()[..], to_b));
    }
}
