//! The data path of one RDS/IB connection: its verbs resources (queue pair, completion queue,
//! receive ring, send slots, the ACK buffer), posting the engine's frames as SENDs with any
//! RDMA operation ahead of its message, and draining completions; what the engine must hear
//! (fragments, sent ACKs, finished RDMA operations, a broken connection) is reported
//! ([`IbOut`]) and applied by `apply.rs`.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::ib::{
    Access, Cq, Mr, Qp, QpCap, QpInit, RecvWr, SendOp, SendWr, Sge, VerbsError, WcStatus,
    WorkCompletion,
};
use crate::info::ConnId;
use crate::proto::driver::Frames;
use crate::proto::rdma_op::{RdmaOp, RdmaStatus};
use crate::proto::{FrameKind, Stack};
use crate::stats::{IbCounter, IbStats};
use crate::sys::EPOLLIN;
use crate::time::Instant;
use crate::wire::{FRAG_SIZE, HEADER_LEN};

use super::super::tap::{Dir, IbQps};
use super::mr::{LocalSeg, OpRegistry};
use super::{log, out_of_range, Ib, IbOut, TOKEN_IB_CQ, TOKEN_MASK};

/// One receive or send buffer: a header and a fragment.
pub(super) const SLOT: usize = HEADER_LEN + FRAG_SIZE;
/// Receive work requests posted per connection.
const RECV_WRS: usize = 256;
/// Send work requests per connection (plus one for the ACK-only frame).
const SEND_WRS: usize = 128;
/// Data SENDs posted unsignaled between two signaled ones (the kernel's
/// `rds_ib_sysctl_max_unsig_wrs`): a completion, and the completion event that wakes the I/O
/// thread, per 17 SENDs instead of per SEND. The send queue completes in order, so a signaled
/// SEND's completion frees the slots of the unsignaled ones posted before it.
const UNSIGNALED_MAX: usize = 16;
const ACK_WR_ID: u64 = u64::MAX;
const RECV_WR_BIT: u64 = 1 << 32;
/// Work request ids of RDMA operations (`| slot`).
const RDMA_WR_BIT: u64 = 1 << 33;
/// RDMA operations in flight per connection.
const RDMA_SLOTS: usize = 16;
/// Send queue entries reserved for RDMA work requests.
const RDMA_WRS: usize = 128;
/// Most scatter/gather elements per RDMA work request.
const MAX_SGE: i32 = 16;
/// Most RDMA reads in flight per direction.
const MAX_RD_ATOM: i32 = 16;

/// An RDMA operation posted on a connection: the local registrations stay until its last
/// work request completed (or the queue pair is gone).
struct Inflight {
    op: Arc<RdmaOp>,
    _segs: Vec<LocalSeg>,
    wrs: usize,
}

/// Verbs resources of one connection. Field order is drop order: the queue pair first.
pub(super) struct Res {
    pub(super) qp: Qp,
    pub(super) cq: Cq,
    recv: Mr,
    send: Mr,
    ack: Mr,
    free: Vec<usize>,
    /// Send slots posted and not yet known complete, in posting order.
    posted: VecDeque<usize>,
    /// Data SENDs still to post unsignaled before the next signaled one.
    unsig: usize,
    ack_busy: bool,
    /// RDMA operations in flight, by slot.
    rdma: Vec<Option<Inflight>>,
    /// Send queue entries used by them.
    rdma_wrs: usize,
    /// Scatter/gather elements per RDMA work request.
    max_sge: usize,
    /// Payload bytes still expected of the message being received.
    rx_left: usize,
    /// The queue is armed ([`Cq::req_notify`]) and its event not yet taken: a completion
    /// wakes the node through the channel. Not armed, it must be polled (and armed) before
    /// the node sleeps ([`Ib::poll_unarmed`]).
    armed: bool,
}

