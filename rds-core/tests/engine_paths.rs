//! Engine tests of paths: generation numbers, lanes (multipath), reconnect backoff, and IB
//! connection set-up (the connect race, accepting any source port).

mod common;

use std::time::Duration;

use rds_core::proto::{
    AcceptError, DropReason, Event, Frame, Incoming, LinkId, PathState, StreamParser, Transmit,
    TransportKind,
};
use rds_core::stats::Counter;
use rds_core::time::Instant;
use rds_core::tunables::Tunables;
use rds_core::wire::{flags, ExtHeader, HeaderRepr, MAX_MSG_SIZE};

use common::*;

// ============================================================================================
// Generation numbers and lanes

#[test]
fn peer_restart_resets_rx_seq_and_flushes_the_retransmit_queue() {
    let mut p = Pair::tcp();
    p.establish();
    let gen_b = p.st(B).gen_num();
    let ca = p.conn(A);
    assert_eq!(p.st(A).peer_gen(ca), gen_b);
    // B sends a few messages so that A's next_rx_seq on lane 0 is well above 2.
    let port_b = port_on_lane(SEED_B, 0, 4100);
    let sb = p.sock(B, port_b);
    let ra = p.sock(A, 6000);
    for _ in 0..5 {
        p.send(B, sb, 6000, b"b").unwrap();
    }
    // ... and on lane 3, so that a lane above 0 has a nonzero next_rx_seq too.
    let port_b3 = port_on_lane(SEED_B, 3, 4200);
    let sb3 = p.sock(B, port_b3);
    for _ in 0..4 {
        p.send(B, sb3, 6000, b"3").unwrap();
    }
    p.run();
    assert_eq!(p.recv_all(A, ra).len(), 9);
    let rx_before = p.path_info(A, 0).next_rx_seq;
    assert!(rx_before > 5, "{rx_before}");
    assert_eq!(p.path_info(A, 3).next_rx_seq, 5);
    // A sends 3 messages that B receives but never acknowledges.
    p.auto_ack = false;
    let port = port_on_lane(SEED_A, 0, 4100);
    let s = p.sock(A, port);
    let _rb = p.sock(B, 6000);
    for _ in 0..3 {
        p.send(A, s, 6000, &[1; 50]).unwrap();
    }
    p.run();
    assert_eq!(
        p.st(A)
            .queued_msgs(true)
            .iter()
            .filter(|m| m.lport == port)
            .count(),
        3
    );

    // B restarts: a new stack, a new generation number. Every connection dies.
    let paths: Vec<usize> = p.lanes.keys().copied().collect();
    let now = p.now;
    for path in paths {
        let lane = p.lanes.remove(&path).unwrap();
        p.st[0].handle_disconnected(now, lane.conn[0], path, lane.epoch[0]);
    }
    p.st[1] = stack(ADDR_B, TransportKind::Tcp, Tunables::default(), SEED_B + 1);
    let gen_b2 = p.st(B).gen_num();
    assert_ne!(gen_b, gen_b2);
    let rb2 = p.sock(B, 6000);
    // One more message while lane 0 is down: never transmitted, so not flushed.
    p.send(A, s, 6000, b"unsent").unwrap();
    p.advance(ms(1));
    let now = p.now;
    p.st(A).handle_timeout(now);
    let c = connects(&p.take_events(A));
    assert_eq!(
        c.iter().map(|c| c.1).collect::<Vec<_>>(),
        [0],
        "only lane 0 reconnects"
    );
    p.connect(A, c[0].0, 0, c[0].2);
    // B's first frames (map, probe with its new generation) reach A before A sends.
    let fb = p.tx(B, 0);
    assert_eq!(fb.len(), 2);
    let flushed0 = p.stat(A, Counter::SendDropPeerRestart);
    p.rx(A, 0, &fb).unwrap();
    assert_eq!(p.st(A).peer_gen(ca), gen_b2);
    assert_eq!(p.stat(A, Counter::SendDropPeerRestart) - flushed0, 3);
    assert_eq!(
        p.path_info(A, 0).next_rx_seq,
        2,
        "restarted at 0, then B's probe (seq 1)"
    );
    for lane in 1..8 {
        assert_eq!(p.path_info(A, lane).next_rx_seq, 0, "lane {lane}");
    }
    let left: Vec<u32> = p
        .st(A)
        .queued_msgs(false)
        .iter()
        .chain(p.st(A).queued_msgs(true).iter())
        .filter(|m| m.lport == port)
        .map(|m| m.len)
        .collect();
    assert_eq!(left, [6]);
    p.auto_ack = true;
    p.run();
    let got = p.recv_all(B, rb2);
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].payload[..], b"unsent");
    assert_eq!(p.lanes.len(), 8, "the lanes fan out again");
}

