//! Regression test (found against the Debian 6.1 kernel in the interop lab): the accepting
//! (larger-address) side of a multipath RDS/TCP connection whose peer does not announce
//! SPORT_IDX must not hand a lane slot to a new connection while the slot's previous
//! connection is still being drained. The base kernel reconnects its lanes with random source
//! ports, so the new connection can belong to another peer lane, and the old connection can
//! still carry frames the peer sent before it saw our FIN. Those frames were acknowledged by
//! our TCP; discarding them lost messages for good.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use rds_core::proto::{AcceptError, DropReason, Frame, Received, Stack, TransportKind};
use rds_core::time::Instant;
use rds_core::tunables::Tunables;
use rds_core::wire::{ExtHeader, HeaderRepr, PROBE_PORT};

const US: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 3));
const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2));

fn data(seq: u64, sport: u16, dport: u16, payload: &'static [u8]) -> Frame {
    Frame {
        hdr: HeaderRepr::data(seq, sport, dport, payload.len() as u32),
        payload: Bytes::from_static(payload),
        held: payload.len(),
    }
}

fn received(st: &mut Stack, sock: rds_core::proto::SockId) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    while let Ok(Received::Data { msg, .. }) = st.recv(sock, 1 << 20, false) {
        v.push(msg.payload.to_vec());
    }
    v
}

#[test]
fn accepted_lane_waits_for_the_drain_of_its_slot() {
    let mut now = Instant::from_nanos(1_000_000);
    let mut st = Stack::new(Tunables::default(), 7);
    st.add_local_addr(US, true, false);
    let sock = st.socket();
    st.bind(sock, SocketAddr::new(US, 5000)).unwrap();

    // The peer (smaller address, base kernel) connects lane 0 and probes: NPATHS only.
    let (cid, p0, e0) = st
        .handle_accept(now, US, PEER, TransportKind::Tcp, 40000, Duration::ZERO)
        .unwrap();
    assert_eq!(p0, 0);
    let mut probe = HeaderRepr::data(1, PROBE_PORT, 0, 0);
    probe.push_ext(ExtHeader::Npaths(8)).unwrap();
    st.handle_frame(
        now,
        cid,
        0,
        e0,
        Frame {
            hdr: probe,
            payload: Bytes::new(),
            held: 0,
        },
    )
    .unwrap();
    assert_eq!(st.npaths(cid), 8);
    // Lanes 1..7 from random source ports take the free slots in accept order.
    let mut epochs = vec![e0];
    for i in 1..8u16 {
        let (_, p, e) = st
            .handle_accept(
                now,
                US,
                PEER,
                TransportKind::Tcp,
                50001 + 3 * i,
                Duration::ZERO,
            )
            .unwrap();
        assert_eq!(p, usize::from(i));
        epochs.push(e);
    }
    st.handle_frame(now, cid, 0, e0, data(2, 7000, 5000, b"m1"))
        .unwrap();
    assert_eq!(received(&mut st, sock), vec![b"m1".to_vec()]);

    // We drop every lane (operator restart): each old connection is drained.
    now += Duration::from_millis(1);
    st.restart_conn(now, cid, DropReason::Restart);
    while st.poll_event().is_some() {}

    // The peer's lane 5 (say) closed first and reconnects; lane 0's old connection is still
    // draining, and so is every other slot: the new connection must wait.
    now += Duration::from_millis(1);
    assert_eq!(
        st.handle_accept(now, US, PEER, TransportKind::Tcp, 50911, Duration::ZERO),
        Err(AcceptError::Wait)
    );
    // Frames the peer still sends on the old lane-0 connection are delivered.
    st.handle_frame(now, cid, 0, e0, data(3, 7000, 5000, b"m2"))
        .unwrap();
    assert_eq!(received(&mut st, sock), vec![b"m2".to_vec()]);

    // Lane 5's old connection ends: its slot is free for the waiting connection.
    st.handle_disconnected(now, cid, 5, epochs[5]);
    let (_, p, _) = st
        .handle_accept(
            now,
            US,
            PEER,
            TransportKind::Tcp,
            50911,
            Duration::from_millis(2),
        )
        .unwrap();
    assert_eq!(p, 5);
    // Lane 0 keeps draining undisturbed.
    st.handle_frame(now, cid, 0, e0, data(4, 7000, 5000, b"m3"))
        .unwrap();
    assert_eq!(received(&mut st, sock), vec![b"m3".to_vec()]);
}
