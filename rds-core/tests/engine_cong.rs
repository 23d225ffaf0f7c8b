//! Engine tests of congestion: marking and clearing a port's bit, failing sends to a congested
//! destination, and monitor notifications.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use bytes::Bytes;
use rds_core::proto::{
    Event, FrameKind, Received, RecvError, SendError, SendExtras, TransportKind,
};
use rds_core::stats::Counter;
use rds_core::wire::HeaderRepr;

use common::*;

// ============================================================================================
// Congestion

#[test]
fn congestion_marks_port_above_rcvbuf_and_clears_below_half() {
    let mut p = Pair::tcp();
    p.establish();
    // A second peer of B: 9.9.9.9 (smaller than B) connected to it.
    let c_addr = IpAddr::V4(Ipv4Addr::new(9, 9, 9, 9));
    let now = p.now;
    let (cc, _, _) = p
        .st(B)
        .handle_accept(
            now,
            ADDR_B,
            c_addr,
            TransportKind::Tcp,
            40000,
            Duration::ZERO,
        )
        .unwrap();
    while p.st(B).poll_transmit(now, cc, 0).is_some() {}
    let rb = p.sock(B, 6005);
    p.st(B).set_rcvbuf(rb, 1000);
    let port = port_on_lane(SEED_A, 0, 4100);
    let s = p.sock(A, port);
    let dest = p.dest(B, 6005);
    p.send(A, s, 6005, &[1; 502]).unwrap();
    p.send(A, s, 6005, &[2; 498]).unwrap();
    p.run();
    // Exactly 1000 bytes queued: not above rcvbuf.
    assert!(!p.st(B).local_cong_map(ADDR_B).unwrap().test(6005));
    assert!(!p.st(A).dest_congested(s, dest));
    p.wire.clear();
    p.send(A, s, 6005, &[3; 1]).unwrap();
    let now = p.now;
    p.st(A)
        .send(now, s, Some(dest), Bytes::from_static(&[4]), true)
        .unwrap();
    let _ = p.take_events(B);
    p.run();
    assert!(p.st(B).local_cong_map(ADDR_B).unwrap().test(6005));
    assert_eq!(p.sock_info(B, rb).rcv_bytes, 1002);
    // One map update to A, with port 6005 = byte 750 bit 5.
    let maps: Vec<_> = p
        .wire
        .iter()
        .filter(|w| w.kind == FrameKind::CongMap)
        .collect();
    assert_eq!(maps.len(), 1, "coalesced into one update");
    assert_eq!(maps[0].from, B);
    assert_eq!(maps[0].payload[750], 0x20);
    assert_eq!(maps[0].payload.iter().filter(|&&b| b != 0).count(), 1);
    assert!(p.st(A).dest_congested(s, dest));
    // ... and one to the other peer of the address.
    assert!(p.events[B.i()].contains(&Event::Transmit { conn: cc, path: 0 }));
    let now = p.now;
    let t = p.st(B).poll_transmit(now, cc, 0).unwrap();
    assert_eq!(t.kind, FrameKind::CongMap);
    assert_eq!(t.payload[750], 0x20);
    assert!(p.st(B).poll_transmit(now, cc, 0).is_none());

    // Reading down to exactly 500 bytes (not below rcvbuf/2) keeps it; below clears it.
    let r = p.st(B).recv(rb, 2000, false).unwrap();
    assert!(matches!(r, Received::Data { full_len: 502, .. }));
    p.wire.clear();
    p.run();
    assert_eq!(p.sock_info(B, rb).rcv_bytes, 500);
    assert!(
        p.st(B).local_cong_map(ADDR_B).unwrap().test(6005),
        "500 bytes left"
    );
    assert!(p.wire.is_empty());
    let _ = p.st(B).recv(rb, 2000, false).unwrap(); // 498 -> 2 left
    p.run();
    assert!(!p.st(B).local_cong_map(ADDR_B).unwrap().test(6005));
    let maps: Vec<_> = p
        .wire
        .iter()
        .filter(|w| w.kind == FrameKind::CongMap)
        .collect();
    assert_eq!(maps.len(), 1);
    assert!(maps[0].payload.iter().all(|&b| b == 0));
    assert!(!p.st(A).dest_congested(s, dest));
    let t = p.st(B).poll_transmit(now, cc, 0).unwrap();
    assert!(t.kind == FrameKind::CongMap && t.payload.iter().all(|&b| b == 0));
}