/// A restarts (a new stack, a new generation number) and B learns it from the probe on the
/// new incarnation's lane-0 connection. B has seen every old connection end except lane
/// `keep`'s, whose last bytes are still on their way. Returns A's new generation.
fn restart_a_keeping_lane(p: &mut Pair, keep: usize) -> u32 {
    let now = p.now;
    let paths: Vec<usize> = p.lanes.keys().copied().collect();
    for path in paths {
        let lane = p.lanes.remove(&path).unwrap();
        if path != keep {
            p.st[1].handle_disconnected(now, lane.conn[1], path, lane.epoch[1]);
        }
    }
    p.st[0] = stack(ADDR_A, TransportKind::Tcp, Tunables::default(), SEED_A + 1);
    let port = port_on_lane(SEED_A + 1, 0, 4100);
    let s = p.sock(A, port);
    p.send(A, s, 6001, b"new").unwrap();
    let c = connects(&p.take_events(A));
    assert_eq!(c.len(), 1);
    p.connect(A, c[0].0, 0, c[0].2);
    let fa = p.tx(A, 0);
    p.rx(B, 0, &fa).unwrap();
    p.st(A).gen_num()
}

/// Frames as the receiver's stream parser cuts them out of the bytes of `t`.
fn frames_of(t: &[Transmit]) -> Vec<Frame> {
    t.iter()
        .map(|t| frame(HeaderRepr::from_bytes(&t.hdr).unwrap(), &t.payload))
        .collect()
}

/// A's lane-3 socket sends 4 messages that B delivers without A seeing them acknowledged,
/// then A's lane 3 goes down on A's side only (`b_sees_it`: on both sides); A reconnects it
/// after the probe exchange and has the messages to send again. Returns the receiving
/// socket, the 4 sequence numbers, the sending port and A's lane-3 `Connect` event.
fn resend_pending_on_lane_3(
    p: &mut Pair,
    b_sees_it: bool,
) -> (
    rds_core::proto::SockId,
    Vec<u64>,
    u16,
    (rds_core::proto::ConnId, u32),
) {
    p.establish();
    p.auto_ack = false;
    let port = port_on_lane(SEED_A, 3, 4100);
    let sa = p.sock(A, port);
    let rb = p.sock(B, 6000);
    for i in 0..4u8 {
        p.send(A, sa, 6000, &[i; 10]).unwrap();
    }
    p.run();
    let seqs: Vec<u64> = p.recv_all(B, rb).iter().map(|m| m.seq).collect();
    assert_eq!(seqs.len(), 4);
    assert_eq!(p.path_info(B, 3).next_rx_seq, seqs[3] + 1);
    let (ca, ea) = (p.conn(A), p.epoch(A, 3));
    let now = p.now;
    if b_sees_it {
        p.cut(3);
    } else {
        p.st(A).handle_disconnected(now, ca, 3, ea);
    }
    // A asks again whether B knows the lanes before it reconnects lane 3.
    let fa = p.tx(A, 0);
    p.rx(B, 0, &fa).unwrap();
    let fb = p.tx(B, 0);
    p.rx(A, 0, &fb).unwrap();
    let c = connects(&p.take_events(A));
    assert_eq!(c.iter().map(|c| c.1).collect::<Vec<_>>(), [3], "{c:?}");
    // A fifth message, never sent before.
    p.send(A, sa, 6000, &[4; 10]).unwrap();
    (rb, seqs, port, (c[0].0, c[0].2))
}

