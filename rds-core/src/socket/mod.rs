//! RDS sockets: the Linux `AF_RDS`/`SOCK_SEQPACKET` semantics as a Rust API.
//!
//! A [`Socket`] is a datagram endpoint bound to one of a node's addresses and a port. Messages
//! are reliable and ordered per (sender, receiver) pair, up to 1 MiB, zero length allowed.
//! Errors carry the kernel's `errno` values (`raw_os_error()`), so that tools can print the
//! same `strerror` texts: `EAGAIN` when the send buffer is full, `ENOBUFS` when the destination
//! port is congested (non-blocking), `EMSGSIZE`, `ENOTCONN`, `EADDRINUSE`, `EADDRNOTAVAIL`,
//! `EINVAL`, `ETIMEDOUT` for an expired timeout.
//!
//! Which node serves a socket is decided once, at bind, and held as the socket's backend:
//! [`Socket::with_node`] names a node of this process; [`Socket::new`] goes through the host
//! daemon when one runs and owns the address (`remote`, a client of [`crate::ctl`]), else
//! uses the process's default embedded node, which takes on the address at bind. The
//! process's [`Stack`] choice (`kern`) puts the running kernel's `AF_RDS` first (`auto`, when
//! the kernel has RDS and no daemon owns the address) or alone (`kernel`).
//!
//! Files: this one is the API and the embedded backend; `remote` the daemon backend (requests
//! on the control connection) and `answer` what the daemon's answers become; [`host`] the
//! daemon's side, which serves client sockets to other processes; [`ring`] the shared-memory
//! rings daemon client sockets send and receive through (both sides); `cong` the wake-up of
//! senders blocked by a congested destination ([`Socket::wait_uncongested`]).
//!
//! Readiness for the caller's own `poll`/`epoll`: [`Socket::fd`] is readable while a receive
//! would return something (POLLIN); [`Socket::send_fd`] is readable while the send buffer has
//! room (POLLOUT).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

mod answer;
mod cong;
pub mod host;
mod kern;
mod remote;
pub mod ring;

pub use kern::{kernel_preferred, set_stack, stack, Stack};

use crate::ctl::SockOpt;
use crate::errno::err;
use crate::info::{canonical, SockId, TransportKind};
use crate::message::Received;
use crate::node::{Node, NodeConfig, Waiter};
use crate::proto::{SendError, SendExtras};
use crate::rdma::{cookie_rkey, MrFlags, RdmaBuffer, RdmaOp, SendCtl, Sent};

/// Most local ranges an RDMA operation may have (`UIO_MAXIOV`/2, enough for rds-stress's
/// 512).
const MAX_RDMA_IOVECS: usize = 512;
use crate::sys;

/// The RDS header's length and the largest message a socket sends (1 MiB).
pub use crate::wire::{HEADER_LEN, MAX_MSG_SIZE};

/// Flags of a receive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvFlags {
    /// `MSG_PEEK`: leave the message queued.
    pub peek: bool,
    /// `MSG_TRUNC`: return the full message length even if the buffer was shorter.
    pub trunc: bool,
    /// `MSG_DONTWAIT`: do not block.
    pub dontwait: bool,
}

/// What a receive produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvMsg {
    /// Bytes copied into the buffer (or the full length with [`RecvFlags::trunc`]).
    pub len: usize,
    /// The message's full length.
    pub full_len: usize,
    /// The sender (none for a congestion notification).
    pub from: Option<SocketAddr>,
    /// The message was longer than the buffer (`MSG_TRUNC` in `msg_flags`).
    pub truncated: bool,
    /// A congestion-monitor notification (`RDS_CMSG_CONG_UPDATE`) instead of data: bit `k`
    /// set means a port `≡ k (mod 64)` became uncongested.
    pub cong_update: Option<u64>,
    /// `RDS_CMSG_RDMA_DEST` cookie carried by the message.
    pub rdma_dest: Option<u64>,
    /// An RDMA completion notification (`RDS_CMSG_RDMA_STATUS`) instead of data.
    pub rdma_status: Option<crate::message::RdmaNotify>,
    /// Receive timestamp (when enabled with [`Socket::set_timestamps`]).
    pub timestamp: Option<SystemTime>,
}

#[derive(Debug, Default, Clone)]
struct Pending {
    transport: Option<TransportKind>,
    sndbuf: Option<usize>,
    rcvbuf: Option<usize>,
    cong_monitor: bool,
    recverr: bool,
    connected: Option<SocketAddr>,
    /// Whose share of the node budget the socket draws on (0: root's, the default).
    owner: u32,
}

/// A socket of a node in this process.
#[derive(Debug)]
struct Bound {
    node: Node,
    id: SockId,
    waiter: Arc<Waiter>,
}

