//! Engine tests of memory bounds: the node budget, the pong cap, the receive queue cap, and
//! freeing idle peers.

mod common;

use std::time::Duration;

use bytes::Bytes;
use rds_core::proto::stack::{
    CONN_COST, CONN_IDLE_LIFETIME, MSG_COST, PONG_QUEUE_MAX, RCVQ_CAP_MIN,
};
use rds_core::proto::{Event, FrameKind, PathState, SendError, SockId, TransportKind};
use rds_core::stats::Counter;
use rds_core::time::Instant;
use rds_core::tunables::Tunables;
use rds_core::wire::{flags, HeaderRepr, FRAG_SIZE, MAX_MSG_SIZE};

use common::*;

// ============================================================================================
// Memory bounds: the node budget, the pong cap, the receive queue cap, freeing idle peers

/// Feeds side `s` `n` messages on `lane` as if the other side sent them (starting after the
/// lane's last received sequence number), without anything going back.
fn inject(p: &mut Pair, s: Side, lane: usize, n: usize, sport: u16, dport: u16, len: usize) {
    let (c, e) = (p.conn(s), p.epoch(s, lane));
    let first = p.path_info(s, lane).next_rx_seq;
    let payload = vec![0x5a; len];
    let now = p.now;
    for seq in first..first + n as u64 {
        let h = HeaderRepr::data(seq, sport, dport, len as u32);
        p.st(s)
            .handle_frame(now, c, lane, e, frame(h, &payload))
            .unwrap();
    }
}

#[test]
fn pings_beyond_the_pong_cap_are_dropped_and_freed_when_the_peer_leaves() {
    let mut p = Pair::tcp();
    p.establish();
    let base = p.st(B).mem_used();
    let (pings, pongs) = (p.stat(B, Counter::RecvPing), p.stat(B, Counter::SendPong));
    let drops = p.stat(B, Counter::SendPongDropFull);
    // A pinger that never reads: nothing B queues is polled.
    let extra = 1000;
    inject(&mut p, B, 3, PONG_QUEUE_MAX + extra, 5000, 0, 0);
    assert_eq!(
        p.stat(B, Counter::RecvPing) - pings,
        (PONG_QUEUE_MAX + extra) as u64
    );
    assert_eq!(p.stat(B, Counter::SendPong) - pongs, PONG_QUEUE_MAX as u64);
    assert_eq!(p.stat(B, Counter::SendPongDropFull) - drops, extra as u64);
    assert_eq!(p.path_info(B, 3).send_queued, PONG_QUEUE_MAX);
    assert_eq!(p.st(B).mem_used() - base, PONG_QUEUE_MAX * MSG_COST);
    // Sent and acknowledged pongs make room again.
    let frames = p.tx(B, 3);
    assert_eq!(frames.len(), PONG_QUEUE_MAX);
    p.rx(A, 3, &frames).unwrap();
    p.run();
    assert_eq!(p.st(B).mem_used(), base);
    inject(&mut p, B, 3, PONG_QUEUE_MAX + 1, 5000, 0, 0);
    assert_eq!(
        p.stat(B, Counter::SendPongDropFull) - drops,
        extra as u64 + 1
    );
    // The pinger goes away for good: B has the larger address and nothing of a socket to
    // send, so it does not ask A back; the pongs are dropped, not kept for a reconnect.
    let paths: Vec<usize> = p.lanes.keys().copied().collect();
    for path in paths {
        p.cut(path);
    }
    assert_eq!(p.stat(B, Counter::SendPongDropDown), PONG_QUEUE_MAX as u64);
    assert_eq!(p.path_info(B, 3).send_queued, 0);
    assert_eq!(p.st(B).mem_used(), base);
    assert!(connects(&p.take_events(B)).is_empty(), "B does not redial");
}

