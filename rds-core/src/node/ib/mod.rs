//! The RDS/IB transport (`net/rds/ib*.c`, `rdma_transport.c`) over rdma-core loaded at run time
//! ([`crate::ib`]): one RDMA CM listener per local address that an RDMA device's GID table
//! holds (port 18634 for IPv4, 16385 for IPv6, `RDMA_PS_TCP`), reliable-connected queue pairs,
//! the 32/56-byte connection private data with protocol 3.1 ([`crate::wire::ib_private`]), a
//! receive ring of header + 4096-byte buffers, and one SEND per frame the engine hands out
//! (header first, at most 4096 payload bytes, the solicited bit where the engine asks for it).
//! Checksums, fragmentation, reassembly, `h_ack` piggybacking and ACK-only frames are the
//! engine's ([`Stack::poll_transmit`], [`Stack::handle_fragment`], [`Stack::handle_ack_sent`]).
//!
//! Credits: we advertise none (`dp_credit` = 0), so flow control is off whatever the peer
//! offers, as with a Linux peer at its default `flow_control = 0`; receivers that run out of
//! posted buffers rely on RNR retry 7 (infinite), which both sides request.
//!
//! Completions: one completion queue per connection with its own completion channel, whose fd
//! is in the node's epoll set. An event on the channel is taken and the queue drained, but it
//! is not re-armed then: the thread that runs the node's I/O (the I/O thread, or an application
//! thread leading it while it waits for its socket, `node/lead.rs`) polls the queues that are
//! not armed before it sleeps ([`Transport::poll_before_sleep`]), and arms a queue only when
//! that poll finds nothing, then polls it once more (a completion between the two raised no
//! event). So the completions that come while the node works are reaped without an event, a
//! re-arm or a wake-up, and an idle connection still costs no CPU. An event still pending
//! after such a poll is harmless: the channel fd stays readable (level-triggered), the next
//! round takes it and finds the queue empty or with newer completions.
//!
//! This file holds the transport's state, its listeners, its connection table and its side
//! of the node's transport contract ([`Transport`], `node/transport.rs`); `conn` runs the
//! connection manager's lifecycle of a connection, `data` its queue pair and data path, `mr`
//! the memory registrations (regions for peers, local memory of RDMA operations). `conn` and
//! `data` report what the engine must hear ([`IbOut`], defined here); `apply` applies it to
//! the engine, the one file here that tells the [`Stack`] anything.

mod apply;
mod conn;
mod data;
mod mr;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::ib::cm::{CmId, EventChannel, IdHandle, PeerConnParam};
use crate::ib::{self, Pd, VerbsError, WorkCompletion};
use crate::info::{canonical, ConnId, TransportKind};
use crate::proto::rdma_op::{RdmaOp, RdmaStatus};
use crate::proto::{DropReason, Stack};
use crate::stats::IbStats;
use crate::wire::ib_private::cm_port;

use super::tap::Tap;
use super::transport::Transport;
use crate::sys::{Epoll, EPOLLIN};
use crate::time::Instant;
use conn::{IbConn, St};
use data::SLOT;
use mr::{OpRegistry, RegMr};

pub use crate::info::IbQpInfo;

/// Epoll token of the connection manager's event channel.
pub(crate) const TOKEN_IB_CM: u64 = 3 << 32;
/// Epoll tokens of the completion channels (`| slot`).
const TOKEN_IB_CQ: u64 = 4 << 32;
const TOKEN_MASK: u64 = (1 << 32) - 1;

/// Work completions taken per `poll_cq`.
const POLL_BATCH: usize = 64;

/// A connection's engine path and the epoch its reports quote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lane {
    conn: ConnId,
    path: usize,
    epoch: u32,
}

/// A connect request whose private data we accept, waiting for the engine's answer.
struct Request {
    id: CmId,
    local: SocketAddr,
    peer: SocketAddr,
    /// The protocol version to answer with.
    version: (u8, u8),
    v6: bool,
    /// The peer's connection parameters.
    param: PeerConnParam,
}