impl Ib {
    /// Creates the queue pair and buffers of connection `i` and posts its receive ring.
    /// Returns the RDMA read depth to offer.
    pub(super) fn make_res(&mut self, i: usize) -> Result<u8, VerbsError> {
        let epoll = self.epoll.clone();
        let ctx = self.conns[i]
            .as_ref()
            .expect("live")
            .id
            .context()
            .ok_or_else(|| VerbsError::invalid("rdma_cm", "the id has no device"))?;
        let attr = ctx.query_device().ok();
        let rd = attr
            .as_ref()
            .map_or(1, |a| a.max_qp_rd_atom.clamp(0, MAX_RD_ATOM) as u8);
        let max_sge = attr.as_ref().map_or(1, |a| a.max_sge.clamp(1, MAX_SGE)) as usize;
        let pd = self.pd_for(&ctx)?;
        let c = self.conns[i].as_mut().expect("live");
        let cq = ctx.create_cq((RECV_WRS + SEND_WRS + RDMA_WRS + 2) as u32, true, 0)?;
        let qp = c.id.create_qp(
            &pd,
            &QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                cap: QpCap {
                    max_send_wr: (SEND_WRS + RDMA_WRS + 1) as u32,
                    max_recv_wr: RECV_WRS as u32,
                    max_send_sge: max_sge as u32,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            },
        )?;
        let recv = pd.reg_mr(RECV_WRS * SLOT, Access::LOCAL_WRITE)?;
        let send = pd.reg_mr(SEND_WRS * SLOT, Access::LOCAL_WRITE)?;
        let ack = pd.reg_mr(HEADER_LEN, Access::LOCAL_WRITE)?;
        post_recvs(&qp, &recv, &(0..RECV_WRS).collect::<Vec<_>>())?;
        cq.req_notify(false)?;
        if let Some(fd) = cq.fd() {
            epoll
                .add(fd, TOKEN_IB_CQ | i as u64, EPOLLIN)
                .map_err(|e| VerbsError::invalid("epoll_ctl", e.to_string()))?;
        }
        c.res = Some(Res {
            qp,
            cq,
            recv,
            send,
            ack,
            free: (0..SEND_WRS).rev().collect(),
            posted: VecDeque::with_capacity(SEND_WRS),
            unsig: UNSIGNALED_MAX,
            ack_busy: false,
            rdma: (0..RDMA_SLOTS).map(|_| None).collect(),
            rdma_wrs: 0,
            max_sge,
            rx_left: 0,
            armed: true,
        });
        Ok(rd)
    }

    /// Posts the engine's frames for the path while send slots last, and applies what the
    /// engine must hear (an RDMA operation that cannot run, a broken connection).
    pub(crate) fn pull(&mut self, stack: &mut Stack, now: Instant, conn: ConnId, path: usize) {
        self.post(stack, now, conn, path);
        self.apply_reports(stack, now);
    }

