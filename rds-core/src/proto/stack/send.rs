//! Sending: a socket's message checked, charged and queued on its lane; cancel, RDMA
//! completion, and releasing messages that leave the queues.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;

use crate::message::{RdmaNotify, RdmaStatus};
use crate::proto::rdma_op::RdmaOp;
use crate::stats::Counter;
use crate::time::Instant;
use crate::wire::{monitor_mask, ExtHeader, HeaderRepr, MAX_MSG_SIZE};

use crate::proto::conn::{Conn, OutMsg};
use crate::proto::reply_lane::{Lanes, Pick};
use crate::proto::{canonical, ConnId, SendError, SendExtras, SockId, TransportKind};

use super::{is_unicast, Stack, CONN_COST, MSG_COST};

impl Stack {
    /// Sends a message (`rds_sendmsg`). `dest = None` uses the connected destination.
    /// Returns the payload length.
    ///
    /// # Errors
    /// See [`SendError`]. A blocking caller waits and retries on
    /// [`SendError::WouldBlock`] (until [`crate::proto::Event::Wake`] for the socket) and on
    /// [`SendError::CongestedWait`] (until [`crate::proto::Event::CongChanged`] and
    /// [`Stack::dest_congested`] is false), passing `retry = true` so that counters are not
    /// counted twice.
    pub fn send(
        &mut self,
        now: Instant,
        sock: SockId,
        dest: Option<SocketAddr>,
        payload: Bytes,
        nonblock: bool,
    ) -> Result<usize, SendError> {
        self.send_ext(now, sock, dest, payload, nonblock, false)
    }

    /// [`Stack::send`] with the retry flag of a blocking caller.
    ///
    /// # Errors
    /// See [`Stack::send`].
    pub fn send_ext(
        &mut self,
        now: Instant,
        sock: SockId,
        dest: Option<SocketAddr>,
        payload: Bytes,
        nonblock: bool,
        retry: bool,
    ) -> Result<usize, SendError> {
        self.send_full(
            now,
            sock,
            dest,
            payload,
            nonblock,
            retry,
            &SendExtras::default(),
        )
    }

