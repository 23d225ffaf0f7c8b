//! A TCP connection we opened: acknowledged messages leave the retransmit queue only once the
//! peer has shown that its RDS took the connection (a frame from it on that connection, or
//! `ADOPT_GRACE` without a reset). The kernel's accepting side can reset a connection whose
//! bytes its TCP already acknowledged (`rds_tcp_accept_one` finding its path not DOWN); what
//! was written on it is then resent, once. Their sending socket gets its buffer space back at
//! the acknowledgement all the same (TCP's window holds a sender back, not the peer's answer).

mod common;

use rds_core::proto::driver::{self, Frames};
use rds_core::proto::stack::ADOPT_GRACE;
use rds_core::proto::{ConnId, Transmit};
use rds_core::stats::Counter;
use rds_core::wire::{flags, HeaderRepr};

use common::*;

/// A's first connection to B (before any handshake, so B is not yet known to send SPORT_IDX):
/// B's TCP accepts it but B's RDS has not taken it. A reports it connected, writes three
/// messages and the peer's TCP acknowledges every byte. Returns A's socket, B's receiving
/// socket, A's connection and the connection's epoch.
fn written_on_an_unadopted_lane(
    p: &mut Pair,
) -> (
    rds_core::proto::SockId,
    rds_core::proto::SockId,
    ConnId,
    u32,
) {
    let port = port_on_lane(SEED_A, 0, 4100);
    let sa = p.sock(A, port);
    let rb = p.sock(B, 6000);
    for i in 0..3u8 {
        p.send(A, sa, 6000, &[i; 20]).unwrap();
    }
    let now = p.now;
    let c = connects(&p.take_events(A));
    assert_eq!(c.len(), 1, "{c:?}");
    let (ca, path, epoch) = c[0];
    assert_eq!(path, 0);
    assert!(p.st(A).handle_connected(now, ca, 0, epoch));
    let (_, ep) = p.st(A).path_state(ca, 0);
    let out: Vec<Transmit> = Frames::new(p.st(A), now, ca, 0).collect();
    let data: Vec<u16> = out
        .iter()
        .map(|t| HeaderRepr::from_bytes(&t.hdr).unwrap())
        .filter(|h| h.sport == port)
        .map(|h| h.dport)
        .collect();
    assert_eq!(data, [6000; 3]);
    // The probe that asks B to answer on this connection went out with them.
    assert!(out
        .iter()
        .any(|t| HeaderRepr::from_bytes(&t.hdr).unwrap().is_probe_ping()));
    let bytes: u64 = out
        .iter()
        .map(|t| (t.hdr.len() + t.payload.len()) as u64)
        .sum();
    p.st(A).handle_tx_acked(now, ca, 0, ep, bytes);
    (sa, rb, ca, ep)
}

/// A's messages from `sock`'s port still in a retransmit queue.
fn held(p: &Pair, sock: rds_core::proto::SockId) -> usize {
    let port = p.sock_info(A, sock).bound.unwrap().port();
    p.st[A.i()]
        .queued_msgs(true)
        .iter()
        .filter(|m| m.lport == port)
        .count()
}

