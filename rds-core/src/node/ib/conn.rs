//! The connection manager's lifecycle of one RDS/IB connection: the active side resolves the
//! address and route and connects with our private data; the passive side checks the
//! request's private data ([`negotiate`]) and, once the engine accepted it, answers with the
//! chosen version; both go up on `ESTABLISHED`. What the engine must hear (a request, a
//! connection established, failed or down) is reported ([`IbOut`]) and applied by
//! `apply.rs`.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::ib::cm::{CmEvent, CmEventType, CmId, ConnParam};
use crate::ib::VerbsError;
use crate::info::{canonical, ConnId};
use crate::proto::Transmit;
use crate::stats::IbCounter;
use crate::wire::ib_private::{cm_port, negotiate, ConnPriv, SUPPORTED_MASK};

use super::data::Res;
use super::{log, Ib, IbOut, Lane, Request};

/// `RDS_RDMA_RESOLVE_TIMEOUT_MS`.
const RESOLVE_TIMEOUT: Duration = Duration::from_millis(5000);
/// `RDS_RDMA_REJ_INCOMPAT`, sent as a host-endian int.
const REJ_INCOMPAT: i32 = 1;
/// Transport and RNR retries (7: RNR retries forever, as RDS asks).
const RETRY: u8 = 7;

/// Where a connection is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum St {
    /// Active: waiting for `ADDR_RESOLVED`.
    Resolving,
    /// Active: waiting for `ROUTE_RESOLVED`.
    Routing,
    /// Active: connect sent, waiting for `ESTABLISHED`.
    Connecting,
    /// Passive: accepted, waiting for `ESTABLISHED` (the engine already counts it up; sends
    /// wait until the peer's queue pair is ready).
    Accepted,
    /// Established.
    Up,
}

/// One connection of the transport: its CM id, the engine path it carries, and its verbs
/// resources once it has them.
pub(super) struct IbConn {
    pub(super) id: CmId,
    pub(super) conn: ConnId,
    pub(super) path: usize,
    pub(super) epoch: u32,
    pub(super) st: St,
    pub(super) v6: bool,
    /// The engine connection's addresses (ours, the peer's).
    pub(super) laddr: IpAddr,
    pub(super) faddr: IpAddr,
    pub(super) res: Option<Res>,
    /// The engine may hold more frames (pulling stopped for lack of send slots).
    pub(super) more: bool,
    /// A frame taken from the engine that waits for send queue room (RDMA resources).
    pub(super) held: Option<Transmit>,
    /// The peer's queue pair number (from the CM exchange), for traces.
    pub(super) peer_qpn: u32,
}

impl IbConn {
    /// The engine path it carries and the epoch its reports quote.
    pub(super) fn lane(&self) -> Lane {
        Lane {
            conn: self.conn,
            path: self.path,
            epoch: self.epoch,
        }
    }

    /// What its end is to the engine: the end of a connection that was up (or accepted), or
    /// a failed attempt.
    fn ended(&self) -> IbOut {
        if matches!(self.st, St::Up | St::Accepted) {
            IbOut::Down(self.lane())
        } else {
            IbOut::ConnectFailed(self.lane())
        }
    }
}

impl Ib {
    /// Starts an attempt for `lane` from `laddr` to `faddr`: resolving the peer's address.
    pub(super) fn open(
        &mut self,
        lane: Lane,
        laddr: IpAddr,
        faddr: IpAddr,
    ) -> Result<(), VerbsError> {
        let id = self.chan.create_id()?;
        id.resolve_addr(
            Some(SocketAddr::new(laddr, 0)),
            SocketAddr::new(faddr, cm_port(faddr)),
            RESOLVE_TIMEOUT,
        )?;
        self.insert(IbConn {
            id,
            conn: lane.conn,
            path: lane.path,
            epoch: lane.epoch,
            st: St::Resolving,
            v6: matches!(canonical(faddr), IpAddr::V6(_)),
            laddr,
            faddr,
            res: None,
            more: false,
            held: None,
            peer_qpn: 0,
        });
        Ok(())
    }

    /// Engine dropped the path: disconnect and free.
    pub(super) fn close_path(&mut self, conn: ConnId, path: usize, epoch: u32) {
        self.ops.sweep();
        if let Some(i) = self.find(conn, path, epoch) {
            self.close(i);
        }
    }

    /// Disconnects connection `idx` and frees it (without telling the engine).
    pub(super) fn close(&mut self, idx: usize) {
        if let Some(c) = &self.conns[idx] {
            let _ = c.id.disconnect();
        }
        self.remove(idx);
    }

    /// Our attempt `idx` went up with the engine's `epoch`.
    pub(super) fn up(&mut self, idx: usize, epoch: u32) {
        if let Some(c) = self.conns[idx].as_mut() {
            c.epoch = epoch;
            c.st = St::Up;
        }
    }