    /// [`Stack::send_ext`] with control data: an RDMA operation or an `RDMA_DEST` cookie
    /// (`RDS_CMSG_RDMA_ARGS` / `RDS_CMSG_RDMA_DEST`). Both need the IB transport
    /// (EOPNOTSUPP otherwise, as the kernel's TCP and loopback transports have no RDMA);
    /// they cannot be combined, and an operation needs local memory (EINVAL).
    ///
    /// # Errors
    /// See [`Stack::send`], plus [`SendError::InvalidCtl`] and [`SendError::NotSupported`].
    #[allow(clippy::too_many_arguments)]
    pub fn send_full(
        &mut self,
        now: Instant,
        sock: SockId,
        dest: Option<SocketAddr>,
        payload: Bytes,
        nonblock: bool,
        retry: bool,
        extras: &SendExtras,
    ) -> Result<usize, SendError> {
        let s = self.socks.get(&sock).ok_or(SendError::BadSocket)?;
        let bound = s.bound.ok_or(SendError::NotConn)?;
        let dest = dest.or(s.connected).ok_or(SendError::NotConn)?;
        let dip = canonical(dest.ip());
        if !is_unicast(dip) {
            return Err(SendError::InvalidDest);
        }
        if dip.is_ipv4() != bound.ip().is_ipv4() {
            return Err(SendError::NotSupported);
        }
        let len = payload.len();
        if let Some(op) = &extras.rdma {
            if extras.rdma_dest.is_some() || op.local.is_empty() {
                return Err(SendError::InvalidCtl);
            }
        }
        let rdma_bytes = extras.rdma.as_ref().map_or(0, |op| op.bytes);
        if len > MAX_MSG_SIZE || rdma_bytes > MAX_MSG_SIZE as u64 || len > s.sndbuf {
            return Err(SendError::MsgSize);
        }
        let kind = if self.locals.contains_key(&dip) {
            TransportKind::Loopback
        } else {
            s.transport.unwrap_or(TransportKind::Tcp)
        };
        if (extras.rdma.is_some() || extras.rdma_dest.is_some()) && kind != TransportKind::Ib {
            return Err(SendError::NotSupported);
        }
        let lane_hash = s.lane_hash;
        // The node budget covers the message and, for a new peer, its connection; a send
        // beyond it fails at once, as a kernel send that cannot allocate.
        let conn_cost = if self.find_conn(bound.ip(), dip, kind).is_some() {
            0
        } else {
            CONN_COST
        };
        let owner = s.owner;
        if !self.mem_fits_for(owner, len + MSG_COST) || !self.mem_fits(len + MSG_COST + conn_cost) {
            self.stats.inc(Counter::MemSendError);
            return Err(SendError::NoBufs);
        }
        let cid = self.conn_get_or_create(now, bound.ip(), dip, kind);
        let peer = SocketAddr::new(dip, dest.port());
        let pick = self.pick_lane(sock, cid, lane_hash, peer);
        let lane = pick.lane;
        if kind != TransportKind::Loopback && !self.conns[cid.0 as usize].paths[lane].is_up() {
            // Connect before the congestion check, as `rds_sendmsg` does: a stale map of a
            // peer that restarted is only replaced once a connection brings the new one.
            self.want_connect(cid, lane);
        }
        let dport = dest.port();
        if !extras.past_congestion && self.peer_congested(cid, dport) {
            let s = self.socks.get_mut(&sock).expect("checked");
            if nonblock {
                self.stats.inc(Counter::CongSendError);
                if s.cong_monitor {
                    s.cong_mask |= monitor_mask(dport);
                }
                return Err(SendError::Congested);
            }
            if !retry {
                self.stats.inc(Counter::CongSendBlocked);
            }
            return Err(SendError::CongestedWait);
        }
        let s = self.socks.get_mut(&sock).expect("checked");
        if s.snd_bytes >= s.sndbuf {
            return Err(SendError::WouldBlock);
        }
        s.snd_bytes += len;
        let ack_required = s.snd_bytes >= s.sndbuf / 2;
        s.reply_lanes.sent(peer, pick);
        if pick.binds {
            self.stats.inc(Counter::ReplyLaneBound);
        }
        self.stats.add(Counter::CopyFromUser, len as u64);
        let mut hdr = HeaderRepr::data(0, bound.port(), dport, len as u32);
        // `rds_ib_xmit`: the RDMA key tells the target which region was used (for use-once
        // regions); RDMA_DEST hands it a cookie. Neither can fail on an empty area.
        if let Some(op) = &extras.rdma {
            let _ = hdr.push_ext(ExtHeader::Rdma { rkey: op.rkey });
            // As the kernel counts the initiator's side: a write's bytes are sent, a
            // read's received.
            self.stats.inc(Counter::SendRdma);
            let c = if op.write {
                Counter::SendRdmaBytes
            } else {
                Counter::RecvRdmaBytes
            };
            self.stats.add(c, op.bytes);
        }
        if let Some(c) = extras.rdma_dest {
            let _ = hdr.push_ext(ExtHeader::RdmaDest {
                rkey: c as u32,
                offset: (c >> 32) as u32,
            });
        }
        let msg = OutMsg {
            id: self.take_msg_id(),
            hdr,
            payload,
            sock: Some(sock),
            seq: 0,
            retransmitted: false,
            ack_required,
            ack_off: 0,
            first_tx: None,
            rdma: extras.rdma.clone(),
            pong: false,
            owner,
            sock_freed: false,
        };
        if dport != 0 {
            // Pings (to port 0) are not application traffic.
            self.conns[cid.0 as usize].app_traffic = true;
        }
        self.queue_msg(now, cid, lane, msg);
        Ok(len)
    }

    /// `RDS_CANCEL_SENT_TO`: drops every message of this socket to `dest` from the send and
    /// retransmit queues. Returns how many were dropped.
    pub fn cancel_sent_to(&mut self, sock: SockId, dest: SocketAddr) -> usize {
        let dest = SocketAddr::new(canonical(dest.ip()), dest.port());
        self.drop_msgs(
            |m, faddr| m.sock == Some(sock) && faddr == dest.ip() && m.hdr.dport == dest.port(),
            Some(RdmaStatus::Canceled),
        )
    }

    /// The transport finished (or failed) a message's RDMA operation: queue its notification
    /// if the socket asked for one (`RDS_RDMA_NOTIFY_ME`, or `RDS_RECVERR` for a failure).
    /// An operation is notified at most once.
    pub fn rdma_complete(&mut self, op: &RdmaOp, status: RdmaStatus) {
        let Some(s) = self.socks.get_mut(&op.sock) else {
            return;
        };
        let wanted = op.notify || (status != RdmaStatus::Success && s.recverr);
        if wanted && op.take_notify() {
            s.notify_q.push_back(RdmaNotify {
                user_token: op.user_token,
                status,
            });
            self.wakes.insert(op.sock);
        }
    }

    pub(super) fn take_msg_id(&mut self) -> u64 {
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        id
    }

