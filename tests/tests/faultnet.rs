//! A replica of the kernel's RDS selftest (`tools/testing/selftests/net/rds/test.py`, TCP run)
//! between two of our nodes, through the fault-injecting proxy of `rds_tests::faultnet`
//! instead of netem (issue 3, tests).
//!
//! As in the selftest: one socket per node (127.3.3.1:10000 and 127.3.3.2:20000), 50,000
//! messages whose payload is the 64-byte hex SHA-256 of `"packet n"`, sender `n % 2` and
//! receiver `1 - (n % 3) % 2` (so half the messages are self-sends over loopback), send bursts
//! that stop at EAGAIN or ENOBUFS, then receive until every sent message arrived, a running
//! SHA-256 per (sender, receiver) pair on both sides, and every round a forced reconnect of all
//! RDS/TCP connections (the TCP buffer tunables toggle between 10000 and 10240 bytes, which
//! makes the nodes drop and re-establish them, like `rds_tcp_sysctl_reset`). On top, the proxy
//! splits the streams at random offsets, pauses, cuts connection pairs at random byte offsets
//! and every third round cuts them all. The test passes only if every per-pair hash matches:
//! no loss, duplication or reordering.
//!
//! The nodes reach each other only through the proxies: node A's route to B is the proxy on
//! 127.3.3.12:16385 (which connects on to 127.3.3.2:16385 from 127.3.3.1) and B's route to A
//! the proxy on 127.3.3.11:16385. Addresses: 127.3.3.0/24. The proxies' seeds are fixed: a
//! run takes four consecutive seeds from 0x5eed, one after the other (`FAULTNET_SEED=s` runs
//! seed `s` alone; `scripts/faultnet-campaign.sh` runs hundreds); `FAULTNET_NET=N` (1-254) moves every address to 127.3.N.0/24, so
//! that a campaign can run beside another run of this test.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rds_core::stats::Counter;
use rds_core::{CtlMode, Node, NodeConfig, RecvFlags, Socket};
use rds_tests::faultnet::{Faults, Proxy};
use sha2::{Digest, Sha256};

const MESSAGES: u64 = 50_000;

/// The third octet of every address (`FAULTNET_NET`, default 3). A value that is not a number
/// from 1 to 254 fails the test, never falls back.
fn subnet() -> u8 {
    match std::env::var("FAULTNET_NET") {
        Err(_) => 3,
        Ok(v) => match v.parse::<u8>() {
            Ok(n) if (1..=254).contains(&n) => n,
            _ => panic!("FAULTNET_NET wants a number from 1 to 254, got '{v}'"),
        },
    }
}

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn node(ip: &str, seed: u64) -> Node {
    let mut cfg = NodeConfig::new([ip.parse().unwrap()]);
    cfg.ctl = CtlMode::Off;
    cfg.seed = Some(seed);
    cfg.name = format!("faultnet-{ip}");
    Node::start(cfg).unwrap()
}

fn packet(n: u64) -> Vec<u8> {
    let d = Sha256::digest(format!("packet {n}").as_bytes());
    d.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .into_bytes()
}

fn toggle_tcp_bufs(n: &Node, round: u32) {
    let mut t = n.tunables();
    let v = if round & 1 == 0 { 10_000 } else { 10_240 };
    t.tcp_sndbuf = v;
    t.tcp_rcvbuf = v;
    n.set_tunables(t);
}

/// A message sent and not yet received: its (sender, receiver) pair, its index within the pair
/// (the sequence number on its lane, counted from 1 while no lane reset it), the round that
/// sent it.
type Outstanding = HashMap<Vec<u8>, ((usize, usize), u64, u32)>;

/// The messages still outstanding, per pair: runs of consecutive indices within the pair,
/// with the rounds they were sent in (at most 10 runs per pair).
fn missing_ranges(out: &Outstanding) -> String {
    let mut by_pair: HashMap<(usize, usize), Vec<(u64, u32)>> = HashMap::new();
    for &(pair, k, r) in out.values() {
        by_pair.entry(pair).or_default().push((k, r));
    }
    let mut pairs: Vec<_> = by_pair.into_iter().collect();
    pairs.sort();
    let mut text = String::new();
    for (pair, mut v) in pairs {
        v.sort_unstable();
        let mut runs: Vec<(u64, u64, u32, u32)> = Vec::new();
        for (k, r) in v {
            match runs.last_mut() {
                Some(run) if run.1 + 1 == k => {
                    run.1 = k;
                    run.3 = r;
                }
                _ => runs.push((k, k, r, r)),
            }
        }
        let shown: Vec<String> = runs
            .iter()
            .take(10)
            .map(|(a, b, ra, rb)| format!("{a}-{b} (rounds {ra}-{rb})"))
            .collect();
        text += &format!(
            "{pair:?}: {} in {} runs: {}; ",
            runs.iter().map(|r| r.1 - r.0 + 1).sum::<u64>(),
            runs.len(),
            shown.join(", ")
        );
    }
    text
}

