//! [`Stack`]: one node's sans-IO RDS state. See the module documentation of [`super`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use core::time::Duration;

use crate::rdma::{RdmaNotify, RdmaOp, RdmaRef, RdmaStatus};
use crate::stats::{Counter, Stats};
use crate::time::Instant;
use crate::tunables::Tunables;
use crate::wire::{
    flags, monitor_mask, CongMap, ExtHeader, HeaderRepr, CONG_MAP_BYTES, FRAG_SIZE, MAX_MSG_SIZE,
    MPATH_WORKERS, PROBE_PORT,
};

use super::conn::{Conn, ConnTable, OutMsg, Path, SeqMemo, TxCur};
use super::rng::{jhash_1word, Rng};
use super::sock::Sock;
use super::stream::{Frame, StreamError};
use super::{
    canonical, AcceptError, BindError, ConnId, DropReason, Event, FrameKind, RecvError, SendError,
    SendExtras, SockId, Transmit, TransportKind,
};
use crate::info::{ConnInfo, PathInfo, PathState, QueuedMsgInfo, SockInfo};
use crate::message::{InMsg, Received};

/// How long a multipath connection waits for the peer's handshake pong before it settles on a
/// single path. The kernel waits forever (a blocking sender hangs if the peer never answers the
/// probe, for example with `ping_enable = 0`).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(1);

/// Before the first handshake, a held connection whose source port does not say "lane 0" is
/// taken as path 0 after this long (older kernels pick random source ports).
pub const STASH_AS_PATH0_AFTER: Duration = Duration::from_millis(50);

/// How long a transport holds an accepted connection waiting for a lane before it resets it.
pub const STASH_MAX: Duration = Duration::from_secs(5);

/// How long a connection is kept after its last activity (created, a path up or down, a
/// message queued or received) once no path is up or connecting, nothing of a socket is
/// queued and no reconnect is planned; then its state and any pongs left are freed. The
/// owning (smaller) side redials a lost peer on its own only within this time of the last
/// activity, and only after application traffic (a socket's message either way); later, the
/// next message of either side brings the connection back.
pub const CONN_IDLE_LIFETIME: Duration = Duration::from_secs(60);

/// Freed connections whose sequence state is remembered (see [`SeqMemo`]): only those that
/// carried application messages, the oldest forgotten first. About 250 bytes each.
pub const SEQ_MEMO_MAX: usize = 4096;

/// Pongs one connection holds at most (queued or awaiting acknowledgement); pings beyond
/// it are consumed without an answer and counted (`send_pong_drop_full`).
pub const PONG_QUEUE_MAX: usize = 256;

/// A socket's receive queue holds at most `RCVQ_CAP_FACTOR` times its receive buffer (and at
/// least [`RCVQ_CAP_MIN`] bytes). Congestion is advertised above one receive buffer, so only a
/// peer that ignores the congestion map reaches the cap; messages beyond it are consumed
/// (acknowledged) and dropped (`recv_drop_rcvq_full`).
pub const RCVQ_CAP_FACTOR: usize = 4;

/// The smallest receive queue cap in bytes (see [`RCVQ_CAP_FACTOR`]).
pub const RCVQ_CAP_MIN: usize = 4 << 20;

/// Bytes of the node budget a queued message costs beyond its payload (its bookkeeping).
pub const MSG_COST: usize = 256;

/// Bytes of the node budget a connection costs (its paths, its peer's congestion map).
pub const CONN_COST: usize = 16 << 10;

/// The node budget when the `mem_budget` tunable is 0 (the node passes min(this, RAM / 8)).
pub const DEFAULT_MEM_BUDGET: u64 = 256 << 20;

/// Which transports serve a local address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Local {
    tcp: bool,
    ib: bool,
}

#[derive(Debug)]
struct LocalAddr {
    serves: Local,
    /// The address's congestion map (`c_lcong`), shared by all its connections.
    cong: CongMap,
}

/// One node's whole protocol state. Deterministic for a given seed and call sequence.
#[derive(Debug)]
pub struct Stack {
    tun: Tunables,
    rng: Rng,
    gen_num: u32,
    hash_init: u32,
    locals: BTreeMap<IpAddr, LocalAddr>,
    socks: BTreeMap<SockId, Sock>,
    next_sock: u32,
    binds: BTreeMap<(IpAddr, u16), SockId>,
    conns: ConnTable,
    /// Bytes of the node budget in use: queued messages both ways, reassembly, connections.
    mem_used: usize,
    conn_index: BTreeMap<(IpAddr, IpAddr, TransportKind), ConnId>,
    /// Sequence state of freed connections, by peer (at most [`SEQ_MEMO_MAX`]).
    seq_memos: BTreeMap<(IpAddr, IpAddr, TransportKind), SeqMemo>,
    /// The memos in the order they were made, with their serials (oldest first).
    seq_memo_order: VecDeque<((IpAddr, IpAddr, TransportKind), u64)>,
    next_memo_serial: u64,
    stats: Stats,
    events: VecDeque<Event>,
    wakes: BTreeSet<SockId>,
    next_msg_id: u64,
    loop_work: Vec<ConnId>,
    shutting_down: bool,
    cong_changed: bool,
}

impl Stack {
    /// A stack with no addresses. `seed` drives every random choice (ports, jitter, the
    /// generation number, the lane hash), so equal seeds and calls give equal results.
    pub fn new(tun: Tunables, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut gen_num = rng.next_u32();
        if gen_num == 0 {
            gen_num = 1;
        }
        let hash_init = rng.next_u32();
        Stack {
            tun,
            rng,
            gen_num,
            hash_init,
            locals: BTreeMap::new(),
            socks: BTreeMap::new(),
            next_sock: 1,
            binds: BTreeMap::new(),
            conns: ConnTable::default(),
            mem_used: 0,
            conn_index: BTreeMap::new(),
            seq_memos: BTreeMap::new(),
            seq_memo_order: VecDeque::new(),
            next_memo_serial: 0,
            stats: Stats::default(),
            events: VecDeque::new(),
            wakes: BTreeSet::new(),
            next_msg_id: 1,
            loop_work: Vec::new(),
            shutting_down: false,
            cong_changed: false,
        }
    }

    // ----------------------------------------------------------------------------------------
    // Configuration and getters

    /// Adds a local address served by TCP and/or IB.
    pub fn add_local_addr(&mut self, ip: IpAddr, tcp: bool, ib: bool) {
        self.locals
            .entry(canonical(ip))
            .or_insert_with(|| LocalAddr {
                serves: Local { tcp, ib },
                cong: CongMap::new(),
            })
            .serves = Local { tcp, ib };
    }

    /// Whether the node owns `ip`.
    pub fn is_local(&self, ip: IpAddr) -> bool {
        self.locals.contains_key(&canonical(ip))
    }

    /// The node's addresses.
    pub fn local_addrs(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.locals.keys().copied()
    }

    /// The congestion map of a local address.
    pub fn local_cong_map(&self, ip: IpAddr) -> Option<&CongMap> {
        self.locals.get(&canonical(ip)).map(|l| &l.cong)
    }

    /// This node's generation number (random, nonzero), sent in probes.
    pub fn gen_num(&self) -> u32 {
        self.gen_num
    }

    /// The tunables in force.
    pub fn tunables(&self) -> &Tunables {
        &self.tun
    }

    /// Replaces the tunables. (Transport buffer tunables need the driver to restart TCP
    /// connections; see [`Stack::restart_all`].)
    pub fn set_tunables(&mut self, tun: Tunables) {
        self.tun = tun;
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Zeroes the counters.
    pub fn reset_stats(&mut self) {
        self.stats.reset();
    }

    /// A connection's addresses and transport. A freed connection reports unspecified
    /// addresses (matching no peer).
    pub fn conn_addrs(&self, conn: ConnId) -> (IpAddr, IpAddr, TransportKind) {
        match self.conns.get(conn.0 as usize) {
            Some(c) => (c.laddr, c.faddr, c.kind),
            None => {
                let any = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
                (any, any, TransportKind::Tcp)
            }
        }
    }

    /// Whether the connection exists (it is freed after [`CONN_IDLE_LIFETIME`] unused).
    pub fn conn_exists(&self, conn: ConnId) -> bool {
        self.conns.contains(conn.0 as usize)
    }

    /// How many connections the stack holds.
    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }

    /// Bytes of the node's memory budget in use (queued messages both ways, reassembly,
    /// connections).
    pub fn mem_used(&self) -> usize {
        self.mem_used
    }

    /// The node's memory budget in bytes (the `mem_budget` tunable; 0 means
    /// [`DEFAULT_MEM_BUDGET`]).
    pub fn mem_budget(&self) -> usize {
        let b = if self.tun.mem_budget == 0 {
            DEFAULT_MEM_BUDGET
        } else {
            self.tun.mem_budget
        };
        usize::try_from(b).unwrap_or(usize::MAX)
    }

    /// Whether `bytes` more fit in the budget.
    fn mem_fits(&self, bytes: usize) -> bool {
        self.mem_used.saturating_add(bytes) <= self.mem_budget()
    }

    fn mem_charge(&mut self, bytes: usize) {
        self.mem_used = self.mem_used.saturating_add(bytes);
    }

    fn mem_release(&mut self, bytes: usize) {
        debug_assert!(self.mem_used >= bytes, "budget accounting underflow");
        self.mem_used = self.mem_used.saturating_sub(bytes);
    }

    /// The receive queue cap of a socket (see [`RCVQ_CAP_FACTOR`]).
    fn rcvq_cap(rcvbuf: usize) -> usize {
        rcvbuf.saturating_mul(RCVQ_CAP_FACTOR).max(RCVQ_CAP_MIN)
    }

    /// Looks up a connection.
    pub fn find_conn(&self, laddr: IpAddr, faddr: IpAddr, kind: TransportKind) -> Option<ConnId> {
        self.conn_index
            .get(&(canonical(laddr), canonical(faddr), kind))
            .copied()
    }

    /// A path's state and epoch.
    /// A freed connection (or a path out of range) reports `(Down, 0)`.
    pub fn path_state(&self, conn: ConnId, path: usize) -> (PathState, u32) {
        match self
            .conns
            .get(conn.0 as usize)
            .and_then(|c| c.paths.get(path))
        {
            Some(p) => (p.state, p.epoch),
            None => (PathState::Down, 0),
        }
    }

    /// The peer's generation number as last seen in a handshake (0 = never).
    pub fn peer_gen(&self, conn: ConnId) -> u32 {
        self.conns.get(conn.0 as usize).map_or(0, |c| c.peer_gen)
    }

    /// The agreed number of paths of a connection (0 before the handshake).
    pub fn npaths(&self, conn: ConnId) -> usize {
        self.conns.get(conn.0 as usize).map_or(0, |c| c.npaths)
    }

    /// Whether an outgoing transport connection on this path only serves to make the peer
    /// connect back (TCP: the larger address may not own connections). The transport closes
    /// such a connection once it is established and reports [`Stack::handle_connect_failed`].
    pub fn is_trigger_only(&self, conn: ConnId) -> bool {
        self.conns
            .get(conn.0 as usize)
            .is_some_and(|c| c.kind == TransportKind::Tcp && !c.is_smaller())
    }

    /// Whether `(conn, path)` names a live connection's path (transport reports about freed
    /// connections are ignored).
    fn path_exists(&self, conn: ConnId, path: usize) -> bool {
        self.conns
            .get(conn.0 as usize)
            .is_some_and(|c| path < c.paths.len())
    }

    // ----------------------------------------------------------------------------------------
    // Sockets

    /// Creates a socket.
    pub fn socket(&mut self) -> SockId {
        let id = SockId(self.next_sock);
        self.next_sock = self.next_sock.wrapping_add(1).max(1);
        self.socks.insert(
            id,
            Sock::new(
                self.tun.sndbuf_default as usize,
                self.tun.rcvbuf_default as usize,
            ),
        );
        id
    }

    /// `SO_RDS_TRANSPORT`: pins the socket's transport before bind.
    ///
    /// # Errors
    /// [`BindError::Invalid`] if bound or already set (the kernel's EOPNOTSUPP case is
    /// reported by the socket layer), [`BindError::NoProtoOpt`] for loopback.
    pub fn set_transport(&mut self, sock: SockId, kind: TransportKind) -> Result<(), BindError> {
        let s = self.socks.get_mut(&sock).ok_or(BindError::Invalid)?;
        if s.bound.is_some() || s.transport.is_some() {
            return Err(BindError::Invalid);
        }
        if kind == TransportKind::Loopback {
            return Err(BindError::NoProtoOpt);
        }
        s.transport = Some(kind);
        Ok(())
    }

    /// The socket's transport, if pinned or bound.
    pub fn sock_transport(&self, sock: SockId) -> Option<TransportKind> {
        self.socks.get(&sock).and_then(|s| s.transport)
    }

    /// Binds a socket (`bind.c`). Port 0 picks a random free port ≥ 2; port 1 is reserved
    /// for the multipath probe. There is no wildcard bind.
    ///
    /// # Errors
    /// See [`BindError`].
    pub fn bind(&mut self, sock: SockId, addr: SocketAddr) -> Result<SocketAddr, BindError> {
        let s = self.socks.get(&sock).ok_or(BindError::Invalid)?;
        if s.bound.is_some() {
            return Err(BindError::Invalid);
        }
        let ip = canonical(addr.ip());
        if !is_unicast(ip) {
            return Err(BindError::Invalid);
        }
        if let (IpAddr::V6(v6), SocketAddr::V6(sa)) = (ip, addr) {
            if v6.is_unicast_link_local() && sa.scope_id() == 0 {
                return Err(BindError::Invalid);
            }
        }
        if addr.port() == PROBE_PORT {
            return Err(BindError::Invalid);
        }
        let local = self.locals.get(&ip).ok_or(BindError::AddrNotAvail)?.serves;
        let kind = match s.transport {
            Some(TransportKind::Ib) if !local.ib => return Err(BindError::NoProtoOpt),
            Some(TransportKind::Tcp) if !local.tcp => return Err(BindError::NoProtoOpt),
            Some(k) => k,
            None if local.ib => TransportKind::Ib,
            None if local.tcp => TransportKind::Tcp,
            None => return Err(BindError::AddrNotAvail),
        };
        let port = if addr.port() == 0 {
            let start = (self.rng.next_u32() as u16).max(2);
            let mut port = start;
            loop {
                if !self.binds.contains_key(&(ip, port)) {
                    break port;
                }
                port = port.wrapping_add(1);
                if port < 2 {
                    port = 2;
                }
                if port == start {
                    return Err(BindError::AddrInUse);
                }
            }
        } else {
            if self.binds.contains_key(&(ip, addr.port())) {
                return Err(BindError::AddrInUse);
            }
            addr.port()
        };
        self.binds.insert((ip, port), sock);
        let bound = SocketAddr::new(ip, port);
        let hash = jhash_1word(u32::from(port), self.hash_init);
        let s = self.socks.get_mut(&sock).expect("checked");
        s.bound = Some(bound);
        s.transport = Some(kind);
        s.lane_hash = hash;
        Ok(bound)
    }

    /// `connect()`: records a default destination; nothing is sent.
    ///
    /// # Errors
    /// [`SendError::InvalidDest`] for wildcard, broadcast or multicast addresses.
    pub fn connect(&mut self, sock: SockId, dest: SocketAddr) -> Result<(), SendError> {
        let dest = SocketAddr::new(canonical(dest.ip()), dest.port());
        if !is_unicast(dest.ip()) {
            return Err(SendError::InvalidDest);
        }
        let s = self.socks.get_mut(&sock).ok_or(SendError::BadSocket)?;
        s.connected = Some(dest);
        Ok(())
    }

    /// The bound address.
    pub fn sock_name(&self, sock: SockId) -> Option<SocketAddr> {
        self.socks.get(&sock).and_then(|s| s.bound)
    }

    /// The default destination.
    pub fn peer_name(&self, sock: SockId) -> Option<SocketAddr> {
        self.socks.get(&sock).and_then(|s| s.connected)
    }

    /// Sets the usable send buffer (bytes, capped by the tunable).
    pub fn set_sndbuf(&mut self, sock: SockId, bytes: usize) {
        let max = self.tun.sndbuf_max as usize;
        if let Some(s) = self.socks.get_mut(&sock) {
            s.sndbuf = bytes.clamp(1, max);
            if s.writable() {
                self.wakes.insert(sock);
            }
        }
    }