impl Bound {
    /// The readiness eventfd (`rx`: POLLIN, else POLLOUT), created on demand and brought in
    /// line with the socket; `core` is the node's engine, locked.
    fn ready_fd(&self, core: &crate::node::Core, rx: bool) -> io::Result<RawFd> {
        let mut g = self
            .waiter
            .slot(rx)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some((sys::eventfd()?, false));
        }
        let fd = g.as_ref().map(|(f, _)| f.as_raw_fd()).expect("just set");
        drop(g);
        if self.node.inner.is_running() {
            self.waiter
                .update_fds(core.stack.readable(self.id), core.stack.writable(self.id));
        } else {
            // A node gone: readable and writable, as a socket with an error.
            self.waiter.update_fds(true, true);
        }
        Ok(fd)
    }

    /// [`Bound::ready_fd`] without the engine lock once the descriptor exists (every wake of
    /// the socket keeps it in line): a wait loop asks for it on every round.
    fn fd(&self, rx: bool) -> io::Result<RawFd> {
        let known = self
            .waiter
            .slot(rx)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(f, _)| f.as_raw_fd());
        match known {
            Some(fd) => Ok(fd),
            None => self.ready_fd(&self.node.inner.lock_core(), rx),
        }
    }

    /// A blocking receive's wait until the socket is readable or `deadline` (`ETIMEDOUT`
    /// past it): for a socket that sent since its last wait, through the node's leading wait,
    /// so that this thread reads the answer itself while no other thread leads
    /// ([`Socket::wait`]).
    fn wait_readable<'a>(
        &'a self,
        core: std::sync::MutexGuard<'a, crate::node::Core>,
        deadline: Option<std::time::Instant>,
    ) -> io::Result<std::sync::MutexGuard<'a, crate::node::Core>> {
        let left = match deadline {
            None => Duration::from_secs(1),
            Some(d) => {
                let now = std::time::Instant::now();
                if now >= d {
                    return Err(err(libc::ETIMEDOUT));
                }
                d - now
            }
        };
        // A receive-only socket (a sink) waits on its condition variable and leaves the
        // transport to the I/O thread, which reads ahead while this thread consumes (leading
        // cost rds-bench's one-way rates 10-25%). A socket that sent since its last wait is
        // waiting for an answer: it leads.
        if !self.waiter.sent.swap(false, Ordering::Relaxed) {
            return wait_on(&self.waiter, core, deadline);
        }
        let Ok(fd) = self.ready_fd(&core, true) else {
            // No descriptor to spare: the condition variable.
            return wait_on(&self.waiter, core, deadline);
        };
        drop(core);
        let inner = &self.node.inner;
        inner.wait_leading([fd, -1, -1], left, || (self.waiter.signaled().0, false))?;
        Ok(inner.lock_core())
    }
}

/// What serves a bound socket, chosen once at bind: the daemon when one runs and owns the
/// address, else a node in this process.
#[derive(Debug)]
enum Backend {
    /// A node in this process (the one named at creation, or the default embedded node).
    Embedded(Bound),
    /// The host daemon's node, reached over its control socket.
    Daemon(remote::Remote),
    /// The running kernel's RDS (`AF_RDS`).
    Kernel(crate::kernel::KernelSocket),
}

/// An RDS socket.
#[derive(Debug)]
pub struct Socket {
    /// The node named at creation ([`Socket::with_node`]); `None`: the daemon or the default
    /// embedded node, whichever owns the address at bind.
    node: Option<Node>,
    /// Options set before bind, handed to the backend at bind.
    pending: Mutex<Pending>,
    /// Set by bind.
    backend: OnceLock<Backend>,
    nonblocking: AtomicBool,
    rcvtimeo_ns: AtomicU64,
    sndtimeo_ns: AtomicU64,
    timestamps: AtomicBool,
    /// What [`Socket::wait_uncongested`] waits on, on an embedded node (`cong`).
    cong: cong::Slot,
}

static DEFAULT_NODE: Mutex<Option<Node>> = Mutex::new(None);

/// The process's default embedded node (started on first use, with no addresses; sockets
/// add theirs at bind). It runs RDS/TCP and, where rdma-core and an RDMA device are present,
/// RDS/IB: as in the kernel, a socket bound to an address an RDMA device holds gets IB, any
/// other TCP (`SO_RDS_TRANSPORT`, [`Socket::set_transport`], overrides).
///
/// # Errors
/// The node's I/O thread or epoll could not be created.
pub fn default_node() -> io::Result<Node> {
    let mut g = DEFAULT_NODE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = g.as_ref().filter(|n| n.is_running()) {
        return Ok(n.clone());
    }
    let mut cfg = NodeConfig::new([]);
    cfg.transports.ib = true;
    let n = Node::start(cfg)?;
    *g = Some(n.clone());
    Ok(n)
}

/// Shuts the process's default embedded node down, if one runs, removing its control socket
/// from the runtime directory; for a tool about to exit (a static is never dropped).
pub fn shutdown_default_node() {
    let n = DEFAULT_NODE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    if let Some(n) = n {
        n.shutdown();
    }
}

