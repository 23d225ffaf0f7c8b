//! A node whose application thread waits long for an answer (it leads: it does the node's
//! I/O while it waits) lets its I/O thread sleep: the I/O thread no longer wakes every
//! millisecond to look whether the leader left, and the answer still comes, read by the
//! waiting thread, and the I/O thread takes over again after it.
//!
//! Also: the I/O thread runs under `SCHED_BATCH`, so that the thread that wakes it is not
//! preempted by it.
//!
//! Counted from the I/O thread's voluntary context switches (`/proc/self/task/TID/status`).
//! One test in this file: the process has these two nodes only.
//!
//! Addresses: 127.94.9.0/24.

mod two_nodes;

use std::net::IpAddr;
use std::time::Duration;

use rds_core::{CtlMode, Node, NodeConfig};
use two_nodes::{stat_fields, TwoNodes};

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

/// The scheduling policy of thread `tid` (field 41 of its `stat`).
fn policy_of(tid: u32) -> u32 {
    stat_fields(&format!("/proc/self/task/{tid}/stat"))[41 - 3]
        .parse()
        .expect("a number")
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
    let t = TwoNodes::connect(&a, ip(1), &b, ip(2));
    const WAIT: Duration = Duration::from_millis(400);
    let (asked, woke) = t.late_answer(WAIT, || sleeps_of(io_a));
    // Waking every millisecond would be about 400; a sleep of at most 50 ms between looks
    // at its timers, about 10.
    let sleeps = woke - asked;
    assert!(
        sleeps <= 40,
        "the I/O thread woke {sleeps} times while a thread waited {WAIT:?} for its answer"
    );
    // The I/O thread reads the next messages itself (a receive by a socket that did not send
    // since its last wait does not lead).
    let mut buf = [0u8; 64];
    for i in 0..20u32 {
        t.sb.send_to(&i.to_be_bytes(), t.to_a).expect("send");
        let (n, from) = t.sa.recv_from(&mut buf).expect("a message");
        assert_eq!((&buf[..n], from), (&i.to_be_bytes()[..], t.to_b));
    }
    // Woken, the I/O thread does not preempt the thread that woke it (SCHED_BATCH, 3).
    // Looked at once it ran: it names itself before it sets its policy.
    assert_eq!(
        policy_of(io_a),
        3,
        "node a's I/O thread's scheduling policy"
    );
}
