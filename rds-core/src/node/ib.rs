//! The RDS/IB transport (`net/rds/ib*.c`, `rdma_transport.c`) over rdma-core loaded at run time
//! ([`crate::ib`]): one RDMA CM listener per local address that an RDMA device's GID table
//! holds (port 18634 for IPv4, 16385 for IPv6, `RDMA_PS_TCP`), reliable-connected queue pairs,
//! the 32/56-byte connection private data with protocol 3.1, a receive ring of
//! header + 4096-byte buffers, and one SEND per frame the engine hands out (header first, at most
//! 4096 payload bytes, the solicited bit where the engine asks for it). Checksums,
//! fragmentation, reassembly, `h_ack` piggybacking and ACK-only frames are the engine's
//! ([`Stack::poll_transmit`], [`Stack::handle_fragment`], [`Stack::handle_ack_sent`]).
//!
//! Credits: we advertise none (`dp_credit` = 0), so flow control is off whatever the peer
//! offers, as with a Linux peer at its default `flow_control = 0`; receivers that run out of
//! posted buffers rely on RNR retry 7 (infinite), which both sides request.
//!
//! Completions: one completion queue per connection with its own completion channel, whose fd
//! is in the node's epoll set; the queue is re-armed and drained on each wakeup, so an idle
//! connection costs no CPU. Runs on the node's I/O thread, like the TCP transport.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::ib::cm::{CmEvent, CmEventType, CmId, ConnParam, EventChannel, IdHandle};
use crate::ib::{
    self, Access, Cq, MemMr, Mr, Pd, Qp, QpCap, QpInit, RecvWr, SendOp, SendWr, Sge, VerbsError,
    WcStatus, WorkCompletion,
};
use crate::proto::{canonical, ConnId, FrameKind, SockId, Stack, Transmit, TransportKind};
use crate::rdma::{make_cookie, MrFlags, RdmaBuffer, RdmaOp, RdmaStatus};
use crate::stats::{IbCounter, IbStats};

use super::tap::{Dir, IbQps, Tap};
use crate::sys::{Epoll, EPOLLIN};
use crate::time::Instant;
use crate::wire::{FRAG_SIZE, HEADER_LEN};

pub use crate::info::IbQpInfo;

/// Epoll token of the connection manager's event channel.
pub(crate) const TOKEN_IB_CM: u64 = 3 << 32;
/// Epoll tokens of the completion channels (`| slot`).
const TOKEN_IB_CQ: u64 = 4 << 32;
const TOKEN_MASK: u64 = (1 << 32) - 1;

/// `RDS_PORT`: the RDMA CM port for IPv4.
pub const RDS_IB_PORT_V4: u16 = 18634;
/// `RDS_CM_PORT`: the RDMA CM port for IPv6.
pub const RDS_IB_PORT_V6: u16 = 16385;

/// One receive or send buffer: a header and a fragment.
const SLOT: usize = HEADER_LEN + FRAG_SIZE;
/// Receive work requests posted per connection.
const RECV_WRS: usize = 256;
/// Send work requests per connection (plus one for the ACK-only frame).
const SEND_WRS: usize = 128;
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
/// `RDS_RDMA_RESOLVE_TIMEOUT_MS`.
const RESOLVE_TIMEOUT: Duration = Duration::from_millis(5000);
/// Protocol versions we take part in (`RDS_IB_SUPPORTED_PROTOCOLS`: 3.1 and 4.1).
const SUPPORTED_MASK: u16 = 0x0003;
/// `RDS_RDMA_REJ_INCOMPAT`, sent as a host-endian int.
const REJ_INCOMPAT: i32 = 1;
/// Transport and RNR retries (7: RNR retries forever, as RDS asks).
const RETRY: u8 = 7;
/// Most RDMA reads in flight per direction.
const MAX_RD_ATOM: i32 = 16;