    /// Sets the usable receive buffer (bytes, capped by the tunable).
    pub fn set_rcvbuf(&mut self, sock: SockId, bytes: usize) {
        let max = self.tun.rcvbuf_max as usize;
        if let Some(s) = self.socks.get_mut(&sock) {
            s.rcvbuf = bytes.clamp(1, max);
        }
    }

    /// `(sndbuf, rcvbuf)` in bytes.
    pub fn bufs(&self, sock: SockId) -> Option<(usize, usize)> {
        self.socks.get(&sock).map(|s| (s.sndbuf, s.rcvbuf))
    }

    /// `RDS_CONG_MONITOR`.
    pub fn set_cong_monitor(&mut self, sock: SockId, on: bool) {
        if let Some(s) = self.socks.get_mut(&sock) {
            s.cong_monitor = on;
        }
    }

    /// `RDS_RECVERR`.
    pub fn set_recverr(&mut self, sock: SockId, on: bool) {
        if let Some(s) = self.socks.get_mut(&sock) {
            s.recverr = on;
        }
    }

    /// `RDS_RECVERR` value.
    pub fn recverr(&self, sock: SockId) -> bool {
        self.socks.get(&sock).is_some_and(|s| s.recverr)
    }

    /// Whether a receive would return something (POLLIN).
    pub fn readable(&self, sock: SockId) -> bool {
        self.socks.get(&sock).is_some_and(Sock::readable)
    }

    /// Whether the send buffer has room (POLLOUT).
    pub fn writable(&self, sock: SockId) -> bool {
        self.socks.get(&sock).is_some_and(Sock::writable)
    }

    /// Whether the socket exists.
    pub fn sock_exists(&self, sock: SockId) -> bool {
        self.socks.contains_key(&sock)
    }

    /// Whether the destination port of `dest` is congested as seen from `sock`.
    pub fn dest_congested(&self, sock: SockId, dest: SocketAddr) -> bool {
        let Some(bound) = self.socks.get(&sock).and_then(|s| s.bound) else {
            return false;
        };
        let dip = canonical(dest.ip());
        if let Some(l) = self.locals.get(&dip) {
            return l.cong.test(dest.port());
        }
        let kind = self.socks[&sock].transport.unwrap_or(TransportKind::Tcp);
        self.find_conn(bound.ip(), dip, kind)
            .is_some_and(|c| self.conns[c.0 as usize].fcong.test(dest.port()))
    }

