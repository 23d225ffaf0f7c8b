//! The multipath handshake: probe pings, the peer's pong and lane count, generation numbers.

use bytes::Bytes;

use crate::stats::Counter;
use crate::time::Instant;
use crate::wire::{ExtHeader, HeaderRepr, MPATH_WORKERS, PROBE_PORT};

use crate::proto::budget::NODE;
use crate::proto::conn::{CarriedRx, OutMsg};
use crate::proto::ConnId;

use super::{Stack, MSG_COST};

impl Stack {
    pub(super) fn queue_probe_ping(&mut self, cid: ConnId) {
        self.conns[cid.0 as usize].ping_triggered = true;
        self.queue_probe_on(cid, 0);
    }

    /// A TCP connection we opened on `path` to a peer without SPORT_IDX carries a probe among
    /// its first frames, so that the peer answers on it and shows it took the connection
    /// ([`super::ADOPT_GRACE`]): the handshake's own probe on lane 0, this one on the others
    /// (and on lane 0 when its probe is already answered). It carries the handshake's
    /// extensions, which a peer processes the same way again; the handshake itself is lane
    /// 0's (see `recv_message`).
    pub(super) fn queue_adopt_probe(&mut self, cid: ConnId, path: usize) {
        let q = &self.conns[cid.0 as usize].paths[path].send_q;
        // A probe resent from an earlier connection may be dropped as a duplicate, unanswered.
        if !q.iter().any(|m| m.hdr.is_probe_ping() && !m.retransmitted) {
            self.queue_probe_on(cid, path);
        }
    }

    fn queue_probe_on(&mut self, cid: ConnId, path: usize) {
        let id = self.take_msg_id();
        let ci = cid.0 as usize;
        let mut hdr = HeaderRepr::data(0, PROBE_PORT, 0, 0);
        self.add_probe_exts(&mut hdr);
        let c = &mut self.conns[ci];
        let msg = OutMsg {
            id,
            hdr,
            payload: Bytes::new(),
            sock: None,
            seq: 0,
            retransmitted: false,
            ack_required: false,
            ack_off: 0,
            first_tx: None,
            rdma: None,
            pong: false,
            owner: NODE,
            sock_freed: false,
        };
        // Ahead of fresh messages, behind the ones being retransmitted (they carry older
        // sequence numbers, which must reach the wire first).
        let q = &mut c.paths[path].send_q;
        let at = q.iter().position(|m| m.seq == 0).unwrap_or(q.len());
        q.insert(at, msg);
        // The probe is part of the connection's own upkeep: charged, never refused.
        self.mem_charge(MSG_COST);
        self.stats.inc(Counter::SendQueued);
        self.stats.inc(Counter::SendPong);
    }

    pub(super) fn add_probe_exts(&self, hdr: &mut HeaderRepr) {
        for e in [
            ExtHeader::Npaths(u16::from(self.lanes_offered())),
            ExtHeader::GenNum(self.gen_num),
            ExtHeader::SportIdx(0),
        ] {
            hdr.push_ext(e).expect("probe extensions fit in 16 bytes");
        }
    }

    /// The lanes we offer in our handshake (`net.rds.mprds_paths`, 1..=8).
    pub(super) fn lanes_offered(&self) -> u8 {
        self.tun.mprds_paths.clamp(1, MPATH_WORKERS as u8)
    }

    pub(super) fn start_mprds(&mut self, cid: ConnId) {
        let c = &self.conns[cid.0 as usize];
        if c.kind.multipath() && c.npaths > 1 && c.is_smaller() {
            for i in 0..c.npaths {
                self.connect_if_down(cid, i);
            }
        }
    }

    pub(super) fn set_npaths(&mut self, _now: Instant, cid: ConnId, n: usize) {
        let next_id = self.next_msg_id;
        let c = &mut self.conns[cid.0 as usize];
        let old = c.npaths;
        if old == n {
            return;
        }
        c.npaths = n;
        if old >= 1 && n > old {
            // Fan-out after traffic used fewer lanes: keep each socket's order by holding the
            // new lanes until lane 0 flushed what was queued before (the kernel's catch-up).
            c.catchup_id = Some(next_id);
        }
        for lane in n..c.paths.len() {
            self.rehome_lane(cid, lane);
        }
        for lane in 0..n {
            let c = &self.conns[cid.0 as usize];
            if !c.paths[lane].send_q.is_empty() {
                if c.paths[lane].is_up() {
                    self.want_transmit(cid, lane);
                } else {
                    self.want_connect(cid, lane);
                }
            }
        }
    }

