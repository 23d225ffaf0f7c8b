//! Engine tests of the socket API: bind, send and receive errors, peeking and truncation,
//! dropping queued messages on cancel and close.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bytes::Bytes;
use rds_core::proto::{BindError, Received, RecvError, SendError, Stack, TransportKind};
use rds_core::stats::Counter;
use rds_core::time::Instant;
use rds_core::wire::MAX_MSG_SIZE;

use common::*;

// ============================================================================================
// Socket API errors and queues

#[test]
fn bind_errors() {
    let mut st = lone();
    let s = st.socket();
    assert_eq!(
        st.bind(s, sa(ADDR_A, 1)),
        Err(BindError::Invalid),
        "probe port"
    );
    for ip in [
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V4(Ipv4Addr::BROADCAST),
        IpAddr::V4(Ipv4Addr::new(224, 0, 0, 1)),
        IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        "ff02::1".parse().unwrap(),
    ] {
        assert_eq!(st.bind(s, sa(ip, 5000)), Err(BindError::Invalid), "{ip}");
    }
    assert_eq!(st.bind(s, sa(ADDR_B, 5000)), Err(BindError::AddrNotAvail));
    assert_eq!(st.bind(s, sa(ADDR_A, 5000)), Ok(sa(ADDR_A, 5000)));
    assert_eq!(
        st.bind(s, sa(ADDR_A, 5001)),
        Err(BindError::Invalid),
        "double bind"
    );
    let s2 = st.socket();
    assert_eq!(st.bind(s2, sa(ADDR_A, 5000)), Err(BindError::AddrInUse));
    // IPv4-mapped addresses are the IPv4 address.
    let mapped = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped());
    assert_eq!(st.bind(s2, sa(mapped, 5000)), Err(BindError::AddrInUse));
    let got = st.bind(s2, sa(ADDR_A, 0)).unwrap();
    assert!(got.port() >= 2 && got.port() != 5000, "{got}");
    assert_eq!(st.sock_name(s2), Some(got));
    // Closing frees the port.
    st.close(s);
    let s3 = st.socket();
    assert_eq!(st.bind(s3, sa(ADDR_A, 5000)), Ok(sa(ADDR_A, 5000)));
    // SO_RDS_TRANSPORT: IB is not served by this address; it cannot change after bind.
    let s4 = st.socket();
    st.set_transport(s4, TransportKind::Ib).unwrap();
    assert_eq!(st.bind(s4, sa(ADDR_A, 5002)), Err(BindError::NoProtoOpt));
    assert_eq!(
        st.set_transport(s3, TransportKind::Ib),
        Err(BindError::Invalid)
    );
    let s5 = st.socket();
    assert_eq!(
        st.set_transport(s5, TransportKind::Loopback),
        Err(BindError::NoProtoOpt)
    );
}

#[test]
fn send_errors() {
    let mut st = lone();
    let now = Instant::ZERO;
    let b = |n: usize| Bytes::from(vec![0u8; n]);
    let s = st.socket();
    assert_eq!(
        st.send(now, s, Some(sa(ADDR_B, 1)), b(1), true),
        Err(SendError::NotConn),
        "unbound"
    );
    st.bind(s, sa(ADDR_A, 4000)).unwrap();
    assert_eq!(
        st.send(now, s, None, b(1), true),
        Err(SendError::NotConn),
        "no destination"
    );
    for ip in [
        Ipv4Addr::BROADCAST,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::new(239, 1, 1, 1),
    ] {
        assert_eq!(
            st.send(now, s, Some(sa(IpAddr::V4(ip), 5)), b(1), true),
            Err(SendError::InvalidDest)
        );
    }
    let v6: IpAddr = "fd00::2".parse().unwrap();
    assert_eq!(
        st.send(now, s, Some(sa(v6, 5)), b(1), true),
        Err(SendError::NotSupported)
    );
    st.set_sndbuf(s, 4 << 20);
    assert_eq!(
        st.send(now, s, Some(sa(ADDR_B, 5)), b(MAX_MSG_SIZE + 1), true),
        Err(SendError::MsgSize)
    );
    assert_eq!(
        st.send(now, s, Some(sa(ADDR_B, 5)), b(MAX_MSG_SIZE), true),
        Ok(MAX_MSG_SIZE)
    );
    let s2 = st.socket();
    st.bind(s2, sa(ADDR_A, 4001)).unwrap();
    st.set_sndbuf(s2, 1000);
    assert_eq!(
        st.send(now, s2, Some(sa(ADDR_B, 5)), b(1001), true),
        Err(SendError::MsgSize)
    );
    assert_eq!(st.send(now, s2, Some(sa(ADDR_B, 5)), b(600), true), Ok(600));
    assert_eq!(
        st.send(now, s2, Some(sa(ADDR_B, 5)), b(600), true),
        Ok(600),
        "below sndbuf before"
    );
    assert_eq!(
        st.send(now, s2, Some(sa(ADDR_B, 5)), b(1), true),
        Err(SendError::WouldBlock)
    );
    assert!(!st.writable(s2));
    // connect() gives a default destination.
    let s3 = st.socket();
    st.bind(s3, sa(ADDR_A, 4002)).unwrap();
    assert_eq!(
        st.connect(s3, sa(IpAddr::V4(Ipv4Addr::BROADCAST), 1)),
        Err(SendError::InvalidDest)
    );
    st.connect(s3, sa(ADDR_B, 9)).unwrap();
    assert_eq!(st.send(now, s3, None, b(3), true), Ok(3));
    assert!(st
        .queued_msgs(false)
        .iter()
        .any(|m| m.lport == 4002 && m.fport == 9));
    st.close(s3);
    assert_eq!(
        st.send(now, s3, None, b(3), true),
        Err(SendError::BadSocket)
    );
}