    /// [`Ib::pull`]'s posting: frames from the engine ([`Frames`]), reports to `outs`.
    fn post(&mut self, stack: &mut Stack, now: Instant, conn: ConnId, path: usize) {
        self.ops.sweep();
        let Some(i) = self.find_up(conn, path) else {
            return;
        };
        let c = self.conns[i].as_mut().expect("live");
        let lane = c.lane();
        let Some(r) = c.res.as_mut() else {
            return;
        };
        let mut frames = Frames::new(stack, now, conn, path);
        let mut failed = false;
        loop {
            if r.free.is_empty() {
                self.stats.inc(IbCounter::IbTxRingFull);
                c.more = true;
                break;
            }
            let t = match c.held.take() {
                Some(t) => t,
                None => match frames.next() {
                    Some(t) => t,
                    None => {
                        c.more = false;
                        break;
                    }
                },
            };
            let mut fence = false;
            if let Some(op) = &t.rdma {
                match post_rdma(r, &mut self.ops, &op.0) {
                    Rdma::Posted => fence = op.0.fence,
                    Rdma::NoRoom => {
                        self.stats.inc(IbCounter::IbTxStalled);
                        // Waits for an RDMA completion to free send queue entries.
                        c.held = Some(t);
                        c.more = true;
                        break;
                    }
                    Rdma::Failed(status) => {
                        // The message still goes; its operation is reported failed.
                        self.outs.push(IbOut::RdmaDone(op.0.clone(), status));
                    }
                    Rdma::PostFailed => {
                        failed = true;
                        break;
                    }
                }
            }
            let posted = if t.kind == FrameKind::AckOnly {
                if r.ack_busy {
                    // The engine keeps one ACK in flight; a second is not expected.
                    self.stats.inc(IbCounter::IbAckSendDelayed);
                    continue;
                }
                self.stats.inc(IbCounter::IbAckSent);
                r.ack_busy = true;
                let _ = r.ack.write_at(0, &t.hdr);
                let Ok(s) = r.ack.sge(0, HEADER_LEN) else {
                    failed = true;
                    break;
                };
                r.qp.post_send(&[SendWr {
                    wr_id: ACK_WR_ID,
                    op: SendOp::Send,
                    sges: &[s],
                    signaled: true,
                    solicited: true,
                    fence: false,
                }])
            } else {
                let len = t.wire_len();
                if len > SLOT {
                    // The engine fragments at 4096 payload bytes; anything longer would
                    // overrun the peer's receive buffer, so it is a bug: drop the connection.
                    log(&format!("frame of {len} bytes exceeds one SEND"));
                    failed = true;
                    break;
                }
                if t.hdr[8..16] != [0; 8] {
                    self.stats.inc(IbCounter::IbAckSendPiggybacked);
                }
                let slot = r.free.pop().expect("checked");
                // The last free slot is always signaled, so that a full ring frees itself.
                let signaled = r.unsig == 0 || r.free.is_empty();
                let off = slot * SLOT;
                let _ = r.send.write_at(off, &t.hdr);
                let _ = r.send.write_at(off + HEADER_LEN, &t.payload);
                let Ok(s) = r.send.sge(off, len) else {
                    failed = true;
                    break;
                };
                let posted = r.qp.post_send(&[SendWr {
                    wr_id: slot as u64,
                    op: SendOp::Send,
                    sges: &[s],
                    signaled,
                    solicited: t.solicited,
                    fence,
                }]);
                if posted.is_ok() {
                    r.posted.push_back(slot);
                    r.unsig = if signaled {
                        UNSIGNALED_MAX
                    } else {
                        r.unsig - 1
                    };
                }
                posted
            };
            if let Err(e) = posted {
                if t.kind == FrameKind::AckOnly {
                    self.stats.inc(IbCounter::IbAckSendFailure);
                }
                log(&format!("post_send: {e}"));
                failed = true;
                break;
            }
            if self.tap.enabled() {
                let qps = tap_qps(r, c.peer_qpn);
                self.tap.record_ib(
                    Dir::Tx,
                    c.laddr,
                    c.faddr,
                    path,
                    qps,
                    t.solicited,
                    &t.hdr,
                    &t.payload,
                );
            }
        }
        if failed {
            self.close(i);
            self.outs.push(IbOut::Down(lane));
        }
    }

    /// An event on connection `i`'s completion channel: takes it (the queue's arming is used
    /// up) and drains the queue. The queue is not armed again here: whoever goes to sleep next
    /// polls it first and arms it only when it finds nothing ([`Ib::poll_unarmed`]), so
    /// completions that come while the node works cost no event.
    pub(super) fn cq_event(&mut self, i: usize, stack: &mut Stack, now: Instant) {
        let Some(r) = self.res_mut(i) else {
            return;
        };
        // One event per arming; a second one pending keeps the fd readable (epoll is
        // level-triggered), so one read (no second read for EAGAIN) is enough. No event (a
        // poll already took the completions of an event read earlier, or the slot was reused)
        // leaves the arming as it was.
        if r.cq.get_event().unwrap_or(false) {
            r.armed = false;
            self.stats.inc(IbCounter::IbTaskletCall);
        }
        self.drain(i, stack, now);
    }

    /// Before the thread running the node's I/O sleeps: polls every completion queue not armed,
    /// and arms those that had nothing, polling each once more after arming (a completion that
    /// came between the poll and the arming raised no event). Returns whether any completion
    /// was found: the caller looks at its sockets again and calls this again before sleeping;
    /// a queue that had completions stays unarmed until then. A queue that cannot be armed is
    /// broken: its connection is closed and reported down.
    pub(super) fn poll_unarmed(&mut self, stack: &mut Stack, now: Instant) -> bool {
        let mut found = false;
        for i in 0..self.conns.len() {
            if self.res_mut(i).is_none_or(|r| r.armed) {
                continue;
            }
            if self.drain(i, stack, now) {
                self.stats.inc(IbCounter::IbCqPolled);
                found = true;
                continue;
            }
            let Some(r) = self.res_mut(i).filter(|r| !r.armed) else {
                continue;
            };
            if let Err(e) = r.cq.req_notify(false) {
                log(&format!("req_notify_cq: {e}"));
                let lane = self.conns[i].as_ref().expect("live").lane();
                self.close(i);
                self.outs.push(IbOut::Down(lane));
                self.apply_reports(stack, now);
                continue;
            }
            r.armed = true;
            self.stats.inc(IbCounter::IbCqArm);
            if self.drain(i, stack, now) {
                self.stats.inc(IbCounter::IbCqPolled);
                found = true;
            }
        }
        found
    }

