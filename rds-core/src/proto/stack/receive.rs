//! Receive: frames and IB fragments in, sequence checks, delivery to sockets, pongs, loopback.

use std::collections::VecDeque;
use std::net::SocketAddr;

use bytes::Bytes;

use crate::stats::Counter;
use crate::time::Instant;
use crate::wire::{flags, CongMap, ExtHeader, HeaderRepr, PROBE_PORT};

use crate::info::PathState;
use crate::message::InMsg;
use crate::proto::budget::NODE;
use crate::proto::conn::OutMsg;
use crate::proto::stream::{Frame, StreamError};
use crate::proto::{ConnId, DropReason, Event, TransportKind};

use super::{Stack, MSG_COST, PONG_QUEUE_MAX};

impl Stack {
    /// Drops the pongs queued on one path (its connection will not come back for them).
    pub(super) fn drop_pongs(&mut self, ci: usize, path: usize) {
        self.drop_queued(ci, path, Counter::SendPongDropDown, |m| m.pong);
    }

    /// Takes the messages `drop` picks out of a path's queues (the others keep their order)
    /// and releases them, counting each in `counter`.
    pub(super) fn drop_queued(
        &mut self,
        ci: usize,
        path: usize,
        counter: Counter,
        drop: impl Fn(&OutMsg) -> bool,
    ) {
        let p = &mut self.conns[ci].paths[path];
        if !p.send_q.iter().chain(p.retrans.iter()).any(&drop) {
            return;
        }
        let mut dropped = Vec::new();
        for q in [&mut p.send_q, &mut p.retrans] {
            let mut keep = VecDeque::with_capacity(q.len());
            for m in q.drain(..) {
                if drop(&m) {
                    dropped.push(m);
                } else {
                    keep.push_back(m);
                }
            }
            *q = keep;
        }
        for m in dropped {
            self.stats.inc(counter);
            self.release(ci, &m);
        }
    }

    /// Drops the connection's pongs once nothing will bring it back on our side (no path
    /// up, connecting, draining or waiting to reconnect): they would wait forever.
    pub(super) fn drop_pongs_if_gone(&mut self, ci: usize) {
        let gone = self.conns[ci].paths.iter().all(|p| {
            p.state == PathState::Down && p.reconnect_at.is_none() && p.drain_epoch.is_none()
        });
        if gone {
            self.drop_pongs_all(ci);
        }
    }

    pub(super) fn drop_pongs_all(&mut self, ci: usize) {
        for pi in 0..self.conns[ci].paths.len() {
            self.drop_pongs(ci, pi);
        }
    }

    /// Ends a path's reassembly, returning its budget.
    pub(super) fn frag_reset(&mut self, ci: usize, path: usize) {
        let p = &mut self.conns[ci].paths[path];
        p.frag.reset();
        p.frag_discard = false;
        let charge = std::mem::take(&mut p.frag_charge);
        self.reasm_release(ci, charge);
    }

    /// Charges `bytes` of reassembly on connection `ci` to the node budget and its peer's
    /// share ([`super::REASM_PER_PEER`]); false (nothing charged) when either is full.
    pub(super) fn reasm_charge(&mut self, ci: usize, bytes: usize) -> bool {
        let faddr = self.conns[ci].faddr;
        let peer = self.reasm_by_peer.get(&faddr).copied().unwrap_or(0);
        if !self.mem_fits(bytes) || peer.saturating_add(bytes) > super::REASM_PER_PEER {
            return false;
        }
        self.mem_charge(bytes);
        if bytes > 0 {
            self.reasm_by_peer.insert(faddr, peer + bytes);
        }
        true
    }

    /// Gives back `bytes` of reassembly charged on connection `ci`.
    pub(super) fn reasm_release(&mut self, ci: usize, bytes: usize) {
        self.mem_release(bytes);
        let faddr = self.conns[ci].faddr;
        if let Some(n) = self.reasm_by_peer.get_mut(&faddr) {
            *n = n.saturating_sub(bytes);
            if *n == 0 {
                self.reasm_by_peer.remove(&faddr);
            }
        }
    }