/// The frames A sends on its reconnected lane 3: the 4 messages again, RETRANSMITTED, and
/// the fifth.
fn resent(p: &mut Pair, seqs: &[u64], port: u16) -> Vec<Frame> {
    let got = frames_of(&p.tx(A, 3));
    let data: Vec<(u64, u8, u8)> = got
        .iter()
        .filter(|f| f.hdr.sport == port)
        .map(|f| (f.hdr.seq, f.hdr.flags, f.payload[0]))
        .collect();
    let r = flags::RETRANSMITTED;
    let fifth = seqs[3] + 1;
    assert_eq!(
        data,
        [
            (seqs[0], r, 0),
            (seqs[1], r, 1),
            (seqs[2], r, 2),
            (seqs[3], r, 3),
            (fifth, 0, 4)
        ]
    );
    got
}

/// Feeds the frames `late` ([`resent`]) to B on lane 3 of connection `cb` (epoch `eb`): the
/// four resends of the old incarnation are dropped as old (`recv_drop_old_seq`), and only the
/// fifth message reaches B's socket `rb`.
fn feed_late_on_lane_3(
    p: &mut Pair,
    cb: rds_core::proto::ConnId,
    eb: u32,
    late: Vec<Frame>,
    rb: rds_core::proto::SockId,
    seqs: &[u64],
) {
    let now = p.now;
    let dropped = p.stat(B, Counter::RecvDropOldSeq);
    for f in late {
        p.st(B).handle_frame(now, cb, 3, eb, f).unwrap();
    }
    assert_eq!(p.stat(B, Counter::RecvDropOldSeq) - dropped, 4);
    let got: Vec<(u64, u8)> = p
        .recv_all(B, rb)
        .iter()
        .map(|m| (m.seq, m.payload[0]))
        .collect();
    assert_eq!(got, [(seqs[3] + 1, 4)]);
}

/// Simulator seed 7052, scripted. A's resends on its reconnected lane 3 are still on their
/// way when A restarts and B learns its new generation on lane 0, which restarts B's
/// sequence of every lane at 0 (`cp_next_rx_seq`, as in the kernel). The old incarnation's
/// connection is checked against the sequence it had: the resends are dropped as old, not
/// delivered a second time; the fifth message arrives once.
#[test]
fn late_resends_of_a_restarted_peer_on_another_lane_are_not_delivered_twice() {
    let mut p = Pair::tcp();
    let (rb, seqs, port, (ca, ea)) = resend_pending_on_lane_3(&mut p, true);
    p.connect(A, ca, 3, ea);
    let eb = p.epoch(B, 3);
    let late = resent(&mut p, &seqs, port);

    let cb = p.conn(B);
    let gen = restart_a_keeping_lane(&mut p, 3);
    assert_eq!(p.st(B).peer_gen(cb), gen);
    let lane3 = p.path_info(B, 3);
    assert_eq!((lane3.state, lane3.next_rx_seq), (PathState::Up, 0));

    let now = p.now;
    feed_late_on_lane_3(&mut p, cb, eb, late, rb, &seqs);

    // The old connection ends; the new incarnation's lane 3 is checked against the lane's
    // own sequence again and delivers everything.
    p.st(B).handle_disconnected(now, cb, 3, eb);
    p.auto_ack = true;
    p.run();
    assert_eq!(p.lanes.len(), 8, "the new incarnation fans out");
    let port2 = port_on_lane(SEED_A + 1, 3, 4200);
    let s2 = p.sock(A, port2);
    for i in 0..3u8 {
        p.send(A, s2, 6000, &[10 + i; 5]).unwrap();
    }
    p.run();
    let got: Vec<u8> = p.recv_all(B, rb).iter().map(|m| m.payload[0]).collect();
    assert_eq!(got, [10, 11, 12]);
}