    /// `rds_conn_peer_gen_update`: the peer restarted if its generation number changed. Its
    /// sequence numbers start again, so `next_rx_seq` restarts at 0 on every path, and messages
    /// sent to the old peer are dropped instead of resent. `via` is the path whose frame
    /// announced the new generation.
    ///
    /// Departures from the kernel: our `next_tx_seq` keeps counting up instead of restarting
    /// at 1 (the restarted peer accepts any number, and restarting can make it drop fresh
    /// messages as old ones after the next reconnect); only messages first transmitted before
    /// the current lane-0 connection came up are dropped, not ones the new peer already got.
    ///
    /// # Late frames of the old peer
    /// The new generation arrives on lane 0 (the probe). The other lanes may still hold
    /// connections of the old incarnation: up, being drained, or accepted and held unread
    /// (links rule 1) while the lane was busy. Their last bytes, retransmissions of messages
    /// we already delivered say, may still be on their way or unread. The kernel resets
    /// `cp_next_rx_seq` on every path at once and keeps reading such a socket (or accepts a
    /// stashed one later), so a late frame passes its duplicate check (`h_sequence <
    /// cp_next_rx_seq` and RETRANSMITTED) against 0 and is delivered a second time; the window
    /// is open until the old connections are gone. We close it: each lane keeps the old
    /// incarnation's receive sequence ([`CarriedRx`]), and the frames of a connection that
    /// came before the change are checked against it: the one up or draining at the change
    /// (by its epoch), then a held connection accepted before the change and adopted after
    /// it ([`Stack::carry_rx`]). A retransmission of something the old incarnation already
    /// delivered is dropped (`recv_drop_old_seq`), as it would have been without the
    /// restart; what it had not delivered still is, as the kernel does. `via`'s connection,
    /// and every connection accepted or connected after the change, are checked against the
    /// lane's restarted sequence.
    ///
    /// A connection can also be the new peer's although it came up before we learnt the
    /// generation (our lane connect in flight while the peer restarted, which it adopted
    /// after our probe). Its frames are first transmissions, never marked RETRANSMITTED (a
    /// resend needs a later connection of the lane, which comes only after the new
    /// generation's pong), so the carried check lets them all through. Accepted frames move
    /// the lane's `next_rx_seq` as the kernel's do, whichever sequence checked them.
    pub(super) fn peer_gen_update(&mut self, cid: ConnId, via: usize, gen: u32) {
        if gen == 0 {
            return;
        }
        let ci = cid.0 as usize;
        let c = &mut self.conns[ci];
        let old = c.peer_gen;
        if c.retired_gens.contains(&gen) {
            return;
        }
        c.peer_gen = gen;
        if old == 0 || old == gen {
            return;
        }
        if c.retired_gens.len() >= 8 {
            c.retired_gens.remove(0);
        }
        c.retired_gens.push(old);
        let cutoff = c.paths[0].up_since;
        let stale = |m: &OutMsg| match (m.first_tx, cutoff) {
            (Some(t), Some(cut)) => t < cut,
            (Some(_), None) => true,
            (None, _) => false,
        };
        for pi in 0..c.paths.len() {
            let p = &mut self.conns[ci].paths[pi];
            let live = if p.is_up() {
                Some(p.epoch)
            } else {
                p.drain_epoch
            };
            p.carried_rx = match p.carried_rx {
                _ if pi == via => None,
                // Still a connection carried over from an earlier restart: its own sequence.
                Some(c) if live.is_some() && c.epoch == live => Some(c),
                _ => Some(CarriedRx {
                    epoch: live,
                    next_rx_seq: p.next_rx_seq,
                }),
            };
            p.next_rx_seq = 0;
            self.drop_queued(ci, pi, Counter::SendDropPeerRestart, stale);
        }
    }

    /// A connection accepted before the peer's generation changed took `path` after it, with
    /// `epoch`: its frames are checked against the previous incarnation's sequence (see
    /// [`Stack::peer_gen_update`]).
    pub(super) fn carry_rx(&mut self, cid: ConnId, path: usize, epoch: u32) {
        if let Some(c) = self.conns[cid.0 as usize].paths[path].carried_rx.as_mut() {
            c.epoch = Some(epoch);
        }
    }

    /// `rds_recv_hs_exthdrs` + `rds_start_mprds`.
    ///
    /// Departure from the kernel: the smaller side connects the other lanes only when the
    /// pong to its own probe arrives (`pong = true`), not on the peer's probe ping. At that
    /// point the peer has processed our probe and knows the number of lanes, so it accepts
    /// them; on the peer's ping it may not yet, and would refuse them (a reset and a retry
    /// per lane).
    pub(super) fn process_handshake(
        &mut self,
        now: Instant,
        cid: ConnId,
        path: usize,
        hdr: &HeaderRepr,
        pong: bool,
    ) {
        let mut npaths = None;
        let mut gen = 0;
        let mut sport_idx = false;
        for e in hdr.exts() {
            match e {
                ExtHeader::Npaths(n) => npaths = Some(usize::from(n).min(MPATH_WORKERS)),
                ExtHeader::GenNum(g) => gen = g,
                ExtHeader::SportIdx(_) => sport_idx = true,
                _ => {}
            }
        }
        let ours = usize::from(self.lanes_offered());
        let c = &mut self.conns[cid.0 as usize];
        let n = npaths.unwrap_or(c.npaths).clamp(1, ours);
        c.ping_triggered = false;
        c.hs_deadline = None;
        if sport_idx {
            c.with_sport_idx = true;
        }
        self.peer_gen_update(cid, path, gen);
        if pong {
            self.conns[cid.0 as usize].fanout_ok = true;
        }
        self.set_npaths(now, cid, n);
        if pong {
            self.start_mprds(cid);
        }
    }
}
