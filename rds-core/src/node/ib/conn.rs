//! The connection manager's lifecycle of one RDS/IB connection: the active side resolves the
//! address and route and connects with our private data; the passive side checks the
//! request's private data ([`negotiate`]), asks the engine to accept and answers with the
//! chosen version; both go up on `ESTABLISHED` and tell the engine when a connection fails or
//! goes down.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::ib::cm::{CmEvent, CmEventType, CmId, ConnParam};
use crate::ib::VerbsError;
use crate::info::{canonical, ConnId, TransportKind};
use crate::proto::{Stack, Transmit};
use crate::stats::IbCounter;
use crate::time::Instant;
use crate::wire::ib_private::{cm_port, negotiate, ConnPriv, SUPPORTED_MASK};

use super::data::Res;
use super::{log, Ib};

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
    pub(super) res: Option<Res>,
    /// The engine may hold more frames (pulling stopped for lack of send slots).
    pub(super) more: bool,
    /// A frame taken from the engine that waits for send queue room (RDMA resources).
    pub(super) held: Option<Transmit>,
    /// The peer's queue pair number (from the CM exchange), for traces.
    pub(super) peer_qpn: u32,
}

impl Ib {
    /// Engine asked to connect `(conn, path)` with `epoch`.
    pub(crate) fn connect(
        &mut self,
        stack: &mut Stack,
        now: Instant,
        conn: ConnId,
        path: usize,
        epoch: u32,
    ) {
        let (laddr, faddr, _) = stack.conn_addrs(conn);
        let r = (|| {
            let id = self.chan.create_id()?;
            id.resolve_addr(
                Some(SocketAddr::new(laddr, 0)),
                SocketAddr::new(faddr, cm_port(faddr)),
                RESOLVE_TIMEOUT,
            )?;
            Ok::<_, VerbsError>(id)
        })();
        match r {
            Ok(id) => {
                self.insert(IbConn {
                    id,
                    conn,
                    path,
                    epoch,
                    st: St::Resolving,
                    v6: matches!(canonical(faddr), IpAddr::V6(_)),
                    res: None,
                    more: false,
                    held: None,
                    peer_qpn: 0,
                });
            }
            Err(e) => {
                log(&format!("connect {laddr} -> {faddr}: {e}"));
                stack.handle_connect_failed(now, conn, path, epoch);
            }
        }
    }

    /// Engine dropped the path: disconnect and free.
    pub(crate) fn disconnect(&mut self, conn: ConnId, path: usize, epoch: u32) {
        self.ops.sweep();
        if let Some(i) = self.find(conn, path, epoch) {
            if let Some(c) = &self.conns[i] {
                let _ = c.id.disconnect();
            }
            self.remove(i);
        }
    }

    pub(super) fn cm_event(&mut self, mut ev: CmEvent, stack: &mut Stack, now: Instant) {
        self.stats.inc(IbCounter::IbEvtHandlerCall);
        log(&format!("cm event {:?} status {}", ev.kind, ev.status));
        if ev.kind == CmEventType::ConnectRequest {
            if let Some(id) = ev.new_id.take() {
                self.on_request(id, &ev, stack, now);
            }
            return;
        }
        let Some(i) = self.find_id(ev.id) else {
            return;
        };
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        let (conn, path, epoch) = (c.conn, c.path, c.epoch);
        match (ev.kind, c.st) {
            (CmEventType::AddrResolved, St::Resolving) => {
                if c.id.resolve_route(RESOLVE_TIMEOUT).is_ok() {
                    c.st = St::Routing;
                } else {
                    self.remove(i);
                    stack.handle_connect_failed(now, conn, path, epoch);
                }
            }
            (CmEventType::RouteResolved, St::Routing) => {
                let (laddr, faddr, _) = stack.conn_addrs(conn);
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
                        stack.handle_connect_failed(now, conn, path, epoch);
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
                if ok && stack.handle_connected(now, conn, path, epoch) {
                    // Going up starts a new epoch; frames of this connection carry it.
                    c.epoch = stack.path_state(conn, path).1;
                    c.st = St::Up;
                    self.pull(stack, now, conn, path);
                } else {
                    let _ = c.id.disconnect();
                    self.remove(i);
                    if !ok {
                        stack.handle_connect_failed(now, conn, path, epoch);
                    }
                }
            }
            (CmEventType::Established, St::Accepted) => {
                c.st = St::Up;
                self.pull(stack, now, conn, path);
            }
            (CmEventType::Disconnected, st) => {
                let _ = c.id.disconnect();
                self.remove(i);
                if matches!(st, St::Up | St::Accepted) {
                    stack.handle_disconnected(now, conn, path, epoch);
                } else {
                    stack.handle_connect_failed(now, conn, path, epoch);
                }
            }
            (
                CmEventType::AddrError
                | CmEventType::RouteError
                | CmEventType::ConnectError
                | CmEventType::Unreachable
                | CmEventType::Rejected
                | CmEventType::DeviceRemoval
                | CmEventType::AddrChange,
                st,
            ) => {
                self.remove(i);
                if matches!(st, St::Up | St::Accepted) {
                    stack.handle_disconnected(now, conn, path, epoch);
                } else {
                    stack.handle_connect_failed(now, conn, path, epoch);
                }
            }
            _ => {}
        }
    }

    fn on_request(&mut self, id: CmId, ev: &CmEvent, stack: &mut Stack, now: Instant) {
        let (Some(local), Some(peer)) = (id.local_addr(), id.peer_addr()) else {
            reject(&id);
            return;
        };
        let v6 = matches!(canonical(local.ip()), IpAddr::V6(_));
        let Some((major, minor)) = negotiate(&ev.private_data, v6) else {
            log(&format!("reject {peer}: incompatible private data"));
            reject(&id);
            return;
        };
        let (c, p, epoch) = match stack.handle_accept(
            now,
            local.ip(),
            peer.ip(),
            TransportKind::Ib,
            peer.port(),
            Duration::ZERO,
        ) {
            Ok(x) => x,
            Err(e) => {
                log(&format!("reject {peer}: {e:?}"));
                if e == crate::proto::AcceptError::Raced {
                    self.stats.inc(IbCounter::IbConnectRaced);
                }
                reject(&id);
                return;
            }
        };
        let i = self.insert(IbConn {
            id,
            conn: c,
            path: p,
            epoch,
            st: St::Accepted,
            v6,
            res: None,
            more: false,
            held: None,
            peer_qpn: ev.conn.qp_num,
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
            let rr = rd.min(ev.conn.initiator_depth);
            let id = rd.min(ev.conn.responder_resources);
            cn.id.accept(&ConnParam {
                private_data: &pd,
                responder_resources: rr,
                initiator_depth: id,
                flow_control: false,
                retry_count: RETRY,
                rnr_retry_count: RETRY,
            })
        });
        if let Err(e) = r {
            log(&format!("accept {peer}: {e}"));
            if let Some(cn) = &self.conns[i] {
                reject(&cn.id);
            }
            self.remove(i);
            stack.handle_disconnected(now, c, p, epoch);
        }
    }
}

fn reject(id: &CmId) {
    let _ = id.reject(&REJ_INCOMPAT.to_ne_bytes());
}
