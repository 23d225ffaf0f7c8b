//! Transmit: the next frame of a path (messages, congestion map, IB fragments and ACK-only
//! frames) and what the transport reports back about it (TCP bytes acknowledged, IB ACK sent).

use bytes::Bytes;

use crate::proto::rdma_op::RdmaRef;
use crate::stats::Counter;
use crate::time::Instant;
use crate::wire::{flags, HeaderRepr, CONG_MAP_BYTES, FRAG_SIZE};

use crate::proto::conn::TxCur;
use crate::proto::{ConnId, Event, FrameKind, Transmit, TransportKind};

use super::Stack;

impl Stack {
    /// The next frame to put on the path's wire, in order. `None` when there is nothing (the
    /// path is not up, empty, or held back).
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, conn: ConnId, path: usize) -> Option<Transmit> {
        if !self.path_exists(conn, path) {
            return None;
        }
        let ci = conn.0 as usize;
        let t = self.next_transmit(now, ci, path);
        if t.is_none() {
            self.conns[ci].paths[path].tx_pending = false;
        }
        t
    }

    /// TCP: the peer acknowledged `acked` bytes of the path's current connection (counted from
    /// its first byte). Messages whose last byte is acknowledged leave the retransmit queue.
    ///
    /// Departure from the kernel: on a connection we opened to a peer that has not shown
    /// SPORT_IDX (a base kernel, or any peer before its handshake), not before the peer has
    /// shown that its RDS took the connection (a frame from it on the connection, or
    /// [`super::ADOPT_GRACE`] without a reset); the socket gets its send-buffer space back at
    /// the acknowledgement all the same. The kernel's sender frees a message as soon as
    /// the peer's TCP acknowledged it, and loses it when the accepting kernel then resets the
    /// connection unread (`rds_tcp_accept_one` finding its path not DOWN); here it is resent
    /// on the next connection, where the peer's duplicate check (`h_sequence <
    /// cp_next_rx_seq` and RETRANSMITTED) lets it through exactly once.
    pub fn handle_tx_acked(
        &mut self,
        _now: Instant,
        conn: ConnId,
        path: usize,
        epoch: u32,
        acked: u64,
    ) {
        if !self.path_exists(conn, path) {
            return;
        }
        let ci = conn.0 as usize;
        let p = &mut self.conns[ci].paths[path];
        if p.epoch != epoch || !p.is_up() || acked <= p.acked_off {
            return;
        }
        p.acked_off = acked.min(p.tx_off);
        if p.adopt_by.is_none() {
            self.release_acked(ci, path);
        } else {
            self.free_acked_sock_bytes(ci, path);
        }
    }

    /// On a connection the peer has not answered on yet: what its TCP acknowledged stays
    /// queued for a resend, but leaves its socket's send buffer, as it would on the kernel (a
    /// sender is held back by TCP's window, not by messages the peer's TCP holds).
    fn free_acked_sock_bytes(&mut self, ci: usize, path: usize) {
        let acked = self.conns[ci].paths[path].acked_off;
        let mut i = 0;
        loop {
            let p = &mut self.conns[ci].paths[path];
            let Some(m) = p.retrans.get_mut(i) else { break };
            if m.ack_off > acked {
                break;
            }
            i += 1;
            if std::mem::replace(&mut m.sock_freed, true) {
                continue;
            }
            let (sock, len) = (m.sock, m.payload.len());
            self.release_sock(sock, len);
        }
    }

    /// The peer took the connection we opened on `path` (it sent on it, or the grace time
    /// passed): what it acknowledged so far leaves the retransmit queue, and the connect
    /// succeeded (its reconnect backoff ends, as `rds_connect_path_complete` ends the
    /// kernel's).
    pub(super) fn adopted(&mut self, ci: usize, path: usize) {
        let p = &mut self.conns[ci].paths[path];
        if p.adopt_by.take().is_some() && p.is_up() {
            p.reconnect_delay = core::time::Duration::ZERO;
            self.release_acked(ci, path);
        }
    }

    fn release_acked(&mut self, ci: usize, path: usize) {
        loop {
            let p = &mut self.conns[ci].paths[path];
            if p.retrans.front().is_none_or(|m| m.ack_off > p.acked_off) {
                break;
            }
            let m = p.retrans.pop_front().expect("front");
            self.stats.inc(Counter::SendDropAcked);
            self.release(ci, &m);
        }
    }

    /// IB: the ACK-only frame in flight completed; another may be sent.
    pub fn handle_ack_sent(&mut self, conn: ConnId, path: usize, epoch: u32) {
        if !self.path_exists(conn, path) {
            return;
        }
        let p = &mut self.conns[conn.0 as usize].paths[path];
        if p.epoch != epoch {
            return;
        }
        p.ack_in_flight = false;
        if p.ack_requested && p.is_up() {
            self.want_transmit(conn, path);
        }
    }

    pub(super) fn want_transmit(&mut self, cid: ConnId, path: usize) {
        let p = &mut self.conns[cid.0 as usize].paths[path];
        if !p.tx_pending && p.is_up() {
            p.tx_pending = true;
            self.events.push_back(Event::Transmit { conn: cid, path });
        }
    }

    pub(super) fn next_transmit(
        &mut self,
        now: Instant,
        ci: usize,
        path: usize,
    ) -> Option<Transmit> {
        let kind = self.conns[ci].kind;
        if !self.conns[ci].paths[path].is_up() || kind == TransportKind::Loopback {
            return None;
        }
        if kind == TransportKind::Ib {
            if let Some(t) = self.next_fragment(ci, path) {
                return Some(t);
            }
        }
        let c = &mut self.conns[ci];
        if c.map_queued && c.map_lane() == Some(path) {
            c.map_queued = false;
            let laddr = c.laddr;
            let map = self
                .locals
                .get(&laddr)
                .map(|l| Bytes::from(l.cong.to_bytes()))
                .unwrap_or_else(|| Bytes::from(vec![0u8; CONG_MAP_BYTES]));
            let mut hdr = HeaderRepr::cong_map();
            self.stats.inc(Counter::CongUpdateQueued);
            return Some(self.frame_out(ci, path, &mut hdr, map, true));
        }
        if path > 0 && self.held_for_catchup(ci) {
            self.stats.inc(Counter::MprdsCatchupTx0Retries);
            return self.ack_only(ci, path);
        }
        let c = &mut self.conns[ci];
        let tun_p = self.tun.max_unacked_packets;
        let tun_b = self.tun.max_unacked_bytes;
        let p = &mut c.paths[path];
        let Some(mut m) = p.send_q.pop_front() else {
            return self.ack_only(ci, path);
        };
        if m.seq == 0 {
            m.seq = p.next_tx_seq;
            p.next_tx_seq += 1;
            m.first_tx = Some(now);
        }
        // Require an ACK every so many packets or bytes (`rds_send_xmit`).
        let len = u64::from(m.hdr.len);
        if p.unacked_packets == 0 || p.unacked_bytes < len {
            m.ack_required = true;
            p.unacked_packets = tun_p;
            p.unacked_bytes = tun_b;
            self.stats.inc(Counter::SendAckRequired);
        } else {
            p.unacked_bytes -= len;
            p.unacked_packets -= 1;
        }
        let mut hdr = m.hdr;
        hdr.seq = m.seq;
        hdr.flags = 0;
        if m.retransmitted {
            hdr.flags |= flags::RETRANSMITTED;
        }
        if kind == TransportKind::Ib && m.ack_required {
            hdr.flags |= flags::ACK_REQUIRED;
        }
        let payload = m.payload.clone();
        let mut t = self.frame_out(ci, path, &mut hdr, payload, false);
        t.rdma = m.rdma.clone().map(RdmaRef);
        let p = &mut self.conns[ci].paths[path];
        m.ack_off = p.tx_off;
        p.retrans.push_back(m);
        Some(t)
    }

    /// Emits a whole message (TCP) or starts fragmenting it (IB).
    pub(super) fn frame_out(
        &mut self,
        ci: usize,
        path: usize,
        hdr: &mut HeaderRepr,
        payload: Bytes,
        cong_map: bool,
    ) -> Transmit {
        let kind = self.conns[ci].kind;
        let p = &mut self.conns[ci].paths[path];
        if kind == TransportKind::Ib {
            hdr.ack = p.ack_next;
            if p.ack_requested {
                p.ack_requested = false;
            }
            let mut bytes = [0u8; 48];
            hdr.emit_checksummed(&mut bytes);
            p.tx_cur = Some(TxCur {
                hdr: bytes,
                payload,
                next_off: 0,
                cong_map,
            });
            return self.next_fragment(ci, path).expect("just started");
        }
        p.tx_off += (crate::wire::HEADER_LEN + payload.len()) as u64;
        Transmit {
            hdr: hdr.to_bytes(),
            payload,
            kind: if cong_map {
                FrameKind::CongMap
            } else {
                FrameKind::Data
            },
            solicited: false,
            rdma: None,
        }
    }

    pub(super) fn next_fragment(&mut self, ci: usize, path: usize) -> Option<Transmit> {
        let p = &mut self.conns[ci].paths[path];
        let cur = p.tx_cur.as_mut()?;
        let off = cur.next_off;
        let len = (cur.payload.len() - off).min(FRAG_SIZE);
        let last = off + len >= cur.payload.len();
        let t = Transmit {
            hdr: cur.hdr,
            payload: cur.payload.slice(off..off + len),
            kind: if cur.cong_map {
                FrameKind::CongMap
            } else {
                FrameKind::Data
            },
            solicited: last,
            rdma: None,
        };
        cur.next_off = off + len;
        if last {
            p.tx_cur = None;
        }
        Some(t)
    }

    /// IB: an ACK-only frame when one is requested and none is in flight.
    pub(super) fn ack_only(&mut self, ci: usize, path: usize) -> Option<Transmit> {
        if self.conns[ci].kind != TransportKind::Ib {
            return None;
        }
        let p = &mut self.conns[ci].paths[path];
        if !p.ack_requested || p.ack_in_flight {
            return None;
        }
        p.ack_requested = false;
        p.ack_in_flight = true;
        let mut hdr = [0u8; 48];
        HeaderRepr::ack_only(p.ack_next).emit_checksummed(&mut hdr);
        Some(Transmit {
            hdr,
            payload: Bytes::new(),
            kind: FrameKind::AckOnly,
            solicited: true,
            rdma: None,
        })
    }

    pub(super) fn held_for_catchup(&mut self, ci: usize) -> bool {
        let c = &mut self.conns[ci];
        let Some(mark) = c.catchup_id else {
            return false;
        };
        let p0 = &c.paths[0];
        let pending = p0
            .send_q
            .iter()
            .chain(p0.retrans.iter())
            .any(|m| m.id < mark);
        if !pending {
            c.catchup_id = None;
        }
        pending
    }
}