/// The first seed of the default range.
const FIRST_SEED: u64 = 0x5eed;
/// Seeds in the default range (each run takes one to a few seconds).
const SEEDS: u64 = 4;

/// The seeds to run: `FAULTNET_SEED=s` alone, else [`SEEDS`] consecutive ones from
/// [`FIRST_SEED`]. A value that is not a number fails the test.
fn seeds() -> std::ops::Range<u64> {
    match std::env::var("FAULTNET_SEED") {
        Err(_) => FIRST_SEED..FIRST_SEED + SEEDS,
        Ok(v) => {
            let s: u64 = v
                .parse()
                .unwrap_or_else(|_| panic!("FAULTNET_SEED wants a number, got '{v}'"));
            s..s + 1
        }
    }
}

#[test]
fn selftest_replica_through_a_cutting_proxy() {
    for seed in seeds() {
        replica(seed);
    }
}

/// One run of the replica with the proxies' faults drawn from `seed`.
fn replica(seed: u64) {
    println!("FAULTNET_SEED={seed}");
    let faults = |s: u64| Faults {
        seed: s,
        cut_mean: 48 << 10,
        max_chunk: 1500,
        delay_one_in: 300,
        max_delay: Duration::from_millis(1),
    };
    let net = subnet();
    let h = |host: u8| format!("127.3.{net}.{host}");
    let na = node(&h(1), 31);
    let nb = node(&h(2), 32);
    let pb = Proxy::start(
        a(&format!("{}:16385", h(12))),
        a(&format!("{}:16385", h(2))),
        faults(seed),
    )
    .unwrap();
    let pa = Proxy::start(
        a(&format!("{}:16385", h(11))),
        a(&format!("{}:16385", h(1))),
        faults(seed + 1),
    )
    .unwrap();
    na.set_peer_route(h(2).parse().unwrap(), Some(pb.addr()));
    nb.set_peer_route(h(1).parse().unwrap(), Some(pa.addr()));
    for n in [&na, &nb] {
        toggle_tcp_bufs(n, 0);
    }

    let addrs = [a(&format!("{}:10000", h(1))), a(&format!("{}:20000", h(2)))];
    let socks = [Socket::with_node(&na), Socket::with_node(&nb)];
    for (s, &ad) in socks.iter().zip(&addrs) {
        s.set_transport(rds_core::proto::TransportKind::Tcp)
            .unwrap();
        s.bind(ad).unwrap();
        s.set_nonblocking(true);
    }
    let fds: Vec<i32> = socks.iter().map(|s| s.fd().unwrap()).collect();
    let mut send_hash: HashMap<(usize, usize), Sha256> = HashMap::new();
    let mut recv_hash: HashMap<(usize, usize), Sha256> = HashMap::new();
    let mut send_count: HashMap<(usize, usize), u64> = HashMap::new();
    let mut recv_count: HashMap<(usize, usize), u64> = HashMap::new();
    let mut outstanding = Outstanding::new();
    let (mut sent, mut received, mut round) = (0u64, 0u64, 0u32);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(60);
    let mut progress = (0u64, Instant::now());
    let mut buf = [0u8; 1024];
    while sent < MESSAGES {
        // Send burst.
        while sent < MESSAGES {
            let (snd, rcv) = ((sent % 2) as usize, (1 - (sent % 3) % 2) as usize);
            let data = packet(sent);
            match socks[snd].send_to(&data, addrs[rcv]) {
                Ok(n) => assert_eq!(n, 64),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS)) => break,
                Err(e) => panic!("send {sent}: {e}"),
            }
            let h = send_hash.entry((snd, rcv)).or_default();
            h.update(b"<");
            h.update(&data);
            h.update(b">");
            let k = send_count.entry((snd, rcv)).or_default();
            *k += 1;
            outstanding.insert(data.to_vec(), ((snd, rcv), *k, round));
            sent += 1;
        }
        // Receive until everything sent has arrived.
        while received < sent {
            if received != progress.0 {
                progress = (received, Instant::now());
            }
            if !(Instant::now() < deadline && progress.1.elapsed() < Duration::from_secs(15)) {
                // What each node holds, for the failure report.
                eprintln!("sent per (sender, receiver): {send_count:?}");
                eprintln!("received per (sender, receiver): {recv_count:?}");
                eprintln!("missing: {}", missing_ranges(&outstanding));
                for (name, n) in [("A", &na), ("B", &nb)] {
                    eprintln!("node {name} connections: {:#?}", n.connections());
                    eprintln!("node {name} transport sockets: {:#?}", n.tcp_sockets());
                    eprintln!("node {name} sockets: {:#?}", n.sockets());
                    let nonzero: Vec<_> = n.stats().into_iter().filter(|s| s.1 != 0).collect();
                    eprintln!("node {name} counters: {nonzero:?}");
                }
            }
            assert!(
                Instant::now() < deadline && progress.1.elapsed() < Duration::from_secs(15),
                "round {round}: {received} of {sent} messages received (stalled or past the \
                 deadline; proxy cuts {} + {}, owed {} + {} bytes)",
                pb.stats().cuts.load(std::sync::atomic::Ordering::Relaxed),
                pa.stats().cuts.load(std::sync::atomic::Ordering::Relaxed),
                pb.owed_bytes(),
                pa.owed_bytes()
            );
            {
                // SAFETY: the sockets that own these descriptors outlive the poll.
                let b: Vec<BorrowedFd<'_>> = fds
                    .iter()
                    .map(|&f| unsafe { BorrowedFd::borrow_raw(f) })
                    .collect();
                let mut pfds: Vec<PollFd<'_>> = b
                    .iter()
                    .map(|f| PollFd::new(*f, PollFlags::POLLIN))
                    .collect();
                let _ = poll(&mut pfds, PollTimeout::from(1000u16));
            }
            for (me, s) in socks.iter().enumerate() {
                loop {
                    let m = match s.recv_msg(&mut buf, RecvFlags::default()) {
                        Ok(m) => m,
                        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => break,
                        Err(e) => panic!("receive: {e}"),
                    };
                    let Some(from) = m.from else { continue };
                    let sender = addrs
                        .iter()
                        .position(|&x| x == from)
                        .unwrap_or_else(|| panic!("message from unknown {from}"));
                    assert_eq!(m.len, 64, "message length from {from}");
                    outstanding.remove(&buf[..64]);
                    let h = recv_hash.entry((sender, me)).or_default();
                    h.update(b"<");
                    h.update(&buf[..64]);
                    h.update(b">");
                    *recv_count.entry((sender, me)).or_default() += 1;
                    received += 1;
                }
            }
        }
        // Forced reconnects: the buffer tunables change, every RDS/TCP connection drops.
        round += 1;
        for n in [&na, &nb] {
            toggle_tcp_bufs(n, round);
        }
        if round % 3 == 0 {
            pb.cut_all();
            pa.cut_all();
        }
    }
    let elapsed = start.elapsed();
    let stat = |p: &Proxy| {
        let s = p.stats();
        let l = |x: &std::sync::atomic::AtomicU64| x.load(std::sync::atomic::Ordering::Relaxed);
        format!(
            "pairs {} cuts {} replayed frames {} delays {} bytes {}",
            l(&s.pairs),
            l(&s.cuts),
            l(&s.replayed_frames),
            l(&s.delays),
            l(&s.bytes)
        )
    };
    println!(
        "{sent} messages in {round} rounds, {elapsed:?}; proxy to B: {}; proxy to A: {}; \
         A conn_reset {} recv_drop_old_seq {}; B conn_reset {} recv_drop_old_seq {}",
        stat(&pb),
        stat(&pa),
        na.counter(Counter::ConnReset),
        na.counter(Counter::RecvDropOldSeq),
        nb.counter(Counter::ConnReset),
        nb.counter(Counter::RecvDropOldSeq),
    );
    assert_eq!(received, MESSAGES);
    for pair in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        assert_eq!(
            send_count.get(&pair),
            recv_count.get(&pair),
            "count {pair:?}"
        );
        let s = send_hash.remove(&pair).map(|h| h.finalize());
        let r = recv_hash.remove(&pair).map(|h| h.finalize());
        assert_eq!(
            s, r,
            "per-pair SHA-256 of {pair:?} (loss, duplication or reordering)"
        );
    }
    // Nothing arrived twice after the count was reached.
    std::thread::sleep(Duration::from_millis(200));
    for s in &socks {
        assert_eq!(
            s.recv_msg(&mut buf, RecvFlags::default())
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EAGAIN)
        );
    }
    // The faults did happen.
    assert!(pb.stats().cuts.load(std::sync::atomic::Ordering::Relaxed) > 0);
    assert!(na.counter(Counter::ConnReset) > 0 && nb.counter(Counter::ConnReset) > 0);
    assert!(round > 3);
    assert!(elapsed < Duration::from_secs(60));
    na.shutdown();
    nb.shutdown();
}

/// The stall report's list of missing messages: runs of consecutive indices per pair, sorted.
#[test]
fn missing_ranges_are_runs_per_pair() {
    let mut out = Outstanding::new();
    for (i, k, r) in [(0u8, 5u64, 2u32), (1, 6, 2), (2, 7, 3), (3, 9, 4)] {
        out.insert(vec![i], ((0, 1), k, r));
    }
    out.insert(vec![9], ((1, 0), 1, 0));
    assert_eq!(
        missing_ranges(&out),
        "(0, 1): 4 in 2 runs: 5-7 (rounds 2-3), 9-9 (rounds 4-4); (1, 0): 1 in 1 runs: 1-1 \
         (rounds 0-0); "
    );
}
