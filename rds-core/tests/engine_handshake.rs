//! Engine tests of connection start-up: the first frames of a TCP connection, the
//! multipath handshake, and ping/pong.

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use rds_core::proto::{FrameKind, PathState, TransportKind};
use rds_core::stats::Counter;
use rds_core::tunables::Tunables;
use rds_core::wire::{ExtHeader, HeaderRepr};

use common::*;

// ============================================================================================
// TCP: the first frames of a connection and the multipath handshake

#[test]
fn tcp_first_frames_are_cong_map_then_probe_then_data() {
    let mut p = Pair::tcp();
    // Congest A:5003 through loopback first, so that A's map has a bit set.
    let r = p.sock(A, 5003);
    p.st(A).set_rcvbuf(r, 100);
    let l = p.sock(A, 4001);
    let now = p.now;
    p.st(A)
        .send(
            now,
            l,
            Some(SocketAddr::new(ADDR_A, 5003)),
            Bytes::from(vec![7; 200]),
            true,
        )
        .unwrap();
    assert!(p.st(A).local_cong_map(ADDR_A).unwrap().test(5003));

    let port = port_on_lane(SEED_A, 0, 4100);
    let s = p.sock(A, port);
    let rb = p.sock(B, 6000);
    let payload: Vec<u8> = (0..64u8).collect();
    assert_eq!(p.send(A, s, 6000, &payload), Ok(64));
    let evs = p.take_events(A);
    let c = connects(&evs);
    assert_eq!(c.len(), 1, "{evs:?}");
    let (conn, path, epoch) = c[0];
    assert_eq!(path, 0, "the first connection is path 0");
    p.connect(A, conn, 0, epoch);
    assert_eq!(p.path_info(A, 0).state, PathState::Up);
    assert_eq!(p.path_info(B, 0).state, PathState::Up);

    let fa = p.tx(A, 0);
    assert_eq!(fa.len(), 3, "{fa:?}");
    // 1. The congestion map: seq 0, len 8192, flags exactly CONG_BITMAP, ports 0, no
    //    extensions, no checksum on TCP.
    assert_eq!(fa[0].hdr, hdr_bytes(0, 0, 8192, 0, 0, 0x01, &[]));
    assert_eq!(fa[0].kind, FrameKind::CongMap);
    let mut map = vec![0u8; 8192];
    map[5003 / 8] = 1 << (5003 % 8); // byte 625 = 0x08
    assert_eq!(map[625], 0x08);
    assert_eq!(&fa[0].payload[..], &map[..]);
    // 2. The probe ping: seq 1, sport 1, dport 0, len 0, NPATHS=8 GEN_NUM SPORT_IDX.
    let gen_a = p.st(A).gen_num();
    assert_eq!(fa[1].hdr, hdr_bytes(1, 0, 0, 1, 0, 0, &probe_ext(gen_a)));
    assert!(fa[1].payload.is_empty());
    // 3. The data: seq 2, no flags on TCP (ACK_REQUIRED never goes on the TCP wire).
    assert_eq!(fa[2].hdr, hdr_bytes(2, 0, 64, port, 6000, 0, &[]));
    assert_eq!(&fa[2].payload[..], &payload[..]);
    assert!(fa.iter().all(|t| !t.solicited));

    // The accepting (larger) side also probes while it does not know the number of lanes.
    let fb = p.tx(B, 0);
    assert_eq!(fb.len(), 2, "{fb:?}");
    assert_eq!(fb[0].hdr, hdr_bytes(0, 0, 8192, 0, 0, 0x01, &[]));
    assert!(fb[0].payload.iter().all(|&b| b == 0));
    let gen_b = p.st(B).gen_num();
    assert_ne!(gen_a, gen_b);
    assert_eq!(fb[1].hdr, hdr_bytes(1, 0, 0, 1, 0, 0, &probe_ext(gen_b)));

    // B takes A's frames: map, probe (answered with a probe pong), data.
    p.rx(B, 0, &fa).unwrap();
    assert_eq!(p.stat(B, Counter::CongUpdateReceived), 1);
    assert_eq!(p.stat(B, Counter::RecvPing), 1);
    assert_eq!(
        p.stat(B, Counter::SendPong),
        2,
        "its own probe and the pong"
    );
    let cb = p.conn(B);
    assert_eq!(p.st(B).npaths(cb), 8);
    assert_eq!(p.st(B).peer_gen(cb), gen_a);
    assert!(p.st(B).dest_congested(rb, SocketAddr::new(ADDR_A, 5003)));
    assert!(!p.st(B).dest_congested(rb, SocketAddr::new(ADDR_A, 5002)));
    let got = p.recv_all(B, rb);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].from, SocketAddr::new(ADDR_A, port));
    assert_eq!(got[0].seq, 2);
    assert_eq!(&got[0].payload[..], &payload[..]);
    let fb2 = p.tx(B, 0);
    assert_eq!(fb2.len(), 1);
    // The probe pong: sport 0, dport 1, the next sequence number, the same extensions.
    assert_eq!(fb2[0].hdr, hdr_bytes(2, 0, 0, 0, 1, 0, &probe_ext(gen_b)));
    assert!(connects(&p.take_events(B)).is_empty(), "B never connects");

    // A takes B's frames: its probe ping is answered, the pong to A's probe starts the
    // other lanes (A has the smaller address).
    let mut all_b = fb;
    all_b.extend(fb2);
    p.rx(A, 0, &all_b).unwrap();
    let ca = p.conn(A);
    assert_eq!(p.st(A).npaths(ca), 8);
    assert_eq!(p.st(A).peer_gen(ca), gen_b);
    let evs = p.take_events(A);
    let lanes: Vec<usize> = connects(&evs).iter().map(|c| c.1).collect();
    assert_eq!(lanes, [1, 2, 3, 4, 5, 6, 7]);
    let fa2 = p.tx(A, 0);
    assert_eq!(fa2.len(), 1);
    assert_eq!(fa2[0].hdr, hdr_bytes(3, 0, 0, 0, 1, 0, &probe_ext(gen_a)));
}