/// What a handler learnt, for the engine.
enum IbOut {
    /// A connect request (the engine accepts it on a path, or it is rejected).
    Request(Box<Request>),
    /// Our attempt in slot `idx` was established at a version we support: the engine says
    /// whether the path goes up.
    Established { idx: usize, lane: Lane },
    /// An accepted connection was established: its frames can go.
    Ready(Lane),
    /// An attempt failed (its connection is gone).
    ConnectFailed(Lane),
    /// A connection that was up or accepted ended (its connection is gone).
    Down(Lane),
    /// A fragment received in receive slot `slot`, copied to the transport's buffer
    /// (`len` bytes); the slot is posted again once the engine took it.
    Fragment { lane: Lane, len: usize, slot: usize },
    /// The ACK-only frame's SEND completed.
    AckSent(Lane),
    /// An RDMA operation ended.
    RdmaDone(Arc<RdmaOp>, RdmaStatus),
}

/// The IB transport of a node.
pub(crate) struct Ib {
    epoll: Arc<Epoll>,
    chan: EventChannel,
    listeners: Vec<(IpAddr, CmId)>,
    conns: Vec<Option<IbConn>>,
    wcs: Vec<WorkCompletion>,
    buf: Vec<u8>,
    /// Receive slots consumed by one completion poll, reposted together (kept between polls
    /// for its capacity; at most [`POLL_BATCH`]).
    refill: Vec<usize>,
    /// One protection domain per device (by name), shared by its connections and regions.
    pds: Vec<(String, Pd)>,
    /// Regions registered for peers, by remote key.
    mrs: HashMap<u32, RegMr>,
    /// The local memory registrations of RDMA operations not yet posted, by operation.
    ops: OpRegistry,
    /// The `ib_*` counters.
    stats: Arc<IbStats>,
    /// The node's trace tap.
    tap: Arc<Tap>,
    /// Epoll tokens of ours that fired, handled when the engine lock is held
    /// ([`Transport::apply`]).
    ready: Vec<u64>,
    /// What the handlers reported, applied after each event ([`Ib::apply_reports`]).
    outs: Vec<IbOut>,
}

impl std::fmt::Debug for Ib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ib")
            .field("listeners", &self.listeners.len())
            .field("conns", &self.conns.iter().flatten().count())
            .finish()
    }
}

/// A message of the transport's connection handling, at debug level (`RDS_LOG=debug`, or
/// `RDS_IB_DEBUG` for these alone).
fn log(what: &str) {
    log::debug!("{what}");
}

impl Ib {
    /// Opens the libraries and the CM event channel (in `epoll` under [`TOKEN_IB_CM`]).
    ///
    /// # Errors
    /// The reason the transport is unavailable here.
    pub(crate) fn new(epoll: Arc<Epoll>, stats: Arc<IbStats>, tap: Arc<Tap>) -> Result<Ib, String> {
        let lib = ib::lib().map_err(|e| e.to_string())?;
        ib::availability().map_err(|e| e.to_string())?;
        let chan = EventChannel::new(lib).map_err(|e| e.to_string())?;
        epoll
            .add(chan.fd(), TOKEN_IB_CM, EPOLLIN)
            .map_err(|e| e.to_string())?;
        Ok(Ib {
            epoll,
            chan,
            listeners: Vec::new(),
            conns: Vec::new(),
            wcs: vec![WorkCompletion::default(); POLL_BATCH],
            buf: vec![0; SLOT],
            refill: Vec::with_capacity(POLL_BATCH),
            pds: Vec::new(),
            mrs: HashMap::new(),
            ops: OpRegistry::default(),
            stats,
            tap,
            ready: Vec::new(),
            outs: Vec::new(),
        })
    }

