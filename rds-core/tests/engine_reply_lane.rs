//! Engine tests of answers on the request's lane (multipath RDS/TCP): a socket that hears from
//! a peer before it sends to it answers on the lane the peer's message came on and keeps it;
//! a socket's lane to a peer never changes once used (each pair's order is kept, also across a
//! lane going down); a bounded number of peers is remembered; loopback and single-lane
//! connections are unchanged.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;

use bytes::Bytes;
use rds_core::proto::reply_lane::{ReplyLane, REPLY_LANES_MAX};
use rds_core::proto::{SockId, TransportKind};
use rds_core::stats::Counter;
use rds_core::wire::{ExtHeader, HeaderRepr};

use common::*;

/// A's socket hashes to lane 2, B's to lane 5.
const LANE_A: usize = 2;
const LANE_B: usize = 5;

/// An established pair with a socket on each side: (pair, A's port, A's socket, B's port,
/// B's socket).
fn setup() -> (Pair, u16, SockId, u16, SockId) {
    let mut p = Pair::tcp();
    p.establish();
    let pa = port_on_lane(SEED_A, LANE_A, 5000);
    let pb = port_on_lane(SEED_B, LANE_B, 6000);
    let sa = p.sock(A, pa);
    let sb = p.sock(B, pb);
    (p, pa, sa, pb, sb)
}

/// Paths of the data frames `from` sent from `sport` to `dport`, in wire order.
fn paths(p: &Pair, from: Side, sport: u16, dport: u16) -> Vec<usize> {
    p.wired_from(from, sport)
        .iter()
        .filter(|w| w.hdr.dport == dport)
        .map(|w| w.path)
        .collect()
}

/// Paths of side `s`'s queued (not yet sent) messages from `lport`.
fn queued_paths(p: &mut Pair, s: Side, lport: u16) -> Vec<usize> {
    p.st(s)
        .queued_msgs(false)
        .iter()
        .filter(|m| m.lport == lport)
        .map(|m| m.path)
        .collect()
}

fn payloads(p: &mut Pair, s: Side, sock: SockId) -> Vec<Vec<u8>> {
    p.recv_all(s, sock)
        .into_iter()
        .map(|m| m.payload.to_vec())
        .collect()
}

fn bound(p: &Pair, s: Side) -> u64 {
    p.stat(s, Counter::ReplyLaneBound)
}

/// A message from B's `pb` to A's `pa` on `lane`, as a kernel peer would send it (no engine
/// of B involved).
fn inject(p: &mut Pair, lane: usize, seq: u64, pb: u16, pa: u16, payload: &[u8]) {
    let (ca, ea, now) = (p.conn(A), p.epoch(A, lane), p.now);
    let hdr = HeaderRepr::data(seq, pb, pa, payload.len() as u32);
    p.st(A)
        .handle_frame(now, ca, lane, ea, frame(hdr, payload))
        .unwrap();
}

#[test]
fn the_answer_rides_the_requests_lane() {
    let (mut p, pa, sa, pb, sb) = setup();
    p.send(A, sa, pb, b"req0").unwrap();
    p.run();
    let got = p.recv_all(B, sb);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].from, p.dest(A, pa));
    // B's socket would send on its hash lane 5; it answers on lane 2, where the request came.
    p.send(B, sb, pa, b"ans0").unwrap();
    assert_eq!(queued_paths(&mut p, B, pb), [LANE_A]);
    p.run();
    assert_eq!(payloads(&mut p, A, sa), [b"ans0".to_vec()]);
    for i in 1..=10u8 {
        p.send(A, sa, pb, &[b'q', i]).unwrap();
        p.run();
        assert_eq!(payloads(&mut p, B, sb), [vec![b'q', i]]);
        p.send(B, sb, pa, &[b'a', i]).unwrap();
        p.run();
        assert_eq!(payloads(&mut p, A, sa), [vec![b'a', i]]);
    }
    assert_eq!(paths(&p, A, pa, pb), [LANE_A; 11]);
    assert_eq!(paths(&p, B, pb, pa), [LANE_A; 11]);
    assert_eq!((bound(&p, A), bound(&p, B)), (0, 1));
    assert_eq!(
        p.st(B).reply_lanes(sb),
        [ReplyLane {
            peer: p.dest(A, pa),
            heard: LANE_A,
            bound: Some(LANE_A)
        }]
    );
    // A sent first: it keeps its own lane and remembers nothing.
    assert_eq!(p.st(A).reply_lanes(sa), []);
    // A socket of B that heard nothing from A keeps its hash lane.
    let sb2 = p.sock(B, pb + 1000);
    let own = lane_of(SEED_B, pb + 1000);
    p.send(B, sb2, pa, b"other").unwrap();
    assert_eq!(queued_paths(&mut p, B, pb + 1000), [own]);
}