/// The connection private data (`struct rds_ib_connect_private` / `rds6_ib_connect_private`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnPriv {
    /// The sender's address.
    pub saddr: IpAddr,
    /// The receiver's address.
    pub daddr: IpAddr,
    /// Protocol major (3 or 4).
    pub major: u8,
    /// Protocol minor.
    pub minor: u8,
    /// Supported minor versions (bit n = minor n).
    pub minor_mask: u16,
    /// Type of service.
    pub toss: u8,
    /// Last sequence received (an acknowledgement).
    pub ack_seq: u64,
    /// Receive credits offered (0: no flow control).
    pub credit: u32,
}

impl ConnPriv {
    /// Bytes of the IPv4 form.
    pub const LEN_V4: usize = 32;
    /// Bytes of the IPv6 form.
    pub const LEN_V6: usize = 56;

    /// The wire form: 32 bytes when both addresses are IPv4, else 56 (v4-mapped as needed).
    pub fn encode(&self, v6: bool) -> Vec<u8> {
        let (mut b, off) = if v6 {
            let mut b = vec![0u8; Self::LEN_V6];
            b[0..16].copy_from_slice(&v6_octets(self.saddr));
            b[16..32].copy_from_slice(&v6_octets(self.daddr));
            (b, 32)
        } else {
            let mut b = vec![0u8; Self::LEN_V4];
            b[0..4].copy_from_slice(&v4_octets(self.saddr));
            b[4..8].copy_from_slice(&v4_octets(self.daddr));
            (b, 8)
        };
        b[off] = self.major;
        b[off + 1] = self.minor;
        b[off + 2..off + 4].copy_from_slice(&self.minor_mask.to_be_bytes());
        b[off + 4] = self.toss;
        b[off + 8..off + 16].copy_from_slice(&self.ack_seq.to_be_bytes());
        b[off + 16..off + 20].copy_from_slice(&self.credit.to_be_bytes());
        b
    }

    /// Parses the form for the family (`v6`); `None` if too short. Longer input (the CM pads
    /// private data) is accepted.
    pub fn decode(b: &[u8], v6: bool) -> Option<ConnPriv> {
        let (saddr, daddr, off) = if v6 {
            if b.len() < Self::LEN_V6 {
                return None;
            }
            let s: [u8; 16] = b[0..16].try_into().ok()?;
            let d: [u8; 16] = b[16..32].try_into().ok()?;
            (
                canonical(IpAddr::from(s)),
                canonical(IpAddr::from(d)),
                32usize,
            )
        } else {
            if b.len() < Self::LEN_V4 {
                return None;
            }
            let s: [u8; 4] = b[0..4].try_into().ok()?;
            let d: [u8; 4] = b[4..8].try_into().ok()?;
            (IpAddr::from(s), IpAddr::from(d), 8usize)
        };
        Some(ConnPriv {
            saddr,
            daddr,
            major: b[off],
            minor: b[off + 1],
            minor_mask: u16::from_be_bytes([b[off + 2], b[off + 3]]),
            toss: b[off + 4],
            ack_seq: u64::from_be_bytes(b[off + 8..off + 16].try_into().ok()?),
            credit: u32::from_be_bytes(b[off + 16..off + 20].try_into().ok()?),
        })
    }
}

fn v4_octets(ip: IpAddr) -> [u8; 4] {
    match canonical(ip) {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(_) => [0; 4],
    }
}

