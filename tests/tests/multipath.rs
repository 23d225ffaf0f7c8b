//! Multipath RDS/TCP (issue 3, tests: "with 8 lanes, sockets spread over lanes and per-pair
//! order holds"): two of our nodes agree on 8 lanes; 128 sockets on different ports send to 4
//! receivers, which echo every message back. The lane of a socket follows the hash of its
//! port, so every lane carries traffic (checked through `Node::connections()`: all 8 paths of
//! both directions advanced their `next_tx_seq`), and each (sender, receiver) pair sees its
//! messages in order, exactly once.
//!
//! Addresses: 127.3.4.0/24.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use rds_core::proto::{PathState, TransportKind};
use rds_core::{CtlMode, Node, NodeConfig, Socket};

const SENDERS: u16 = 128;
const RECEIVERS: u16 = 4;
const PER_SENDER: u32 = 20;

fn node(ip: &str, seed: u64) -> Node {
    let mut cfg = NodeConfig::new([ip.parse().unwrap()]);
    cfg.ctl = CtlMode::Off;
    cfg.seed = Some(seed);
    cfg.name = format!("multipath-{ip}");
    Node::start(cfg).unwrap()
}

fn msg(port: u16, i: u32) -> Vec<u8> {
    let len = 64 + ((u32::from(port) * 131 + i * 977) % 3000) as usize;
    let mut m = vec![(port as u8) ^ (i as u8); len];
    m[..2].copy_from_slice(&port.to_be_bytes());
    m[2..6].copy_from_slice(&i.to_be_bytes());
    m
}

fn sock(n: &Node, addr: SocketAddr) -> Socket {
    let s = Socket::with_node(n);
    s.set_send_buffer_size(4 << 20);
    s.set_recv_buffer_size(4 << 20);
    s.bind(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20)));
    s.set_write_timeout(Some(Duration::from_secs(20)));
    s
}

/// State and `next_tx_seq` of each lane.
type Lanes = Vec<(PathState, u64)>;

fn tcp_paths(n: &Node, peer: &str) -> Lanes {
    let c = n
        .connections()
        .into_iter()
        .find(|c| c.faddr.to_string() == peer && c.kind == TransportKind::Tcp)
        .expect("a TCP connection");
    assert_eq!(c.npaths, 8, "lanes agreed with {peer}");
    c.paths
        .iter()
        .take(8)
        .map(|p| (p.state, p.next_tx_seq))
        .collect()
}

/// 128 sockets of `src` (ports from 9000) send to 4 sockets of `dst` (ports from 8000), which
/// check per-sender order and echo; the senders check their echoes. Returns the lanes of the
/// `src -> dst` connection before and after.
fn fan_in(src: &Node, dst: &Node) -> (Lanes, Lanes) {
    let (sip, dip) = (src.addrs()[0], dst.addrs()[0]);
    let senders: Vec<Socket> = (0..SENDERS)
        .map(|k| sock(src, SocketAddr::new(sip, 9000 + k)))
        .collect();
    let receivers: Vec<Socket> = (0..RECEIVERS)
        .map(|k| sock(dst, SocketAddr::new(dip, 8000 + k)))
        .collect();
    // Warm up: one exchange brings the connection and its lane handshake up.
    senders[0]
        .send_to(b"hello", receivers[0].local_addr().unwrap())
        .unwrap();
    let mut buf = vec![0u8; 8192];
    receivers[0].recv_from(&mut buf).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while src.connections().iter().all(|c| c.npaths != 8) {
        assert!(std::time::Instant::now() < deadline, "no lane handshake");
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = tcp_paths(src, &dip.to_string());
    std::thread::scope(|sc| {
        // Receiver r gets the messages of senders k ≡ r (mod RECEIVERS), checks per-sender
        // order and echoes each one.
        for (r, rx) in receivers.iter().enumerate() {
            sc.spawn(move || {
                let mut next: HashMap<SocketAddr, u32> = HashMap::new();
                let mut buf = vec![0u8; 8192];
                let total = u32::from(SENDERS / RECEIVERS) * PER_SENDER;
                for _ in 0..total {
                    let (n, from) = rx.recv_from(&mut buf).unwrap();
                    let port = from.port();
                    assert_eq!(usize::from(port - 9000) % RECEIVERS as usize, r);
                    let want = next.entry(from).or_insert(0);
                    assert_eq!(&buf[..n], &msg(port, *want)[..], "{from} -> receiver {r}");
                    *want += 1;
                    rx.send_to(&buf[..n], from).unwrap();
                }
                assert!(next.values().all(|&v| v == PER_SENDER));
            });
        }
        for i in 0..PER_SENDER {
            for (k, s) in senders.iter().enumerate() {
                let to = receivers[k % RECEIVERS as usize].local_addr().unwrap();
                s.send_to(&msg(9000 + k as u16, i), to).unwrap();
            }
        }
    });
    // Every sender gets its echoes back in order.
    for (k, s) in senders.iter().enumerate() {
        let port = 9000 + k as u16;
        let from_want = receivers[k % RECEIVERS as usize].local_addr().unwrap();
        for i in 0..PER_SENDER {
            let (n, from) = s.recv_from(&mut buf).unwrap();
            assert_eq!(from, from_want);
            assert_eq!(&buf[..n], &msg(port, i)[..], "echo {i} to {port}");
        }
    }
    (before, tcp_paths(src, &dip.to_string()))
}

fn check_lanes(name: &str, before: &[(PathState, u64)], after: &[(PathState, u64)]) {
    for (lane, ((_, s0), (st, s1))) in before.iter().zip(after).enumerate() {
        assert_eq!(*st, PathState::Up, "{name} lane {lane}");
        assert!(
            s1 > s0,
            "{name}: lane {lane} carried nothing ({s0} -> {s1})"
        );
    }
    let total: u64 = before.iter().zip(after).map(|((_, a), (_, b))| b - a).sum();
    assert!(
        total >= u64::from(SENDERS) * u64::from(PER_SENDER),
        "{name}: {total}"
    );
}

#[test]
fn eight_lanes_carry_traffic_and_keep_per_pair_order() {
    let na = node("127.3.4.1", 41);
    let nb = node("127.3.4.2", 42);
    let (before, after) = fan_in(&na, &nb);
    check_lanes("127.3.4.1 -> 127.3.4.2", &before, &after);
    let (before, after) = fan_in(&nb, &na);
    check_lanes("127.3.4.2 -> 127.3.4.1", &before, &after);
    na.shutdown();
    nb.shutdown();
}