#[test]
fn congested_destination_fails_sends_and_notifies_monitors() {
    let mut p = Pair::tcp();
    p.establish();
    let rb = p.sock(B, 6005);
    p.st(B).set_rcvbuf(rb, 100);
    let s = p.sock(A, 4000);
    let mon_idle = p.sock(A, 4001);
    p.st(A).set_cong_monitor(mon_idle, true);
    p.send(A, s, 6005, &[0; 101]).unwrap();
    p.run();
    let dest = p.dest(B, 6005);
    assert!(p.st(A).dest_congested(s, dest));
    let now = p.now;
    assert_eq!(p.send(A, s, 6005, b"x"), Err(SendError::Congested));
    assert_eq!(p.stat(A, Counter::CongSendError), 1);
    let blocking = |p: &mut Pair, retry| {
        p.st[0].send_ext(now, s, Some(dest), Bytes::from_static(b"x"), false, retry)
    };
    assert_eq!(blocking(&mut p, false), Err(SendError::CongestedWait));
    assert_eq!(p.stat(A, Counter::CongSendBlocked), 1);
    assert_eq!(blocking(&mut p, true), Err(SendError::CongestedWait));
    assert_eq!(
        p.stat(A, Counter::CongSendBlocked),
        1,
        "a retry is not counted again"
    );
    // Other ports of B are not congested.
    assert_eq!(p.send(A, s, 6006, b"x"), Ok(1));
    // A send past congestion (a daemon client's posted send) is queued, and still bounded
    // by the send buffer.
    let past = SendExtras {
        past_congestion: true,
        ..SendExtras::default()
    };
    let room = p.st(A).send_room(s);
    let one = Bytes::from_static(b"y");
    assert_eq!(
        p.st[0].send_full(now, s, Some(dest), one.clone(), true, false, &past),
        Ok(1)
    );
    assert_eq!(p.st(A).send_room(s), room - 1);
    p.st(A).set_sndbuf(s, 1);
    assert_eq!(
        p.st[0].send_full(now, s, Some(dest), one, true, false, &past),
        Err(SendError::WouldBlock)
    );
    assert_eq!(p.st(A).send_room(s), 0);
    assert_eq!(p.stat(A, Counter::CongSendError), 1);
    p.st(A).set_sndbuf(s, 1 << 20);
    // Monitoring: a non-blocking failure records the port's bit.
    p.st(A).set_cong_monitor(s, true);
    assert_eq!(p.send(A, s, 6005, b"x"), Err(SendError::Congested));
    assert_eq!(p.stat(A, Counter::CongSendError), 2);
    assert_eq!(p.st(A).recv(s, 100, false), Err(RecvError::WouldBlock));
    assert!(!p.st(A).readable(s));
    // B reads; the update reaches A; the monitor gets the uncongested bit once.
    let _ = p.recv_all(B, rb);
    let _ = p.take_events(A);
    p.run();
    assert!(!p.st(A).dest_congested(s, dest));
    assert!(p.events[A.i()].contains(&Event::Wake(s)));
    assert!(p.events[A.i()].contains(&Event::CongChanged));
    assert!(p.st(A).readable(s));
    assert_eq!(
        p.st(A).recv(s, 100, false),
        Ok(Received::CongUpdate(1 << (6005 % 64)))
    );
    assert_eq!(1u64 << (6005 % 64), 1 << 53);
    assert_eq!(p.st(A).recv(s, 100, false), Err(RecvError::WouldBlock));
    assert_eq!(
        p.st(A).recv(mon_idle, 100, false),
        Err(RecvError::WouldBlock)
    );
    assert_eq!(p.send(A, s, 6005, b"x"), Ok(1));
}

#[test]
fn pong_is_not_sent_to_a_congested_pinger() {
    let mut p = Pair::tcp();
    p.establish();
    let rb = p.sock(B, 6005);
    p.st(B).set_rcvbuf(rb, 10);
    let s = p.sock(A, 4000);
    p.send(A, s, 6005, &[0; 11]).unwrap();
    p.run();
    // B's port 6005 is congested in A's copy of B's map; B pings A from that port.
    let (ca, ea) = (p.conn(A), p.epoch(A, 0));
    let pongs = p.stat(A, Counter::SendPong);
    let now = p.now;
    p.st(A)
        .handle_frame(
            now,
            ca,
            0,
            ea,
            frame(HeaderRepr::data(500, 6005, 0, 0), &[]),
        )
        .unwrap();
    assert_eq!(p.stat(A, Counter::RecvPing), 2, "B's probe and this ping");
    assert_eq!(p.stat(A, Counter::SendPong), pongs);
    assert!(p.tx(A, 0).is_empty());
}