#[test]
fn tcp_lanes_come_up_with_their_own_sequence_space() {
    let mut p = Pair::tcp();
    p.establish();
    for path in 0..8 {
        assert_eq!(p.path_info(A, path).state, PathState::Up, "A lane {path}");
        assert_eq!(p.path_info(B, path).state, PathState::Up, "B lane {path}");
    }
    assert!(
        connects(&p.events[B.i()]).is_empty(),
        "the larger address never initiates"
    );
    // One socket per lane; each lane numbers its messages from 1 (lanes > 0 carry nothing
    // before them; lane 0 carried the probes and the first message).
    let rb = p.sock(B, 6000);
    let mut socks = Vec::new();
    for lane in 1..8 {
        let port = port_on_lane(SEED_A, lane, 5000);
        socks.push((lane, port, p.sock(A, port)));
    }
    for round in 0..3u8 {
        for &(_, _, s) in &socks {
            p.send(A, s, 6000, &[round]).unwrap();
        }
    }
    p.run();
    let got = p.recv_all(B, rb);
    assert_eq!(got.len(), 21);
    for &(lane, port, _) in &socks {
        let seqs: Vec<u64> = got
            .iter()
            .filter(|m| m.from.port() == port)
            .map(|m| m.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3], "lane {lane}");
        let on_wire: Vec<usize> = p.wired_from(A, port).iter().map(|w| w.path).collect();
        assert_eq!(on_wire, [lane; 3]);
        assert_eq!(p.path_info(A, lane).next_tx_seq, 4);
        assert_eq!(p.path_info(B, lane).next_rx_seq, 4);
    }
}

// ============================================================================================
// Ping / pong