    /// Whether a completion queue is not armed ([`Ib::poll_unarmed`] has work).
    pub(super) fn any_unarmed(&self) -> bool {
        self.conns
            .iter()
            .flatten()
            .any(|c| c.res.as_ref().is_some_and(|r| !r.armed))
    }

    fn res_mut(&mut self, i: usize) -> Option<&mut Res> {
        self.conns.get_mut(i)?.as_mut()?.res.as_mut()
    }

    /// Polls connection `i`'s completion queue until it is empty, applying each work
    /// completion's report before the next. Returns whether it found any completion.
    fn drain(&mut self, i: usize, stack: &mut Stack, now: Instant) -> bool {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return false;
        };
        let lane = c.lane();
        if c.res.is_none() {
            return false;
        }
        let mut dead = false;
        let mut engine_dropped = false;
        let mut seen = Seen::default();
        // Receive buffers consumed by a poll are reposted together after it.
        self.refill.clear();
        'outer: while let Some(r) = self.conns[i].as_mut().and_then(|c| c.res.as_mut()) {
            if !self.refill.is_empty() {
                if post_recvs(&r.qp, &r.recv, &self.refill).is_err() {
                    dead = true;
                    break;
                }
                self.stats
                    .add(IbCounter::IbRxRefillFromCq, self.refill.len() as u64);
                self.refill.clear();
            }
            let n = match r.cq.poll(&mut self.wcs) {
                Ok(0) => break,
                Ok(n) => n,
                Err(_) => {
                    dead = true;
                    break;
                }
            };
            seen.any = true;
            for k in 0..n {
                let wc = self.wcs[k];
                let alive = self.completion(i, wc, &mut seen);
                if !self.apply_reports(stack, now) {
                    // The engine dropped the path and queued its Disconnect.
                    engine_dropped = true;
                    break 'outer;
                }
                if !alive {
                    dead = true;
                    break 'outer;
                }
            }
        }
        if seen.tx {
            self.stats.inc(IbCounter::IbTxCqEvent);
        }
        if seen.rx {
            self.stats.inc(IbCounter::IbRxCqEvent);
        }
        if engine_dropped {
            return seen.any;
        }
        if dead {
            self.close(i);
            self.outs.push(IbOut::Down(lane));
            self.apply_reports(stack, now);
            return seen.any;
        }
        let more = self.conns[i].as_ref().is_some_and(|c| c.more);
        if seen.pull && more {
            self.pull(stack, now, lane.conn, lane.path);
        }
        seen.any
    }

    /// One work completion of connection `i`: frees what it completes and reports what the
    /// engine must hear. Returns whether the connection is still usable.
    fn completion(&mut self, i: usize, wc: WorkCompletion, seen: &mut Seen) -> bool {
        let Some(c) = self.conns[i].as_mut() else {
            return false;
        };
        let lane = c.lane();
        let Some(r) = c.res.as_mut() else {
            return false;
        };
        let id = wc.wr_id();
        if id & RDMA_WR_BIT != 0 && id != ACK_WR_ID {
            let slot = (id & TOKEN_MASK) as usize;
            if let Some(f) = r.rdma.get_mut(slot).and_then(Option::take) {
                r.rdma_wrs -= f.wrs;
                seen.pull = true;
                // `rds_ib_send_complete`: a flushed operation is reported when its message
                // is dropped instead (never retransmitted).
                let status = match wc.status() {
                    WcStatus::Success => Some(RdmaStatus::Success),
                    WcStatus::WrFlushErr => None,
                    WcStatus::RemAccessErr => Some(RdmaStatus::RemoteError),
                    _ => Some(RdmaStatus::OtherError),
                };
                if let Some(st) = status {
                    self.outs.push(IbOut::RdmaDone(f.op.clone(), st));
                }
            }
        }
        if !wc.is_success() {
            log(&format!(
                "completion wr {:#x}: {} (vendor {:#x})",
                wc.wr_id(),
                wc.status(),
                wc.vendor_err()
            ));
            return false;
        }
        if id == ACK_WR_ID {
            seen.tx = true;
            r.ack_busy = false;
            self.outs.push(IbOut::AckSent(lane));
            seen.pull = true;
        } else if id & RECV_WR_BIT != 0 {
            seen.rx = true;
            let slot = (id & TOKEN_MASK) as usize;
            let len = (wc.byte_len() as usize).min(SLOT);
            if slot >= RECV_WRS || r.recv.read_at(slot * SLOT, &mut self.buf[..len]).is_err() {
                return false;
            }
            count_rx(&self.stats, &mut r.rx_left, &self.buf[..len]);
            if self.tap.enabled() && len >= HEADER_LEN {
                let qps = tap_qps(r, c.peer_qpn);
                let (h, pl) = self.buf[..len].split_at(HEADER_LEN);
                self.tap
                    .record_ib(Dir::Rx, c.laddr, c.faddr, lane.path, qps, false, h, pl);
            }
            self.outs.push(IbOut::Fragment { lane, len, slot });
        } else if id & RDMA_WR_BIT != 0 {
            // handled above
        } else if (id as usize) < SEND_WRS {
            seen.tx = true;
            // This SEND and every unsignaled one posted before it are done.
            if let Some(k) = r.posted.iter().position(|&s| s == id as usize) {
                r.free.extend(r.posted.drain(..=k));
            }
            seen.pull = true;
        }
        true
    }
}