fn v6_octets(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// The passive side's version choice for a connect request's private data
/// (`rds_ib_protocol_compatible`): `None` rejects.
pub fn negotiate(private_data: &[u8], v6: bool) -> Option<(u8, u8)> {
    if private_data.is_empty() {
        return None;
    }
    let Some(p) = ConnPriv::decode(private_data, v6).filter(|p| p.major != 0) else {
        // Short data or major 0: the kernel answers 4.0.
        return Some((4, 0));
    };
    let common = p.minor_mask & SUPPORTED_MASK;
    if p.major == 4 && common != 0 {
        return Some((4, (15 - common.leading_zeros()) as u8));
    }
    if (p.major, p.minor) == (3, 1) {
        return Some((3, 1));
    }
    None
}

/// The RDMA CM port for a peer address.
pub fn cm_port(ip: IpAddr) -> u16 {
    match canonical(ip) {
        IpAddr::V4(_) => RDS_IB_PORT_V4,
        IpAddr::V6(_) => RDS_IB_PORT_V6,
    }
}

/// The RDMA device whose GID table holds `ip` (`rds_ib_laddr_check` by address), if any.
pub fn device_for(ip: IpAddr) -> Result<Option<String>, ib::IbUnavailable> {
    let want = v6_octets(canonical(ip));
    Ok(ib::availability()?
        .into_iter()
        .filter(ib::DeviceSummary::usable_for_rds)
        .find(|d| d.ports.iter().any(|p| p.gids.iter().any(|g| g.0 == want)))
        .map(|d| d.name))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
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

/// An RDMA operation posted on a connection: the local registrations stay until its last
/// work request completed (or the queue pair is gone).
struct Inflight {
    op: Arc<RdmaOp>,
    _mrs: Vec<MemMr>,
    wrs: usize,
}

/// Verbs resources of one connection. Field order is drop order: the queue pair first.
struct Res {
    qp: Qp,
    cq: Cq,
    recv: Mr,
    send: Mr,
    ack: Mr,
    free: Vec<usize>,
    ack_busy: bool,
    /// RDMA operations in flight, by slot.
    rdma: Vec<Option<Inflight>>,
    /// Send queue entries used by them.
    rdma_wrs: usize,
    /// Scatter/gather elements per RDMA work request.
    max_sge: usize,
    /// Payload bytes still expected of the message being received.
    rx_left: usize,
}

/// A region registered for peers (`RDS_GET_MR`).
struct RegMr {
    sock: SockId,
    use_once: bool,
    len: usize,
    _mr: MemMr,
}

/// The kernel's two MR pools: up to 8 KiB, and up to 1 MiB.
fn mr_class(len: usize) -> (IbCounter, IbCounter) {
    if len <= 8192 {
        (IbCounter::IbRdmaMr8kAlloc, IbCounter::IbRdmaMr8kUsed)
    } else {
        (IbCounter::IbRdmaMr1mAlloc, IbCounter::IbRdmaMr1mUsed)
    }
}

fn mr_free_class(len: usize) -> IbCounter {
    if len <= 8192 {
        IbCounter::IbRdmaMr8kFree
    } else {
        IbCounter::IbRdmaMr1mFree
    }
}

struct IbConn {
    id: CmId,
    conn: ConnId,
    path: usize,
    epoch: u32,
    st: St,
    v6: bool,
    res: Option<Res>,
    /// The engine may hold more frames (pulling stopped for lack of send slots).
    more: bool,
    /// A frame taken from the engine that waits for send queue room (RDMA resources).
    held: Option<Transmit>,
    /// The peer's queue pair number (from the CM exchange), for traces.
    peer_qpn: u32,
}

/// The IB transport of a node.
pub(crate) struct Ib {
    epoll: Arc<Epoll>,
    chan: EventChannel,
    listeners: Vec<(IpAddr, CmId)>,
    conns: Vec<Option<IbConn>>,
    wcs: Vec<WorkCompletion>,
    buf: Vec<u8>,
    /// One protection domain per device (by name), shared by its connections and regions.
    pds: Vec<(String, Pd)>,
    /// Regions registered for peers, by remote key.
    mrs: HashMap<u32, RegMr>,
    /// The `ib_*` counters.
    stats: Arc<IbStats>,
    /// The node's trace tap.
    tap: Arc<Tap>,
}

impl std::fmt::Debug for Ib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ib")
            .field("listeners", &self.listeners.len())
            .field("conns", &self.conns.iter().flatten().count())
            .finish()
    }
}