/// The same with the resends on a connection B accepted while its lane 3 was still up (held
/// unread while the old connection drains), adopted only after B learnt the new generation:
/// it is the old incarnation's too, and is checked against the old sequence.
#[test]
fn a_held_connection_of_a_restarted_peer_is_checked_against_its_old_sequence() {
    let mut p = Pair::tcp();
    let (rb, seqs, port, (ca, ea)) = resend_pending_on_lane_3(&mut p, false);
    let cb = p.conn(B);
    let old = p.epoch(B, 3);
    let now = p.now;
    // B accepts A's new lane-3 connection while its own lane 3 is up: the old one drains,
    // the new one is held.
    let got = p
        .st(B)
        .link_accepted(now, LinkId(7), ADDR_B, ADDR_A, TransportKind::Tcp, 48_003);
    assert_eq!(got, Incoming::Hold);
    assert!(p.st(A).handle_connected(now, ca, 3, ea));
    let late = resent(&mut p, &seqs, port);

    let gen = restart_a_keeping_lane(&mut p, 3);
    assert_eq!(p.st(B).peer_gen(cb), gen);
    assert_eq!(p.path_info(B, 3).state, PathState::Down);
    // The old connection ends; the held one takes the lane.
    p.st(B).handle_disconnected(now, cb, 3, old);
    p.st(B).handle_timeout(now);
    let adopted: Vec<(usize, u32)> = p
        .take_events(B)
        .iter()
        .filter_map(|e| match *e {
            Event::Adopt {
                link: LinkId(7),
                path,
                epoch,
                ..
            } => Some((path, epoch)),
            _ => None,
        })
        .collect();
    assert_eq!(adopted.len(), 1, "{adopted:?}");
    let (path, eb) = adopted[0];
    assert_eq!(path, 3);

    feed_late_on_lane_3(&mut p, cb, eb, late, rb, &seqs);
}

#[test]
fn npaths_is_the_smaller_of_8_and_the_peers() {
    for (announced, want) in [
        (Some(4u16), 4usize),
        (Some(1), 1),
        (Some(8), 8),
        (Some(64), 8),
        (None, 1),
    ] {
        let mut p = Pair::tcp();
        let s = p.sock(A, 4000);
        p.send(A, s, 6000, b"x").unwrap();
        let (conn, _, epoch) = connects(&p.take_events(A))[0];
        p.connect(A, conn, 0, epoch);
        let _ = p.tx(B, 0);
        let (cb, eb) = (p.conn(B), p.epoch(B, 0));
        let mut probe = HeaderRepr::data(1, 1, 0, 0);
        if let Some(n) = announced {
            probe.push_ext(ExtHeader::Npaths(n)).unwrap();
        }
        let now = p.now;
        p.st(B)
            .handle_frame(now, cb, 0, eb, frame(probe, &[]))
            .unwrap();
        assert_eq!(p.st(B).npaths(cb), want, "peer announced {announced:?}");
        // Our pong always announces 8.
        let out = p.tx(B, 0);
        assert_eq!(out.len(), 1);
        let h = HeaderRepr::from_bytes(&out[0].hdr).unwrap();
        assert!(h.is_probe_pong());
        assert_eq!(h.exts().next(), Some(ExtHeader::Npaths(8)));
    }
}