    /// The lane a socket's port hashes to on connection `c`.
    fn hash_lane(&self, c: &Conn, lane_hash: u32) -> usize {
        if !c.kind.multipath() {
            return 0;
        }
        let n = if c.npaths == 0 {
            usize::from(self.lanes_offered())
        } else {
            c.npaths
        };
        if n <= 1 {
            0
        } else {
            (lane_hash as usize) & (n - 1)
        }
    }

    /// The lane of a socket's message to `peer`: on a multipath connection with more than one
    /// lane, the lane the socket's first message to the peer was bound to, which is the one the
    /// peer was heard on if it was heard before ([`crate::proto::reply_lane`]); else the
    /// socket's hash lane.
    pub(super) fn pick_lane(
        &self,
        sock: SockId,
        cid: ConnId,
        lane_hash: u32,
        peer: SocketAddr,
    ) -> Pick {
        let c = &self.conns[cid.0 as usize];
        let hash = self.hash_lane(c, lane_hash);
        if !c.kind.multipath() || c.npaths <= 1 {
            return Pick::hash(hash);
        }
        let Some(s) = self.socks.get(&sock) else {
            return Pick::hash(hash);
        };
        let lanes = Lanes { n: c.npaths, hash };
        s.reply_lanes
            .pick(peer, lanes, |l| c.paths.get(l).is_some_and(|p| p.is_up()))
    }

    /// Queues a message (its budget is charged here; callers checked that it fits).
    pub(super) fn queue_msg(&mut self, now: Instant, cid: ConnId, lane: usize, msg: OutMsg) {
        self.stats.inc(Counter::SendQueued);
        self.mem_charge_for(msg.owner, msg.payload.len() + MSG_COST);
        let ci = cid.0 as usize;
        let c = &mut self.conns[ci];
        c.last_active = now;
        if msg.pong {
            c.pongs += 1;
        }
        c.paths[lane].send_q.push_back(msg);
        match self.conns[ci].kind {
            TransportKind::Loopback => {
                self.loop_work.push(cid);
                self.run_loopback(now);
            }
            _ => {
                if self.conns[ci].paths[lane].is_up() {
                    self.want_transmit(cid, lane);
                } else {
                    self.want_connect(cid, lane);
                }
            }
        }
    }

    /// Removes messages matching `pred` from every queue, releasing their buffer space.
    pub(super) fn drop_msgs(
        &mut self,
        pred: impl Fn(&OutMsg, IpAddr) -> bool,
        rdma: Option<RdmaStatus>,
    ) -> usize {
        let mut dropped = Vec::new();
        for (ci, c) in self.conns.iter_mut() {
            let faddr = c.faddr;
            for p in &mut c.paths {
                for q in [&mut p.send_q, &mut p.retrans] {
                    if q.iter().any(|m| pred(m, faddr)) {
                        let mut keep = VecDeque::with_capacity(q.len());
                        for m in q.drain(..) {
                            if pred(&m, faddr) {
                                dropped.push((ci, m));
                            } else {
                                keep.push_back(m);
                            }
                        }
                        *q = keep;
                    }
                }
            }
        }
        let n = dropped.len();
        for (ci, m) in dropped {
            self.release(ci, &m);
            if let (Some(op), Some(st)) = (&m.rdma, rdma) {
                self.rdma_complete(op, st);
            }
        }
        n
    }

    pub(super) fn drop_msgs_of_conn(&mut self, ci: usize) -> usize {
        let mut dropped = Vec::new();
        for p in &mut self.conns[ci].paths {
            dropped.extend(p.send_q.drain(..));
            dropped.extend(p.retrans.drain(..));
        }
        let n = dropped.len();
        for m in dropped {
            self.release(ci, &m);
        }
        n
    }

    /// A message of connection `ci` left the queues: give its bytes back to the node budget
    /// and to the sending socket.
    pub(super) fn release(&mut self, ci: usize, m: &OutMsg) {
        self.mem_release_for(m.owner, m.payload.len() + MSG_COST);
        if m.pong {
            if let Some(c) = self.conns.get_mut(ci) {
                c.pongs = c.pongs.saturating_sub(1);
            }
        }
        if !m.sock_freed {
            self.release_sock(m.sock, m.payload.len());
        }
    }

    /// Returns `len` bytes of a message to its socket's send buffer (waking a writer it
    /// unblocks).
    pub(super) fn release_sock(&mut self, sock: Option<SockId>, len: usize) {
        let Some(sid) = sock else { return };
        if let Some(s) = self.socks.get_mut(&sid) {
            let was_writable = s.writable();
            s.snd_bytes = s.snd_bytes.saturating_sub(len);
            if !was_writable && s.writable() {
                self.wakes.insert(sid);
            }
        }
    }
}