#[test]
fn acknowledged_messages_are_resent_when_the_peer_resets_a_connection_it_never_took() {
    let mut p = Pair::tcp();
    let (sa, rb, ca, ep) = written_on_an_unadopted_lane(&mut p);
    let dropped = p.stat(A, Counter::SendDropAcked);
    // Acknowledged by the peer's TCP, but B never answered: still A's to resend, though the
    // socket has its send buffer back.
    assert_eq!(held(&p, sa), 3);
    assert_eq!(p.sock_info(A, sa).snd_bytes, 0);
    assert_eq!(p.stat(A, Counter::SendDropAcked), dropped);
    // The acceptor resets it unread (as the kernel's accept does when its path is busy).
    let now = p.now;
    p.st(A).handle_disconnected(now, ca, 0, ep);
    p.advance(ms(2000));
    p.run();
    let got: Vec<(u8, u64)> = p
        .recv_all(B, rb)
        .iter()
        .map(|m| (m.payload[0], m.seq))
        .collect();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [0, 1, 2]);
    let resent: Vec<u8> = p
        .wired_from(A, p.sock_info(A, sa).bound.unwrap().port())
        .iter()
        .map(|w| w.hdr.flags & flags::RETRANSMITTED)
        .collect();
    assert_eq!(resent, [flags::RETRANSMITTED; 3]);
    // Resent and answered on the new connection: gone, and the socket was not credited twice.
    assert_eq!(held(&p, sa), 0);
    assert_eq!(p.sock_info(A, sa).snd_bytes, 0);
    p.send(A, sa, 6000, &[9; 30]).unwrap();
    assert_eq!(p.sock_info(A, sa).snd_bytes, 30);
}

#[test]
fn a_frame_from_the_peer_on_the_connection_frees_what_it_acknowledged() {
    let mut p = Pair::tcp();
    let (sa, _rb, ca, ep) = written_on_an_unadopted_lane(&mut p);
    assert_eq!(held(&p, sa), 3);
    // B's pong to the probe (any frame of B's on this connection would do).
    let now = p.now;
    let pong = frame(HeaderRepr::pong(1, rds_core::wire::PROBE_PORT), &[]);
    p.st(A).handle_frame(now, ca, 0, ep, pong).unwrap();
    assert_eq!(held(&p, sa), 0);
    assert_eq!(p.sock_info(A, sa).snd_bytes, 0);
}

#[test]
fn a_silent_peer_that_keeps_the_connection_frees_it_after_the_grace_time() {
    let mut p = Pair::tcp();
    let (sa, _rb, _ca, _ep) = written_on_an_unadopted_lane(&mut p);
    let start = p.now;
    assert!(p
        .st(A)
        .poll_timeout()
        .is_some_and(|t| t <= start + ADOPT_GRACE));
    p.advance(ADOPT_GRACE - ms(1));
    let now = p.now;
    driver::handle_due(p.st(A), now);
    assert_eq!(held(&p, sa), 3);
    p.advance(ms(1));
    let now = p.now;
    driver::handle_due(p.st(A), now);
    assert_eq!(held(&p, sa), 0);
}

#[test]
fn a_connection_reset_before_the_peer_answered_keeps_the_reconnect_backoff() {
    let tun = rds_core::tunables::Tunables {
        reconnect_min_delay: ms(10),
        reconnect_max_delay: ms(1000),
        ..rds_core::tunables::Tunables::default()
    };
    let mut p = Pair::new(rds_core::proto::TransportKind::Tcp, tun.clone(), tun);
    let s = p.sock(A, 4000);
    p.send(A, s, 6000, b"x").unwrap();
    // Five refused attempts: the backoff has grown to 320 ms.
    let mut evs = p.take_events(A);
    for _ in 0..5 {
        let (conn, path, epoch) = connects(&evs)[0];
        let now = p.now;
        p.st(A).handle_connect_failed(now, conn, path, epoch);
        let at = p.st(A).poll_timeout().unwrap();
        p.now = at;
        p.st(A).handle_timeout(at);
        evs = p.take_events(A);
    }
    // The next one connects, and the peer resets it before answering on it (a busy accept):
    // the connect did not succeed, so the retry waits (jittered below the backoff) instead of
    // going at once, as it would after a connection the peer answered on.
    let (conn, path, epoch) = connects(&evs)[0];
    let now = p.now;
    assert!(p.st(A).handle_connected(now, conn, path, epoch));
    let (_, ep) = p.st(A).path_state(conn, path);
    p.st(A).handle_disconnected(now, conn, path, ep);
    let at = p.st(A).poll_timeout().unwrap();
    assert!(
        at > now,
        "an immediate retry after a connection the peer never took"
    );
    assert!(at - now < ms(640), "{:?}", at - now);
}