#[test]
fn ping_to_port_0_is_answered_on_the_same_path() {
    let mut p = Pair::tcp();
    p.establish();
    let lane = 3;
    let (cb, eb) = (p.conn(B), p.epoch(B, lane));
    let next_tx = p.path_info(B, lane).next_tx_seq;
    let (pings, pongs) = (p.stat(B, Counter::RecvPing), p.stat(B, Counter::SendPong));
    let now = p.now;
    p.st(B)
        .handle_frame(
            now,
            cb,
            lane,
            eb,
            frame(HeaderRepr::data(40, 5000, 0, 0), &[]),
        )
        .unwrap();
    assert_eq!(p.stat(B, Counter::RecvPing), pings + 1);
    assert_eq!(p.stat(B, Counter::SendPong), pongs + 1);
    let out = p.tx(B, lane);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].hdr, hdr_bytes(next_tx, 0, 0, 0, 5000, 0, &[]));
    assert!(out[0].payload.is_empty());
    for other in (0..8).filter(|&l| l != lane) {
        assert!(p.tx(B, other).is_empty(), "lane {other}");
    }
    // A ping with a payload is answered too (rds-ping may send data).
    p.st(B)
        .handle_frame(
            now,
            cb,
            lane,
            eb,
            frame(HeaderRepr::data(41, 5001, 0, 3), b"abc"),
        )
        .unwrap();
    let out = p.tx(B, lane);
    assert_eq!(out[0].hdr, hdr_bytes(next_tx + 1, 0, 0, 0, 5001, 0, &[]));
}

#[test]
fn ping_from_port_0_is_ignored() {
    let mut p = Pair::tcp();
    p.establish();
    let (cb, eb) = (p.conn(B), p.epoch(B, 0));
    let pings = p.stat(B, Counter::RecvPing);
    let nosock = p.stat(B, Counter::RecvDropNoSock);
    let now = p.now;
    p.st(B)
        .handle_frame(now, cb, 0, eb, frame(HeaderRepr::data(90, 0, 0, 0), &[]))
        .unwrap();
    assert!(p.tx(B, 0).is_empty(), "no pong to a pong");
    assert_eq!(p.stat(B, Counter::RecvPing), pings);
    assert_eq!(p.stat(B, Counter::RecvDropNoSock), nosock);
    // It still counts as received for sequencing.
    assert_eq!(p.path_info(B, 0).next_rx_seq, 91);
}

#[test]
fn ping_disabled_drops_as_no_socket_but_probe_pong_still_counts() {
    let tun = Tunables {
        ping_enable: false,
        ..Tunables::default()
    };
    let mut p = Pair::new(TransportKind::Tcp, Tunables::default(), tun);
    let s = p.sock(A, 4000);
    p.send(A, s, 6000, b"x").unwrap();
    let (conn, _, epoch) = connects(&p.take_events(A))[0];
    p.connect(A, conn, 0, epoch);
    let _ = p.tx(B, 0); // B's map and probe
    let (cb, eb) = (p.conn(B), p.epoch(B, 0));
    let now = p.now;
    p.st(B)
        .handle_frame(now, cb, 0, eb, frame(HeaderRepr::data(1, 5000, 0, 0), &[]))
        .unwrap();
    assert_eq!(p.stat(B, Counter::RecvDropNoSock), 1);
    assert_eq!(p.stat(B, Counter::RecvPing), 0);
    // A probe ping is a ping too: not answered.
    let mut probe = HeaderRepr::data(2, 1, 0, 0);
    probe.push_ext(ExtHeader::Npaths(8)).unwrap();
    p.st(B)
        .handle_frame(now, cb, 0, eb, frame(probe, &[]))
        .unwrap();
    assert_eq!(p.stat(B, Counter::RecvDropNoSock), 2);
    assert!(p.tx(B, 0).is_empty());
    assert_eq!(p.st(B).npaths(cb), 0);
    // A probe pong is processed whatever ping_enable says.
    let mut pong = HeaderRepr::data(3, 0, 1, 0);
    pong.push_ext(ExtHeader::Npaths(4)).unwrap();
    p.st(B)
        .handle_frame(now, cb, 0, eb, frame(pong, &[]))
        .unwrap();
    assert_eq!(p.st(B).npaths(cb), 4);
    assert_eq!(p.stat(B, Counter::RecvDropNoSock), 2);
}
