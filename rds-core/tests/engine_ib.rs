//! Engine tests of the IB transport's framing: ACK_REQUIRED pacing, piggybacked and ACK-only
//! acknowledgements, fragmentation and fragment checks.

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use rds_core::proto::{DropReason, Event, FrameKind, PathState, TransportKind};
use rds_core::stats::Counter;
use rds_core::tunables::Tunables;
use rds_core::wire::{checksum, flags, HeaderRepr, FRAG_SIZE, MAX_MSG_SIZE};

use common::*;

// ============================================================================================
// IB: ACK_REQUIRED pacing, piggybacked and ACK-only acknowledgements, fragmentation

/// Sends `n` messages of `len` bytes from A before the path is up, brings it up and returns
/// the data frames' flags in order.
fn ib_flags_of_first_messages(tun: Tunables, n: usize, len: usize) -> Vec<u8> {
    let mut p = Pair::new(TransportKind::Ib, tun.clone(), tun);
    let s = p.sock(A, 4000);
    p.st(A).set_sndbuf(s, 64 << 20);
    for _ in 0..n {
        p.send(A, s, 6000, &vec![0; len]).unwrap();
    }
    let (conn, path, epoch) = connects(&p.take_events(A))[0];
    p.connect(A, conn, path, epoch);
    let out = p.tx(A, 0);
    assert_eq!(out[0].kind, FrameKind::CongMap);
    assert_eq!(out[1].kind, FrameKind::CongMap);
    let data: Vec<u8> = out[2..].iter().map(|t| t.hdr[24]).collect();
    assert_eq!(data.len(), n);
    assert_eq!(
        p.stat(A, Counter::SendAckRequired),
        data.iter().filter(|&&f| f != 0).count() as u64
    );
    data
}

fn pattern(n: usize, every: usize, first: usize) -> Vec<u8> {
    (0..n)
        .map(|i| {
            if i >= first && (i - first) % every == 0 {
                flags::ACK_REQUIRED
            } else {
                0
            }
        })
        .collect()
}

#[test]
fn ib_ack_required_every_ninth_with_defaults() {
    let f = ib_flags_of_first_messages(Tunables::default(), 30, 64);
    // The first message on a fresh path, then every 9th (8 unacked packets in between).
    assert_eq!(f, pattern(30, 9, 0));
    assert_eq!(
        f.iter()
            .enumerate()
            .filter(|(_, &x)| x != 0)
            .map(|(i, _)| i)
            .collect::<Vec<_>>(),
        [0, 9, 18, 27]
    );
}

#[test]
fn ib_ack_required_follows_the_tunables() {
    let tun = Tunables {
        max_unacked_packets: 3,
        ..Tunables::default()
    };
    assert_eq!(ib_flags_of_first_messages(tun, 20, 64), pattern(20, 4, 0));
    // Bytes: 1000 allowed, 300 per message: 1000 -> 700 -> 400 -> 100, then a request.
    let tun = Tunables {
        max_unacked_packets: 1000,
        max_unacked_bytes: 1000,
        ..Tunables::default()
    };
    assert_eq!(ib_flags_of_first_messages(tun, 20, 300), pattern(20, 4, 0));
    // A message larger than the byte budget requests an ACK every time.
    let tun = Tunables {
        max_unacked_bytes: 100,
        ..Tunables::default()
    };
    assert_eq!(ib_flags_of_first_messages(tun, 5, 101), pattern(5, 1, 0));
}

#[test]
fn ib_ack_required_counters_start_full_after_a_reset() {
    let mut p = Pair::ib();
    p.establish();
    assert!(p.st(A).queued_msgs(true).is_empty(), "all acknowledged");
    p.cut(0);
    p.run();
    assert_eq!(p.path_info(A, 0).state, PathState::Up);
    let s = p.sock(A, 4000);
    for _ in 0..20 {
        p.send(A, s, 6000, &[0; 64]).unwrap();
    }
    let out = p.tx(A, 0);
    let f: Vec<u8> = out.iter().map(|t| t.hdr[24]).collect();
    assert_eq!(f, pattern(20, 9, 8));
}