    /// The protection domain of a device, allocated on first use.
    fn pd_for(&mut self, ctx: &ib::Context) -> Result<Pd, VerbsError> {
        let name = ctx.device_name();
        if let Some((_, pd)) = self.pds.iter().find(|(n, _)| *n == name) {
            return Ok(pd.clone());
        }
        let pd = ctx.alloc_pd()?;
        self.pds.push((name, pd.clone()));
        Ok(pd)
    }

    fn ctx_for(&self, ip: IpAddr) -> std::io::Result<ib::Context> {
        let ip = canonical(ip);
        self.listeners
            .iter()
            .find(|(a, _)| *a == ip)
            .and_then(|(_, id)| id.context())
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENODEV))
    }

    /// Listens on `ip` if an RDMA device holds it. Returns whether it does.
    ///
    /// # Errors
    /// The device holds the address but the listener cannot be set up (for example the
    /// kernel's `rds_rdma` owns the port).
    pub(crate) fn listen(&mut self, ip: IpAddr) -> std::io::Result<bool> {
        let ip = canonical(ip);
        if self.listeners.iter().any(|(a, _)| *a == ip) {
            return Ok(true);
        }
        if device_for(ip).ok().flatten().is_none() {
            return Ok(false);
        }
        let id = self.chan.create_id().map_err(to_io)?;
        let at = SocketAddr::new(ip, cm_port(ip));
        id.bind(at)
            .map_err(|e| crate::node::tcp::port_taken(to_io(e), at, "rds_rdma"))?;
        id.listen(64).map_err(to_io)?;
        self.listeners.push((ip, id));
        Ok(true)
    }

    /// The queue pair numbers of the connections that have a queue pair.
    pub(crate) fn qps(&self) -> Vec<IbQpInfo> {
        self.conns
            .iter()
            .flatten()
            .filter_map(|c| {
                let r = c.res.as_ref()?;
                Some(IbQpInfo {
                    conn: c.conn,
                    local_qpn: r.qp.qp_num(),
                    peer_qpn: c.peer_qpn,
                })
            })
            .collect()
    }

    /// Live connections (any state).
    pub(crate) fn len(&self) -> usize {
        self.conns.iter().flatten().count()
    }

    fn find(&self, conn: ConnId, path: usize, epoch: u32) -> Option<usize> {
        self.conns.iter().position(|c| {
            c.as_ref()
                .is_some_and(|c| c.conn == conn && c.path == path && c.epoch == epoch)
        })
    }

    fn find_up(&self, conn: ConnId, path: usize) -> Option<usize> {
        self.conns.iter().position(|c| {
            c.as_ref()
                .is_some_and(|c| c.conn == conn && c.path == path && c.st == St::Up)
        })
    }

    fn find_id(&self, h: IdHandle) -> Option<usize> {
        self.conns
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.id.handle() == h))
    }

    fn insert(&mut self, c: IbConn) -> usize {
        if let Some(i) = self.conns.iter().position(Option::is_none) {
            self.conns[i] = Some(c);
            i
        } else {
            self.conns.push(Some(c));
            self.conns.len() - 1
        }
    }

    /// Frees a connection's resources (without telling the engine).
    fn remove(&mut self, idx: usize) {
        if let Some(c) = self.conns.get_mut(idx).and_then(Option::take) {
            if let Some(fd) = c.res.as_ref().and_then(|r| r.cq.fd()) {
                let _ = self.epoll.delete(fd);
            }
            drop(c);
        }
    }

    /// Disconnects everything (node shutdown).
    pub(crate) fn close_all(&mut self) {
        for i in 0..self.conns.len() {
            self.close(i);
        }
        self.listeners.clear();
    }

    /// An epoll event for one of our tokens, with the engine lock: each connection manager
    /// event's reports are applied before the next event is read.
    fn handle_token(&mut self, token: u64, stack: &mut Stack, now: Instant) {
        self.ops.sweep();
        if token == TOKEN_IB_CM {
            loop {
                match self.chan.get_event() {
                    Ok(Some(ev)) => {
                        self.cm_event(ev);
                        self.apply_reports(stack, now);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        log(&format!("cm channel: {e}"));
                        break;
                    }
                }
            }
        } else if token & !TOKEN_MASK == TOKEN_IB_CQ {
            self.cq_event((token & TOKEN_MASK) as usize, stack, now);
        }
    }
}