    /// Bytes of reassembly the node could hold in all now: what it holds plus the budget's
    /// free room (the TCP transport stops reading a connection whose message in progress
    /// would pass it, and reports [`Stack::tcp_reassembly_refused`]).
    pub fn reasm_room(&self) -> usize {
        let held: usize = self.reasm_by_peer.values().sum();
        self.mem_budget()
            .saturating_sub(self.mem_used())
            .saturating_add(held)
    }

    /// TCP: the transport could not hold the message in progress on a connection (the budget
    /// is full) and closed it (its disconnect follows): count the drop (`recv_drop_no_mem`).
    pub fn tcp_reassembly_refused(&mut self) {
        self.stats.inc(Counter::RecvDropNoMem);
    }

    /// TCP: the message in progress on the path's current connection (`epoch`) now holds
    /// `held` bytes in the transport's parser (charged as it fills; 0 between messages).
    /// Returns false when that does not fit the node budget or the peer's share of
    /// reassembly: the path was reset ([`DropReason::Memory`], `recv_drop_no_mem` counted)
    /// and the transport drops the connection.
    pub fn tcp_reassembly(
        &mut self,
        now: Instant,
        conn: ConnId,
        path: usize,
        epoch: u32,
        held: usize,
    ) -> bool {
        if !self.path_exists(conn, path) {
            return true;
        }
        let ci = conn.0 as usize;
        let p = &self.conns[ci].paths[path];
        if p.epoch != epoch || !p.is_up() {
            // A connection the path no longer counts (draining, or about to be closed).
            return true;
        }
        let old = p.frag_charge;
        if held > old {
            if !self.reasm_charge(ci, held - old) {
                self.stats.inc(Counter::RecvDropNoMem);
                self.reset_path(now, conn, path, Some(DropReason::Memory));
                return false;
            }
        } else {
            self.reasm_release(ci, old - held);
        }
        self.conns[ci].paths[path].frag_charge = held;
        true
    }

    /// A complete message arrived on a path (TCP: from a [`crate::proto::StreamParser`]).
    ///
    /// # Errors
    /// The frame breaks the protocol: the engine reset the path and queued
    /// [`Event::Disconnect`].
    pub fn handle_frame(
        &mut self,
        now: Instant,
        conn: ConnId,
        path: usize,
        epoch: u32,
        frame: Frame,
    ) -> Result<(), DropReason> {
        if !self.path_exists(conn, path) {
            return Ok(());
        }
        let p = &self.conns[conn.0 as usize].paths[path];
        let draining = p.drain_epoch == Some(epoch);
        if !draining && (p.epoch != epoch || !p.is_up()) {
            return Ok(());
        }
        if !draining && p.adopt_by.is_some() {
            self.adopted(conn.0 as usize, path);
        }
        self.recv_message(now, conn, path, epoch, frame)
            .inspect_err(|&r| {
                if draining {
                    self.conns[conn.0 as usize].paths[path].drain_epoch = None;
                    self.events.push_back(Event::Disconnect {
                        conn,
                        path,
                        epoch,
                        reason: r,
                    });
                    self.queue_reconnect(now, conn, path);
                } else {
                    self.reset_path(now, conn, path, Some(r));
                }
            })
    }

    /// The path's byte stream could not be parsed: count it and drop the path.
    pub fn handle_stream_error(
        &mut self,
        now: Instant,
        conn: ConnId,
        path: usize,
        epoch: u32,
        err: StreamError,
    ) {
        if !self.path_exists(conn, path) {
            return;
        }
        let p = &self.conns[conn.0 as usize].paths[path];
        if p.epoch != epoch || !p.is_up() {
            return;
        }
        self.stats.inc(match err {
            StreamError::TooLong { .. } => Counter::ConnDropOversize,
            StreamError::Poisoned => Counter::ConnDropBadFrame,
        });
        self.reset_path(now, conn, path, Some(DropReason::Protocol));
    }