#[test]
fn a_sender_ignoring_congestion_stops_at_the_receive_queue_cap() {
    let mut p = Pair::tcp();
    p.establish();
    let rb = p.sock(B, 6100);
    let rcvbuf = p.st(B).bufs(rb).unwrap().1;
    let cap = (rcvbuf * 4).max(RCVQ_CAP_MIN);
    let len = 65536;
    let fit = cap / len;
    let extra = 10;
    let base = p.st(B).mem_used();
    let seq = p.path_info(B, 0).next_rx_seq;
    // The peer keeps sending although the port is congested from the second message on.
    inject(&mut p, B, 0, fit + extra, 4000, 6100, len);
    assert!(p.st(B).local_cong_map(ADDR_B).unwrap().test(6100));
    let info = p.sock_info(B, rb);
    assert_eq!(info.rcv_bytes, fit * len);
    assert_eq!(p.stat(B, Counter::RecvDropRcvqFull), extra as u64);
    assert_eq!(p.stat(B, Counter::RecvDropNoMem), 0);
    assert_eq!(p.st(B).mem_used() - base, fit * (len + MSG_COST));
    // Dropped messages were consumed: the sequence space moved past them.
    assert_eq!(p.path_info(B, 0).next_rx_seq, seq + (fit + extra) as u64);
    // Reading makes room, and memory comes back.
    assert_eq!(p.recv_all(B, rb).len(), fit);
    assert_eq!(p.st(B).mem_used(), base);
    inject(&mut p, B, 0, 1, 4000, 6100, len);
    assert_eq!(p.recv_all(B, rb).len(), 1);
    assert_eq!(p.stat(B, Counter::RecvDropRcvqFull), extra as u64);
}

#[test]
fn the_budget_bounds_receive_queues_and_is_never_exceeded() {
    let budget = 2 << 20;
    let tun = Tunables {
        mem_budget: budget,
        ..Tunables::default()
    };
    let mut p = Pair::new(TransportKind::Tcp, Tunables::default(), tun);
    p.establish();
    let socks: Vec<SockId> = (0..4).map(|i| p.sock(B, 6200 + i)).collect();
    let base = p.st(B).mem_used();
    let len = 65536;
    let fit = (budget as usize - base) / (len + MSG_COST);
    let per_sock = 20;
    for i in 0..4u16 {
        inject(&mut p, B, 0, per_sock, 4000, 6200 + i, len);
        assert!(p.st(B).mem_used() <= budget as usize);
    }
    assert_eq!(
        p.stat(B, Counter::RecvDropNoMem),
        (4 * per_sock - fit) as u64
    );
    assert_eq!(p.stat(B, Counter::RecvDropRcvqFull), 0);
    assert_eq!(p.st(B).mem_used(), base + fit * (len + MSG_COST));
    // A pong needs budget too: pings beyond it are consumed unanswered and counted.
    let spare = budget as usize - p.st(B).mem_used();
    let answered = (spare / MSG_COST).min(PONG_QUEUE_MAX);
    let (drops, pongs) = (
        p.stat(B, Counter::RecvDropNoMem),
        p.stat(B, Counter::SendPong),
    );
    let full = p.stat(B, Counter::SendPongDropFull);
    inject(&mut p, B, 0, answered + 3, 5000, 0, 0);
    assert_eq!(p.stat(B, Counter::SendPong) - pongs, answered as u64);
    let unanswered =
        (p.stat(B, Counter::RecvDropNoMem) - drops) + (p.stat(B, Counter::SendPongDropFull) - full);
    assert_eq!(unanswered, 3);
    assert!(p.st(B).mem_used() <= budget as usize);
    let frames = p.tx(B, 0);
    p.rx(A, 0, &frames).unwrap();
    // Closing the sockets returns everything.
    for s in socks {
        p.st(B).close(s);
    }
    assert_eq!(p.st(B).mem_used(), base);
}