/// RDS/IB's side of the node's transport contract: its handlers need the engine's answers as
/// they go, so its events are noted without the engine lock and handled when it applies; its
/// posts never block, so any lane is idle for a sender and nothing waits to be flushed.
impl Transport for Ib {
    fn kind(&self) -> TransportKind {
        TransportKind::Ib
    }

    fn owns_token(&self, token: u64) -> bool {
        is_ours(token)
    }

    fn handle_event(&mut self, token: u64, _bits: u32, _now: Instant) {
        self.ready.push(token);
    }

    fn apply(&mut self, stack: &mut Stack, now: Instant) -> u64 {
        let mut ready = std::mem::take(&mut self.ready);
        for &token in &ready {
            self.handle_token(token, stack, now);
        }
        ready.clear();
        ready.append(&mut self.ready);
        self.ready = ready;
        0
    }

    fn has_reports(&self) -> bool {
        !self.ready.is_empty()
    }

    fn connect(&mut self, stack: &mut Stack, conn: ConnId, path: usize, epoch: u32, now: Instant) {
        self.connect_path(stack, conn, path, epoch, now);
    }

    fn disconnect(&mut self, conn: ConnId, path: usize, epoch: u32, _: DropReason, _: Instant) {
        self.close_path(conn, path, epoch);
    }

    fn transmit(&mut self, stack: &mut Stack, conn: ConnId, path: usize, now: Instant) {
        self.pull(stack, now, conn, path);
    }

    fn lane_idle(&mut self, _conn: ConnId, _path: usize, _open: bool) -> bool {
        true
    }

    fn polls_before_sleep(&self) -> bool {
        self.any_unarmed()
    }

    fn poll_before_sleep(&mut self, stack: &mut Stack, now: Instant) -> bool {
        self.ops.sweep();
        self.poll_unarmed(stack, now)
    }
}

/// Whether an epoll token is the transport's: its CM event channel or a completion channel.
fn is_ours(token: u64) -> bool {
    let kind = token & !TOKEN_MASK;
    kind == TOKEN_IB_CM || kind == TOKEN_IB_CQ
}

/// The RDMA device whose GID table holds `ip` (`rds_ib_laddr_check` by address), if any.
pub fn device_for(ip: IpAddr) -> Result<Option<String>, ib::IbUnavailable> {
    let want = match canonical(ip) {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    };
    Ok(ib::availability()?
        .into_iter()
        .filter(ib::DeviceSummary::usable_for_rds)
        .find(|d| d.ports.iter().any(|p| p.gids.iter().any(|g| g.0 == want)))
        .map(|d| d.name))
}

fn to_io(e: VerbsError) -> std::io::Error {
    std::io::Error::new(e.source.kind(), e.to_string())
}

fn out_of_range(e: ib::OutOfRange) -> VerbsError {
    VerbsError::invalid("sge", format!("{e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CM channel's token and every completion channel's are ours; the node's wake token
    /// and TCP's listener and connection tokens (`1 << 32`, `2 << 32`) are not.
    #[test]
    fn owns_its_channel_tokens_only() {
        assert!(is_ours(TOKEN_IB_CM));
        assert!(
            is_ours(TOKEN_IB_CQ) && is_ours(TOKEN_IB_CQ | 17) && is_ours(TOKEN_IB_CQ | TOKEN_MASK)
        );
        assert!(!is_ours(0));
        assert!(!is_ours(1 << 32) && !is_ours((1 << 32) | 4));
        assert!(!is_ours(2 << 32) && !is_ours((2 << 32) | 4));
        assert!(!is_ours(5 << 32));
    }
}