    /// IB: one received SEND (header + up to 4096 payload bytes).
    ///
    /// # Errors
    /// A bad checksum, a short or mismatching fragment: the path was reset and
    /// [`Event::Disconnect`] queued.
    pub fn handle_fragment(
        &mut self,
        now: Instant,
        conn: ConnId,
        path: usize,
        epoch: u32,
        frame: &[u8],
    ) -> Result<(), DropReason> {
        if !self.path_exists(conn, path) {
            return Ok(());
        }
        let ci = conn.0 as usize;
        let p = &mut self.conns[ci].paths[path];
        if p.epoch != epoch || !p.is_up() {
            return Ok(());
        }
        let info = match p.frag.push(frame) {
            Ok(i) => i,
            Err(e) => {
                let (c, r) = match e {
                    crate::proto::FragError::BadChecksum => {
                        (Counter::RecvDropBadChecksum, DropReason::BadChecksum)
                    }
                    crate::proto::FragError::TooLong(_) => {
                        (Counter::ConnDropOversize, DropReason::Protocol)
                    }
                    _ => (Counter::ConnDropBadFrame, DropReason::Protocol),
                };
                self.stats.inc(c);
                self.reset_path(now, conn, path, Some(r));
                return Err(r);
            }
        };
        if info.ack > p.ack_recv {
            p.ack_recv = info.ack;
            let mut done = Vec::new();
            while p
                .retrans
                .front()
                .is_some_and(|m| m.seq <= info.ack && m.seq != 0)
            {
                done.push(p.retrans.pop_front().expect("front"));
            }
            for m in done {
                self.stats.inc(Counter::SendDropAcked);
                self.release(ci, &m);
            }
        }
        // Reassembly draws from the node budget from its first fragment to its last; a
        // message that does not fit is received without being stored, then dropped.
        let p = &mut self.conns[ci].paths[path];
        if p.frag.in_message() && p.frag_charge == 0 && !p.frag_discard {
            let want = p.frag.pending_len().unwrap_or(0) as usize;
            if self.reasm_charge(ci, want) {
                self.conns[ci].paths[path].frag_charge = want;
            } else {
                let p = &mut self.conns[ci].paths[path];
                p.frag.discard();
                p.frag_discard = true;
            }
        }
        if info.complete.is_some() {
            let p = &mut self.conns[ci].paths[path];
            p.frag_discard = false;
            let charge = std::mem::take(&mut p.frag_charge);
            self.reasm_release(ci, charge);
        }
        match info.complete {
            Some(f) if info.discarded => {
                self.consume_discarded(conn, path, &f.hdr);
                Ok(())
            }
            Some(f) => self
                .recv_message(now, conn, path, epoch, f)
                .inspect_err(|&r| self.reset_path(now, conn, path, Some(r))),
            None => Ok(()),
        }
    }

    /// IB: a message received but not stored for lack of budget: acknowledged and counted
    /// as dropped, its sequence number consumed.
    pub(super) fn consume_discarded(&mut self, cid: ConnId, path: usize, hdr: &HeaderRepr) {
        self.stats.inc(Counter::RecvDropNoMem);
        let p = &mut self.conns[cid.0 as usize].paths[path];
        p.ack_next = hdr.seq;
        if hdr.seq >= p.next_rx_seq {
            p.next_rx_seq = hdr.seq.wrapping_add(1);
        }
        if hdr.has_flag(flags::ACK_REQUIRED) {
            p.ack_requested = true;
            self.stats.inc(Counter::RecvAckRequired);
            self.want_transmit(cid, path);
        }
    }

