//! Engine tests of sequence numbers: retransmission after a reset, the duplicate rule, and
//! TCP's release of messages once the transport acknowledges them.

mod common;

use rds_core::proto::{FrameKind, Transmit, TransportKind};
use rds_core::stats::Counter;
use rds_core::tunables::Tunables;
use rds_core::wire::{flags, HeaderRepr};

use common::*;

// ============================================================================================
// Sequence numbers, retransmission, duplicates

#[test]
fn tcp_resend_after_reset_is_retransmitted_and_dropped_as_old() {
    let mut p = Pair::tcp();
    p.establish();
    p.auto_ack = false;
    let port = port_on_lane(SEED_A, 0, 4100);
    let s = p.sock(A, port);
    let rb = p.sock(B, 6000);
    let n0 = p.path_info(A, 0).next_tx_seq;
    for i in 0..3u8 {
        p.send(A, s, 6000, &[i; 10]).unwrap();
    }
    p.run();
    let got = p.recv_all(B, rb);
    assert_eq!(
        got.iter().map(|m| m.seq).collect::<Vec<_>>(),
        [n0, n0 + 1, n0 + 2]
    );
    let ours = |p: &Pair, retrans: bool| -> Vec<u64> {
        p.st[0]
            .queued_msgs(retrans)
            .iter()
            .filter(|m| m.lport == port)
            .map(|m| m.seq)
            .collect()
    };
    assert_eq!(ours(&p, true), [n0, n0 + 1, n0 + 2], "unacknowledged");
    let rx_before = p.path_info(B, 0).next_rx_seq;
    assert_eq!(rx_before, n0 + 3);
    let resets = p.stat(A, Counter::ConnReset);

    p.cut(0);
    assert_eq!(p.stat(A, Counter::ConnReset), resets + 1);
    assert_eq!(ours(&p, true), Vec::<u64>::new());
    assert_eq!(
        ours(&p, false),
        [n0, n0 + 1, n0 + 2],
        "requeued, same numbers"
    );
    assert_eq!(
        p.path_info(B, 0).next_rx_seq,
        rx_before,
        "kept across the reset"
    );
    p.wire.clear();
    p.run();
    let resent = p.wired_from(A, port);
    assert_eq!(resent.len(), 3);
    for (i, w) in resent.iter().enumerate() {
        assert_eq!(w.hdr.seq, n0 + i as u64);
        assert_eq!(
            w.hdr.flags,
            flags::RETRANSMITTED,
            "exactly RETRANSMITTED on TCP"
        );
    }
    assert_eq!(p.stat(B, Counter::RecvDropOldSeq), 3);
    assert!(p.recv_all(B, rb).is_empty(), "duplicates not delivered");
    // The new probe came behind the retransmissions with a fresh number.
    let probe = p
        .wire
        .iter()
        .find(|w| w.from == A && w.hdr.is_probe_ping())
        .unwrap();
    assert_eq!(probe.hdr.seq, n0 + 3);
    assert_eq!(probe.hdr.flags, 0);
    // Fresh messages carry no flag and are delivered.
    p.send(A, s, 6000, b"new").unwrap();
    p.run();
    let got = p.recv_all(B, rb);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].seq, n0 + 4);
    assert_eq!(p.wired_from(A, port).last().unwrap().hdr.flags, 0);
}

#[test]
fn ib_resend_after_reset_is_retransmitted_and_ack_required() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    let rb = p.sock(B, 6000);
    for i in 0..3u8 {
        p.send(A, s, 6000, &[i; 10]).unwrap();
    }
    let out = p.tx(A, 0);
    assert_eq!(out.len(), 3);
    let seqs: Vec<u64> = out
        .iter()
        .map(|t| HeaderRepr::from_bytes(&t.hdr).unwrap().seq)
        .collect();
    p.rx(B, 0, &out).unwrap();
    assert_eq!(p.recv_all(B, rb).len(), 3);
    let _ = p.tx(B, 0); // B's acknowledgement is lost with the connection
    p.cut(0);
    p.wire.clear();
    p.run();
    let resent = p.wired_from(A, 4000);
    assert_eq!(resent.len(), 3);
    for (w, seq) in resent.iter().zip(&seqs) {
        assert_eq!(w.hdr.seq, *seq);
        assert_eq!(w.hdr.flags, flags::RETRANSMITTED | flags::ACK_REQUIRED);
    }
    assert_eq!(p.stat(B, Counter::RecvDropOldSeq), 3);
    assert!(p.recv_all(B, rb).is_empty());
}