#[test]
fn ib_ack_required_when_send_buffer_half_full() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    p.st(A).set_sndbuf(s, 1000);
    p.send(A, s, 6000, &[0; 100]).unwrap(); // 100 < 500
    p.send(A, s, 6000, &[0; 400]).unwrap(); // 500 >= 500 at queue time
    let out = p.tx(A, 0);
    assert_eq!(out[0].hdr[24], 0);
    assert_eq!(out[1].hdr[24], flags::ACK_REQUIRED);
}

#[test]
fn ib_ack_only_frames_and_piggybacking() {
    let mut p = Pair::ib();
    p.establish();
    let _rb = p.sock(B, 6000);
    let (cb, eb) = (p.conn(B), p.epoch(B, 0));
    let now = p.now;
    let req = p.stat(B, Counter::RecvAckRequired);
    let ar = |seq| with_flags(HeaderRepr::data(seq, 7000, 6000, 5), flags::ACK_REQUIRED);
    p.st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&ar(100), b"hello"))
        .unwrap();
    assert_eq!(p.stat(B, Counter::RecvAckRequired), req + 1);
    assert!(p
        .take_events(B)
        .contains(&Event::Transmit { conn: cb, path: 0 }));
    let out = p.tx(B, 0);
    assert_eq!(out.len(), 1);
    // seq 0, h_ack 100, len 0, ports 0, flags 0; checksum by hand: !0x0064 = 0xff9b.
    let mut want = hdr_bytes(0, 100, 0, 0, 0, 0, &[]);
    want[30..32].copy_from_slice(&[0xff, 0x9b]);
    assert_eq!(out[0].hdr, want);
    assert_eq!(checksum(&out[0].hdr), 0);
    assert_eq!(out[0].kind, FrameKind::AckOnly);
    assert!(out[0].solicited);
    assert!(out[0].payload.is_empty());

    // Only one ACK in flight.
    p.st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&ar(101), b"hello"))
        .unwrap();
    assert!(p.tx(B, 0).is_empty());
    p.st(B).handle_ack_sent(cb, 0, eb);
    let out = p.tx(B, 0);
    assert_eq!(out.len(), 1);
    let mut want = hdr_bytes(0, 101, 0, 0, 0, 0, &[]);
    want[30..32].copy_from_slice(&[0xff, 0x9a]);
    assert_eq!(out[0].hdr, want);
    // A stale completion does not release the ACK slot.
    p.st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&ar(102), b"hello"))
        .unwrap();
    p.st(B).handle_ack_sent(cb, 0, eb.wrapping_add(7));
    assert!(p.tx(B, 0).is_empty());

    // A data message piggybacks the ack and satisfies the request.
    let sb = p.sock(B, 6001);
    p.send(B, sb, 7000, b"reply").unwrap();
    let out = p.tx(B, 0);
    assert_eq!(out.len(), 1, "{out:?}");
    let h = HeaderRepr::from_bytes(&out[0].hdr).unwrap();
    assert_eq!((h.ack, h.sport, h.dport, h.len), (102, 6001, 7000, 5));
    assert_eq!(checksum(&out[0].hdr), 0);
    assert_eq!(out[0].kind, FrameKind::Data);
    assert!(out[0].solicited);
    p.st(B).handle_ack_sent(cb, 0, eb);
    assert!(p.tx(B, 0).is_empty(), "nothing left to acknowledge");
    // Without ACK_REQUIRED no ACK-only frame is sent, but the next data carries the ack.
    let plain = HeaderRepr::data(103, 7000, 6000, 5);
    p.st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&plain, b"hello"))
        .unwrap();
    assert!(p.tx(B, 0).is_empty());
    p.send(B, sb, 7000, b"again").unwrap();
    let out = p.tx(B, 0);
    assert_eq!(HeaderRepr::from_bytes(&out[0].hdr).unwrap().ack, 103);
}