#[test]
fn a_send_beyond_the_budget_fails_with_enobufs() {
    let budget: usize = 1 << 20;
    let tun = Tunables {
        mem_budget: budget as u64,
        sndbuf_max: 64 << 20,
        ..Tunables::default()
    };
    let mut st = stack(ADDR_A, TransportKind::Tcp, tun, 77);
    let s = st.socket();
    st.bind(s, sa(ADDR_A, 4000)).unwrap();
    st.set_sndbuf(s, 64 << 20);
    let dest = Some(sa(ADDR_B, 5000));
    let len = 65536;
    let mut sent = 0;
    let err = loop {
        match st.send(Instant::ZERO, s, dest, Bytes::from(vec![1; len]), true) {
            Ok(_) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 100);
    };
    assert_eq!(err, SendError::NoBufs);
    assert_eq!(rds_core::errno::send_errno(err), libc::ENOBUFS);
    // The connection, then every message that fits (probe pings come only with a path up).
    assert_eq!(sent, (budget - CONN_COST) / (len + MSG_COST));
    assert_eq!(st.stats().get(Counter::MemSendError), 1);
    assert!(st.mem_used() <= budget);
    // A blocking sender gets the same answer (it would wait for nothing).
    assert_eq!(
        st.send(Instant::ZERO, s, dest, Bytes::from(vec![1; len]), false),
        Err(SendError::NoBufs)
    );
    assert_eq!(st.stats().get(Counter::MemSendError), 2);
    // Cancelling the queued messages gives the budget back.
    assert_eq!(st.cancel_sent_to(s, sa(ADDR_B, 5000)), sent);
    assert_eq!(st.mem_used(), CONN_COST);
    st.send(Instant::ZERO, s, dest, Bytes::from(vec![1; len]), true)
        .unwrap();
}

/// Both sides' remaining lanes are cut (the peer left).
fn cut_all(p: &mut Pair) {
    let paths: Vec<usize> = p.lanes.keys().copied().collect();
    for path in paths {
        p.cut(path);
    }
}

#[test]
fn a_ping_only_peer_is_not_redialled_and_is_freed_after_the_lifetime() {
    let mut p = Pair::tcp();
    // B (the larger address) pings A: it asks A to connect, and A answers the pings.
    let sb = p.sock(B, 7000);
    for _ in 0..3 {
        p.send(B, sb, 0, b"").unwrap();
    }
    p.run();
    let pongs = p
        .wired_from(A, 0)
        .iter()
        .filter(|w| w.hdr.dport == 7000)
        .count();
    assert_eq!(pongs, 3);
    assert!(!p.lanes.is_empty());
    let evs = p.take_events(A);
    assert!(connects(&evs).is_empty());
    p.st(B).close(sb);
    cut_all(&mut p);
    p.run();
    assert!(
        connects(&p.events[A.i()]).len() <= 8,
        "lanes of the first connection only"
    );
    let before = connects(&p.events[A.i()]).len();
    // A holds the smaller address, so it owns the connection; it carried only pings, so A
    // does not dial the peer back.
    for _ in 0..10 {
        p.advance(Duration::from_secs(7));
        p.run();
    }
    assert_eq!(connects(&p.events[A.i()]).len(), before, "no dial-back");
    assert_eq!(p.st(A).conn_count(), 0);
    assert_eq!(p.st(B).conn_count(), 0);
    assert_eq!(p.stat(A, Counter::ConnFreed), 1);
    assert_eq!(p.st(A).mem_used(), 0);
    assert_eq!(p.st(B).mem_used(), 0);
    assert!(p.st(A).conn_infos().is_empty());
}