#[test]
fn either_side_may_ask_first() {
    // B asks (on its lane 5); A answers there.
    let (mut p, pa, sa, pb, sb) = setup();
    for i in 0..6u8 {
        p.send(B, sb, pa, &[b'q', i]).unwrap();
        p.run();
        assert_eq!(payloads(&mut p, A, sa), [vec![b'q', i]]);
        p.send(A, sa, pb, &[b'a', i]).unwrap();
        p.run();
        assert_eq!(payloads(&mut p, B, sb), [vec![b'a', i]]);
    }
    assert_eq!(paths(&p, B, pb, pa), [LANE_B; 6]);
    assert_eq!(paths(&p, A, pa, pb), [LANE_B; 6]);
    assert_eq!((bound(&p, A), bound(&p, B)), (1, 0));
}

#[test]
fn a_socket_that_sent_first_never_moves() {
    // Both sides send before they hear each other (a symmetric exchange): each keeps its lane,
    // and the lanes stay where they are after every message was acknowledged.
    let (mut p, pa, sa, pb, sb) = setup();
    p.send(B, sb, pa, b"b1").unwrap();
    p.send(A, sa, pb, b"a1").unwrap();
    // A's message reaches B first (only lane 2 is carried); B's b1 is still queued.
    let f = p.tx(A, LANE_A);
    p.rx(B, LANE_A, &f).unwrap();
    assert_eq!(payloads(&mut p, B, sb), [b"a1".to_vec()]);
    p.send(B, sb, pa, b"b2").unwrap();
    p.send(B, sb, pa, b"b3").unwrap();
    assert_eq!(queued_paths(&mut p, B, pb), [LANE_B; 3]);
    // Each step carries lane 2 before lane 5: a message moved to lane 2 would overtake.
    p.run();
    assert_eq!(
        payloads(&mut p, A, sa),
        [b"b1".to_vec(), b"b2".to_vec(), b"b3".to_vec()]
    );
    for i in 0..4u8 {
        p.send(A, sa, pb, &[b'a', i]).unwrap();
        p.run();
        p.send(B, sb, pa, &[b'b', i]).unwrap();
        p.run();
    }
    assert_eq!(payloads(&mut p, B, sb).len(), 4);
    assert_eq!(payloads(&mut p, A, sa).len(), 4);
    assert_eq!(paths(&p, B, pb, pa), [LANE_B; 7]);
    assert_eq!(paths(&p, A, pa, pb), [LANE_A; 5]);
    assert_eq!((bound(&p, A), bound(&p, B)), (0, 0));
    assert_eq!(p.st(A).reply_lanes(sa), []);
    assert_eq!(p.st(B).reply_lanes(sb), []);

    // A kernel-like peer that always sends on its own lane 5 does not move A either.
    for i in 0..12u8 {
        inject(&mut p, LANE_B, 1000 + u64::from(i), pb, pa, &[b'k', i]);
        assert_eq!(payloads(&mut p, A, sa), [vec![b'k', i]]);
        p.send(A, sa, pb, &[b'r', i]).unwrap();
        p.run();
    }
    assert_eq!(paths(&p, A, pa, pb), [LANE_A; 17]);
}