#[test]
fn lane_hash_spreads_ports_and_follows_npaths() {
    let mut per_lane = [0u32; 8];
    for port in 2000..2256u16 {
        let l = lane_of(SEED_A, port);
        assert_eq!(l, lane_of(SEED_A, port), "stable");
        per_lane[l] += 1;
    }
    assert!(
        per_lane.iter().all(|&n| (16..=48).contains(&n)),
        "{per_lane:?}"
    );
    // A different hash seed gives a different spread (the seed is per node).
    let moved = (2000..2256u16)
        .filter(|&p| lane_of(SEED_A, p) != lane_of(SEED_B, p))
        .count();
    assert!(moved > 128, "{moved}");

    // With a peer of 4 lanes a socket uses hash & 3: the same lane modulo 4.
    let mut p = Pair::tcp();
    let s = p.sock(A, 4000);
    p.send(A, s, 6000, b"x").unwrap();
    let (conn, _, epoch) = connects(&p.take_events(A))[0];
    p.connect(A, conn, 0, epoch);
    let fa = p.tx(A, 0);
    p.rx(B, 0, &fa).unwrap();
    let _ = p.tx(B, 0);
    // A hears from a 4-lane peer.
    let ca = p.conn(A);
    let ea = p.epoch(A, 0);
    let mut pong = HeaderRepr::data(1, 0, 1, 0);
    pong.push_ext(ExtHeader::Npaths(4)).unwrap();
    let now = p.now;
    p.st(A)
        .handle_frame(now, ca, 0, ea, frame(pong, &[]))
        .unwrap();
    assert_eq!(p.st(A).npaths(ca), 4);
    let before: Vec<_> = p.st(A).queued_msgs(false);
    let mut socks = Vec::new();
    for port in 5000..5032u16 {
        let id = p.sock(A, port);
        p.send(A, id, 6000, b"y").unwrap();
        socks.push(port);
    }
    let q = p.st(A).queued_msgs(false);
    let q: Vec<_> = q.iter().filter(|m| !before.contains(m)).collect();
    for port in socks {
        let m = q.iter().find(|m| m.lport == port).unwrap();
        assert_eq!(m.path, lane_of(SEED_A, port) & 3, "port {port}");
    }
}

#[test]
fn accepted_lane_is_client_port_mod_8_once_sport_idx_is_known() {
    let mut p = Pair::tcp();
    p.establish();
    let cb = p.conn(B);
    let now = p.now;
    p.cut(5);
    let r = p.st(B).handle_accept(
        now,
        ADDR_B,
        ADDR_A,
        TransportKind::Tcp,
        40013,
        Duration::ZERO,
    );
    assert_eq!(r.map(|(c, path, _)| (c, path)), Ok((cb, 5)));
    // A connection to a lane that is up replaces the old one, once the old one was read to
    // its end: the newcomer waits (unread) while the old one drains.
    let _ = p.take_events(B);
    let (_, old_epoch) = p.st(B).path_state(cb, 2);
    let accept = |p: &mut Pair| {
        p.st(B).handle_accept(
            now,
            ADDR_B,
            ADDR_A,
            TransportKind::Tcp,
            50002,
            Duration::ZERO,
        )
    };
    assert_eq!(accept(&mut p), Err(AcceptError::Wait));
    let evs = p.take_events(B);
    assert!(evs.contains(&Event::Disconnect {
        conn: cb,
        path: 2,
        epoch: old_epoch,
        reason: DropReason::Superseded
    }));
    assert!(DropReason::Superseded.drains());
    assert_eq!(accept(&mut p), Err(AcceptError::Wait));
    p.st(B).handle_disconnected(now, cb, 2, old_epoch);
    assert_eq!(accept(&mut p).map(|(_, path, _)| path), Ok(2));
    assert_eq!(p.st(B).path_state(cb, 2).0, PathState::Up);

    // Before the handshake only a lane-0 port is taken at once; another waits, and after a
    // while is taken as path 0 (older kernels use random source ports).
    let mut q = Pair::tcp();
    let a = |port, waited| {
        let mut st = stack(ADDR_B, TransportKind::Tcp, Tunables::default(), 5);
        st.handle_accept(
            Instant::ZERO,
            ADDR_B,
            ADDR_A,
            TransportKind::Tcp,
            port,
            waited,
        )
        .map(|(_, path, _)| path)
    };
    assert_eq!(a(40008, Duration::ZERO), Ok(0));
    assert_eq!(a(40011, Duration::ZERO), Err(AcceptError::Wait));
    assert_eq!(a(40011, ms(49)), Err(AcceptError::Wait));
    assert_eq!(a(40011, ms(50)), Ok(0));
    // The smaller address refuses and connects back itself.
    let now = q.now;
    let r = q.st(A).handle_accept(
        now,
        ADDR_A,
        ADDR_B,
        TransportKind::Tcp,
        40000,
        Duration::ZERO,
    );
    assert_eq!(r, Err(AcceptError::ConnectBack));
    assert_eq!(
        connects(&q.take_events(A))
            .iter()
            .map(|c| c.1)
            .collect::<Vec<_>>(),
        [0]
    );
    // Connections from our own address are not RDS/TCP's business.
    let r = q.st(A).handle_accept(
        now,
        ADDR_A,
        ADDR_A,
        TransportKind::Tcp,
        40000,
        Duration::ZERO,
    );
    assert_eq!(r, Err(AcceptError::Local));
}