/// What one completion poll saw, for the counters and the refill.
#[derive(Default)]
struct Seen {
    /// Any completion.
    any: bool,
    /// Send queue room was freed: the engine's frames may go.
    pull: bool,
    /// A SEND (or the ACK) completed.
    tx: bool,
    /// A receive completed.
    rx: bool,
}

/// Posts the receive buffers `slots` again, as one chain of work requests.
fn post_recvs(qp: &Qp, recv: &Mr, slots: &[usize]) -> Result<(), VerbsError> {
    let sges = slots
        .iter()
        .map(|&s| recv.sge(s * SLOT, SLOT))
        .collect::<Result<Vec<Sge<'_>>, _>>()
        .map_err(out_of_range)?;
    let wrs: Vec<RecvWr<'_>> = slots
        .iter()
        .zip(&sges)
        .map(|(&s, sge)| RecvWr {
            wr_id: RECV_WR_BIT | s as u64,
            sges: std::slice::from_ref(sge),
        })
        .collect();
    qp.post_recv(&wrs).map_err(|e| e.source)
}

/// The queue pairs of a connection as traces show them (RoCE has no LIDs).
fn tap_qps(r: &Res, peer_qpn: u32) -> IbQps {
    IbQps {
        local_qpn: r.qp.qp_num(),
        peer_qpn,
        local_lid: 0,
        peer_lid: 0,
    }
}

/// Counts a received frame: fragments, ACK-only frames, and whole messages (the fragment
/// that completes a message's `h_len`).
fn count_rx(stats: &IbStats, left: &mut usize, frame: &[u8]) {
    if frame.len() < HEADER_LEN {
        return;
    }
    stats.inc(IbCounter::IbRxTotalFrags);
    let be32 = |o: usize| u32::from_be_bytes([frame[o], frame[o + 1], frame[o + 2], frame[o + 3]]);
    let (seq_zero, len) = (frame[..8] == [0; 8], be32(16) as usize);
    let ports_zero = frame[20..24] == [0; 4];
    if seq_zero && len == 0 && ports_zero {
        stats.inc(IbCounter::IbAckReceived);
        return;
    }
    if *left == 0 {
        *left = len;
    }
    *left = left.saturating_sub(frame.len() - HEADER_LEN);
    if *left == 0 {
        stats.inc(IbCounter::IbRxTotalIncs);
    }
}