#[test]
fn duplicate_rule_is_the_kernels() {
    let mut p = Pair::tcp();
    p.establish();
    let rb = p.sock(B, 6000);
    let (cb, eb) = (p.conn(B), p.epoch(B, 2));
    let now = p.now;
    let deliver = |p: &mut Pair, seq: u64, fl: u8| {
        let h = with_flags(HeaderRepr::data(seq, 7000, 6000, 1), fl);
        p.st(B)
            .handle_frame(now, cb, 2, eb, frame(h, &[seq as u8]))
            .unwrap();
    };
    deliver(&mut p, 10, 0);
    assert_eq!(p.path_info(B, 2).next_rx_seq, 11);
    // Older, retransmitted: dropped.
    deliver(&mut p, 10, flags::RETRANSMITTED);
    deliver(&mut p, 3, flags::RETRANSMITTED);
    assert_eq!(p.stat(B, Counter::RecvDropOldSeq), 2);
    assert_eq!(p.path_info(B, 2).next_rx_seq, 11);
    // Older, not retransmitted: accepted, and next_rx_seq moves back (kernel rule).
    deliver(&mut p, 5, 0);
    assert_eq!(p.path_info(B, 2).next_rx_seq, 6);
    // Retransmitted but not older: accepted.
    deliver(&mut p, 6, flags::RETRANSMITTED);
    deliver(&mut p, 9, flags::RETRANSMITTED);
    assert_eq!(p.path_info(B, 2).next_rx_seq, 10);
    assert_eq!(p.stat(B, Counter::RecvDropOldSeq), 2);
    let seqs: Vec<u64> = p.recv_all(B, rb).iter().map(|m| m.seq).collect();
    assert_eq!(seqs, [10, 5, 6, 9]);
    // Other lanes are independent.
    assert_eq!(p.path_info(B, 3).next_rx_seq, 0);
}

#[test]
fn highest_sequence_number_does_not_overflow() {
    let mut p = Pair::tcp();
    p.establish();
    let rb = p.sock(B, 6000);
    let (cb, eb) = (p.conn(B), p.epoch(B, 1));
    let now = p.now;
    let h = HeaderRepr::data(u64::MAX, 7000, 6000, 0);
    p.st(B).handle_frame(now, cb, 1, eb, frame(h, &[])).unwrap();
    assert_eq!(p.recv_all(B, rb)[0].seq, u64::MAX);
    // The kernel's u64 arithmetic wraps.
    assert_eq!(p.path_info(B, 1).next_rx_seq, 0);
}

// ============================================================================================
// TCP: transport-acknowledged release

#[test]
fn tcp_messages_leave_the_retransmit_queue_when_their_last_byte_is_acked() {
    let mut p = Pair::tcp();
    p.establish();
    p.auto_ack = false;
    let port = port_on_lane(SEED_A, 0, 4100);
    let s = p.sock(A, port);
    let _rb = p.sock(B, 6000);
    let s0 = p.lanes[&0].sent[A.i()];
    p.send(A, s, 6000, &[1; 100]).unwrap();
    p.send(A, s, 6000, &[2; 200]).unwrap();
    let snd = |p: &Pair| p.sock_info(A, s).snd_bytes;
    assert_eq!(snd(&p), 300);
    let out = p.tx(A, 0);
    assert_eq!(
        out.iter().map(Transmit::wire_len).collect::<Vec<_>>(),
        [148, 248]
    );
    p.rx(B, 0, &out).unwrap();
    let ours = |p: &Pair| -> Vec<u32> {
        p.st[0]
            .queued_msgs(true)
            .iter()
            .filter(|m| m.lport == port)
            .map(|m| m.len)
            .collect()
    };
    assert_eq!(ours(&p), [100, 200]);
    let (ca, ea) = (p.conn(A), p.epoch(A, 0));
    let acked0 = p.stat(A, Counter::SendDropAcked);
    let now = p.now;
    let ack = |p: &mut Pair, upto: u64| p.st(A).handle_tx_acked(now, ca, 0, ea, upto);
    ack(&mut p, s0 + 147);
    assert_eq!(ours(&p), [100, 200], "one byte short");
    assert_eq!(snd(&p), 300);
    ack(&mut p, s0 + 148);
    assert_eq!(ours(&p), [200]);
    assert_eq!(snd(&p), 200);
    ack(&mut p, s0 + 148 + 247);
    assert_eq!(ours(&p), [200]);
    ack(&mut p, s0 + 148 + 248);
    assert!(ours(&p).is_empty());
    assert_eq!(snd(&p), 0);
    assert_eq!(p.stat(A, Counter::SendDropAcked), acked0 + 2);
    // A stale epoch or a backwards ack changes nothing.
    p.send(A, s, 6000, &[3; 10]).unwrap();
    let out = p.tx(A, 0);
    p.rx(B, 0, &out).unwrap();
    ack(&mut p, s0 + 100);
    p.st(A)
        .handle_tx_acked(now, ca, 0, ea.wrapping_add(1), s0 + 10_000);
    assert_eq!(ours(&p), [10]);
}