#[test]
fn larger_address_never_initiates_lanes_above_0() {
    let mut p = Pair::tcp();
    p.establish();
    let ra = p.sock(A, 6000);
    p.auto_ack = true;
    for lane in 1..8 {
        p.cut(lane);
    }
    // B has messages for every lane while lanes 1..7 are down.
    let mut ports = Vec::new();
    for lane in 1..8 {
        let port = port_on_lane(SEED_B, lane, 7000);
        let s = p.sock(B, port);
        p.send(B, s, 6000, &[lane as u8]).unwrap();
        ports.push(port);
    }
    let evs = p.take_events(B);
    assert!(connects(&evs).is_empty(), "{evs:?}");
    for e in evs {
        p.process(B, e);
    }
    p.advance(ms(1));
    p.run();
    for _ in 0..20 {
        if p.lanes.len() == 8 {
            break;
        }
        p.advance(ms(50));
        p.run();
    }
    assert_eq!(p.lanes.len(), 8);
    assert!(
        connects(&p.events[B.i()]).iter().all(|c| c.1 == 0),
        "B connects at most lane 0"
    );
    assert!(connects(&p.events[A.i()]).iter().any(|c| c.1 > 0));
    let got = p.recv_all(A, ra);
    assert_eq!(got.len(), 7);
    for (lane, port) in (1..8).zip(ports) {
        let w = p.wired_from(B, port);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].path, lane);
    }
}

// ============================================================================================
// Reconnect backoff

/// Fails `n` connection attempts of A's path 0 in a row (the first one from `evs`); returns
/// the delay before each retry and the events holding the next attempt.
fn backoff_delays(p: &mut Pair, mut evs: Vec<Event>, n: usize) -> (Vec<Duration>, Vec<Event>) {
    let mut v = Vec::new();
    for _ in 0..n {
        let (conn, path, epoch) = *connects(&evs).first().expect("a connect attempt");
        assert_eq!(path, 0);
        let now = p.now;
        p.st(A).handle_connect_failed(now, conn, path, epoch);
        let at = p.st(A).poll_timeout().expect("a reconnect is scheduled");
        v.push(at - now);
        p.now = at;
        p.st(A).handle_timeout(at);
        evs = p.take_events(A);
    }
    (v, evs)
}

#[test]
fn reconnect_backoff_doubles_with_jitter_and_resets_after_success() {
    for (min, max) in [(1u64, 1000u64), (10, 50)] {
        let tun = Tunables {
            reconnect_min_delay: ms(min),
            reconnect_max_delay: ms(max),
            ..Tunables::default()
        };
        for kind in [TransportKind::Tcp, TransportKind::Ib] {
            let mut p = Pair::new(kind, tun.clone(), tun.clone());
            let s = p.sock(A, 4000);
            p.send(A, s, 6000, b"x").unwrap();
            let evs = p.take_events(A);
            let (d, evs) = backoff_delays(&mut p, evs, 30);
            assert_eq!(d[0], Duration::ZERO, "the first retry is immediate");
            let mut bound = ms(min);
            for (i, &w) in d.iter().enumerate().skip(1) {
                assert!(w < bound, "retry {i}: {w:?} not below {bound:?}");
                bound = (bound * 2).min(ms(max));
            }
            assert_eq!(bound, ms(max));
            // Jittered, and reaching into the large bounds.
            let late = &d[20..];
            assert!(late.iter().any(|&w| w > ms(max) / 4), "{late:?}");
            assert!(late.windows(2).any(|w| w[0] != w[1]));
            // Success resets it: the next failure retries at once, then below min again.
            let (conn, _, epoch) = connects(&evs)[0];
            p.connect(A, conn, 0, epoch);
            assert_eq!(p.path_info(A, 0).state, PathState::Up);
            // (Before the handshake, a TCP connect has succeeded once the peer answered on
            // it: its pong.)
            p.run();
            p.cut(0);
            let at = p.st(A).poll_timeout().unwrap();
            assert_eq!(at, p.now);
            p.st(A).handle_timeout(at);
            let evs = p.take_events(A);
            let (d, _) = backoff_delays(&mut p, evs, 2);
            assert!(d[0] < ms(min), "{d:?}");
            assert!(d[1] < ms(min) * 2, "{d:?}");
        }
    }
}