fn log(what: &str) {
    if std::env::var_os("RDS_IB_DEBUG").is_some() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        eprintln!(
            "rds-ib: {}.{:03} {what}",
            t.as_secs() % 1000,
            t.subsec_millis()
        );
    }
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
            wcs: vec![WorkCompletion::default(); 64],
            buf: vec![0; SLOT],
            pds: Vec::new(),
            mrs: HashMap::new(),
            stats,
            tap,
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

    /// `RDS_GET_MR` for a socket bound to `ip`: registers the range for remote read and
    /// write, zero-based, and returns its cookie.
    ///
    /// # Errors
    /// `EADDRNOTAVAIL`-like `InvalidInput` when no device holds `ip`; the registration's error.
    pub(crate) fn get_mr(
        &mut self,
        ip: IpAddr,
        sock: SockId,
        buf: &RdmaBuffer,
        off: usize,
        len: usize,
        flags: MrFlags,
    ) -> std::io::Result<u64> {
        let ctx = self.ctx_for(ip)?;
        let pd = self.pd_for(&ctx).map_err(to_io)?;
        let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let mr = pd
            .reg_mem(buf.mem(), off, len, access, true)
            .map_err(to_io)?;
        let rkey = mr.rkey();
        let cookie = make_cookie(rkey, buf.page_offset(off));
        let (alloc, used) = mr_class(len);
        self.stats.inc(alloc);
        self.stats.inc(used);
        self.mrs.insert(
            rkey,
            RegMr {
                sock,
                use_once: flags.use_once,
                len,
                _mr: mr,
            },
        );
        Ok(cookie)
    }

    /// Registers the local memory of an RDMA operation (for the adapter's own access) on the
    /// device of `ip`, one registration per range.
    ///
    /// # Errors
    /// No device holds `ip` (`ENODEV`), or a registration failed.
    pub(crate) fn register_local(
        &mut self,
        ip: IpAddr,
        local: &[crate::rdma::LocalVec],
    ) -> std::io::Result<Vec<MemMr>> {
        let ctx = self.ctx_for(ip)?;
        let pd = self.pd_for(&ctx).map_err(to_io)?;
        local
            .iter()
            .map(|v| {
                pd.reg_mem(v.buf.mem(), v.off, v.len, Access::LOCAL_WRITE, false)
                    .map_err(to_io)
            })
            .collect()
    }

    fn ctx_for(&self, ip: IpAddr) -> std::io::Result<ib::Context> {
        let ip = canonical(ip);
        self.listeners
            .iter()
            .find(|(a, _)| *a == ip)
            .and_then(|(_, id)| id.context())
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENODEV))
    }

    /// `RDS_FREE_MR`. Returns whether the socket had the region.
    pub(crate) fn free_mr(&mut self, sock: SockId, rkey: u32) -> bool {
        if self.mrs.get(&rkey).is_some_and(|m| m.sock == sock) {
            self.release_mr(rkey);
            return true;
        }
        false
    }

    fn release_mr(&mut self, rkey: u32) {
        if let Some(m) = self.mrs.remove(&rkey) {
            self.stats.inc(mr_free_class(m.len));
        }
    }

    /// Whether `sock` has the region `rkey` (an `RDMA_DEST` cookie must name one).
    pub(crate) fn has_mr(&self, sock: SockId, rkey: u32) -> bool {
        self.mrs.get(&rkey).is_some_and(|m| m.sock == sock)
    }

    /// A message with an RDMA operation on `rkey` reached `sock` (`rds_rdma_unuse`).
    pub(crate) fn unuse(&mut self, sock: SockId, rkey: u32) {
        if self
            .mrs
            .get(&rkey)
            .is_some_and(|m| m.sock == sock && m.use_once)
        {
            self.release_mr(rkey);
        }
    }

    /// A socket closed: its regions go.
    pub(crate) fn free_sock(&mut self, sock: SockId) {
        let keys: Vec<u32> = self
            .mrs
            .iter()
            .filter(|(_, m)| m.sock == sock)
            .map(|(&k, _)| k)
            .collect();
        for k in keys {
            self.release_mr(k);
        }
    }

    /// Regions registered for peers.
    pub(crate) fn mr_count(&self) -> usize {
        self.mrs.len()
    }

    /// Whether a token is one of ours.
    pub(crate) fn owns_token(token: u64) -> bool {
        let kind = token & !TOKEN_MASK;
        kind == TOKEN_IB_CM || kind == TOKEN_IB_CQ
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
        id.bind(SocketAddr::new(ip, cm_port(ip))).map_err(to_io)?;
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
        if let Some(i) = self.find(conn, path, epoch) {
            if let Some(c) = &self.conns[i] {
                let _ = c.id.disconnect();
            }
            self.remove(i);
        }
    }

    /// Disconnects everything (node shutdown).
    pub(crate) fn close_all(&mut self) {
        for i in 0..self.conns.len() {
            if let Some(c) = &self.conns[i] {
                let _ = c.id.disconnect();
            }
            self.remove(i);
        }
        self.listeners.clear();
    }

    /// An epoll event for one of our tokens.
    pub(crate) fn handle_event(&mut self, token: u64, stack: &mut Stack, now: Instant) {
        if token == TOKEN_IB_CM {
            loop {
                match self.chan.get_event() {
                    Ok(Some(ev)) => self.cm_event(ev, stack, now),
                    Ok(None) => break,
                    Err(e) => {
                        log(&format!("cm channel: {e}"));
                        break;
                    }
                }
            }
        } else if token & !TOKEN_MASK == TOKEN_IB_CQ {
            self.completions((token & TOKEN_MASK) as usize, stack, now);
        }
    }

    fn cm_event(&mut self, mut ev: CmEvent, stack: &mut Stack, now: Instant) {
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

    /// Creates the queue pair and buffers of connection `i` and posts its receive ring.
    /// Returns the RDMA read depth to offer.
    fn make_res(&mut self, i: usize) -> Result<u8, VerbsError> {
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
        for s in 0..RECV_WRS {
            let sge = [recv.sge(s * SLOT, SLOT).map_err(out_of_range)?];
            qp.post_recv(&[RecvWr {
                wr_id: RECV_WR_BIT | s as u64,
                sges: &sge,
            }])
            .map_err(|e| e.source)?;
        }
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
            ack_busy: false,
            rdma: (0..RDMA_SLOTS).map(|_| None).collect(),
            rdma_wrs: 0,
            max_sge,
            rx_left: 0,
        });
        Ok(rd)
    }

    /// Posts the engine's frames for the path while send slots last.
    pub(crate) fn pull(&mut self, stack: &mut Stack, now: Instant, conn: ConnId, path: usize) {
        let Some(i) = self.find_up(conn, path) else {
            return;
        };
        let c = self.conns[i].as_mut().expect("live");
        let epoch = c.epoch;
        let Some(r) = c.res.as_mut() else {
            return;
        };
        let mut failed = false;
        loop {
            if r.free.is_empty() {
                self.stats.inc(IbCounter::IbTxRingFull);
                c.more = true;
                break;
            }
            let t = match c.held.take() {
                Some(t) => t,
                None => match stack.poll_transmit(now, conn, path) {
                    Some(t) => t,
                    None => {
                        c.more = false;
                        break;
                    }
                },
            };
            let mut fence = false;
            if let Some(op) = &t.rdma {
                match post_rdma(r, &op.0) {
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
                        stack.rdma_complete(&op.0, status);
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
                let off = slot * SLOT;
                let _ = r.send.write_at(off, &t.hdr);
                let _ = r.send.write_at(off + HEADER_LEN, &t.payload);
                let Ok(s) = r.send.sge(off, len) else {
                    failed = true;
                    break;
                };
                r.qp.post_send(&[SendWr {
                    wr_id: slot as u64,
                    op: SendOp::Send,
                    sges: &[s],
                    signaled: true,
                    solicited: t.solicited,
                    fence,
                }])
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
                let (laddr, faddr, _) = stack.conn_addrs(conn);
                let qps = tap_qps(r, c.peer_qpn);
                self.tap.record_ib(
                    Dir::Tx,
                    laddr,
                    faddr,
                    path,
                    qps,
                    t.solicited,
                    &t.hdr,
                    &t.payload,
                );
            }
        }
        if failed {
            let _ = c.id.disconnect();
            self.remove(i);
            stack.handle_disconnected(now, conn, path, epoch);
        }
    }

    /// Drains connection `i`'s completion channel and queue.
    fn completions(&mut self, i: usize, stack: &mut Stack, now: Instant) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        let (conn, path, epoch) = (c.conn, c.path, c.epoch);
        let Some(r) = c.res.as_mut() else {
            return;
        };
        while let Ok(true) = r.cq.get_event() {}
        self.stats.inc(IbCounter::IbTaskletCall);
        let mut dead = r.cq.req_notify(false).is_err();
        let mut engine_dropped = false;
        let mut want_pull = false;
        let (mut tx_seen, mut rx_seen) = (false, false);
        'outer: while !dead {
            let n = match r.cq.poll(&mut self.wcs) {
                Ok(0) => break,
                Ok(n) => n,
                Err(_) => {
                    dead = true;
                    break;
                }
            };
            for wc in &self.wcs[..n] {
                let id = wc.wr_id();
                if id & RDMA_WR_BIT != 0 && id != ACK_WR_ID {
                    let slot = (id & TOKEN_MASK) as usize;
                    if let Some(f) = r.rdma.get_mut(slot).and_then(Option::take) {
                        r.rdma_wrs -= f.wrs;
                        want_pull = true;
                        // `rds_ib_send_complete`: a flushed operation is reported when its
                        // message is dropped instead (never retransmitted).
                        let status = match wc.status() {
                            WcStatus::Success => Some(RdmaStatus::Success),
                            WcStatus::WrFlushErr => None,
                            WcStatus::RemAccessErr => Some(RdmaStatus::RemoteError),
                            _ => Some(RdmaStatus::OtherError),
                        };
                        if let Some(st) = status {
                            stack.rdma_complete(&f.op, st);
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
                    dead = true;
                    break 'outer;
                }
                if id == ACK_WR_ID {
                    tx_seen = true;
                    r.ack_busy = false;
                    stack.handle_ack_sent(conn, path, epoch);
                    want_pull = true;
                } else if id & RECV_WR_BIT != 0 {
                    rx_seen = true;
                    let slot = (id & TOKEN_MASK) as usize;
                    let len = (wc.byte_len() as usize).min(SLOT);
                    if slot >= RECV_WRS
                        || r.recv.read_at(slot * SLOT, &mut self.buf[..len]).is_err()
                    {
                        dead = true;
                        break 'outer;
                    }
                    count_rx(&self.stats, &mut r.rx_left, &self.buf[..len]);
                    if self.tap.enabled() && len >= HEADER_LEN {
                        let (laddr, faddr, _) = stack.conn_addrs(conn);
                        let qps = tap_qps(r, c.peer_qpn);
                        let (h, pl) = self.buf[..len].split_at(HEADER_LEN);
                        self.tap
                            .record_ib(Dir::Rx, laddr, faddr, path, qps, false, h, pl);
                    }
                    if stack
                        .handle_fragment(now, conn, path, epoch, &self.buf[..len])
                        .is_err()
                    {
                        // The engine dropped the path and queued its Disconnect.
                        engine_dropped = true;
                        break 'outer;
                    }
                    let Ok(sge) = r.recv.sge(slot * SLOT, SLOT) else {
                        dead = true;
                        break 'outer;
                    };
                    if r.qp
                        .post_recv(&[RecvWr {
                            wr_id: id,
                            sges: &[sge],
                        }])
                        .is_err()
                    {
                        dead = true;
                        break 'outer;
                    }
                    self.stats.inc(IbCounter::IbRxRefillFromCq);
                } else if id & RDMA_WR_BIT != 0 {
                    // handled above
                } else if (id as usize) < SEND_WRS {
                    tx_seen = true;
                    r.free.push(id as usize);
                    want_pull = true;
                }
            }
        }
        if tx_seen {
            self.stats.inc(IbCounter::IbTxCqEvent);
        }
        if rx_seen {
            self.stats.inc(IbCounter::IbRxCqEvent);
        }
        if engine_dropped {
            return;
        }
        if dead {
            let _ = c.id.disconnect();
            self.remove(i);
            stack.handle_disconnected(now, conn, path, epoch);
            return;
        }
        if want_pull && c.more {
            self.pull(stack, now, conn, path);
        }
    }
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
/// one signaled), ahead of its message's SEND.
fn post_rdma(r: &mut Res, op: &Arc<RdmaOp>) -> Rdma {
    let regs = op.take_regs();
    if regs.len() != op.local.len() || regs.is_empty() {
        return Rdma::Failed(RdmaStatus::OtherError);
    }
    let nwr = regs.len().div_ceil(r.max_sge);
    if nwr > RDMA_WRS {
        return Rdma::Failed(RdmaStatus::OtherError);
    }
    let slot = r.rdma.iter().position(Option::is_none);
    let Some(slot) = slot.filter(|_| r.rdma_wrs + nwr <= RDMA_WRS) else {
        *op.regs.lock().unwrap_or_else(|p| p.into_inner()) = regs;
        return Rdma::NoRoom;
    };
    let sges: Result<Vec<Sge<'_>>, _> = op
        .local
        .iter()
        .zip(&regs)
        .map(|(v, mr)| mr.sge(v.off, v.len))
        .collect();
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
        _mrs: regs,
        wrs: nwr,
    });
    Rdma::Posted
}