#[test]
fn ib_h_ack_releases_messages_up_to_it() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    for len in [10, 20, 30] {
        p.send(A, s, 6000, &vec![0; len]).unwrap();
    }
    let out = p.tx(A, 0);
    let seqs: Vec<u64> = out
        .iter()
        .map(|t| HeaderRepr::from_bytes(&t.hdr).unwrap().seq)
        .collect();
    assert_eq!(seqs.len(), 3);
    let snd = |p: &Pair| p.sock_info(A, s).snd_bytes;
    assert_eq!(snd(&p), 60);
    let (ca, ea) = (p.conn(A), p.epoch(A, 0));
    let now = p.now;
    let ack = ib_frag(&HeaderRepr::ack_only(seqs[1]), &[]);
    p.st(A).handle_fragment(now, ca, 0, ea, &ack).unwrap();
    let left: Vec<u64> = p.st(A).queued_msgs(true).iter().map(|m| m.seq).collect();
    assert_eq!(left, [seqs[2]]);
    assert_eq!(snd(&p), 30);
    // An older ack changes nothing; an ack on a data frame counts as well.
    let old = ib_frag(&HeaderRepr::ack_only(seqs[0]), &[]);
    p.st(A).handle_fragment(now, ca, 0, ea, &old).unwrap();
    assert_eq!(p.st(A).queued_msgs(true).len(), 1);
    let mut h = HeaderRepr::data(77, 6000, 4000, 1);
    h.ack = seqs[2];
    p.st(A)
        .handle_fragment(now, ca, 0, ea, &ib_frag(&h, &[9]))
        .unwrap();
    assert!(p.st(A).queued_msgs(true).is_empty());
    assert_eq!(snd(&p), 0);
}

#[test]
fn ib_fragmentation_of_sizes() {
    let mut p = Pair::ib();
    p.establish();
    let s = p.sock(A, 4000);
    p.st(A).set_sndbuf(s, 4 << 20);
    let rb = p.sock(B, 6000);
    p.st(B).set_rcvbuf(rb, 8 << 20);
    for (len, nfrags) in [
        (0usize, 1usize),
        (1, 1),
        (4096, 1),
        (4097, 2),
        (MAX_MSG_SIZE, 256),
    ] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        p.send(A, s, 6000, &payload).unwrap();
        let out = p.tx(A, 0);
        assert_eq!(out.len(), nfrags, "{len} bytes");
        let h0 = out[0].hdr;
        let h = HeaderRepr::from_bytes(&h0).unwrap();
        assert_eq!((h.len as usize, h.sport, h.dport), (len, 4000, 6000));
        assert_ne!(h.csum, 0);
        assert_eq!(checksum(&h0), 0, "valid header checksum");
        let mut joined = Vec::new();
        for (i, t) in out.iter().enumerate() {
            let last = i + 1 == nfrags;
            assert_eq!(t.hdr, h0, "identical header copy on fragment {i}");
            assert_eq!(t.solicited, last, "solicited only on the last fragment");
            assert_eq!(t.kind, FrameKind::Data);
            let want = if last {
                len - FRAG_SIZE * (nfrags - 1)
            } else {
                FRAG_SIZE
            };
            assert_eq!(t.payload.len(), want);
            joined.extend_from_slice(&t.payload);
        }
        assert_eq!(joined, payload);
        p.rx(B, 0, &out).unwrap();
        let got = p.recv_all(B, rb);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].payload.len(), len);
        assert!(got[0].payload[..] == payload[..]);
        let _ = p.tx(B, 0);
    }
}