    /// Sends a message (`rds_sendmsg`). `dest = None` uses the connected destination.
    /// Returns the payload length.
    ///
    /// # Errors
    /// See [`SendError`]. A blocking caller waits and retries on
    /// [`SendError::WouldBlock`] (until [`Event::Wake`] for the socket) and on
    /// [`SendError::CongestedWait`] (until [`Event::CongChanged`] and
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
        if !self.mem_fits(len + MSG_COST + conn_cost) {
            self.stats.inc(Counter::MemSendError);
            return Err(SendError::NoBufs);
        }
        let cid = self.conn_get_or_create(now, bound.ip(), dip, kind);
        let lane = self.lane_for(cid, lane_hash);
        if kind != TransportKind::Loopback && !self.conns[cid.0 as usize].paths[lane].is_up() {
            // Connect before the congestion check, as `rds_sendmsg` does: a stale map of a
            // peer that restarted is only replaced once a connection brings the new one.
            self.want_connect(cid, lane);
        }
        let dport = dest.port();
        if self.peer_congested(cid, dport) {
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
        };
        if dport != 0 {
            // Pings (to port 0) are not application traffic.
            self.conns[cid.0 as usize].app_traffic = true;
        }
        self.queue_msg(now, cid, lane, msg);
        Ok(len)
    }

    /// Receives (`rds_recvmsg`): a congestion notification first (if monitoring), then the
    /// oldest message. At most `max_len` payload bytes are returned; without `peek` the rest of
    /// a longer message is discarded.
    ///
    /// # Errors
    /// [`RecvError::WouldBlock`] when nothing is queued.
    pub fn recv(
        &mut self,
        sock: SockId,
        max_len: usize,
        peek: bool,
    ) -> Result<Received, RecvError> {
        let s = self.socks.get_mut(&sock).ok_or(RecvError::BadSocket)?;
        if let Some(n) = s.notify_q.front().copied() {
            if !peek {
                s.notify_q.pop_front();
            }
            return Ok(Received::RdmaStatus(n));
        }
        if s.cong_monitor && s.cong_notify != 0 {
            let n = s.cong_notify;
            s.cong_notify = 0;
            return Ok(Received::CongUpdate(n));
        }
        let front = s.rcv_q.front().ok_or(RecvError::WouldBlock)?;
        let full_len = front.payload.len();
        let truncated = full_len > max_len;
        let mut msg = if peek {
            front.clone()
        } else {
            s.rcv_q.pop_front().expect("front exists")
        };
        if truncated {
            msg.payload.truncate(max_len);
        }
        if !peek {
            self.mem_release(full_len + MSG_COST);
            self.stats.inc(Counter::RecvDelivered);
            self.stats
                .add(Counter::CopyToUser, msg.payload.len() as u64);
            self.rcvbuf_delta(sock, -(full_len as i64));
        }
        Ok(Received::Data {
            msg,
            full_len,
            truncated,
        })
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

    /// Closes a socket: unbinds it, drops its queued messages and clears its congestion bit.
    pub fn close(&mut self, sock: SockId) {
        let Some(s) = self.socks.remove(&sock) else {
            return;
        };
        self.wakes.remove(&sock);
        self.mem_release(s.rcv_bytes + s.rcv_q.len() * MSG_COST);
        if let Some(b) = s.bound {
            self.binds.remove(&(b.ip(), b.port()));
            if s.congested {
                self.local_cong_changed(b.ip(), b.port(), false);
            }
        }
        self.drop_msgs(|m, _| m.sock == Some(sock), None);
    }

    // ----------------------------------------------------------------------------------------
    // Driver outputs

    /// Next piece of work for the driver.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        if let Some(s) = self.wakes.pop_first() {
            return Some(Event::Wake(s));
        }
        if std::mem::take(&mut self.cong_changed) {
            return Some(Event::CongChanged);
        }
        None
    }

    /// The next timer deadline, if any.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .values()
            .flat_map(|c| {
                c.paths
                    .iter()
                    .filter_map(|p| p.reconnect_at)
                    .chain(c.hs_deadline)
                    .chain(Self::idle(c).then(|| c.last_active + CONN_IDLE_LIFETIME))
            })
            .min()
    }

    /// Whether a connection is unused: not loopback, no path up, connecting, draining or
    /// waiting to reconnect, and no socket's message queued. Such a connection is freed
    /// [`CONN_IDLE_LIFETIME`] after its last activity.
    fn idle(c: &Conn) -> bool {
        c.kind != TransportKind::Loopback
            && c.paths.iter().all(|p| {
                p.state == PathState::Down
                    && p.drain_epoch.is_none()
                    && p.reconnect_at.is_none()
                    && p.tx_cur.is_none()
                    && !p.has_sock_queued()
            })
    }

    /// Runs due timers: reconnects, handshake fallbacks, and freeing idle connections.
    pub fn handle_timeout(&mut self, now: Instant) {
        for ci in self.conns.ids() {
            let cid = ConnId(ci as u32);
            if self.conns[ci].hs_deadline.is_some_and(|t| t <= now) {
                self.conns[ci].hs_deadline = None;
                if self.conns[ci].npaths == 0 {
                    self.conns[ci].ping_triggered = false;
                    self.set_npaths(now, cid, 1);
                }
            }
            for pi in 0..self.conns[ci].paths.len() {
                let p = &mut self.conns[ci].paths[pi];
                if p.reconnect_at.is_some_and(|t| t <= now) {
                    p.reconnect_at = None;
                    if p.state == PathState::Down {
                        if self.should_reconnect(now, cid, pi) {
                            self.start_connect(cid, pi);
                        } else {
                            self.drop_pongs_if_gone(ci);
                        }
                    }
                }
            }
            let c = &self.conns[ci];
            if Self::idle(c) && now >= c.last_active + CONN_IDLE_LIFETIME {
                self.free_conn(ci);
            }
        }
    }

    /// Frees an idle connection: its pongs are dropped (counted) and its memory returned.
    fn free_conn(&mut self, ci: usize) {
        self.drop_pongs_all(ci);
        // Nothing of a socket is queued (see `idle`); probe pings may be.
        self.drop_msgs_of_conn(ci);
        let paths: Vec<usize> = (0..self.conns[ci].paths.len()).collect();
        for pi in paths {
            self.frag_reset(ci, pi);
        }
        let Some(c) = self.conns.remove(ci) else {
            return;
        };
        let key = (c.laddr, c.faddr, c.kind);
        self.conn_index.remove(&key);
        if c.app_traffic {
            self.remember_seq(key, &c);
        }
        self.mem_release(CONN_COST);
        self.stats.inc(Counter::ConnFreed);
    }

    /// Keeps the sequence state of a freed connection (see [`SeqMemo`]), forgetting the
    /// oldest memo beyond [`SEQ_MEMO_MAX`].
    fn remember_seq(&mut self, key: (IpAddr, IpAddr, TransportKind), c: &Conn) {
        let serial = self.next_memo_serial;
        self.next_memo_serial += 1;
        self.seq_memos.insert(key, SeqMemo::of(c, serial));
        self.seq_memo_order.push_back((key, serial));
        while self.seq_memos.len() > SEQ_MEMO_MAX {
            let Some((k, ser)) = self.seq_memo_order.pop_front() else {
                break;
            };
            if self.seq_memos.get(&k).is_some_and(|m| m.serial == ser) {
                self.seq_memos.remove(&k);
            }
        }
        // Entries of memos restored or replaced since are stale: the order keeps at most
        // twice as many entries as there are memos.
        if self.seq_memo_order.len() > 2 * SEQ_MEMO_MAX {
            let memos = &self.seq_memos;
            self.seq_memo_order
                .retain(|(k, ser)| memos.get(k).is_some_and(|m| m.serial == *ser));
        }
    }

    /// Drops the pongs queued on one path (its connection will not come back for them).
    fn drop_pongs(&mut self, ci: usize, path: usize) {
        let p = &mut self.conns[ci].paths[path];
        if p.send_q.iter().chain(p.retrans.iter()).all(|m| !m.pong) {
            return;
        }
        let mut dropped = Vec::new();
        for q in [&mut p.send_q, &mut p.retrans] {
            let mut keep = VecDeque::with_capacity(q.len());
            for m in q.drain(..) {
                if m.pong {
                    dropped.push(m);
                } else {
                    keep.push_back(m);
                }
            }
            *q = keep;
        }
        for m in dropped {
            self.stats.inc(Counter::SendPongDropDown);
            self.release(ci, &m);
        }
    }

    /// Drops the connection's pongs once nothing will bring it back on our side (no path
    /// up, connecting, draining or waiting to reconnect): they would wait forever.
    fn drop_pongs_if_gone(&mut self, ci: usize) {
        let gone = self.conns[ci].paths.iter().all(|p| {
            p.state == PathState::Down && p.reconnect_at.is_none() && p.drain_epoch.is_none()
        });
        if gone {
            self.drop_pongs_all(ci);
        }
    }

    fn drop_pongs_all(&mut self, ci: usize) {
        for pi in 0..self.conns[ci].paths.len() {
            self.drop_pongs(ci, pi);
        }
    }

    /// Ends a path's reassembly, returning its budget.
    fn frag_reset(&mut self, ci: usize, path: usize) {
        let p = &mut self.conns[ci].paths[path];
        p.frag.reset();
        p.frag_discard = false;
        let charge = std::mem::take(&mut p.frag_charge);
        self.mem_release(charge);
    }

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

    // ----------------------------------------------------------------------------------------
    // Transport inputs

    /// An outgoing connection for `(conn, path)` with `epoch` is established. Returns `false`
    /// if the attempt is stale (the path moved on): the transport must close that connection.
    pub fn handle_connected(
        &mut self,
        now: Instant,
        conn: ConnId,
        path: usize,
        epoch: u32,
    ) -> bool {
        if !self.path_exists(conn, path) {
            return false;
        }
        let p = &self.conns[conn.0 as usize].paths[path];
        if p.epoch != epoch || p.state != PathState::Connecting {
            return false;
        }
        self.path_up(now, conn, path);
        true
    }

    /// The attempt with `epoch` failed (or served only as a trigger); back off and retry.
    pub fn handle_connect_failed(&mut self, now: Instant, conn: ConnId, path: usize, epoch: u32) {
        if !self.path_exists(conn, path) {
            return;
        }
        let p = &mut self.conns[conn.0 as usize].paths[path];
        if p.epoch != epoch || p.state != PathState::Connecting {
            return;
        }
        p.state = PathState::Down;
        self.queue_reconnect(now, conn, path);
    }

    /// The transport connection of `(conn, path)` with `epoch` went away (FIN, RST, error).
    pub fn handle_disconnected(&mut self, now: Instant, conn: ConnId, path: usize, epoch: u32) {
        if !self.path_exists(conn, path) {
            return;
        }
        let c = &mut self.conns[conn.0 as usize];
        let p = &mut c.paths[path];
        if p.drain_epoch == Some(epoch) {
            c.last_active = now;
            let p = &mut c.paths[path];
            p.drain_epoch = None;
            if p.state == PathState::Down && !self.shutting_down {
                self.queue_reconnect(now, conn, path);
            }
            return;
        }
        if p.epoch != epoch {
            return;
        }
        match p.state {
            PathState::Up => self.reset_path(now, conn, path, None),
            PathState::Connecting => self.handle_connect_failed(now, conn, path, epoch),
            _ => {}
        }
    }

    /// A transport connection from `faddr` to our `laddr` was accepted. `client_port` is the
    /// peer's source port (lane selection with SPORT_IDX); `waited` is how long the transport
    /// has held this connection after earlier [`AcceptError::Wait`] answers. Returns the
    /// connection, path and epoch it now carries.
    ///
    /// A connection is refused only when it cannot carry data (see [`AcceptError`]). When no
    /// lane can be assigned yet, the answer is [`AcceptError::Wait`]: the transport keeps the
    /// connection *unread* (its data stays in the TCP receive buffer, where the peer already
    /// counts it as acknowledged) and asks again later, as newer kernels stash such
    /// connections. Resetting it would lose that data.
    ///
    /// # Errors
    /// See [`AcceptError`].
    pub fn handle_accept(
        &mut self,
        now: Instant,
        laddr: IpAddr,
        faddr: IpAddr,
        kind: TransportKind,
        client_port: u16,
        waited: Duration,
    ) -> Result<(ConnId, usize, u32), AcceptError> {
        let (laddr, faddr) = (canonical(laddr), canonical(faddr));
        if !self.locals.contains_key(&laddr) || self.shutting_down {
            return Err(AcceptError::NotLocal);
        }
        if self.locals.contains_key(&faddr) {
            return Err(AcceptError::Local);
        }
        if self.find_conn(laddr, faddr, kind).is_none() && !self.mem_fits(CONN_COST) {
            self.stats.inc(Counter::ConnRefusedNoMem);
            return Err(AcceptError::NoMem);
        }
        let cid = self.conn_get_or_create(now, laddr, faddr, kind);
        let ci = cid.0 as usize;
        if kind == TransportKind::Tcp && self.conns[ci].is_smaller() {
            // A larger peer's connection only asks us to connect (it never carries data).
            // The peer is there now, so a reconnect waiting out its backoff (after the
            // peer restarted, say) goes at once; after an operator's kill the attempt is the
            // new traffic that brings the connection back.
            let p = &mut self.conns[ci].paths[0];
            if p.state == PathState::Down && p.drain_epoch.is_none() && p.reconnect_at.is_some() {
                p.reconnect_at = None;
                p.reconnect_delay = Duration::ZERO;
            }
            self.connect_if_down(cid, 0);
            return Err(AcceptError::ConnectBack);
        }
        if kind == TransportKind::Ib && self.conns[ci].paths[0].state == PathState::Connecting {
            if self.conns[ci].is_smaller() {
                // Both sides connecting and ours is the smaller address: refuse the request
                // (`ib_connect_raced`; an IB reject happens before any data). A peer of
                // ours yields to our request; a kernel refuses it too, and backoff settles.
                return Err(AcceptError::Raced);
            }
            // Departure from the kernel, which refuses here too: the peer has the smaller
            // address, so its attempt wins and ours is abandoned. Without a tie-break two
            // racing sides refuse each other until their backoff jitter separates them
            // (seconds with a kernel peer, which retries at once). Our own request reached
            // the peer before this accept does, so a kernel peer refuses it as raced
            // rather than dropping the connection it is about to have.
            self.reset_path(now, cid, 0, Some(DropReason::Replaced));
        }
        let c = &self.conns[ci];
        let n = c.npaths;
        let lane0 = usize::from(client_port) % MPATH_WORKERS == 0;
        let slot = if !kind.multipath() {
            // IB has one path; the RDMA CM source port says nothing about lanes.
            0
        } else if n == 0 {
            // Before the handshake only path 0 exists. A peer that learned the number of
            // lanes (from our probe, or from an earlier incarnation of this node) may already
            // connect others; they must not become our path 0, or the lanes' sequence spaces
            // cross. Lane index = source port mod 8, as newer kernels and this stack choose
            // it; older kernels use random ports, so after a short wait any connection is
            // taken as path 0.
            // Path 0 by its port (while ours is up, ours is stale and is replaced below), or,
            // after a short wait, any connection while we have no path 0.
            let settled = waited >= STASH_AS_PATH0_AFTER;
            if !(lane0 || (settled && !c.paths[0].is_up())) {
                return Err(AcceptError::Wait);
            }
            0
        } else if c.with_sport_idx {
            usize::from(client_port) % n
        } else {
            // A peer without SPORT_IDX (base kernels) does not say which lane this is, so
            // the connection may belong to a different peer lane than the slot's previous
            // one. A slot whose previous connection is still being drained is therefore not
            // free: that peer lane may still be sending on it (it has not seen our FIN yet),
            // and taking the slot over would discard those frames after our TCP
            // acknowledged them. Hold the connection until a drain ends.
            match c.paths[..n]
                .iter()
                .position(|p| !p.is_up() && (n == 1 || p.drain_epoch.is_none()))
            {
                Some(i) => i,
                None if n == 1 => 0,
                None => return Err(AcceptError::Wait),
            }
        };
        if self.conns[ci].paths[slot].is_up() {
            // The peer owns the connection and opened this lane again, so ours is stale (for
            // example the peer restarted): replace it. Base kernels reset the newcomer instead
            // and wait for keepalive to kill the stale connection.
            self.reset_path(now, cid, slot, Some(DropReason::Replaced));
        }
        let epoch = self.path_up(now, cid, slot);
        Ok((cid, slot, epoch))
    }

    /// TCP: the peer acknowledged `acked` bytes of the path's current connection (counted from
    /// its first byte). Messages whose last byte is acknowledged leave the retransmit queue.
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
        let acked = p.acked_off;
        let mut done = Vec::new();
        while p.retrans.front().is_some_and(|m| m.ack_off <= acked) {
            done.push(p.retrans.pop_front().expect("front"));
        }
        for m in done {
            self.stats.inc(Counter::SendDropAcked);
            self.release(ci, &m);
        }
    }

    /// A complete message arrived on a path (TCP: from a [`super::StreamParser`]).
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
        self.recv_message(now, conn, path, frame.hdr, frame.payload)
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
                    super::FragError::BadChecksum => {
                        (Counter::RecvDropBadChecksum, DropReason::BadChecksum)
                    }
                    super::FragError::TooLong(_) => {
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
            if self.mem_fits(want) {
                self.mem_charge(want);
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
            self.mem_release(charge);
        }
        match info.complete {
            Some(f) if info.discarded => {
                self.consume_discarded(conn, path, &f.hdr);
                Ok(())
            }
            Some(f) => self
                .recv_message(now, conn, path, f.hdr, f.payload)
                .inspect_err(|&r| self.reset_path(now, conn, path, Some(r))),
            None => Ok(()),
        }
    }

    /// IB: a message received but not stored for lack of budget: acknowledged and counted
    /// as dropped, its sequence number consumed.
    fn consume_discarded(&mut self, cid: ConnId, path: usize, hdr: &HeaderRepr) {
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

    // ----------------------------------------------------------------------------------------
    // Administration

    /// Drops every path of a connection so that it reconnects and retransmits
    /// (`rds-ctrl conn restart`).
    pub fn restart_conn(&mut self, now: Instant, conn: ConnId, reason: DropReason) {
        if !self.conns.contains(conn.0 as usize) {
            return;
        }
        for pi in 0..self.conns[conn.0 as usize].paths.len() {
            let st = self.conns[conn.0 as usize].paths[pi].state;
            if matches!(st, PathState::Up | PathState::Connecting) {
                self.reset_path(now, conn, pi, Some(reason));
            }
        }
    }

    /// Restarts every connection of a transport (a tunable of it changed).
    pub fn restart_all(&mut self, now: Instant, kind: TransportKind, reason: DropReason) {
        for ci in self.conns.ids() {
            if self.conns[ci].kind == kind {
                self.restart_conn(now, ConnId(ci as u32), reason);
            }
        }
    }

    /// Ends a connection (`rds-ctrl conn kill`): its paths go down without reconnecting and
    /// every queued message is dropped. Returns how many messages were dropped. New traffic
    /// (a send, or the peer connecting) brings it back.
    pub fn kill_conn(&mut self, now: Instant, conn: ConnId) -> usize {
        let ci = conn.0 as usize;
        if !self.conns.contains(ci) {
            return 0;
        }
        self.conns[ci].killed = true;
        self.restart_conn(now, conn, DropReason::Kill);
        for p in &mut self.conns[ci].paths {
            p.reconnect_at = None;
            p.reconnect_delay = Duration::ZERO;
        }
        self.drop_msgs_of_conn(ci)
    }

    /// Closes every connection for shutdown; nothing reconnects afterwards.
    pub fn shutdown(&mut self, now: Instant) {
        self.shutting_down = true;
        for ci in self.conns.ids() {
            self.restart_conn(now, ConnId(ci as u32), DropReason::Shutdown);
            for p in &mut self.conns[ci].paths {
                p.reconnect_at = None;
            }
            self.conns[ci].hs_deadline = None;
        }
    }

    // ----------------------------------------------------------------------------------------
    // Info snapshots

    /// Every connection.
    pub fn conn_infos(&self) -> Vec<ConnInfo> {
        self.conns
            .iter()
            .map(|(i, c)| ConnInfo {
                id: ConnId(i as u32),
                laddr: c.laddr,
                faddr: c.faddr,
                kind: c.kind,
                npaths: c.npaths,
                peer_gen: c.peer_gen,
                paths: c
                    .paths
                    .iter()
                    .enumerate()
                    .map(|(j, p)| PathInfo {
                        index: j,
                        state: p.state,
                        next_tx_seq: p.next_tx_seq,
                        next_rx_seq: p.next_rx_seq,
                        send_queued: p.send_q.len(),
                        retrans_queued: p.retrans.len(),
                        sending: p.tx_pending,
                        ups: p.ups,
                        draining: p.drain_epoch.is_some(),
                        reconnect_pending: p.reconnect_at.is_some(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// Every socket.
    pub fn sock_infos(&self) -> Vec<SockInfo> {
        self.socks
            .iter()
            .map(|(&id, s)| SockInfo {
                id,
                bound: s.bound,
                connected: s.connected,
                sndbuf: s.sndbuf,
                rcvbuf: s.rcvbuf,
                snd_bytes: s.snd_bytes,
                rcv_bytes: s.rcv_bytes,
                congested: s.congested,
                transport: s.transport,
            })
            .collect()
    }

    /// Messages in send queues (`retrans = false`) or retransmit queues (`true`).
    pub fn queued_msgs(&self, retrans: bool) -> Vec<QueuedMsgInfo> {
        let mut v = Vec::new();
        for c in self.conns.values() {
            for (pi, p) in c.paths.iter().enumerate() {
                let q = if retrans { &p.retrans } else { &p.send_q };
                v.extend(q.iter().map(|m| QueuedMsgInfo {
                    seq: m.seq,
                    len: m.hdr.len,
                    laddr: c.laddr,
                    faddr: c.faddr,
                    lport: m.hdr.sport,
                    fport: m.hdr.dport,
                    path: pi,
                }));
            }
        }
        v
    }

    /// Messages waiting in socket receive queues.
    pub fn recv_queued_msgs(&self) -> Vec<QueuedMsgInfo> {
        let mut v = Vec::new();
        for s in self.socks.values() {
            let Some(b) = s.bound else { continue };
            v.extend(s.rcv_q.iter().map(|m| QueuedMsgInfo {
                seq: m.seq,
                len: m.payload.len() as u32,
                laddr: b.ip(),
                faddr: m.from.ip(),
                lport: b.port(),
                fport: m.from.port(),
                path: 0,
            }));
        }
        v
    }

    // ----------------------------------------------------------------------------------------
    // Internals: connections and paths

    fn take_msg_id(&mut self) -> u64 {
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        id
    }

    fn conn_get_or_create(
        &mut self,
        now: Instant,
        laddr: IpAddr,
        faddr: IpAddr,
        kind: TransportKind,
    ) -> ConnId {
        if let Some(&c) = self.conn_index.get(&(laddr, faddr, kind)) {
            return c;
        }
        let mut conn = Conn::new(laddr, faddr, kind, now);
        if let Some(m) = self.seq_memos.remove(&(laddr, faddr, kind)) {
            m.restore(&mut conn);
        }
        let cid = ConnId(self.conns.insert(conn));
        self.mem_charge(CONN_COST);
        self.conn_index.insert((laddr, faddr, kind), cid);
        if kind == TransportKind::Loopback {
            // Loopback connections are up at once and never go down.
            self.path_up(now, cid, 0);
        }
        cid
    }

    fn peer_congested(&self, cid: ConnId, port: u16) -> bool {
        let c = &self.conns[cid.0 as usize];
        if c.kind == TransportKind::Loopback {
            self.locals.get(&c.faddr).is_some_and(|l| l.cong.test(port))
        } else {
            c.fcong.test(port)
        }
    }

    fn lane_for(&self, cid: ConnId, lane_hash: u32) -> usize {
        let c = &self.conns[cid.0 as usize];
        if !c.kind.multipath() {
            return 0;
        }
        let n = if c.npaths == 0 {
            MPATH_WORKERS
        } else {
            c.npaths
        };
        if n <= 1 {
            0
        } else {
            (lane_hash as usize) & (n - 1)
        }
    }

    /// Queues a message (its budget is charged here; callers checked that it fits).
    fn queue_msg(&mut self, now: Instant, cid: ConnId, lane: usize, msg: OutMsg) {
        self.stats.inc(Counter::SendQueued);
        self.mem_charge(msg.payload.len() + MSG_COST);
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

    fn want_transmit(&mut self, cid: ConnId, path: usize) {
        let p = &mut self.conns[cid.0 as usize].paths[path];
        if !p.tx_pending && p.is_up() {
            p.tx_pending = true;
            self.events.push_back(Event::Transmit { conn: cid, path });
        }
    }

    /// Something is queued on `lane` and it is not up: get the right path connecting.
    fn want_connect(&mut self, cid: ConnId, lane: usize) {
        let c = &self.conns[cid.0 as usize];
        let target = match c.kind {
            TransportKind::Tcp
                if c.is_smaller() && c.fanout_ok && c.npaths > 0 && lane < c.npaths =>
            {
                lane
            }
            _ => 0,
        };
        self.connect_if_down(cid, target);
    }

    fn connect_if_down(&mut self, cid: ConnId, path: usize) {
        if self.shutting_down {
            return;
        }
        let c = &self.conns[cid.0 as usize];
        if path > 0 && c.kind == TransportKind::Tcp && !(c.is_smaller() && c.fanout_ok) {
            return;
        }
        self.conns[cid.0 as usize].killed = false;
        let p = &self.conns[cid.0 as usize].paths[path];
        if p.state == PathState::Down && p.reconnect_at.is_none() && p.drain_epoch.is_none() {
            self.start_connect(cid, path);
        }
    }

    fn start_connect(&mut self, cid: ConnId, path: usize) {
        let p = &mut self.conns[cid.0 as usize].paths[path];
        p.state = PathState::Connecting;
        p.epoch = p.epoch.wrapping_add(1);
        let epoch = p.epoch;
        self.events.push_back(Event::Connect {
            conn: cid,
            path,
            epoch,
        });
    }

    fn should_reconnect(&self, now: Instant, cid: ConnId, path: usize) -> bool {
        let c = &self.conns[cid.0 as usize];
        if self.shutting_down || c.killed {
            return false;
        }
        // A socket's message waits, or the peer carried application traffic lately: only
        // then is a lost peer redialled on our own (a peer that only pinged, probed or
        // connected is not; it comes back by connecting, or with our next message).
        let sock_queued = c.paths.iter().any(Path::has_sock_queued);
        let wanted = sock_queued || (c.app_traffic && now < c.last_active + CONN_IDLE_LIFETIME);
        match c.kind {
            TransportKind::Loopback => false,
            // Lanes above 0 only once the peer confirmed the handshake: a peer that does not
            // know the number of lanes refuses them, possibly after its TCP acknowledged data
            // sent on them (which would then be lost).
            TransportKind::Tcp if c.is_smaller() => {
                wanted && (path == 0 || (c.fanout_ok && path < c.npaths))
            }
            // The larger side connects only to make the peer connect back, and only when a
            // socket has something to send (pongs wait for the peer to come back).
            TransportKind::Tcp => path == 0 && sock_queued,
            TransportKind::Ib => wanted && path == 0,
        }
    }

    /// `rds_queue_reconnect`: the first attempt at once, then random delays below a bound that
    /// doubles up to the maximum.
    fn queue_reconnect(&mut self, now: Instant, cid: ConnId, path: usize) {
        let c = &self.conns[cid.0 as usize];
        let target = if path > 0 && c.kind == TransportKind::Tcp && !c.is_smaller() {
            // The larger side never connects lanes above 0; the peer does, once lane 0 is
            // up. A lane that went down with messages queued (say after lane 0, which had
            // nothing queued then) needs lane 0 to reconnect, unless it is already on its way.
            let p0 = &c.paths[0];
            if p0.state != PathState::Down || p0.reconnect_at.is_some() || p0.drain_epoch.is_some()
            {
                return;
            }
            0
        } else {
            path
        };
        if !self.should_reconnect(now, cid, target) {
            self.drop_pongs_if_gone(cid.0 as usize);
            return;
        }
        let path = target;
        let (min, max) = (self.tun.reconnect_min_delay, self.tun.reconnect_max_delay);
        let p = &mut self.conns[cid.0 as usize].paths[path];
        if p.reconnect_delay.is_zero() {
            p.reconnect_delay = min.max(Duration::from_nanos(1));
            p.reconnect_at = Some(now);
        } else {
            let bound = u64::try_from(p.reconnect_delay.as_nanos()).unwrap_or(u64::MAX);
            let wait = Duration::from_nanos(self.rng.below(bound.max(1)));
            p.reconnect_at = Some(now + wait);
            p.reconnect_delay = (p.reconnect_delay * 2).min(max.max(min));
        }
    }

    /// `rds_connect_path_complete`: the path is up. Returns its new epoch.
    fn path_up(&mut self, now: Instant, cid: ConnId, path: usize) -> u32 {
        let ci = cid.0 as usize;
        let c = &mut self.conns[ci];
        let kind = c.kind;
        let p = &mut c.paths[path];
        p.state = PathState::Up;
        p.epoch = p.epoch.wrapping_add(1);
        p.ups += 1;
        p.up_since = Some(now);
        p.tx_off = 0;
        p.acked_off = 0;
        p.reconnect_delay = Duration::ZERO;
        p.reconnect_at = None;
        p.ack_next = 0;
        p.ack_recv = 0;
        p.ack_requested = false;
        p.ack_in_flight = false;
        p.tx_cur = None;
        p.frag.reset();
        p.frag_discard = false;
        let frag_charge = std::mem::take(&mut p.frag_charge);
        p.tx_pending = false;
        // A new connection ends any drain of the previous one (an accepting transport reads
        // the old connection to its end before it reports the new one).
        p.drain_epoch = None;
        let epoch = p.epoch;
        c.last_active = now;
        self.mem_used = self.mem_used.saturating_sub(frag_charge);
        let c = &mut self.conns[ci];
        if kind != TransportKind::Loopback {
            c.map_queued = true;
        }
        if kind.multipath() && path == 0 {
            // The smaller side probes on every new lane-0 connection; the larger side (as the
            // kernel's accepting side) while it does not know the number of lanes. Its probe
            // goes ahead of fresh messages and tells a peer that it restarted (GEN_NUM) before
            // the retransmissions behind it could be taken as old duplicates. The peer fans
            // out only on the pong to its own probe, so this ping does not race lanes.
            let smaller = c.is_smaller();
            if (smaller || c.npaths == 0) && !c.ping_triggered {
                self.queue_probe_ping(cid);
            }
            let c = &mut self.conns[ci];
            if c.npaths == 0 {
                c.hs_deadline = Some(now + HANDSHAKE_TIMEOUT);
            }
            // Lanes above 0 reconnect once the pong to the probe just queued confirms that
            // the peer still knows the number of lanes (it may have restarted).
            let _ = smaller;
        }
        if kind != TransportKind::Loopback {
            self.want_transmit(cid, path);
        }
        epoch
    }

    /// `rds_conn_path_reset` after a shutdown: requeue unacknowledged messages as
    /// RETRANSMITTED (keeping `next_rx_seq`), then reconnect if this side should.
    /// `reason = Some(..)` means the engine decided, so the driver must close the transport.
    fn reset_path(&mut self, now: Instant, cid: ConnId, path: usize, reason: Option<DropReason>) {
        let ci = cid.0 as usize;
        let (max_p, max_b) = (self.tun.max_unacked_packets, self.tun.max_unacked_bytes);
        let c = &mut self.conns[ci];
        let multipath = c.kind.multipath();
        let p = &mut c.paths[path];
        let was = p.state;
        let mut drain = false;
        if let Some(reason) = reason {
            if matches!(was, PathState::Up | PathState::Connecting) {
                self.events.push_back(Event::Disconnect {
                    conn: cid,
                    path,
                    epoch: p.epoch,
                    reason,
                });
                if was == PathState::Up && reason.drains() {
                    p.drain_epoch = Some(p.epoch);
                    drain = true;
                }
            }
        }
        if was == PathState::Up {
            self.stats.inc(Counter::ConnReset);
            // Senders waiting for a congested port of this peer try again: the map can only
            // change through a new connection, which their next attempt starts.
            self.cong_changed = true;
        }
        p.state = PathState::Down;
        p.epoch = p.epoch.wrapping_add(1);
        // A probe's pong answers a probe on the connection it came with; the next lane-0
        // connection runs a new exchange. Resent, a pong would tell a restarted peer that we
        // processed its probe when we did not (and it would fan out before we learnt its
        // generation). Our own probe ping is resent first, as the kernel does: it carries our
        // generation ahead of the retransmissions behind it.
        let stale_pong = |m: &OutMsg| m.sock.is_none() && m.hdr.is_probe_pong();
        let mut rdma_dropped = Vec::new();
        let mut stale_pongs = Vec::new();
        while let Some(mut m) = p.retrans.pop_back() {
            if stale_pong(&m) {
                stale_pongs.push(m);
                continue;
            }
            if m.rdma.is_some() {
                // RDMA operations are never retransmitted (`rds_send_xmit`).
                rdma_dropped.push(m);
                continue;
            }
            m.retransmitted = true;
            m.ack_required = true;
            p.send_q.push_front(m);
        }
        if p.send_q.iter().any(stale_pong) {
            let mut keep = VecDeque::with_capacity(p.send_q.len());
            for m in p.send_q.drain(..) {
                if stale_pong(&m) {
                    stale_pongs.push(m);
                } else {
                    keep.push_back(m);
                }
            }
            p.send_q = keep;
        }
        p.tx_cur = None;
        p.frag.reset();
        p.frag_discard = false;
        let frag_charge = std::mem::take(&mut p.frag_charge);
        p.tx_off = 0;
        p.acked_off = 0;
        p.unacked_packets = max_p;
        p.unacked_bytes = max_b;
        p.ack_next = 0;
        p.ack_recv = 0;
        p.ack_requested = false;
        p.ack_in_flight = false;
        p.tx_pending = false;
        if multipath && path == 0 {
            // The next connection gets a fresh probe too (behind the retransmissions): a
            // resent one may be dropped by the peer as a duplicate and then goes unanswered.
            c.ping_triggered = false;
            c.fanout_ok = false;
        }
        let reprobe = multipath && path > 0 && c.is_smaller() && c.fanout_ok;
        if reprobe {
            // A lane dropped: before any lane reconnects, ask again whether the peer at the
            // other end of lane 0 knows the lanes. If the peer restarted, lane 0 is stale,
            // no pong comes, and the lanes wait for lane 0 to reconnect; otherwise a new
            // peer would refuse them after its TCP acknowledged data sent on them.
            c.fanout_ok = false;
        }
        if c.npaths > 0 && path >= c.npaths {
            self.rehome_lane(cid, path);
        }
        if reprobe && !self.conns[ci].ping_triggered && self.conns[ci].paths[0].is_up() {
            self.queue_probe_ping(cid);
            self.want_transmit(cid, 0);
        }
        self.mem_release(frag_charge);
        if was == PathState::Up {
            self.conns[ci].last_active = now;
        }
        for m in stale_pongs {
            self.release(ci, &m);
        }
        for m in rdma_dropped {
            self.release(ci, &m);
            if let Some(op) = &m.rdma {
                self.rdma_complete(op, RdmaStatus::Dropped);
            }
        }
        if !drain && !self.shutting_down && reason != Some(DropReason::Kill) {
            self.queue_reconnect(now, cid, path);
        }
    }

    /// Moves the unsent messages of a lane that is no longer in use to the lane its sockets
    /// hash to now.
    fn rehome_lane(&mut self, cid: ConnId, lane: usize) {
        let c = &mut self.conns[cid.0 as usize];
        let n = c.npaths.max(1);
        let to = lane & (n - 1);
        if to == lane || c.paths[lane].send_q.is_empty() {
            return;
        }
        let moved: Vec<OutMsg> = c.paths[lane].send_q.drain(..).collect();
        c.paths[to].send_q.extend(moved);
        if c.paths[to].is_up() {
            self.want_transmit(cid, to);
        } else {
            self.want_connect(cid, to);
        }
    }

    fn queue_probe_ping(&mut self, cid: ConnId) {
        let id = self.take_msg_id();
        let ci = cid.0 as usize;
        let mut hdr = HeaderRepr::data(0, PROBE_PORT, 0, 0);
        self.add_probe_exts(&mut hdr);
        let c = &mut self.conns[ci];
        c.ping_triggered = true;
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
        };
        // Ahead of fresh messages, behind the ones being retransmitted (they carry older
        // sequence numbers, which must reach the wire first).
        let q = &mut c.paths[0].send_q;
        let at = q.iter().position(|m| m.seq == 0).unwrap_or(q.len());
        q.insert(at, msg);
        // The probe is part of the connection's own upkeep: charged, never refused.
        self.mem_charge(MSG_COST);
        self.stats.inc(Counter::SendQueued);
        self.stats.inc(Counter::SendPong);
    }

    fn add_probe_exts(&self, hdr: &mut HeaderRepr) {
        for e in [
            ExtHeader::Npaths(MPATH_WORKERS as u16),
            ExtHeader::GenNum(self.gen_num),
            ExtHeader::SportIdx(0),
        ] {
            hdr.push_ext(e).expect("probe extensions fit in 16 bytes");
        }
    }

    fn start_mprds(&mut self, cid: ConnId) {
        let c = &self.conns[cid.0 as usize];
        if c.kind.multipath() && c.npaths > 1 && c.is_smaller() {
            for i in 0..c.npaths {
                self.connect_if_down(cid, i);
            }
        }
    }

    fn set_npaths(&mut self, _now: Instant, cid: ConnId, n: usize) {
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
    /// sent to the old peer are dropped instead of resent.
    ///
    /// Departures from the kernel: our `next_tx_seq` keeps counting up instead of restarting
    /// at 1 (the restarted peer accepts any number, and restarting can make it drop fresh
    /// messages as old ones after the next reconnect); only messages first transmitted before
    /// the current lane-0 connection came up are dropped, not ones the new peer already got.
    fn peer_gen_update(&mut self, cid: ConnId, gen: u32) {
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
        let mut dropped = Vec::new();
        for p in &mut c.paths {
            p.next_rx_seq = 0;
            for q in [&mut p.retrans, &mut p.send_q] {
                let mut keep = VecDeque::with_capacity(q.len());
                for m in q.drain(..) {
                    if stale(&m) {
                        dropped.push(m);
                    } else {
                        keep.push_back(m);
                    }
                }
                *q = keep;
            }
        }
        for m in dropped {
            self.stats.inc(Counter::SendDropPeerRestart);
            self.release(ci, &m);
        }
    }

    /// Removes messages matching `pred` from every queue, releasing their buffer space.
    fn drop_msgs(
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

    fn drop_msgs_of_conn(&mut self, ci: usize) -> usize {
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
    fn release(&mut self, ci: usize, m: &OutMsg) {
        self.mem_release(m.payload.len() + MSG_COST);
        if m.pong {
            if let Some(c) = self.conns.get_mut(ci) {
                c.pongs = c.pongs.saturating_sub(1);
            }
        }
        let Some(sid) = m.sock else { return };
        if let Some(s) = self.socks.get_mut(&sid) {
            let was_writable = s.writable();
            s.snd_bytes = s.snd_bytes.saturating_sub(m.payload.len());
            if !was_writable && s.writable() {
                self.wakes.insert(sid);
            }
        }
    }

    // ----------------------------------------------------------------------------------------
    // Internals: transmit

    fn next_transmit(&mut self, now: Instant, ci: usize, path: usize) -> Option<Transmit> {
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
    fn frame_out(
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

    fn next_fragment(&mut self, ci: usize, path: usize) -> Option<Transmit> {
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
    fn ack_only(&mut self, ci: usize, path: usize) -> Option<Transmit> {
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

    fn held_for_catchup(&mut self, ci: usize) -> bool {
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

    // ----------------------------------------------------------------------------------------
    // Internals: receive

    fn recv_message(
        &mut self,
        now: Instant,
        cid: ConnId,
        path: usize,
        hdr: HeaderRepr,
        payload: Bytes,
    ) -> Result<(), DropReason> {
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
        if kind.multipath() && hdr.is_hs_probe() {
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
                self.peer_gen_update(cid, g);
            }
        }
        let p = &mut self.conns[ci].paths[path];
        if hdr.seq < p.next_rx_seq && hdr.has_flag(flags::RETRANSMITTED) {
            self.stats.inc(Counter::RecvDropOldSeq);
            return Ok(());
        }
        // `h_sequence` comes from the peer: u64 arithmetic wraps, as in the kernel.
        p.next_rx_seq = hdr.seq.wrapping_add(1);

        if ping_enable && hdr.dport == 0 {
            if hdr.sport == 0 {
                return Ok(());
            }
            self.stats.inc(Counter::RecvPing);
            self.send_pong(now, cid, path, hdr.sport);
            if hdr.is_probe_ping() && kind.multipath() {
                self.process_handshake(now, cid, &hdr, false);
            }
            return Ok(());
        }
        if hdr.is_probe_pong() {
            if kind.multipath() {
                self.process_handshake(now, cid, &hdr, true);
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
        if !self.mem_fits(len + MSG_COST) {
            self.stats.inc(Counter::RecvDropNoMem);
            return Ok(());
        }
        self.mem_charge(len + MSG_COST);
        let c = &mut self.conns[ci];
        c.app_traffic = true;
        c.last_active = now;
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
        let s = self.socks.get_mut(&sid).expect("bound sockets exist");
        s.rcv_q.push_back(InMsg {
            from: SocketAddr::new(from_ip, hdr.sport),
            payload,
            seq: hdr.seq,
            rx_time: now,
            rdma_dest,
        });
        self.stats.inc(Counter::RecvQueued);
        self.wakes.insert(sid);
        self.rcvbuf_delta(sid, len as i64);
        Ok(())
    }

    /// `rds_send_pong`: a zero-length message from port 0 to the pinger's port, on the same
    /// path, unless the pinger's port is congested. A probe's pong carries the handshake
    /// extensions.
    fn send_pong(&mut self, now: Instant, cid: ConnId, path: usize, to_port: u16) {
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
        };
        self.stats.inc(Counter::SendPong);
        self.queue_msg(now, cid, path, msg);
    }

    /// `rds_recv_hs_exthdrs` + `rds_start_mprds`.
    ///
    /// Departure from the kernel: the smaller side connects the other lanes only when the
    /// pong to its own probe arrives (`pong = true`), not on the peer's probe ping. At that
    /// point the peer has processed our probe and knows the number of lanes, so it accepts
    /// them; on the peer's ping it may not yet, and would refuse them (a reset and a retry
    /// per lane).
    fn process_handshake(&mut self, now: Instant, cid: ConnId, hdr: &HeaderRepr, pong: bool) {
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
        let c = &mut self.conns[cid.0 as usize];
        let n = npaths.unwrap_or(c.npaths).max(1);
        c.ping_triggered = false;
        c.hs_deadline = None;
        if sport_idx {
            c.with_sport_idx = true;
        }
        self.peer_gen_update(cid, gen);
        if pong {
            self.conns[cid.0 as usize].fanout_ok = true;
        }
        self.set_npaths(now, cid, n);
        if pong {
            self.start_mprds(cid);
        }
    }

    fn run_loopback(&mut self, now: Instant) {
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
                let _ = self.recv_message(now, cid, 0, hdr, m.payload);
            }
        }
    }

    // ----------------------------------------------------------------------------------------
    // Internals: congestion

    /// `rds_recv_rcvbuf_delta`: a socket is congested above its receive buffer and uncongested
    /// again below half of it.
    fn rcvbuf_delta(&mut self, sid: SockId, delta: i64) {
        let Some(s) = self.socks.get_mut(&sid) else {
            return;
        };
        if delta == 0 {
            return;
        }
        if delta > 0 {
            s.rcv_bytes += delta as usize;
            self.stats.add(Counter::RecvBytesAddedToSock, delta as u64);
        } else {
            s.rcv_bytes = s.rcv_bytes.saturating_sub((-delta) as usize);
            self.stats
                .add(Counter::RecvBytesFreedFromSock, (-delta) as u64);
        }
        let Some(b) = s.bound else { return };
        let now_congested = s.rcv_bytes > s.rcvbuf;
        if !s.congested && now_congested {
            s.congested = true;
            self.local_cong_changed(b.ip(), b.port(), true);
        } else if s.congested && s.rcv_bytes < s.rcvbuf / 2 {
            s.congested = false;
            self.local_cong_changed(b.ip(), b.port(), false);
        }
    }

    /// A port of a local address changed congestion state: send our map to every peer of the
    /// address, and tell local monitors (loopback senders read the map directly).
    fn local_cong_changed(&mut self, ip: IpAddr, port: u16, congested: bool) {
        let Some(l) = self.locals.get_mut(&ip) else {
            return;
        };
        if congested {
            l.cong.set(port);
        } else {
            l.cong.clear(port);
        }
        for ci in self.conns.ids() {
            let c = &mut self.conns[ci];
            if c.laddr != ip || c.kind == TransportKind::Loopback {
                continue;
            }
            c.map_queued = true;
            if let Some(lane) = c.map_lane() {
                self.want_transmit(ConnId(ci as u32), lane);
            }
        }
        self.cong_map_updated(if congested { 0 } else { monitor_mask(port) });
    }

    /// `rds_cong_map_updated`: notify congestion monitors whose ports were uncongested and
    /// wake blocked senders.
    fn cong_map_updated(&mut self, uncongested: u64) {
        if uncongested != 0 {
            for (&sid, s) in &mut self.socks {
                if s.cong_monitor && s.cong_mask & uncongested != 0 {
                    s.cong_notify |= s.cong_mask & uncongested;
                    s.cong_mask &= !uncongested;
                    self.wakes.insert(sid);
                }
            }
        }
        self.cong_changed = true;
    }
}

/// Unicast: not unspecified, broadcast or multicast (also in mapped form).
fn is_unicast(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => !(v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast()),
        IpAddr::V6(v6) => !(v6.is_unspecified() || v6.is_multicast()),
    }
}