    /// A complete message read from `path`'s connection with `epoch`: the sequence check,
    /// then pings, the handshake, congestion maps or the bound socket's receive queue.
    pub(super) fn recv_message(
        &mut self,
        now: Instant,
        cid: ConnId,
        path: usize,
        epoch: u32,
        frame: Frame,
    ) -> Result<(), DropReason> {
        let Frame { hdr, payload, held } = frame;
        let ci = cid.0 as usize;
        let kind = self.conns[ci].kind;
        if hdr.is_cong_map() {
            if kind == TransportKind::Loopback {
                return Ok(());
            }
            let Ok(map) = CongMap::from_bytes(&payload) else {
                self.stats.inc(Counter::ConnDropBadCongMap);
                return Err(DropReason::Protocol);
            };
            let mask = self.conns[ci].fcong.update_from(&map);
            self.stats.inc(Counter::CongUpdateReceived);
            self.cong_map_updated(mask);
            // Departure from the kernel: newly congested ports of a kernel peer also need
            // no action here; senders test the map when they send.
            return Ok(());
        }
        if payload.len() != hdr.len as usize {
            self.stats.inc(Counter::ConnDropBadFrame);
            return Err(DropReason::Protocol);
        }
        let ping_enable = self.tun.ping_enable;
        let p = &mut self.conns[ci].paths[path];
        if kind == TransportKind::Ib {
            p.ack_next = hdr.seq;
            if hdr.has_flag(flags::ACK_REQUIRED) {
                p.ack_requested = true;
                self.stats.inc(Counter::RecvAckRequired);
                self.want_transmit(cid, path);
            }
        }
        if kind.multipath() && hdr.is_hs_probe() && path == 0 {
            // A probe from a restarted peer may come again as a retransmission whose sequence
            // number looks old to us. Learn the new generation first (which restarts our
            // `next_rx_seq`), or the probe and everything the new peer retransmits would be
            // dropped as duplicates. (The kernel checks duplicates first.)
            let gen = hdr.exts().find_map(|e| match e {
                ExtHeader::GenNum(g) => Some(g),
                _ => None,
            });
            let known = self.conns[ci].peer_gen;
            if let Some(g) = gen.filter(|&g| g != 0 && known != 0 && g != known) {
                if self.conns[ci].retired_gens.contains(&g) {
                    // From an incarnation of the peer that has already been replaced: this
                    // connection is stale. Drop it rather than go back to the old generation.
                    self.stats.inc(Counter::ConnDropBadFrame);
                    return Err(DropReason::Replaced);
                }
                self.peer_gen_update(cid, path, g);
            }
        }
        let p = &mut self.conns[ci].paths[path];
        // A connection of the peer's previous incarnation is checked against that
        // incarnation's sequence (see `peer_gen_update`), every other one against the path's.
        let carried = p.carried_rx.as_mut().filter(|c| c.epoch == Some(epoch));
        let next_rx_seq = carried.as_ref().map_or(p.next_rx_seq, |c| c.next_rx_seq);
        if hdr.seq < next_rx_seq && hdr.has_flag(flags::RETRANSMITTED) {
            self.stats.inc(Counter::RecvDropOldSeq);
            return Ok(());
        }
        // `h_sequence` comes from the peer: u64 arithmetic wraps, as in the kernel.
        if let Some(c) = carried {
            c.next_rx_seq = hdr.seq.wrapping_add(1);
        }
        p.next_rx_seq = hdr.seq.wrapping_add(1);

        if ping_enable && hdr.dport == 0 {
            if hdr.sport == 0 {
                return Ok(());
            }
            self.stats.inc(Counter::RecvPing);
            self.send_pong(now, cid, path, hdr.sport);
            // The handshake is lane 0's; a probe on another lane asks only for its pong
            // (`queue_adopt_probe`).
            if hdr.is_probe_ping() && kind.multipath() && path == 0 {
                self.process_handshake(now, cid, path, &hdr, false);
            }
            return Ok(());
        }
        if hdr.is_probe_pong() {
            if kind.multipath() && path == 0 {
                self.process_handshake(now, cid, path, &hdr, true);
            }
            return Ok(());
        }

        let c = &self.conns[ci];
        let (to_ip, from_ip) = if kind == TransportKind::Loopback {
            (c.faddr, c.laddr)
        } else {
            (c.laddr, c.faddr)
        };
        let Some(&sid) = self.binds.get(&(to_ip, hdr.dport)) else {
            self.stats.inc(Counter::RecvDropNoSock);
            return Ok(());
        };
        // Bounds of what a peer can make us hold: the socket's receive queue cap (only a
        // peer ignoring the congestion map reaches it) and the node budget. The message is
        // consumed either way (acknowledged, never retransmitted), as for an unbound port.
        let len = payload.len();
        let s = self.socks.get(&sid).expect("bound sockets exist");
        if s.rcv_bytes.saturating_add(len) > Self::rcvq_cap(s.rcvbuf) {
            self.stats.inc(Counter::RecvDropRcvqFull);
            return Ok(());
        }
        // What the payload keeps alive, at least its length.
        let held = held.max(len);
        let owner = s.owner;
        if !self.mem_fits_for(owner, held + MSG_COST) {
            self.stats.inc(Counter::RecvDropNoMem);
            return Ok(());
        }
        self.mem_charge_for(owner, held + MSG_COST);
        let c = &mut self.conns[ci];
        c.app_traffic = true;
        c.last_active = now;
        // Multipath with several lanes: the socket remembers the lane for its answers.
        let lanes = kind.multipath() && c.npaths > 1;
        let rdma_dest = hdr.exts().find_map(|e| match e {
            ExtHeader::RdmaDest { rkey, offset } => {
                Some(u64::from(rkey) | (u64::from(offset) << 32))
            }
            _ => None,
        });
        if let Some(rkey) = hdr.exts().find_map(|e| match e {
            ExtHeader::Rdma { rkey } => Some(rkey),
            _ => None,
        }) {
            self.events.push_back(Event::RdmaUnuse { sock: sid, rkey });
        }
        let from = SocketAddr::new(from_ip, hdr.sport);
        let s = self.socks.get_mut(&sid).expect("bound sockets exist");
        if lanes {
            s.reply_lanes.heard(from, path);
        }
        s.rcv_q.push_back(InMsg {
            from,
            payload,
            seq: hdr.seq,
            rx_time: now,
            rdma_dest,
            held,
        });
        self.stats.inc(Counter::RecvQueued);
        self.wakes.insert(sid);
        self.rcvbuf_delta(sid, len as i64);
        Ok(())
    }