#[test]
fn ib_cong_map_is_two_fragments() {
    let mut p = Pair::ib();
    let r = p.sock(A, 700);
    p.st(A).set_rcvbuf(r, 10);
    let l = p.sock(A, 701);
    let now = p.now;
    p.st(A)
        .send(
            now,
            l,
            Some(SocketAddr::new(ADDR_A, 700)),
            Bytes::from_static(&[0; 11]),
            true,
        )
        .unwrap();
    let s = p.sock(A, 4000);
    p.send(A, s, 6000, b"x").unwrap();
    let (conn, path, epoch) = connects(&p.take_events(A))[0];
    p.connect(A, conn, path, epoch);
    let out = p.tx(A, 0);
    assert_eq!(out.len(), 3);
    let mut want = hdr_bytes(0, 0, 8192, 0, 0, 0x01, &[]);
    // Checksum by hand: words 0x2000 (len) + 0x0100 (flags) = 0x2100 -> 0xdeff.
    want[30..32].copy_from_slice(&[0xde, 0xff]);
    for (i, t) in out[..2].iter().enumerate() {
        assert_eq!(t.hdr, want);
        assert_eq!(t.kind, FrameKind::CongMap);
        assert_eq!(t.payload.len(), 4096);
        assert_eq!(t.solicited, i == 1);
    }
    // Port 700 = byte 87, bit 4, in the first fragment.
    assert_eq!(out[0].payload[87], 0x10);
    assert_eq!(out[0].payload.iter().filter(|&&b| b != 0).count(), 1);
    assert!(out[1].payload.iter().all(|&b| b == 0));
    assert_eq!(out[2].kind, FrameKind::Data);
    p.rx(B, 0, &out).unwrap();
    assert_eq!(p.stat(B, Counter::CongUpdateReceived), 1);
    let sb = p.sock(B, 6000);
    assert!(p.st(B).dest_congested(sb, SocketAddr::new(ADDR_A, 700)));
}

#[test]
fn ib_fragment_header_mismatch_drops_the_path() {
    let mut p = Pair::ib();
    p.establish();
    let (cb, eb) = (p.conn(B), p.epoch(B, 0));
    let now = p.now;
    let h = HeaderRepr::data(200, 7000, 6000, 5000);
    p.st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&h, &[1; 4096]))
        .unwrap();
    let _ = p.take_events(B);
    let bad0 = p.stat(B, Counter::ConnDropBadFrame);
    let mut other = h;
    other.seq = 201;
    let r = p
        .st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&other, &[1; 904]));
    assert_eq!(r, Err(DropReason::Protocol));
    assert_eq!(p.stat(B, Counter::ConnDropBadFrame), bad0 + 1);
    assert_eq!(disconnects(&p.take_events(B)), [(0, DropReason::Protocol)]);
    assert_ne!(p.st(B).path_state(cb, 0).0, PathState::Up);
    // Later frames of the old epoch are ignored.
    assert_eq!(p.st(B).handle_fragment(now, cb, 0, eb, &[0; 3]), Ok(()));
    // So is a wrong fragment length (a continuation must carry 4096 bytes or the rest).
    let mut p = Pair::ib();
    p.establish();
    let (cb, eb) = (p.conn(B), p.epoch(B, 0));
    let r = p
        .st(B)
        .handle_fragment(now, cb, 0, eb, &ib_frag(&h, &[1; 4000]));
    assert_eq!(r, Err(DropReason::Protocol));
    assert_eq!(p.stat(B, Counter::ConnDropBadFrame), 1);
}

#[test]
fn ib_bad_checksum_drops_the_path() {
    let mut p = Pair::ib();
    p.establish();
    let (cb, eb) = (p.conn(B), p.epoch(B, 0));
    let now = p.now;
    let _ = p.take_events(B);
    let mut f = ib_frag(&HeaderRepr::data(300, 7000, 6000, 2), b"ok");
    f[21] ^= 0x01; // sport 7000 -> 7001, checksum no longer valid
    let r = p.st(B).handle_fragment(now, cb, 0, eb, &f);
    assert_eq!(r, Err(DropReason::BadChecksum));
    assert_eq!(p.stat(B, Counter::RecvDropBadChecksum), 1);
    assert_eq!(
        disconnects(&p.take_events(B)),
        [(0, DropReason::BadChecksum)]
    );
    // The connection comes back and works.
    p.lanes.clear();
    p.run();
    let rb = p.sock(B, 6000);
    let s = p.sock(A, 4000);
    p.send(A, s, 6000, b"after").unwrap();
    p.run();
    assert_eq!(p.recv_all(B, rb).len(), 1);
    // A zero checksum means "none" and is accepted.
    let (cb, eb, now) = (p.conn(B), p.epoch(B, 0), p.now);
    let mut plain = vec![0u8; 48];
    HeaderRepr::data(999, 7000, 6000, 1).emit(&mut plain);
    plain.push(5);
    assert_eq!(p.st(B).handle_fragment(now, cb, 0, eb, &plain), Ok(()));
    assert_eq!(p.recv_all(B, rb).len(), 1);
}