fn nanos(d: Option<Duration>) -> u64 {
    d.map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

fn timeout(ns: u64) -> Option<Duration> {
    (ns != 0).then(|| Duration::from_nanos(ns))
}

fn node_down() -> io::Error {
    err(libc::ENETDOWN)
}

impl Socket {
    /// An unbound socket served by the default embedded node.
    ///
    /// # Errors
    /// None today; kept fallible for the daemon client backend.
    pub fn new() -> io::Result<Socket> {
        Ok(Self::make(None))
    }

    /// An unbound socket served by `node`.
    pub fn with_node(node: &Node) -> Socket {
        Self::make(Some(node.clone()))
    }

    /// A socket of `node` opened on behalf of user `uid` (the daemon's client sockets): what
    /// it holds draws on that user's share of the node budget (`net.rds.uid_mem_share`).
    pub(crate) fn with_node_for(node: &Node, uid: u32) -> Socket {
        let s = Self::make(Some(node.clone()));
        s.pending().owner = uid;
        s
    }

    fn make(node: Option<Node>) -> Socket {
        Socket {
            node,
            pending: Mutex::new(Pending::default()),
            backend: OnceLock::new(),
            nonblocking: AtomicBool::new(false),
            rcvtimeo_ns: AtomicU64::new(0),
            sndtimeo_ns: AtomicU64::new(0),
            timestamps: AtomicBool::new(false),
            cong: cong::Slot::default(),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The embedded backend, once bound to one.
    fn embedded(&self) -> Option<&Bound> {
        match self.backend.get() {
            Some(Backend::Embedded(b)) => Some(b),
            _ => None,
        }
    }

    /// The daemon backend, once bound to it.
    fn daemon(&self) -> Option<&remote::Remote> {
        match self.backend.get() {
            Some(Backend::Daemon(r)) => Some(r),
            _ => None,
        }
    }

    /// The kernel backend, once bound to it.
    fn kernel(&self) -> Option<&crate::kernel::KernelSocket> {
        match self.backend.get() {
            Some(Backend::Kernel(k)) => Some(k),
            _ => None,
        }
    }

    fn b(&self) -> io::Result<&Bound> {
        self.embedded().ok_or_else(|| err(libc::ENOTCONN))
    }

    /// `bind()`: binds to `addr` (port 0 picks a free port ≥ 2; port 1 is reserved; no
    /// wildcard). Returns the bound address.
    ///
    /// # Errors
    /// `EINVAL` (already bound, wildcard/broadcast/multicast, port 1), `EADDRNOTAVAIL` (no
    /// node can own the address), `EADDRINUSE`, `ENOPROTOOPT` (the preset transport cannot
    /// serve the address).
    pub fn bind(&self, addr: SocketAddr) -> io::Result<SocketAddr> {
        if self.backend.get().is_some() {
            return Err(err(libc::EINVAL));
        }
        let ip = canonical(addr.ip());
        if ip.is_unspecified() || ip.is_multicast() || ip == std::net::Ipv4Addr::BROADCAST {
            return Err(err(libc::EINVAL));
        }
        if self.node.is_none() {
            if let Some(r) = kern::bind_first(self, SocketAddr::new(ip, addr.port()))? {
                return Ok(r);
            }
        }
        if self.node.is_none() && !crate::env::no_daemon() {
            if let Some(r) = self.bind_daemon(SocketAddr::new(ip, addr.port()))? {
                return Ok(r);
            }
        }
        let node = match &self.node {
            Some(n) => n.clone(),
            None => {
                let n = default_node()?;
                if !n.owns(ip) {
                    n.add_addr(ip).map_err(|e| match e.kind() {
                        io::ErrorKind::AddrNotAvailable => err(libc::EADDRNOTAVAIL),
                        _ => e,
                    })?;
                }
                n
            }
        };
        let p = self.pending().clone();
        let inner = node.inner.clone();
        let mut core = inner.lock_core();
        if !inner.is_running() {
            return Err(node_down());
        }
        let id = core.stack.socket();
        let r = (|| {
            if let Some(t) = p.transport {
                core.stack.set_transport(id, t)?;
            }
            core.stack.bind(id, SocketAddr::new(ip, addr.port()))
        })();
        let bound = match r {
            Ok(b) => b,
            Err(e) => {
                core.stack.close(id);
                return Err(e.into());
            }
        };
        if let Some(v) = p.sndbuf {
            core.stack.set_sndbuf(id, v);
        }
        if let Some(v) = p.rcvbuf {
            core.stack.set_rcvbuf(id, v);
        }
        core.stack.set_cong_monitor(id, p.cong_monitor);
        core.stack.set_recverr(id, p.recverr);
        core.stack.set_owner(id, p.owner);
        if let Some(c) = p.connected {
            let _ = core.stack.connect(id, c);
        }
        let waiter = Arc::new(Waiter::default());
        core.waiters.insert(id, waiter.clone());
        drop(core);
        let _ = self
            .backend
            .set(Backend::Embedded(Bound { node, id, waiter }));
        Ok(bound)
    }

    /// Binds through the daemon if one runs and owns `addr`; `Ok(None)` when not.
    fn bind_daemon(&self, addr: SocketAddr) -> io::Result<Option<SocketAddr>> {
        let Some(ep) = crate::ctl::find_daemon() else {
            return Ok(None);
        };
        let p = self.pending().clone();
        let mut opts = vec![
            SockOpt::CongMonitor(p.cong_monitor),
            SockOpt::Recverr(p.recverr),
            SockOpt::Timestamps(self.timestamps.load(Ordering::Relaxed)),
        ];
        opts.extend(p.sndbuf.map(SockOpt::Sndbuf));
        opts.extend(p.rcvbuf.map(SockOpt::Rcvbuf));
        match remote::Remote::bind(&ep, addr, p.transport, &opts, p.connected) {
            Ok((r, bound)) => {
                let _ = self.backend.set(Backend::Daemon(r));
                Ok(Some(bound))
            }
            // The daemon does not own the address: an embedded node may.
            Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether the daemon serves this socket.
    pub fn via_daemon(&self) -> bool {
        self.daemon().is_some()
    }

    /// Whether the running kernel's RDS serves this socket.
    pub fn via_kernel(&self) -> bool {
        self.kernel().is_some()
    }

    /// Whether the daemon serves this socket's sends and receives through a shared-memory
    /// ring ([`ring`]).
    pub fn via_ring(&self) -> bool {
        self.daemon().is_some_and(remote::Remote::has_ring)
    }

    /// The bound address.
    ///
    /// # Errors
    /// `ENOTCONN` when unbound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        if let Some(r) = self.daemon() {
            return r.local_addr();
        }
        if let Some(k) = self.kernel() {
            return k.local_addr();
        }
        let b = self.b()?;
        b.node
            .inner
            .lock_core()
            .stack
            .sock_name(b.id)
            .ok_or_else(|| err(libc::ENOTCONN))
    }

    /// `connect()`: records a default destination; nothing is sent.
    ///
    /// # Errors
    /// `EDESTADDRREQ` for a wildcard address, `EINVAL` for broadcast or multicast.
    pub fn connect(&self, addr: SocketAddr) -> io::Result<()> {
        let ip = canonical(addr.ip());
        if ip.is_unspecified() {
            return Err(err(libc::EDESTADDRREQ));
        }
        if let Some(r) = self.daemon() {
            return r.connect(addr);
        }
        if let Some(k) = self.kernel() {
            return k.connect(addr);
        }
        match self.embedded() {
            Some(b) => {
                let mut core = b.node.inner.lock_core();
                core.stack.connect(b.id, addr)?;
                Ok(())
            }
            None => {
                if ip.is_multicast() || ip == std::net::Ipv4Addr::BROADCAST {
                    return Err(err(libc::EINVAL));
                }
                self.pending().connected = Some(addr);
                Ok(())
            }
        }
    }

    /// The default destination (`getpeername`).
    ///
    /// # Errors
    /// `ENOTCONN` when none was set.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        if let Some(r) = self.daemon() {
            return r.peer_addr();
        }
        if let Some(k) = self.kernel() {
            return k.peer_addr();
        }
        let p = match self.embedded() {
            Some(b) => b.node.inner.lock_core().stack.peer_name(b.id),
            None => self.pending().connected,
        };
        p.ok_or_else(|| err(libc::ENOTCONN))
    }

    /// Sends `buf` as one message to `dest`. Returns its length.
    ///
    /// # Errors
    /// See the module documentation; `ETIMEDOUT` when a blocking send outlived the write
    /// timeout.
    pub fn send_to(&self, buf: &[u8], dest: SocketAddr) -> io::Result<usize> {
        self.send_bytes(crate::buf::copy(buf), Some(dest), false)
    }

    /// Sends `buf` to the connected destination.
    ///
    /// # Errors
    /// As [`Socket::send_to`]; `ENOTCONN` without a destination.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.send_bytes(crate::buf::copy(buf), None, false)
    }

    /// Sends a message without copying it. `dontwait` makes this call non-blocking.
    ///
    /// # Errors
    /// As [`Socket::send_to`].
    pub fn send_bytes(
        &self,
        msg: Bytes,
        dest: Option<SocketAddr>,
        dontwait: bool,
    ) -> io::Result<usize> {
        let nonblock = dontwait || self.nonblocking.load(Ordering::Relaxed);
        let tmo = timeout(self.sndtimeo_ns.load(Ordering::Relaxed));
        if let Some(r) = self.daemon() {
            return r.send(&msg, dest, nonblock, tmo);
        }
        if let Some(k) = self.kernel() {
            return kern::send(k, &msg, dest, nonblock, tmo);
        }
        self.send_local(msg, dest, nonblock, &SendExtras::default())
    }

    /// `sendmsg` with RDMA control data ([`crate::rdma`]): an RDMA read or write performed
    /// before the message's first SEND (`RDS_CMSG_RDMA_ARGS`), or a region cookie handed to
    /// the peer (`RDS_CMSG_RDMA_DEST`, or `RDS_CMSG_RDMA_MAP`, which registers it first).
    ///
    /// # Errors
    /// On the kernel backend, the kernel's. Otherwise as [`Socket::send_to`], and:
    /// `EOPNOTSUPP` when the socket is not on the IB transport
    /// (or is served by the daemon); `EINVAL` for an operation combined with a cookie, an
    /// operation without local memory or with ranges outside their buffers, or an
    /// `RDMA_DEST` cookie that is not one of this socket's regions; `EMSGSIZE` for an
    /// operation over 1 MiB.
    pub fn send_ctl(
        &self,
        payload: &[u8],
        dest: Option<SocketAddr>,
        ctl: &SendCtl,
    ) -> io::Result<Sent> {
        if ctl.rdma.is_none() && ctl.rdma_dest.is_none() && ctl.rdma_map.is_none() {
            let len = self.send_bytes(crate::buf::copy(payload), dest, false)?;
            return Ok(Sent {
                len,
                map_cookie: None,
            });
        }
        if let Some(k) = self.kernel() {
            let nonblock = self.nonblocking.load(Ordering::Relaxed);
            let tmo = timeout(self.sndtimeo_ns.load(Ordering::Relaxed));
            return kern::send_ctl(k, payload, dest, (nonblock, tmo), ctl);
        }
        let (b, ip) = self.rdma_socket()?;
        let cookies = usize::from(ctl.rdma_dest.is_some()) + usize::from(ctl.rdma_map.is_some());
        if cookies > 1 || (cookies == 1 && ctl.rdma.is_some()) {
            return Err(err(libc::EINVAL));
        }
        let inner = &b.node.inner;
        let mut extras = SendExtras::default();
        if let Some(c) = ctl.rdma_dest {
            if !inner.with_ib(|t| Ok(t.has_mr(b.id, cookie_rkey(c))))? {
                return Err(err(libc::EINVAL));
            }
            extras.rdma_dest = Some(c);
        }
        if let Some(a) = &ctl.rdma {
            let ok_ranges = a
                .local
                .iter()
                .all(|v| v.len > 0 && v.buf.contains(v.off, v.len));
            if a.local.is_empty() || a.local.len() > MAX_RDMA_IOVECS || !ok_ranges {
                return Err(err(libc::EINVAL));
            }
            let op = Arc::new(RdmaOp::new(b.id, a));
            if op.bytes > crate::wire::MAX_MSG_SIZE as u64 {
                return Err(err(libc::EMSGSIZE));
            }
            inner.with_ib(|t| t.register_local(ip, &op, &a.local))?;
            extras.rdma = Some(op);
        }
        let mut map_cookie = None;
        if let Some(m) = &ctl.rdma_map {
            let c = self.get_mr(&m.buf, m.off, m.len, m.flags)?;
            map_cookie = Some(c);
            extras.rdma_dest = Some(c);
        }
        let nonblock = self.nonblocking.load(Ordering::Relaxed);
        match self.send_local(crate::buf::copy(payload), dest, nonblock, &extras) {
            Ok(len) => Ok(Sent { len, map_cookie }),
            Err(e) => {
                if let Some(c) = map_cookie {
                    let _ = self.free_mr(c, false);
                }
                Err(e)
            }
        }
    }

    /// `RDS_GET_MR`: registers `len` bytes of `buf` at `off` so that peers holding the
    /// returned cookie may read and write them (zero-based, see [`crate::rdma`]). The region
    /// lives until [`Socket::free_mr`], the socket's close, or (use-once) the first message
    /// whose RDMA operation used it.
    ///
    /// # Errors
    /// On the kernel backend, the kernel's. Otherwise `ENOTCONN` when unbound; `EOPNOTSUPP`
    /// when not on the IB transport (or served by the daemon); `EINVAL` for an empty range or one outside the buffer; the registration's
    /// error.
    pub fn get_mr(
        &self,
        buf: &RdmaBuffer,
        off: usize,
        len: usize,
        flags: MrFlags,
    ) -> io::Result<u64> {
        if let Some(k) = self.kernel() {
            return kern::get_mr(k, buf, off, len, flags);
        }
        let (b, ip) = self.rdma_socket()?;
        if len == 0 || !buf.contains(off, len) {
            return Err(err(libc::EINVAL));
        }
        b.node
            .inner
            .with_ib(|t| t.get_mr(ip, b.id, buf, off, len, flags))
    }

    /// `RDS_FREE_MR`: releases one of this socket's regions. Cookie 0 does nothing (the
    /// kernel's "flush" form).
    ///
    /// # Errors
    /// On the kernel backend, the kernel's (`EINVAL` on RDS/TCP, even for cookie 0).
    /// Otherwise `ENOTCONN` when unbound; `EOPNOTSUPP` when not on the IB transport; `EINVAL`
    /// when the socket has no such region.
    pub fn free_mr(&self, cookie: u64, invalidate: bool) -> io::Result<()> {
        if let Some(k) = self.kernel() {
            let flags = MrFlags {
                use_once: false,
                invalidate,
            };
            return k.free_mr(cookie, flags.bits());
        }
        let (b, _) = self.rdma_socket()?;
        if cookie == 0 {
            return Ok(());
        }
        if b.node
            .inner
            .with_ib(|t| Ok(t.free_mr(b.id, cookie_rkey(cookie))))?
        {
            Ok(())
        } else {
            Err(err(libc::EINVAL))
        }
    }

    /// The bound socket and its address, if it may use RDMA (embedded node, IB transport).
    fn rdma_socket(&self) -> io::Result<(&Bound, std::net::IpAddr)> {
        if self.daemon().is_some() || self.kernel().is_some() {
            return Err(err(libc::EOPNOTSUPP));
        }
        let b = self.embedded().ok_or_else(|| err(libc::ENOTCONN))?;
        let (name, kind) = {
            let core = b.node.inner.lock_core();
            (core.stack.sock_name(b.id), core.stack.sock_transport(b.id))
        };
        let name = name.ok_or_else(|| err(libc::ENOTCONN))?;
        if kind != Some(TransportKind::Ib) {
            return Err(err(libc::EOPNOTSUPP));
        }
        Ok((b, name.ip()))
    }

    fn send_local(
        &self,
        msg: Bytes,
        dest: Option<SocketAddr>,
        nonblock: bool,
        extras: &SendExtras,
    ) -> io::Result<usize> {
        let tmo = timeout(self.sndtimeo_ns.load(Ordering::Relaxed));
        let b = self.b()?;
        let deadline = tmo.map(|t| std::time::Instant::now() + t);
        let inner = &b.node.inner;
        let mut core = inner.lock_core();
        let mut retry = false;
        loop {
            if !inner.is_running() {
                return Err(node_down());
            }
            let now = inner.now();
            match core
                .stack
                .send_full(now, b.id, dest, msg.clone(), nonblock, retry, extras)
            {
                Ok(n) => {
                    let (r, w) = (core.stack.readable(b.id), core.stack.writable(b.id));
                    b.waiter.update_fds(r, w);
                    inner.after_app_call_inline(core, msg.len() <= crate::node::INLINE_MAX);
                    b.waiter.sent.store(true, Ordering::Relaxed);
                    return Ok(n);
                }
                Err(SendError::WouldBlock) if !nonblock => {
                    retry = true;
                    // Space comes back with TCP's acknowledgements, which the I/O thread
                    // polls: it must be awake to see them.
                    inner.wake_io();
                    core = wait_on(&b.waiter, core, deadline)?;
                }
                Err(SendError::CongestedWait) => {
                    retry = true;
                    // Start the connection that will bring the peer's new map.
                    inner.after_app_call(core);
                    core = inner.lock_core();
                    let dst = match dest.or_else(|| core.stack.peer_name(b.id)) {
                        Some(d) => d,
                        None => return Err(err(libc::ENOTCONN)),
                    };
                    // Woken when a congestion map changes or a path goes down; then the
                    // next try reconnects a connection that went down meanwhile (the new
                    // connection brings the peer's current map).
                    if core.stack.dest_congested(b.id, dst) && inner.is_running() {
                        core = wait(&inner.cong_cv, core, deadline)?;
                    }
                }
                Err(e) => {
                    let (r, w) = (core.stack.readable(b.id), core.stack.writable(b.id));
                    b.waiter.update_fds(r, w);
                    inner.after_app_call(core);
                    // Buffer space and memory come back with TCP's acknowledgements, which
                    // the I/O thread polls.
                    inner.wake_io();
                    return Err(e.into());
                }
            }
        }
    }

    /// Receives one message into `buf`; returns `(bytes copied, sender)`.
    ///
    /// # Errors
    /// `EAGAIN` when non-blocking and nothing is queued; `ETIMEDOUT` after the read timeout.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        loop {
            let m = self.recv_msg(buf, RecvFlags::default())?;
            if let Some(from) = m.from {
                return Ok((m.len, from));
            }
            // A congestion notification is a 0-byte receive without a sender; data callers
            // that did not ask for monitoring never get one.
        }
    }

    /// Receives with flags; see [`RecvMsg`]. Copies at most `buf.len()` bytes.
    ///
    /// # Errors
    /// As [`Socket::recv_from`].
    pub fn recv_msg(&self, buf: &mut [u8], flags: RecvFlags) -> io::Result<RecvMsg> {
        let (item, full_len, truncated, timestamp) = self.recv_item(buf.len(), flags)?;
        Ok(match item {
            Received::CongUpdate(mask) => RecvMsg {
                len: 0,
                full_len: 0,
                from: None,
                truncated: false,
                cong_update: Some(mask),
                rdma_dest: None,
                rdma_status: None,
                timestamp: None,
            },
            Received::RdmaStatus(n) => RecvMsg {
                len: 0,
                full_len: 0,
                from: None,
                truncated: false,
                cong_update: None,
                rdma_dest: None,
                rdma_status: Some(n),
                timestamp: None,
            },
            Received::Data { msg, .. } => {
                let n = msg.payload.len();
                buf[..n].copy_from_slice(&msg.payload);
                RecvMsg {
                    len: if flags.trunc { full_len } else { n },
                    full_len,
                    from: Some(msg.from),
                    truncated,
                    cong_update: None,
                    rdma_dest: msg.rdma_dest,
                    rdma_status: None,
                    timestamp,
                }
            }
        })
    }

    /// Receives one message without copying its payload (at most `max_len` bytes of it).
    ///
    /// # Errors
    /// As [`Socket::recv_from`].
    pub fn recv_bytes(&self, max_len: usize, flags: RecvFlags) -> io::Result<Received> {
        self.recv_item(max_len, flags).map(|r| r.0)
    }

    /// One receive: what came, the message's full length, whether it was cut, and its
    /// receive time (data only, when [`Socket::set_timestamps`] asked for it).
    fn recv_item(
        &self,
        max_len: usize,
        flags: RecvFlags,
    ) -> io::Result<(Received, usize, bool, Option<SystemTime>)> {
        let nonblock = flags.dontwait || self.nonblocking.load(Ordering::Relaxed);
        let tmo = timeout(self.rcvtimeo_ns.load(Ordering::Relaxed));
        if let Some(r) = self.daemon() {
            let (got, ts) = r.recv(max_len, flags.peek, nonblock, tmo)?;
            let (full, trunc) = match &got {
                Received::Data {
                    full_len,
                    truncated,
                    ..
                } => (*full_len, *truncated),
                Received::CongUpdate(_) | Received::RdmaStatus(_) => (0, false),
            };
            let ts = ts.filter(|_| self.timestamps.load(Ordering::Relaxed));
            return Ok((got, full, trunc, ts));
        }
        if let Some(k) = self.kernel() {
            return kern::recv_item(k, max_len, flags, nonblock, tmo);
        }
        let b = self.b()?;
        let deadline = tmo.map(|t| std::time::Instant::now() + t);
        let inner = &b.node.inner;
        let mut core = inner.lock_core();
        loop {
            if !inner.is_running() {
                return Err(node_down());
            }
            match core.stack.recv(b.id, max_len, flags.peek) {
                Ok(r) => {
                    let (rd, wr) = (core.stack.readable(b.id), core.stack.writable(b.id));
                    b.waiter.update_fds(rd, wr);
                    inner.after_app_call(core);
                    let (full, trunc, ts) = match &r {
                        Received::Data {
                            msg,
                            full_len,
                            truncated,
                        } => (
                            *full_len,
                            *truncated,
                            self.timestamps.load(Ordering::Relaxed).then(|| {
                                UNIX_EPOCH + Duration::from_nanos(b.node.wall_ns(msg.rx_time))
                            }),
                        ),
                        Received::CongUpdate(_) | Received::RdmaStatus(_) => (0, false, None),
                    };
                    return Ok((r, full, trunc, ts));
                }
                Err(e) if nonblock => {
                    drop(core);
                    return Err(e.into());
                }
                Err(_) => core = b.wait_readable(core, deadline)?,
            }
        }
    }

    /// `O_NONBLOCK`.
    pub fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }

    /// `SO_RCVTIMEO` (`None` = wait forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) {
        self.rcvtimeo_ns.store(nanos(t), Ordering::Relaxed);
        if let Some(k) = self.kernel() {
            let _ = k.set_read_timeout(t);
        }
    }

    /// `SO_SNDTIMEO` (`None` = wait forever).
    pub fn set_write_timeout(&self, t: Option<Duration>) {
        self.sndtimeo_ns.store(nanos(t), Ordering::Relaxed);
        if let Some(k) = self.kernel() {
            let _ = k.set_write_timeout(t);
        }
    }

    /// `SO_TIMESTAMP`: report receive times.
    pub fn set_timestamps(&self, on: bool) {
        self.timestamps.store(on, Ordering::Relaxed);
        if let Some(r) = self.daemon() {
            let _ = r.set(SockOpt::Timestamps(on));
        }
        if let Some(k) = self.kernel() {
            let _ = k.set_timestamps(on);
        }
    }

    /// `SO_SNDBUF`: the usable send buffer in bytes (the kernel keeps twice this and uses
    /// half; [`Socket::send_buffer_size`] reports the doubled value as `getsockopt` does).
    pub fn set_send_buffer_size(&self, bytes: usize) {
        if let Some(r) = self.daemon() {
            let _ = r.set(SockOpt::Sndbuf(bytes));
            return;
        }
        if let Some(k) = self.kernel() {
            let _ = k.set_sndbuf(bytes);
            return;
        }
        match self.embedded() {
            Some(b) => {
                let mut core = b.node.inner.lock_core();
                core.stack.set_sndbuf(b.id, bytes);
                b.node.inner.after_app_call(core);
            }
            None => self.pending().sndbuf = Some(bytes),
        }
    }

    /// `SO_RCVBUF`: the usable receive buffer in bytes (congestion threshold).
    pub fn set_recv_buffer_size(&self, bytes: usize) {
        if let Some(r) = self.daemon() {
            let _ = r.set(SockOpt::Rcvbuf(bytes));
            return;
        }
        if let Some(k) = self.kernel() {
            let _ = k.set_rcvbuf(bytes);
            return;
        }
        match self.embedded() {
            Some(b) => b.node.inner.lock_core().stack.set_rcvbuf(b.id, bytes),
            None => self.pending().rcvbuf = Some(bytes),
        }
    }

    fn bufs(&self) -> (usize, usize) {
        if let Some(r) = self.daemon() {
            return r.bufs();
        }
        if let Some(k) = self.kernel() {
            // The kernel reports the doubled values; this reports the usable halves.
            let (snd, rcv) = k.bufs();
            return (snd / 2, rcv / 2);
        }
        match self.embedded() {
            Some(b) => b
                .node
                .inner
                .lock_core()
                .stack
                .bufs(b.id)
                .unwrap_or_default(),
            None => {
                let p = self.pending();
                let d = crate::tunables::Tunables::default();
                (
                    p.sndbuf.unwrap_or(d.sndbuf_default as usize),
                    p.rcvbuf.unwrap_or(d.rcvbuf_default as usize),
                )
            }
        }
    }

    /// `getsockopt(SO_SNDBUF)`: twice the usable send buffer, as Linux reports it.
    pub fn send_buffer_size(&self) -> usize {
        self.bufs().0 * 2
    }

    /// `getsockopt(SO_RCVBUF)`: twice the usable receive buffer, as Linux reports it.
    pub fn recv_buffer_size(&self) -> usize {
        self.bufs().1 * 2
    }

    /// `SO_RDS_TRANSPORT` (set): pins the transport before bind.
    ///
    /// # Errors
    /// `EOPNOTSUPP` when already bound or set.
    pub fn set_transport(&self, t: TransportKind) -> io::Result<()> {
        if self.backend.get().is_some() {
            return Err(err(libc::EOPNOTSUPP));
        }
        let mut p = self.pending();
        if p.transport.is_some() {
            return Err(err(libc::EOPNOTSUPP));
        }
        if t == TransportKind::Loopback {
            return Err(err(libc::EINVAL));
        }
        p.transport = Some(t);
        Ok(())
    }

    /// `SO_RDS_TRANSPORT` (get): `None` (`RDS_TRANS_NONE`) when unbound and not set.
    pub fn transport(&self) -> Option<TransportKind> {
        if let Some(r) = self.daemon() {
            return r.transport();
        }
        if let Some(k) = self.kernel() {
            return k.transport();
        }
        match self.embedded() {
            Some(b) => b.node.inner.lock_core().stack.sock_transport(b.id),
            None => self.pending().transport,
        }
    }

    /// `RDS_CONG_MONITOR`.
    pub fn set_cong_monitor(&self, on: bool) {
        if let Some(r) = self.daemon() {
            let _ = r.set(SockOpt::CongMonitor(on));
            return;
        }
        if let Some(k) = self.kernel() {
            let _ = k.set_cong_monitor(on);
            return;
        }
        match self.embedded() {
            Some(b) => b.node.inner.lock_core().stack.set_cong_monitor(b.id, on),
            None => self.pending().cong_monitor = on,
        }
    }

    /// `RDS_RECVERR` (set).
    pub fn set_recverr(&self, on: bool) {
        if let Some(r) = self.daemon() {
            // Kept here too: `recverr` answers from it for a daemon socket.
            self.pending().recverr = on;
            let _ = r.set(SockOpt::Recverr(on));
            return;
        }
        if let Some(k) = self.kernel() {
            let _ = k.set_recverr(on);
            return;
        }
        match self.embedded() {
            Some(b) => b.node.inner.lock_core().stack.set_recverr(b.id, on),
            None => self.pending().recverr = on,
        }
    }

    /// `RDS_RECVERR` (get).
    pub fn recverr(&self) -> bool {
        if self.daemon().is_some() {
            return self.pending().recverr;
        }
        if let Some(k) = self.kernel() {
            return k.recverr();
        }
        match self.embedded() {
            Some(b) => b.node.inner.lock_core().stack.recverr(b.id),
            None => self.pending().recverr,
        }
    }

    /// `RDS_CANCEL_SENT_TO`: drops this socket's queued and unacknowledged messages to `dest`.
    /// Returns how many were dropped.
    ///
    /// # Errors
    /// `ENOTCONN` when unbound.
    pub fn cancel_sent_to(&self, dest: SocketAddr) -> io::Result<usize> {
        if let Some(r) = self.daemon() {
            return r.cancel(dest);
        }
        if let Some(k) = self.kernel() {
            // The kernel does not say how many it dropped.
            return k.cancel_sent_to(dest).map(|()| 0);
        }
        let b = self.b()?;
        let mut core = b.node.inner.lock_core();
        let n = core.stack.cancel_sent_to(b.id, dest);
        let (r, w) = (core.stack.readable(b.id), core.stack.writable(b.id));
        b.waiter.update_fds(r, w);
        b.node.inner.after_app_call(core);
        Ok(n)
    }

    /// Waits up to `timeout` until the socket is readable (if `rx`) or writable (if `tx`), as
    /// `poll(2)` on [`Socket::fd`] and [`Socket::send_fd`] (or, on the kernel backend, on the
    /// socket for POLLIN and POLLOUT) would; returns `(readable, writable)`, both false when
    /// the time ran out or a signal came.
    ///
    /// On an embedded node the waiting thread does the node's transport I/O itself while no
    /// other thread does, so a message that reaches the node for this socket wakes only this
    /// thread (not the node's I/O thread first). A request/response loop should wait here
    /// rather than poll the descriptors.
    ///
    /// # Errors
    /// As [`Socket::fd`]; `poll(2)` errors other than EINTR.
    pub fn wait(&self, rx: bool, tx: bool, timeout: Duration) -> io::Result<(bool, bool)> {
        self.wait_or(rx, tx, None, timeout)
    }

    /// [`Socket::wait`] that also ends when `other` (a signalfd, say) is readable; returns
    /// the socket's readiness then.
    ///
    /// # Errors
    /// As [`Socket::wait`].
    pub fn wait_or(
        &self,
        rx: bool,
        tx: bool,
        other: Option<RawFd>,
        timeout: Duration,
    ) -> io::Result<(bool, bool)> {
        let ofd = other.unwrap_or(-1);
        if let Some(k) = self.kernel() {
            let events = if rx { libc::POLLIN } else { 0 } | if tx { libc::POLLOUT } else { 0 };
            let r = sys::poll_for(&[(k.raw_fd(), events), (ofd, libc::POLLIN)], timeout)?[0];
            let bad = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
            return Ok((
                rx && r & (libc::POLLIN | bad) != 0,
                tx && r & (libc::POLLOUT | bad) != 0,
            ));
        }
        if let Some(b) = self.embedded() {
            let rfd = if rx { b.fd(true)? } else { -1 };
            let tfd = if tx { b.fd(false)? } else { -1 };
            let inner = &b.node.inner;
            let r = inner.wait_leading([rfd, tfd, ofd], timeout, || {
                let (r, w) = b.waiter.signaled();
                (rx && r, tx && w)
            })?;
            // A node gone: ready, as a socket with an error (the next call says ENETDOWN).
            return Ok(if inner.is_running() { r } else { (rx, tx) });
        }
        let rfd = if rx { self.fd()? } else { -1 };
        let tfd = if tx { self.send_fd()? } else { -1 };
        let asks = [
            (rfd, libc::POLLIN),
            (tfd, libc::POLLIN),
            (ofd, libc::POLLIN),
        ];
        let r = sys::poll_for(&asks, timeout)?;
        Ok((r[0] != 0, r[1] != 0))
    }

    /// Whether a receive would return something now (POLLIN).
    pub fn readable(&self) -> bool {
        if let Some(r) = self.daemon() {
            return r.readiness().0;
        }
        if let Some(k) = self.kernel() {
            return k.ready().0;
        }
        self.embedded()
            .is_some_and(|b| b.node.inner.lock_core().stack.readable(b.id))
    }

    /// Whether the send buffer has room (POLLOUT).
    pub fn writable(&self) -> bool {
        if let Some(r) = self.daemon() {
            return r.readiness().1;
        }
        if let Some(k) = self.kernel() {
            return k.ready().1;
        }
        self.embedded()
            .is_some_and(|b| b.node.inner.lock_core().stack.writable(b.id))
    }

    /// A descriptor readable while [`Socket::readable`] holds (for poll/epoll).
    ///
    /// # Errors
    /// `ENOTCONN` when unbound; eventfd creation errors.
    pub fn fd(&self) -> io::Result<RawFd> {
        self.ready_fd(true)
    }

    /// A descriptor readable while [`Socket::writable`] holds (for poll/epoll).
    ///
    /// # Errors
    /// As [`Socket::fd`]; `EOPNOTSUPP` on the kernel backend (poll [`Socket::fd`] for
    /// POLLOUT there).
    pub fn send_fd(&self) -> io::Result<RawFd> {
        self.ready_fd(false)
    }

    fn ready_fd(&self, rx: bool) -> io::Result<RawFd> {
        if let Some(r) = self.daemon() {
            return r.fd(rx);
        }
        if let Some(k) = self.kernel() {
            // The socket itself is readable for POLLIN; POLLOUT has no readable stand-in.
            return if rx {
                Ok(k.raw_fd())
            } else {
                Err(err(libc::EOPNOTSUPP))
            };
        }
        let b = self.b()?;
        let core = b.node.inner.lock_core();
        b.ready_fd(&core, rx)
    }

    /// The node serving this socket (once bound).
    pub fn node(&self) -> Option<&Node> {
        self.embedded().map(|b| &b.node)
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        if let Some(r) = self.daemon() {
            r.close();
        }
        if let Some(b) = self.embedded() {
            let mut core = b.node.inner.lock_core();
            let ib = core.stack.sock_transport(b.id) == Some(TransportKind::Ib);
            core.waiters.remove(&b.id);
            core.stack.close(b.id);
            b.node.inner.after_app_call(core);
            if ib {
                // Its regions go with it (the transport lock is taken without the engine's).
                let _ = b.node.inner.with_ib(|t| {
                    t.free_sock(b.id);
                    Ok(())
                });
            }
        }
    }
}

