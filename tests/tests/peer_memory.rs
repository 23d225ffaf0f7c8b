//! What remote peers can make the host daemon hold (issue 30, items 2 and 3), attacked as a
//! peer would: raw TCP connections to `rds-ctrl daemon tcp` from 127.173.N.x source addresses,
//! with the daemon's memory read from `/proc/<pid>`.
//!
//! - 2, half-sent messages: 150 peers each announce a 1 MiB message and send all but its last
//!   byte. The daemon charges what arrives as it arrives: with a 64 MiB budget it holds at most
//!   the budget (the peers past it are reset and counted), every stalled message ends after
//!   `net.rds.partial_timeout_ms` (3 s here, `tcp_partial_timeouts`), and the memory goes back
//!   to the system: resident memory returns to within the buffer pool's 32 MiB of the start.
//! - 3, small messages pinning read buffers: 5,000 one-byte messages, each read on its own,
//!   to a socket that uid 65534 opened through the daemon and never reads: the daemon grows by
//!   about what it charges (257 bytes a message), not a read buffer a message.
//!
//! Addresses: 127.173.N.0/24 for case N; the daemon is 127.173.N.200. Needs root (a socket of
//! uid 65534).

use std::io::Write;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use rds_tests::hostdaemon::{wait_for, Holder, HostDaemon, RssSampler};
use rds_tests::raw;

const MIB: u64 = 1 << 20;

fn ip(case: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 173, case, host)
}

#[track_caller]
fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs a child as uid 65534: run it as root"
    );
}

#[test]
fn half_sent_messages_are_charged_ended_and_given_back() {
    require_root();
    const PEERS: u8 = 150;
    let budget = 64 * MIB;
    let d = HostDaemon::start(
        ip(2, 200),
        None,
        &format!("net.rds.mem_budget = {budget}\nnet.rds.partial_timeout_ms = 3000\n"),
    );
    let start = d.proc();
    let sampler = RssSampler::start(d.pid);
    let before = d.stats();
    let len = 1usize << 20;
    let body = vec![0x33u8; len - 1];
    let t0 = Instant::now();
    let mut peers = Vec::new();
    for k in 0..PEERS {
        let mut s = raw::connect_lane(ip(2, 1 + k), ip(2, 200), 0, None);
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let h = rds_core::wire::HeaderRepr::data(1, 5000, 7000, len as u32);
        // A peer the daemon resets (its share or the budget is full) fails its write: fine.
        let _ = s.write_all(&h.to_bytes()).and_then(|_| s.write_all(&body));
        peers.push(s);
    }
    let sent_in = t0.elapsed();
    let delta = |d: &HostDaemon, k: &str| d.stat(k) - before.get(k).copied().unwrap_or(0);
    // Every stalled message ends within the timeout (and a round of the I/O thread).
    let took = wait_for(
        "the stalled messages to end",
        Duration::from_secs(30),
        || {
            let snap = d.snapshot();
            snap.tcp.iter().all(|t| t.data_rem == 0)
        },
    );
    let peak = sampler.stop();
    let timeouts = delta(&d, "tcp_partial_timeouts");
    let refused = delta(&d, "recv_drop_no_mem");
    drop(peers);
    // Memory goes back: resident memory falls to within the pool's keep of the start.
    let pool = rds_core::buf::KEEP as u64 / 1024;
    let back = wait_for("the memory to be returned", Duration::from_secs(20), || {
        d.proc().rss_kib <= start.rss_kib + pool + 8 * 1024
    });
    let after = d.proc();
    eprintln!(
        "FIGURE half-sent: {PEERS} peers each sent 1 MiB - 1 of a 1 MiB message in {:.2} s; \
         budget {} MiB: {refused} reset past the budget (recv_drop_no_mem), {timeouts} ended \
         after 3 s (tcp_partial_timeouts), all within {:.1} s; daemon RSS {} KiB at start, peak \
         {} KiB, {} KiB {:.1} s after the peers left",
        sent_in.as_secs_f64(),
        budget / MIB,
        took.as_secs_f64(),
        start.rss_kib,
        peak,
        after.rss_kib,
        back.as_secs_f64()
    );
    assert!(
        peak.saturating_sub(start.rss_kib) <= (budget + 32 * MIB) / 1024,
        "the daemon grew by {} KiB with a budget of {} MiB",
        peak - start.rss_kib,
        budget / MIB
    );
    assert!(timeouts > 0, "no stalled message was ended");
    assert!(refused > 0, "no peer was refused past the budget");
    d.survives();
}

#[test]
fn small_messages_do_not_pin_read_buffers() {
    require_root();
    const MSGS: u64 = 5000;
    let d = HostDaemon::start(ip(3, 200), None, "");
    let mut c = d.tool_as("rds-hostile-client", 65534);
    c.arg("bind")
        .arg(d.sock_path())
        .arg(format!("{}:7000", ip(3, 200)));
    let victim = Holder::start(c, "uid 65534's socket");
    assert_eq!(victim.line, format!("done bind ok {}:7000", ip(3, 200)));
    let start = d.proc();
    let mut s = raw::connect_lane(ip(3, 1), ip(3, 200), 0, None);
    s.set_nodelay(true).unwrap();
    for i in 1..=MSGS {
        raw::send_data(&mut s, i, 5000, 7000, b"x").unwrap();
        // Each message its own segment, read on its own.
        std::thread::sleep(Duration::from_micros(150));
    }
    let queued = |d: &HostDaemon| -> u64 {
        let snap = d.snapshot();
        snap.recv.iter().filter(|m| m.lport == 7000).count() as u64 + snap.omitted.recv
    };
    wait_for(
        "every message to be queued",
        Duration::from_secs(30),
        || queued(&d) == MSGS,
    );
    let after = d.proc();
    let charged = MSGS * (1 + rds_core::proto::stack::MSG_COST as u64);
    eprintln!(
        "FIGURE small-messages: {MSGS} one-byte messages queued to a socket nobody reads \
         ({charged} bytes charged): daemon VmRSS +{} KiB, VmData +{} KiB",
        after.rss_kib as i64 - start.rss_kib as i64,
        after.data_kib as i64 - start.data_kib as i64
    );
    // A few MiB of slack for the allocator and the info snapshots; a read buffer a message
    // would be 1,250 MiB.
    for (what, grew) in [
        ("VmRSS", after.rss_kib.saturating_sub(start.rss_kib)),
        ("VmData", after.data_kib.saturating_sub(start.data_kib)),
    ] {
        assert!(
            grew < 16 * 1024,
            "{what} grew by {grew} KiB for {charged} bytes charged"
        );
    }
    victim.release();
    d.survives();
}