// ============================================================================================
// A restarted node's sequence numbers

/// A sends 20 messages to B, then restarts (a new stack on the same address, 1 s later); its
/// first connection drops before B reads a byte of it, so what it carried (over TCP the
/// handshake's probe too) is resent, flagged RETRANSMITTED, on the next one. B keeps the
/// lane's receive sequence across connections: over IB always (no generation number), over
/// TCP until it learns the new incarnation's generation. `origins`: the wall clock each
/// incarnation numbers from ([`rds_core::proto::Stack::set_seq_origin`]), if any. Returns
/// (messages B delivered after the restart, B's `recv_drop_old_seq` count since, the resent
/// data frame's sequence number, the highest sequence number of the old incarnation).
fn restarted_sender_resends(
    kind: TransportKind,
    origins: Option<(u64, u64)>,
) -> (usize, u64, u64, u64) {
    let mut p = Pair::new(kind, Tunables::default(), Tunables::default());
    if let Some((first, _)) = origins {
        p.st(A).set_seq_origin(first);
    }
    p.establish();
    let port = port_on_lane(SEED_A + 1, 0, 4000);
    let rb = p.sock(B, 6000);
    let s = p.sock(A, port);
    for i in 0..20u8 {
        p.send(A, s, 6000, &[i; 32]).unwrap();
    }
    p.run();
    assert_eq!(p.recv_all(B, rb).len(), 20);
    let old_max = p
        .wire
        .iter()
        .filter(|w| w.from == A)
        .map(|w| w.hdr.seq)
        .max()
        .unwrap();

    // The restart.
    let lanes: Vec<usize> = p.lanes.keys().copied().collect();
    for lane in lanes {
        p.cut(lane);
    }
    p.advance(ms(1000));
    p.st[A.i()] = stack(ADDR_A, kind, Tunables::default(), SEED_A + 1);
    if let Some((_, second)) = origins {
        p.st(A).set_seq_origin(second);
    }
    let s = p.sock(A, port);
    p.send(A, s, 6000, b"first of the new incarnation").unwrap();
    let (conn, path, epoch) = connects(&p.take_events(A))[0];
    p.connect(A, conn, path, epoch);
    let lost = p.tx(A, 0);
    assert!(lost.iter().any(|t| t.kind == FrameKind::Data), "{lost:?}");
    p.cut(0);
    let old_before = p.stat(B, Counter::RecvDropOldSeq);
    for _ in 0..50 {
        p.advance(ms(100));
        p.run();
    }
    let resent = p
        .wire
        .iter()
        .rfind(|w| w.from == A && w.hdr.sport == port && w.kind == FrameKind::Data)
        .expect("resent")
        .hdr;
    assert_ne!(resent.flags & flags::RETRANSMITTED, 0);
    (
        p.recv_all(B, rb).len(),
        p.stat(B, Counter::RecvDropOldSeq) - old_before,
        resent.seq,
        old_max,
    )
}

#[test]
fn a_restarted_node_s_resent_first_message_is_delivered() {
    let t0 = 1_700_000_000_000_000_000;
    let t1 = t0 + 2_000_000_000;
    for kind in [TransportKind::Ib, TransportKind::Tcp] {
        // From the wall clock, the new incarnation numbers above the old one: a receiver that
        // kept the old sequence (the kernel's RDS/IB always; its RDS/TCP until the new
        // generation's probe, which may itself be a dropped retransmission) takes it.
        let (got, old, seq, old_max) = restarted_sender_resends(kind, Some((t0, t1)));
        assert_eq!((got, old), (1, 0), "{kind:?}");
        assert!(
            seq > old_max && seq >= t1 / 1000,
            "{kind:?}: {seq} after {old_max}"
        );
    }
    // Numbered from 1 over IB, the resent message is below what B expects next: B drops it as
    // old (and acknowledges it), as the kernel does. Lost.
    let (got, old, seq, _) = restarted_sender_resends(TransportKind::Ib, None);
    assert_eq!((got, old, seq), (0, 1, 1));
    // Over TCP our receiver learns the generation from the resent probe before it checks the
    // sequence (the kernel does not); the numbers alone would have been below.
    let (got, old, seq, old_max) = restarted_sender_resends(TransportKind::Tcp, None);
    assert_eq!((got, old), (1, 0));
    assert!(seq < old_max, "{seq} {old_max}");
}