/// Waits on a socket's condition variable as one of its counted waiters (see
/// [`Waiter::waiting`]); as [`wait`].
fn wait_on<'a, T>(
    w: &Waiter,
    guard: std::sync::MutexGuard<'a, T>,
    deadline: Option<std::time::Instant>,
) -> io::Result<std::sync::MutexGuard<'a, T>> {
    w.waiting.fetch_add(1, Ordering::Relaxed);
    let r = wait(&w.cv, guard, deadline);
    w.waiting.fetch_sub(1, Ordering::Relaxed);
    r
}

/// Waits on `cv` until woken or `deadline`; `ETIMEDOUT` past the deadline.
fn wait<'a, T>(
    cv: &std::sync::Condvar,
    guard: std::sync::MutexGuard<'a, T>,
    deadline: Option<std::time::Instant>,
) -> io::Result<std::sync::MutexGuard<'a, T>> {
    match deadline {
        None => Ok(cv.wait(guard).unwrap_or_else(|p| p.into_inner())),
        Some(d) => {
            let now = std::time::Instant::now();
            if now >= d {
                return Err(err(libc::ETIMEDOUT));
            }
            Ok(cv
                .wait_timeout(guard, d - now)
                .unwrap_or_else(|p| p.into_inner())
                .0)
        }
    }
}