fn reject(id: &CmId) {
    let _ = id.reject(&REJ_INCOMPAT.to_ne_bytes());
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
    use std::net::{Ipv4Addr, Ipv6Addr};

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

    #[test]
    fn private_data_v4_bytes() {
        let p = ConnPriv {
            saddr: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 4)),
            daddr: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
            major: 3,
            minor: 1,
            minor_mask: 3,
            toss: 0,
            ack_seq: 0x0102_0304_0506_0708,
            credit: 0x11223344,
        };
        let b = p.encode(false);
        assert_eq!(
            b,
            [
                198, 18, 0, 4, 198, 18, 0, 2, 3, 1, 0, 3, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0x11,
                0x22, 0x33, 0x44, 0, 0, 0, 0
            ]
        );
        assert_eq!(ConnPriv::decode(&b, false), Some(p));
        let mut padded = b.clone();
        padded.resize(56, 0);
        assert_eq!(ConnPriv::decode(&padded, false), Some(p));
        assert_eq!(ConnPriv::decode(&b[..31], false), None);
    }

    #[test]
    fn private_data_v6_bytes() {
        let s: Ipv6Addr = "fd00::4".parse().unwrap();
        let d: Ipv6Addr = "fd00::2".parse().unwrap();
        let p = ConnPriv {
            saddr: IpAddr::V6(s),
            daddr: IpAddr::V6(d),
            major: 3,
            minor: 1,
            minor_mask: 3,
            toss: 5,
            ack_seq: 9,
            credit: 0,
        };
        let b = p.encode(true);
        assert_eq!(b.len(), 56);
        assert_eq!(&b[0..16], &s.octets());
        assert_eq!(&b[16..32], &d.octets());
        assert_eq!(&b[32..40], &[3, 1, 0, 3, 5, 0, 0, 0]);
        assert_eq!(&b[40..48], &9u64.to_be_bytes());
        assert_eq!(&b[48..56], &[0; 8]);
        assert_eq!(ConnPriv::decode(&b, true), Some(p));
    }

    #[test]
    fn version_negotiation_as_the_kernel() {
        let mk = |major: u8, minor: u8, mask: u16| {
            ConnPriv {
                saddr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                daddr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                major,
                minor,
                minor_mask: mask,
                toss: 0,
                ack_seq: 0,
                credit: 0,
            }
            .encode(false)
        };
        assert_eq!(negotiate(&mk(3, 1, 3), false), Some((3, 1)));
        assert_eq!(negotiate(&mk(4, 1, 3), false), Some((4, 1)));
        assert_eq!(negotiate(&mk(4, 0, 1), false), Some((4, 0)));
        assert_eq!(negotiate(&mk(4, 1, 4), false), None);
        assert_eq!(negotiate(&mk(3, 0, 3), false), None);
        assert_eq!(negotiate(&mk(0, 0, 0), false), Some((4, 0)));
        assert_eq!(negotiate(&[1, 2, 3], false), Some((4, 0)));
        assert_eq!(negotiate(&[], false), None);
        assert_eq!(cm_port("10.0.0.1".parse().unwrap()), 18634);
        assert_eq!(cm_port("fd00::1".parse().unwrap()), 16385);
        assert_eq!(cm_port("::ffff:10.0.0.1".parse().unwrap()), 18634);
    }
}
