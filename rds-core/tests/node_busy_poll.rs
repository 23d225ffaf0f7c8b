//! `net.rds.busy_poll_us`: a thread that waits for its socket polls the node's connections
//! for that long before it sleeps, where the process may run on more than one CPU. Seen from
//! the waiting thread's CPU time (`/proc/thread-self/stat`, in ticks of 10 ms): the answer
//! comes 80 ms after the wait began; with a 100 ms busy poll the thread was on a CPU for most
//! of that time, with none (or on one CPU) it slept.

mod two_nodes;

use std::net::IpAddr;
use std::time::Duration;

use rds_core::tunables::Tunables;
use rds_core::{Node, NodeConfig};
use two_nodes::{stat_fields, TwoNodes};

/// User plus system CPU time of the calling thread, in ticks of 10 ms.
fn thread_ticks() -> u64 {
    // utime is field 14 of proc(5), stime field 15.
    let f = stat_fields("/proc/thread-self/stat");
    f[14 - 3].parse::<u64>().expect("utime") + f[15 - 3].parse::<u64>().expect("stime")
}

/// Two nodes on `net.1` and `net.2` with this busy-poll time; a socket sends a request and
/// waits for the answer, which comes 80 ms later: the waiting thread's CPU ticks. (A socket
/// that sent since its last wait is waiting for an answer and polls; a receive-only one
/// leaves the connections to the I/O thread.)
fn ticks_of_a_wait(net: u8, busy_poll: Duration) -> u64 {
    let ip = |h: u8| IpAddr::from([127, 94, net, h]);
    let start = |h: u8| {
        let mut cfg = NodeConfig::new([ip(h)]);
        cfg.tunables = Tunables {
            busy_poll,
            ..Tunables::default()
        };
        Node::start(cfg).expect("node on a loopback address")
    };
    let (a, b) = (start(1), start(2));
    let t = TwoNodes::connect(&a, ip(1), &b, ip(2));
    let (before, after) = t.late_answer(Duration::from_millis(80), thread_ticks);
    after - before
}

#[test]
fn a_waiting_thread_polls_for_the_busy_poll_time_before_it_sleeps() {
    assert!(
        std::thread::available_parallelism().is_ok_and(|n| n.get() > 1),
        "this test needs a process that may run on two CPUs"
    );
    let spun = ticks_of_a_wait(1, Duration::from_millis(100));
    assert!(
        spun >= 3,
        "a 100 ms busy poll kept the thread on a CPU for only {spun} ticks"
    );
    let slept = ticks_of_a_wait(2, Duration::ZERO);
    assert!(
        slept <= 1,
        "without busy poll the wait took {slept} ticks of CPU"
    );
}

#[test]
fn a_node_started_on_one_cpu_does_not_busy_poll() {
    let mut one = nix::sched::CpuSet::new();
    let cpu = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .ok()
        .and_then(|set| (0..nix::sched::CpuSet::count()).find(|&c| set.is_set(c).unwrap_or(false)))
        .expect("a CPU this process may run on");
    one.set(cpu).expect("cpu set");
    // The nodes start, and the waits run, on a thread that may use this one CPU only.
    let ticks = std::thread::spawn(move || {
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one).expect("affinity");
        ticks_of_a_wait(3, Duration::from_millis(100))
    })
    .join()
    .expect("test thread");
    assert!(ticks <= 1, "on one CPU the wait took {ticks} ticks of CPU");
}