#[test]
fn a_peer_with_traffic_is_redialled_then_freed_once_idle() {
    let mut p = Pair::tcp();
    p.establish();
    let cid = p.conn(A);
    cut_all(&mut p);
    // A had application traffic: it reconnects at once (the kernel's rule: the smaller
    // address owns and re-establishes the connection).
    let now = p.now;
    assert_eq!(p.st(A).poll_timeout(), Some(now));
    p.st(A).handle_timeout(now);
    let evs = p.take_events(A);
    let c = connects(&evs);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].1, 0);
    // The peer is gone: every attempt fails. A keeps trying within the lifetime.
    let fail = |p: &mut Pair, evs: &[Event]| {
        let now = p.now;
        for &(conn, path, epoch) in &connects(evs) {
            p.st(A).handle_connect_failed(now, conn, path, epoch);
        }
    };
    fail(&mut p, &evs);
    let mut attempts = 1;
    let start = p.now;
    while p.now < start + CONN_IDLE_LIFETIME + Duration::from_secs(5) {
        p.advance(ms(500));
        let now = p.now;
        if p.st(A).poll_timeout().is_some_and(|t| t <= now) {
            p.st(A).handle_timeout(now);
        }
        let evs = p.take_events(A);
        attempts += connects(&evs).len();
        fail(&mut p, &evs);
        assert!(p.st(A).conn_count() <= 1);
    }
    assert!(attempts > 10, "redialled {attempts} times");
    assert!(!p.st(A).conn_exists(cid), "freed after the lifetime");
    assert_eq!(p.stat(A, Counter::ConnFreed), 1);
    // Reports about the freed connection are ignored; its id answers as gone.
    let now = p.now;
    p.st(A).handle_disconnected(now, cid, 0, 1);
    assert_eq!(p.st(A).poll_transmit(now, cid, 0), None);
    assert_eq!(p.st(A).path_state(cid, 0), (PathState::Down, 0));
    // New traffic brings a new connection with a new id.
    p.lanes.clear();
    let port = port_on_lane(SEED_A, 0, 3900);
    let sa_ = p.st(A).conn_infos().len();
    assert_eq!(sa_, 0);
    let s = p.sock(A, port + 1000);
    p.send(A, s, port, b"again").unwrap();
    let c2 = p
        .st(A)
        .find_conn(ADDR_A, ADDR_B, TransportKind::Tcp)
        .unwrap();
    assert!(c2 > cid);
}

#[test]
fn a_freed_connection_keeps_its_sequence_state_for_the_peer_s_return() {
    let mut p = Pair::tcp();
    p.establish();
    let (old_tx_a, old_rx_b) = (p.path_info(A, 0).next_tx_seq, p.path_info(B, 0).next_rx_seq);
    assert!(old_rx_b > 1);
    cut_all(&mut p);
    // A's redials fail until both sides free the connection.
    let start = p.now;
    while p.now < start + CONN_IDLE_LIFETIME + Duration::from_secs(5) {
        p.advance(ms(500));
        let now = p.now;
        for s in [A, B] {
            if p.st(s).poll_timeout().is_some_and(|t| t <= now) {
                p.st(s).handle_timeout(now);
            }
        }
        let evs = p.take_events(A);
        for &(conn, path, epoch) in &connects(&evs) {
            p.st(A).handle_connect_failed(now, conn, path, epoch);
        }
        assert!(connects(&p.take_events(B)).is_empty(), "B does not dial");
    }
    assert_eq!(p.st(A).conn_count(), 0);
    assert_eq!(p.st(B).conn_count(), 0);
    // New traffic: sequence numbers go on where they were on both sides.
    p.lanes.clear();
    p.wire.clear();
    let port = port_on_lane(SEED_A, 0, 3900);
    let sb = p.sock(B, port + 1);
    let sa = p.sock(A, port + 2);
    p.send(A, sa, port + 1, b"again").unwrap();
    p.run();
    assert_eq!(p.recv_all(B, sb).len(), 1);
    let first = p
        .wire
        .iter()
        .filter(|w| w.from == A && w.path == 0 && w.kind == FrameKind::Data)
        .map(|w| w.hdr.seq)
        .min()
        .unwrap();
    assert_eq!(
        first, old_tx_a,
        "A's lane 0 goes on from its last sequence number"
    );
    // (The new connection is the only one: its info comes first.)
    assert!(p.st(B).conn_infos()[0].paths[0].next_rx_seq > old_rx_b);
    // A retransmission of a message B got before the free is dropped, not delivered again.
    let (c, e) = (p.conn(B), p.epoch(B, 0));
    let drops = p.stat(B, Counter::RecvDropOldSeq);
    let mut h = HeaderRepr::data(old_rx_b - 1, port + 2, port + 1, 5);
    h.flags |= flags::RETRANSMITTED;
    let now = p.now;
    p.st(B)
        .handle_frame(now, c, 0, e, frame(h, b"hello"))
        .unwrap();
    assert_eq!(p.stat(B, Counter::RecvDropOldSeq), drops + 1);
    assert!(p.recv_all(B, sb).is_empty());
}