#[test]
fn a_bound_lane_that_goes_down_keeps_the_peers_messages() {
    let (mut p, pa, sa, pb, sb) = setup();
    p.send(A, sa, pb, b"a1").unwrap();
    p.run();
    assert_eq!(payloads(&mut p, B, sb), [b"a1".to_vec()]);
    p.send(B, sb, pa, b"c0").unwrap();
    p.run();
    assert_eq!(payloads(&mut p, A, sa), [b"c0".to_vec()]);
    // c1 is delivered but not acknowledged when lane 2 breaks: it waits for a retransmit.
    p.auto_ack = false;
    p.send(B, sb, pa, b"c1").unwrap();
    p.run();
    p.cut(LANE_A);
    // c2 and c3 wait behind it on lane 2 rather than take B's lane 5, which is up.
    p.send(B, sb, pa, b"c2").unwrap();
    p.auto_ack = true;
    p.send(B, sb, pa, b"c3").unwrap();
    assert_eq!(queued_paths(&mut p, B, pb), [LANE_A; 3]);
    p.run();
    assert!(p.lanes.contains_key(&LANE_A), "lane 2 is back");
    assert_eq!(
        payloads(&mut p, A, sa),
        [b"c1".to_vec(), b"c2".to_vec(), b"c3".to_vec()]
    );
    assert_eq!(p.stat(A, Counter::RecvDropOldSeq), 1, "c1's retransmission");
    assert_eq!(
        paths(&p, B, pb, pa),
        [LANE_A, LANE_A, LANE_A, LANE_A, LANE_A]
    );
    assert_eq!(bound(&p, B), 1);
}

#[test]
fn a_heard_lane_down_at_the_first_answer_gives_the_hash_lane_for_good() {
    let (mut p, pa, sa, pb, sb) = setup();
    p.send(A, sa, pb, b"a1").unwrap();
    p.run();
    assert_eq!(payloads(&mut p, B, sb), [b"a1".to_vec()]);
    p.cut(LANE_A);
    p.send(B, sb, pa, b"b1").unwrap();
    assert_eq!(queued_paths(&mut p, B, pb), [LANE_B]);
    p.run();
    assert!(p.lanes.contains_key(&LANE_A), "lane 2 is back");
    assert_eq!(payloads(&mut p, A, sa), [b"b1".to_vec()]);
    // Lane 2 is up again and A keeps sending on it: B stays on its lane.
    p.send(A, sa, pb, b"a2").unwrap();
    p.run();
    assert_eq!(payloads(&mut p, B, sb), [b"a2".to_vec()]);
    p.send(B, sb, pa, b"b2").unwrap();
    p.run();
    assert_eq!(payloads(&mut p, A, sa), [b"b2".to_vec()]);
    assert_eq!(paths(&p, B, pb, pa), [LANE_B, LANE_B]);
    assert_eq!(bound(&p, B), 0);
    assert_eq!(p.st(B).reply_lanes(sb), []);
}