/// What became of a message's RDMA operation at transmit time.
enum Rdma {
    Posted,
    /// No free slot or send queue room: try again after a completion.
    NoRoom,
    /// It cannot run (its memory was not registered, or it needs more work requests than a
    /// connection has): report this status, send the message anyway.
    Failed(RdmaStatus),
    /// `ibv_post_send` failed: the connection is broken.
    PostFailed,
}

/// Posts an RDMA operation's work requests (up to `max_sge` elements each; only the last
/// one signaled), ahead of its message's SEND. The operation's local registrations leave
/// `ops` here: into the connection's in-flight table when posted, dropped when it cannot run,
/// put back when there is no room yet.
fn post_rdma(r: &mut Res, ops: &mut OpRegistry, op: &Arc<RdmaOp>) -> Rdma {
    let Some(segs) = ops.take(op.id) else {
        return Rdma::Failed(RdmaStatus::OtherError);
    };
    if segs.len() != op.local.len() || segs.is_empty() {
        return Rdma::Failed(RdmaStatus::OtherError);
    }
    let nwr = segs.len().div_ceil(r.max_sge);
    if nwr > RDMA_WRS {
        return Rdma::Failed(RdmaStatus::OtherError);
    }
    let slot = r.rdma.iter().position(Option::is_none);
    let Some(slot) = slot.filter(|_| r.rdma_wrs + nwr <= RDMA_WRS) else {
        ops.insert(op, segs);
        return Rdma::NoRoom;
    };
    let sges: Result<Vec<Sge<'_>>, _> = segs.iter().map(LocalSeg::sge).collect();
    let Ok(sges) = sges else {
        return Rdma::Failed(RdmaStatus::OtherError);
    };
    let mut wrs = Vec::with_capacity(nwr);
    let mut remote = op.remote_addr;
    let chunks: Vec<&[Sge<'_>]> = sges.chunks(r.max_sge).collect();
    for (k, ch) in chunks.iter().enumerate() {
        let last = k + 1 == chunks.len();
        let (remote_addr, rkey) = (remote, op.rkey);
        wrs.push(SendWr {
            wr_id: if last { RDMA_WR_BIT | slot as u64 } else { 0 },
            op: if op.write {
                SendOp::RdmaWrite { remote_addr, rkey }
            } else {
                SendOp::RdmaRead { remote_addr, rkey }
            },
            sges: ch,
            signaled: last,
            solicited: false,
            fence: false,
        });
        remote = remote.wrapping_add(ch.iter().map(|s| u64::from(s.length())).sum::<u64>());
    }
    if let Err(e) = r.qp.post_send(&wrs) {
        log(&format!("post_send (rdma): {e}"));
        return Rdma::PostFailed;
    }
    drop(wrs);
    drop(sges);
    r.rdma_wrs += nwr;
    r.rdma[slot] = Some(Inflight {
        op: op.clone(),
        _segs: segs,
        wrs: nwr,
    });
    Rdma::Posted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fragments, whole messages and ACK-only frames as the `ib_rx_*` / `ib_ack_received`
    /// counters see them.
    #[test]
    fn receive_counters() {
        use crate::wire::HeaderRepr;
        let stats = IbStats::new();
        let mut left = 0;
        let frag = |h: HeaderRepr, n: usize| {
            let mut f = h.to_bytes().to_vec();
            f.resize(HEADER_LEN + n, 7);
            f
        };
        // A 5000-byte message in two fragments, a 0-byte one, an ACK-only frame.
        let big = HeaderRepr::data(1, 4000, 5000, 5000);
        count_rx(&stats, &mut left, &frag(big, 4096));
        assert_eq!(left, 904);
        count_rx(&stats, &mut left, &frag(big, 904));
        count_rx(
            &stats,
            &mut left,
            &frag(HeaderRepr::data(2, 4000, 5000, 0), 0),
        );
        count_rx(&stats, &mut left, &frag(HeaderRepr::ack_only(2), 0));
        count_rx(&stats, &mut left, &[0; 10]);
        let get = |c: IbCounter| stats.snapshot()[c as usize].1;
        assert_eq!(get(IbCounter::IbRxTotalFrags), 4);
        assert_eq!(get(IbCounter::IbRxTotalIncs), 2);
        assert_eq!(get(IbCounter::IbAckReceived), 1);
        assert_eq!(left, 0);
    }
}