    /// `rds_send_pong`: a zero-length message from port 0 to the pinger's port, on the same
    /// path, unless the pinger's port is congested. A probe's pong carries the handshake
    /// extensions.
    pub(super) fn send_pong(&mut self, now: Instant, cid: ConnId, path: usize, to_port: u16) {
        let ci = cid.0 as usize;
        let c = &self.conns[ci];
        // Loopback: the answer travels the reverse connection back to the pinger (the kernel
        // queues it on the same loopback connection, which delivers it to the pinged address
        // instead when the two addresses differ).
        let (cid, path) = if c.kind == TransportKind::Loopback {
            let (l, f) = (c.laddr, c.faddr);
            (
                self.conn_get_or_create(now, f, l, TransportKind::Loopback),
                0,
            )
        } else {
            (cid, path)
        };
        if self.peer_congested(cid, to_port) {
            return;
        }
        // Pongs belong to no socket: a cap per connection and the node budget bound them
        // (a pinger that never reads cannot make us hold more).
        if self.conns[cid.0 as usize].pongs >= PONG_QUEUE_MAX {
            self.stats.inc(Counter::SendPongDropFull);
            return;
        }
        if !self.mem_fits(MSG_COST) {
            self.stats.inc(Counter::RecvDropNoMem);
            return;
        }
        let mut hdr = HeaderRepr::pong(0, to_port);
        if to_port == PROBE_PORT && self.conns[cid.0 as usize].kind.multipath() {
            self.add_probe_exts(&mut hdr);
        }
        let msg = OutMsg {
            id: self.take_msg_id(),
            hdr,
            payload: Bytes::new(),
            sock: None,
            seq: 0,
            retransmitted: false,
            ack_required: false,
            ack_off: 0,
            first_tx: None,
            rdma: None,
            pong: true,
            owner: NODE,
            sock_freed: false,
        };
        self.stats.inc(Counter::SendPong);
        self.queue_msg(now, cid, path, msg);
    }

    pub(super) fn run_loopback(&mut self, now: Instant) {
        while let Some(cid) = self.loop_work.pop() {
            let ci = cid.0 as usize;
            while let Some(mut m) = self.conns[ci].paths[0].send_q.pop_front() {
                let p = &mut self.conns[ci].paths[0];
                m.seq = p.next_tx_seq;
                p.next_tx_seq += 1;
                let mut hdr = m.hdr;
                hdr.seq = m.seq;
                // Acked as soon as it is handed to the receiver (`rds_loop_xmit`).
                self.release(ci, &m);
                let held = crate::buf::held_for(m.payload.len());
                let epoch = self.conns[ci].paths[0].epoch;
                let frame = Frame {
                    hdr,
                    payload: m.payload,
                    held,
                };
                let _ = self.recv_message(now, cid, 0, epoch, frame);
            }
        }
    }
}