#[test]
fn many_source_ports_stay_within_the_bound() {
    let (mut p, _pa, _sa, pb, sb) = setup();
    // 64 ports of A send to B's socket; none hashes to B's lane 5 (so that an answer on the
    // peer's lane and one on B's own lane differ).
    let ports_from = |from: u16| -> Vec<u16> {
        (from..)
            .filter(|&port| lane_of(SEED_A, port) != LANE_B)
            .take(64)
            .collect()
    };
    let flood = |p: &mut Pair, ports: &[u16]| -> Vec<u16> {
        for &port in ports {
            let s = p.sock(A, port);
            p.send(A, s, pb, b"x").unwrap();
        }
        p.run();
        p.recv_all(B, sb).iter().map(|m| m.from.port()).collect()
    };
    let ports = ports_from(8000);
    let order = flood(&mut p, &ports);
    assert_eq!(order.len(), 64);
    // The most recently heard ones are remembered (arrival order is lane by lane).
    let remembered: BTreeSet<u16> = order[64 - REPLY_LANES_MAX..].iter().copied().collect();
    let kept: BTreeSet<u16> = p
        .st(B)
        .reply_lanes(sb)
        .iter()
        .map(|e| e.peer.port())
        .collect();
    assert_eq!(kept, remembered);
    // Answers: remembered ports on their lane, forgotten ones on B's hash lane.
    for &port in &ports {
        p.send(B, sb, port, b"y").unwrap();
        p.run();
        let want = if remembered.contains(&port) {
            lane_of(SEED_A, port)
        } else {
            LANE_B
        };
        assert_eq!(paths(&p, B, pb, port), [want], "port {port}");
    }
    assert_eq!(bound(&p, B), REPLY_LANES_MAX as u64);
    // All 16 entries are bound now: 64 new ports are not remembered, and the bound ones stay.
    let more = ports_from(9000);
    assert_eq!(flood(&mut p, &more).len(), 64);
    let entries = p.st(B).reply_lanes(sb);
    assert_eq!(entries.len(), REPLY_LANES_MAX);
    for e in &entries {
        assert!(remembered.contains(&e.peer.port()));
        assert_eq!(e.bound, Some(lane_of(SEED_A, e.peer.port())));
    }
    for &port in &more[..8] {
        p.send(B, sb, port, b"z").unwrap();
        p.run();
        assert_eq!(paths(&p, B, pb, port), [LANE_B], "port {port}");
    }
    let first: Vec<u16> = remembered.iter().copied().take(4).collect();
    for port in first {
        p.send(B, sb, port, b"w").unwrap();
        p.run();
        let l = lane_of(SEED_A, port);
        assert_eq!(paths(&p, B, pb, port), [l, l], "port {port}");
    }
}

#[test]
fn single_lane_and_loopback_use_the_hash_lane() {
    // A peer that announces one lane: everything on lane 0, nothing remembered.
    let mut p = Pair::tcp();
    let pa = port_on_lane(SEED_A, LANE_A, 5000);
    let pb = 6000;
    let sa = p.sock(A, pa);
    p.send(A, sa, pb, b"x").unwrap();
    let (conn, _, epoch) = connects(&p.take_events(A))[0];
    p.connect(A, conn, 0, epoch);
    let fa = p.tx(A, 0);
    p.rx(B, 0, &fa).unwrap();
    let (ca, ea) = (p.conn(A), p.epoch(A, 0));
    let mut pong = HeaderRepr::data(1, 0, 1, 0);
    pong.push_ext(ExtHeader::Npaths(1)).unwrap();
    let now = p.now;
    p.st(A)
        .handle_frame(now, ca, 0, ea, frame(pong, &[]))
        .unwrap();
    assert_eq!(p.st(A).npaths(ca), 1);
    // A socket of A that has sent nothing hears from B on lane 0.
    let pa2 = port_on_lane(SEED_A, LANE_A, pa + 1);
    let sa2 = p.sock(A, pa2);
    let hdr = HeaderRepr::data(2, pb, pa2, 1);
    p.st(A)
        .handle_frame(now, ca, 0, ea, frame(hdr, b"k"))
        .unwrap();
    assert_eq!(payloads(&mut p, A, sa2), [b"k".to_vec()]);
    p.send(A, sa2, pb, b"y").unwrap();
    assert_eq!(queued_paths(&mut p, A, pa2), [0]);
    assert_eq!(p.st(A).reply_lanes(sa2), []);

    // Loopback: two sockets of one address answer each other; nothing is remembered.
    let mut st = stack(ADDR_A, TransportKind::Tcp, Default::default(), 9);
    let (x, y) = (st.socket(), st.socket());
    let (ax, ay) = (SocketAddr::new(ADDR_A, 7000), SocketAddr::new(ADDR_A, 7001));
    st.bind(x, ax).unwrap();
    st.bind(y, ay).unwrap();
    st.send(now, x, Some(ay), Bytes::from_static(b"q"), true)
        .unwrap();
    assert!(st.recv(y, 100, false).is_ok());
    st.send(now, y, Some(ax), Bytes::from_static(b"a"), true)
        .unwrap();
    assert!(st.recv(x, 100, false).is_ok());
    assert_eq!(st.reply_lanes(x), []);
    assert_eq!(st.reply_lanes(y), []);
    assert_eq!(st.stats().get(Counter::ReplyLaneBound), 0);
}
