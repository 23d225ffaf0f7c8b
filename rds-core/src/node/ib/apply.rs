//! What the connection manager and completion handlers report ([`IbOut`], in `mod.rs`),
//! applied to the engine: the one place where the IB transport tells the [`Stack`] about connections that go
//! up, fail or end, accepted requests, received fragments, sent ACKs and finished RDMA
//! operations, and carries out the engine's answers on its connections (as
//! `node/tcp/apply.rs` does for RDS/TCP).
//!
//! The handlers need the engine's answer as they go (an accept, a connection going up, a
//! fragment the engine refused ends the completion poll), so their reports are applied right
//! after each event or work completion, in order.

use std::time::Duration;

use crate::info::{ConnId, TransportKind};
use crate::node::transport::connecting;
use crate::proto::{AcceptError, Stack};
use crate::stats::IbCounter;
use crate::time::Instant;

use super::conn::reject;
use super::{log, Ib, IbOut, Lane, Request};

impl Ib {
    /// Applies the kept reports to the engine in order. Returns `false` when the engine
    /// dropped a fragment's path (it queued the path's disconnect; what was reported after
    /// that fragment is dropped with it).
    pub(super) fn apply_reports(&mut self, stack: &mut Stack, now: Instant) -> bool {
        let mut outs = std::mem::take(&mut self.outs);
        let mut kept = true;
        for o in outs.drain(..) {
            if kept {
                kept = self.apply_one(stack, now, o);
            }
        }
        outs.append(&mut self.outs);
        self.outs = outs;
        kept
    }

    fn apply_one(&mut self, stack: &mut Stack, now: Instant, o: IbOut) -> bool {
        match o {
            IbOut::Request(req) => self.offer(stack, now, *req),
            IbOut::Established { idx, lane } => {
                let Lane { conn, path, epoch } = lane;
                if stack.handle_connected(now, conn, path, epoch) {
                    // Going up starts a new epoch; frames of this connection carry it.
                    self.up(idx, stack.path_state(conn, path).1);
                    self.pull(stack, now, conn, path);
                } else {
                    self.close(idx);
                }
            }
            IbOut::Ready(lane) => self.pull(stack, now, lane.conn, lane.path),
            IbOut::ConnectFailed(Lane { conn, path, epoch }) => {
                stack.handle_connect_failed(now, conn, path, epoch);
            }
            IbOut::Down(Lane { conn, path, epoch }) => {
                stack.handle_disconnected(now, conn, path, epoch);
            }
            IbOut::Fragment { lane, len, slot } => {
                let Lane { conn, path, epoch } = lane;
                if stack
                    .handle_fragment(now, conn, path, epoch, &self.buf[..len])
                    .is_err()
                {
                    return false;
                }
                self.refill.push(slot);
            }
            IbOut::AckSent(Lane { conn, path, epoch }) => stack.handle_ack_sent(conn, path, epoch),
            IbOut::RdmaDone(op, status) => stack.rdma_complete(&op, status),
        }
        true
    }

    /// Asks the engine to accept a connect request, and answers the peer.
    fn offer(&mut self, stack: &mut Stack, now: Instant, req: Request) {
        let (local, peer) = (req.local.ip(), req.peer.ip());
        let kind = TransportKind::Ib;
        let (conn, path, epoch) =
            match stack.handle_accept(now, local, peer, kind, req.peer.port(), Duration::ZERO) {
                Ok(x) => x,
                Err(e) => {
                    log(&format!("reject {}: {e:?}", req.peer));
                    if e == AcceptError::Raced {
                        self.stats.inc(IbCounter::IbConnectRaced);
                    }
                    reject(&req.id);
                    return;
                }
            };
        let (laddr, faddr, _) = stack.conn_addrs(conn);
        let lane = Lane { conn, path, epoch };
        if self.accept(req, lane, laddr, faddr).is_err() {
            stack.handle_disconnected(now, conn, path, epoch);
        }
    }

    /// The engine's [`crate::proto::Event::Connect`]: starts resolving the peer's address, or
    /// reports the attempt failed at once. A connect the path has moved on from is dropped
    /// (the engine waits for no end of an RDS/IB attempt).
    pub(super) fn connect_path(
        &mut self,
        stack: &mut Stack,
        conn: ConnId,
        path: usize,
        epoch: u32,
        now: Instant,
    ) {
        if !connecting(stack, conn, path, epoch) {
            return;
        }
        let (laddr, faddr, _) = stack.conn_addrs(conn);
        if let Err(e) = self.open(Lane { conn, path, epoch }, laddr, faddr) {
            log(&format!("connect {laddr} -> {faddr}: {e}"));
            stack.handle_connect_failed(now, conn, path, epoch);
        }
    }
}