// ============================================================================================
// IB connection set-up

#[test]
fn ib_connect_race_the_larger_address_yields() {
    let mut p = Pair::ib();
    let sa = p.sock(A, 4000);
    let sb = p.sock(B, 5000);
    p.send(A, sa, 5000, b"a").unwrap();
    p.send(B, sb, 4000, b"b").unwrap();
    let (ea, eb) = (p.take_events(A), p.take_events(B));
    let (ca, _, epa) = connects(&ea)[0];
    let (cb, _, epb) = connects(&eb)[0];
    let now = p.now;
    let ib = TransportKind::Ib;
    // B's request reaches A (smaller address, connecting): refused as raced.
    assert_eq!(
        p.st(A)
            .handle_accept(now, ADDR_A, ADDR_B, ib, 0, Duration::ZERO),
        Err(AcceptError::Raced)
    );
    // A's request reaches B (larger, connecting): B yields and abandons its own attempt.
    let (c2, path, e2) = p
        .st(B)
        .handle_accept(now, ADDR_B, ADDR_A, ib, 0, Duration::ZERO)
        .unwrap();
    assert_eq!((c2, path), (cb, 0));
    let evs = p.take_events(B);
    assert!(evs.contains(&Event::Disconnect {
        conn: cb,
        path: 0,
        epoch: epb,
        reason: DropReason::Replaced
    }));
    assert_eq!(p.st(B).path_state(cb, 0), (PathState::Up, e2));
    // A's attempt completes; B's abandoned one is refused by A and changes nothing at B.
    assert!(p.st(A).handle_connected(now, ca, 0, epa));
    p.st(B).handle_connect_failed(now, cb, 0, epb);
    assert_eq!(p.st(B).path_state(cb, 0), (PathState::Up, e2));
    let (_, ea2) = p.st(A).path_state(ca, 0);
    let lane = Lane {
        conn: [ca, cb],
        epoch: [ea2, e2],
        parser: [
            StreamParser::new(MAX_MSG_SIZE as u32),
            StreamParser::new(MAX_MSG_SIZE as u32),
        ],
        sent: [0, 0],
    };
    p.lanes.insert(0, lane);
    p.run();
    assert_eq!(p.recv_all(B, sb).len(), 1);
    assert_eq!(p.recv_all(A, sa).len(), 1);
}

/// The RDMA CM source port is random and says nothing about lanes: an IB request is taken at
/// once, whatever its port (a TCP connection from a port that is not lane 0 waits instead).
#[test]
fn ib_accept_takes_any_source_port() {
    for port in [34707u16, 40001, 65535, 1] {
        let mut st = stack(ADDR_B, TransportKind::Ib, Tunables::default(), SEED_B);
        let r = st.handle_accept(
            Instant::ZERO,
            ADDR_B,
            ADDR_A,
            TransportKind::Ib,
            port,
            Duration::ZERO,
        );
        let (c, path, epoch) = r.unwrap_or_else(|e| panic!("port {port}: {e:?}"));
        assert_eq!(path, 0);
        assert_eq!(st.path_state(c, 0), (PathState::Up, epoch));
    }
    let mut st = stack(ADDR_B, TransportKind::Tcp, Tunables::default(), SEED_B);
    let r = st.handle_accept(
        Instant::ZERO,
        ADDR_B,
        ADDR_A,
        TransportKind::Tcp,
        34707,
        Duration::ZERO,
    );
    assert_eq!(r, Err(AcceptError::Wait));
}