#[test]
fn recv_peek_and_truncation() {
    let mut st = lone();
    let now = Instant::ZERO;
    let tx = st.socket();
    st.bind(tx, sa(ADDR_A, 7000)).unwrap();
    let rx = st.socket();
    st.bind(rx, sa(ADDR_A, 7001)).unwrap();
    assert_eq!(st.recv(rx, 100, false), Err(RecvError::WouldBlock));
    st.send(
        now,
        tx,
        Some(sa(ADDR_A, 7001)),
        Bytes::from_static(b"0123456789"),
        true,
    )
    .unwrap();
    st.send(
        now,
        tx,
        Some(sa(ADDR_A, 7001)),
        Bytes::from_static(b"second"),
        true,
    )
    .unwrap();
    assert!(st.readable(rx));
    let peek = st.recv(rx, 100, true).unwrap();
    assert_eq!(
        st.recv(rx, 100, true).unwrap(),
        peek,
        "peek leaves it queued"
    );
    let Received::Data {
        msg,
        full_len,
        truncated,
    } = peek
    else {
        panic!("data expected");
    };
    assert_eq!(
        (&msg.payload[..], full_len, truncated),
        (&b"0123456789"[..], 10, false)
    );
    assert_eq!(msg.from, sa(ADDR_A, 7000));
    // Peek with a short buffer: truncated copy, still queued.
    let Received::Data { msg, truncated, .. } = st.recv(rx, 4, true).unwrap() else {
        panic!();
    };
    assert_eq!((&msg.payload[..], truncated), (&b"0123"[..], true));
    let delivered = st.stats().get(Counter::RecvDelivered);
    let Received::Data {
        msg,
        full_len,
        truncated,
    } = st.recv(rx, 3, false).unwrap()
    else {
        panic!();
    };
    assert_eq!(
        (&msg.payload[..], full_len, truncated),
        (&b"012"[..], 10, true)
    );
    assert_eq!(st.stats().get(Counter::RecvDelivered), delivered + 1);
    // The rest of a truncated message is gone.
    let Received::Data { msg, .. } = st.recv(rx, 100, false).unwrap() else {
        panic!();
    };
    assert_eq!(&msg.payload[..], b"second");
    assert_eq!(st.recv(rx, 100, false), Err(RecvError::WouldBlock));
    assert!(!st.readable(rx));
    assert_eq!(
        st.sock_infos()
            .iter()
            .find(|i| i.id == rx)
            .unwrap()
            .rcv_bytes,
        0
    );
}

#[test]
fn cancel_sent_to_and_close_drop_queued_messages() {
    let mut st = lone();
    let now = Instant::ZERO;
    let s = st.socket();
    st.bind(s, sa(ADDR_A, 4000)).unwrap();
    let other = st.socket();
    st.bind(other, sa(ADDR_A, 4001)).unwrap();
    for _ in 0..3 {
        st.send(
            now,
            s,
            Some(sa(ADDR_B, 6000)),
            Bytes::from_static(&[0; 10]),
            true,
        )
        .unwrap();
    }
    for _ in 0..2 {
        st.send(
            now,
            s,
            Some(sa(ADDR_B, 6001)),
            Bytes::from_static(&[0; 20]),
            true,
        )
        .unwrap();
    }
    st.send(
        now,
        other,
        Some(sa(ADDR_B, 6000)),
        Bytes::from_static(&[0; 5]),
        true,
    )
    .unwrap();
    let snd = |st: &Stack, id| {
        st.sock_infos()
            .iter()
            .find(|i| i.id == id)
            .unwrap()
            .snd_bytes
    };
    assert_eq!(snd(&st, s), 70);
    assert_eq!(st.cancel_sent_to(s, sa(ADDR_B, 6000)), 3);
    assert_eq!(snd(&st, s), 40);
    let q: Vec<(u16, u16)> = st
        .queued_msgs(false)
        .iter()
        .map(|m| (m.lport, m.fport))
        .collect();
    assert_eq!(q.len(), 3);
    assert_eq!(q.iter().filter(|m| **m == (4000, 6001)).count(), 2);
    assert_eq!(q.iter().filter(|m| **m == (4001, 6000)).count(), 1);
    assert_eq!(st.cancel_sent_to(s, sa(ADDR_B, 6000)), 0);
    st.close(s);
    let q: Vec<(u16, u16)> = st
        .queued_msgs(false)
        .iter()
        .map(|m| (m.lport, m.fport))
        .collect();
    assert_eq!(q, [(4001, 6000)]);
    assert!(!st.sock_exists(s));
}

#[test]
fn close_of_a_congested_socket_clears_its_bit_and_updates_peers() {
    let mut p = Pair::tcp();
    p.establish();
    let rb = p.sock(B, 6005);
    p.st(B).set_rcvbuf(rb, 10);
    let s = p.sock(A, 4000);
    p.send(A, s, 6005, &[0; 11]).unwrap();
    p.run();
    let dest = p.dest(B, 6005);
    assert!(p.st(A).dest_congested(s, dest));
    p.st(B).close(rb);
    assert!(!p.st(B).local_cong_map(ADDR_B).unwrap().test(6005));
    p.run();
    assert!(!p.st(A).dest_congested(s, dest));
    // Messages to the closed port are dropped and counted.
    let drops = p.stat(B, Counter::RecvDropNoSock);
    p.send(A, s, 6005, b"late").unwrap();
    p.run();
    assert_eq!(p.stat(B, Counter::RecvDropNoSock), drops + 1);
}