    /// One connection manager event; what the engine must hear goes to `outs`.
    pub(super) fn cm_event(&mut self, mut ev: CmEvent) {
        self.stats.inc(IbCounter::IbEvtHandlerCall);
        log(&format!("cm event {:?} status {}", ev.kind, ev.status));
        if ev.kind == CmEventType::ConnectRequest {
            if let Some(id) = ev.new_id.take() {
                self.on_request(id, &ev);
            }
            return;
        }
        let Some(i) = self.find_id(ev.id) else {
            return;
        };
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        let lane = c.lane();
        match (ev.kind, c.st) {
            (CmEventType::AddrResolved, St::Resolving) => {
                if c.id.resolve_route(RESOLVE_TIMEOUT).is_ok() {
                    c.st = St::Routing;
                } else {
                    self.remove(i);
                    self.outs.push(IbOut::ConnectFailed(lane));
                }
            }
            (CmEventType::RouteResolved, St::Routing) => {
                let (laddr, faddr) = (c.laddr, c.faddr);
                let r = self.make_res(i).and_then(|rd| {
                    let c = self.conns[i].as_mut().expect("live");
                    let pd = ConnPriv {
                        saddr: laddr,
                        daddr: faddr,
                        major: 3,
                        minor: 1,
                        minor_mask: SUPPORTED_MASK,
                        toss: 0,
                        ack_seq: 0,
                        credit: 0,
                    }
                    .encode(c.v6);
                    c.id.connect(&ConnParam {
                        private_data: &pd,
                        responder_resources: rd,
                        initiator_depth: rd,
                        flow_control: false,
                        retry_count: RETRY,
                        rnr_retry_count: RETRY,
                    })
                });
                match r {
                    Ok(()) => {
                        if let Some(c) = self.conns[i].as_mut() {
                            c.st = St::Connecting;
                        }
                    }
                    Err(e) => {
                        log(&format!("connect: {e}"));
                        self.remove(i);
                        self.outs.push(IbOut::ConnectFailed(lane));
                    }
                }
            }
            (CmEventType::Established, St::Connecting) => {
                c.peer_qpn = ev.conn.qp_num;
                // Adopt the version the peer answered; below 3.1 is not supported.
                let ok = match ConnPriv::decode(&ev.private_data, c.v6) {
                    Some(p) if p.major != 0 => (p.major, p.minor) >= (3, 1),
                    _ => true,
                };
                if ok {
                    self.outs.push(IbOut::Established { idx: i, lane });
                } else {
                    self.close(i);
                    self.outs.push(IbOut::ConnectFailed(lane));
                }
            }
            (CmEventType::Established, St::Accepted) => {
                c.st = St::Up;
                self.outs.push(IbOut::Ready(lane));
            }
            (CmEventType::Disconnected, _) => {
                let end = c.ended();
                self.close(i);
                self.outs.push(end);
            }
            (
                CmEventType::AddrError
                | CmEventType::RouteError
                | CmEventType::ConnectError
                | CmEventType::Unreachable
                | CmEventType::Rejected
                | CmEventType::DeviceRemoval
                | CmEventType::AddrChange,
                _,
            ) => {
                let end = c.ended();
                self.remove(i);
                self.outs.push(end);
            }
            _ => {}
        }
    }

    /// A connect request: rejected at once if its private data is not one we speak, else
    /// reported for the engine to accept.
    fn on_request(&mut self, id: CmId, ev: &CmEvent) {
        let (Some(local), Some(peer)) = (id.local_addr(), id.peer_addr()) else {
            reject(&id);
            return;
        };
        let v6 = matches!(canonical(local.ip()), IpAddr::V6(_));
        let Some(version) = negotiate(&ev.private_data, v6) else {
            log(&format!("reject {peer}: incompatible private data"));
            reject(&id);
            return;
        };
        self.outs.push(IbOut::Request(Box::new(Request {
            id,
            local,
            peer,
            version,
            v6,
            param: ev.conn,
        })));
    }

    /// Answers a connect request the engine accepted on `lane`: the connection's resources,
    /// then the CM accept with the chosen version. On failure the request is rejected and
    /// freed; the caller tells the engine.
    pub(super) fn accept(
        &mut self,
        req: Request,
        lane: Lane,
        laddr: IpAddr,
        faddr: IpAddr,
    ) -> Result<(), VerbsError> {
        let Request {
            id,
            local,
            peer,
            version: (major, minor),
            v6,
            param,
        } = req;
        let i = self.insert(IbConn {
            id,
            conn: lane.conn,
            path: lane.path,
            epoch: lane.epoch,
            st: St::Accepted,
            v6,
            laddr,
            faddr,
            res: None,
            more: false,
            held: None,
            peer_qpn: param.qp_num,
        });
        let r = self.make_res(i).and_then(|rd| {
            let cn = self.conns[i].as_mut().expect("live");
            let pd = ConnPriv {
                saddr: canonical(local.ip()),
                daddr: canonical(peer.ip()),
                major,
                minor,
                minor_mask: SUPPORTED_MASK,
                toss: 0,
                ack_seq: 0,
                credit: 0,
            }
            .encode(v6);
            let rr = rd.min(param.initiator_depth);
            let id = rd.min(param.responder_resources);
            cn.id.accept(&ConnParam {
                private_data: &pd,
                responder_resources: rr,
                initiator_depth: id,
                flow_control: false,
                retry_count: RETRY,
                rnr_retry_count: RETRY,
            })
        });
        if let Err(e) = &r {
            log(&format!("accept {peer}: {e}"));
            if let Some(cn) = &self.conns[i] {
                reject(&cn.id);
            }
            self.remove(i);
        }
        r
    }
}

/// Rejects a connect request as incompatible.
pub(super) fn reject(id: &CmId) {
    let _ = id.reject(&REJ_INCOMPAT.to_ne_bytes());
}