#[test]
fn a_connection_with_queued_messages_is_not_freed() {
    let mut st = lone();
    let s = st.socket();
    st.bind(s, sa(ADDR_A, 4000)).unwrap();
    let dest = sa(ADDR_B, 5000);
    st.send(Instant::ZERO, s, Some(dest), Bytes::from_static(b"x"), true)
        .unwrap();
    let cid = st.find_conn(ADDR_A, ADDR_B, TransportKind::Tcp).unwrap();
    // Every attempt fails, for ten lifetimes: the message waits and the connection stays.
    let mut now = Instant::ZERO;
    let end = now + CONN_IDLE_LIFETIME * 10;
    while now < end {
        while let Some(e) = st.poll_event() {
            if let Event::Connect { conn, path, epoch } = e {
                st.handle_connect_failed(now, conn, path, epoch);
            }
        }
        now = st
            .poll_timeout()
            .expect("a reconnect is always planned")
            .max(now);
        st.handle_timeout(now);
    }
    assert!(st.conn_exists(cid));
    assert_eq!(st.stats().get(Counter::ConnFreed), 0);
    // Once the message is gone (cancelled), so is the connection, one lifetime later.
    assert_eq!(st.cancel_sent_to(s, dest), 1);
    let end = now + CONN_IDLE_LIFETIME * 2;
    while now < end && st.conn_exists(cid) {
        while let Some(e) = st.poll_event() {
            if let Event::Connect { conn, path, epoch } = e {
                st.handle_connect_failed(now, conn, path, epoch);
            }
        }
        let Some(t) = st.poll_timeout() else { break };
        now = t.max(now);
        st.handle_timeout(now);
    }
    assert!(!st.conn_exists(cid));
    assert_eq!(st.mem_used(), 0);
}

#[test]
fn ib_reassembly_draws_from_the_budget_and_a_message_beyond_it_is_consumed_and_dropped() {
    let budget: usize = 1 << 20;
    let tun = Tunables {
        mem_budget: budget as u64,
        ..Tunables::default()
    };
    let mut p = Pair::new(TransportKind::Ib, Tunables::default(), tun);
    p.establish();
    let s = p.sock(A, 4000);
    p.st(A).set_sndbuf(s, 4 << 20);
    let rb = p.sock(B, 6000);
    p.st(B).set_rcvbuf(rb, 8 << 20);
    let base = p.st(B).mem_used();
    // 1 MiB does not fit next to the connection: received fragment by fragment, not stored.
    p.send(A, s, 6000, &vec![7; MAX_MSG_SIZE]).unwrap();
    let out = p.tx(A, 0);
    assert_eq!(out.len(), 256);
    let seq = HeaderRepr::from_bytes(&out[0].hdr).unwrap().seq;
    p.rx(B, 0, &out).unwrap();
    assert_eq!(p.stat(B, Counter::RecvDropNoMem), 1);
    assert!(p.recv_all(B, rb).is_empty());
    assert_eq!(p.st(B).mem_used(), base);
    assert_eq!(p.path_info(B, 0).next_rx_seq, seq + 1);
    // The path stays up and the next message that fits arrives; while it is reassembled its
    // full length is charged.
    let out = {
        p.send(A, s, 6000, &[9; FRAG_SIZE + 1]).unwrap();
        p.tx(A, 0)
    };
    assert_eq!(out.len(), 2);
    p.rx(B, 0, &out[..1]).unwrap();
    assert_eq!(p.st(B).mem_used(), base + FRAG_SIZE + 1);
    p.rx(B, 0, &out[1..]).unwrap();
    assert_eq!(p.st(B).mem_used(), base + FRAG_SIZE + 1 + MSG_COST);
    let got = p.recv_all(B, rb);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload.len(), FRAG_SIZE + 1);
    assert_eq!(p.stat(B, Counter::RecvDropNoMem), 1);
    assert_eq!(p.path_info(B, 0).state, PathState::Up);
}
