//! RDS sockets: the Linux `AF_RDS`/`SOCK_SEQPACKET` semantics as a Rust API.
//!
//! A [`Socket`] is a datagram endpoint bound to one of a node's addresses and a port. Messages
//! are reliable and ordered per (sender, receiver) pair, up to 1 MiB, zero length allowed.
//! Errors carry the kernel's `errno` values (`raw_os_error()`), so that tools can print the
//! same `strerror` texts: `EAGAIN` when the send buffer is full, `ENOBUFS` when the destination
//! port is congested (non-blocking), `EMSGSIZE`, `ENOTCONN`, `EADDRINUSE`, `EADDRNOTAVAIL`,
//! `EINVAL`, `ETIMEDOUT` for an expired timeout.
//!
//! What serves a socket is decided once, at bind, and held as the socket's backend
//! (`backend`): [`Socket::with_node`] names a node of this process; [`Socket::new`] goes
//! through the host daemon when one runs and owns the address, else uses the process's
//! default embedded node, which takes on the address at bind. The process's [`StackChoice`]
//! puts the running kernel's `AF_RDS` first (`auto`, when the kernel has RDS and no daemon
//! owns the address) or alone (`kernel`).
//!
//! Files: this one is the API, which matches the backend once per call and keeps the
//! options set before bind (`preset`); `backend` the choice at bind; the three backends,
//! `embedded` (a node in this process), `remote` (the daemon, requests on the control
//! connection; `answer` what the daemon's answers become) and `kernel` (the kernel's
//! `AF_RDS`, through [`crate::kernel`]); [`host`] the daemon's side, which serves client
//! sockets to other processes; [`ring`] the shared-memory rings daemon client sockets send
//! and receive through (both sides); `cong` the wake-up of senders blocked by a congested
//! destination ([`Socket::wait_uncongested`]).
//!
//! Readiness for the caller's own `poll`/`epoll`: [`Socket::fd`] is readable while a receive
//! would return something (POLLIN); [`Socket::send_fd`] is readable while the send buffer has
//! room (POLLOUT).

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;

mod answer;
mod backend;
mod cong;
mod embedded;
pub mod host;
mod kernel;
mod preset;
mod remote;
pub mod ring;

pub use backend::{kernel_preferred, set_stack, stack, StackChoice};
pub use embedded::{default_node, shutdown_default_node, QuietRx};

use crate::ctl::SockOpt;
use crate::errno::err;
use crate::info::{canonical, TransportKind};
use crate::message::Received;
use crate::node::Node;
use crate::proto::SendExtras;
use crate::rdma::{MrFlags, RdmaBuffer, SendCtl, Sent};
use crate::sys;
use backend::Backend;
use preset::{Preset, Timing};

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

/// The smallest usable send buffer, in bytes: the kernel keeps at least `SOCK_MIN_SNDBUF`
/// (4608, the true size of two TCP segments) whatever `SO_SNDBUF` asks, and RDS uses half of
/// what it keeps. A smaller one held a message or two here (`rds-stress` asks for its depth's
/// bytes: 256 at depth 1), where the kernel's holds 36 messages of 64 bytes.
pub const SNDBUF_MIN: usize = 2304;

/// The smallest usable receive buffer, in bytes: half the kernel's `SOCK_MIN_RCVBUF` (2304).
pub const RCVBUF_MIN: usize = 1152;

/// An RDS socket.
#[derive(Debug)]
pub struct Socket {
    /// The node named at creation ([`Socket::with_node`]); `None`: the daemon, the kernel or
    /// the default embedded node, whichever the process's [`StackChoice`] takes at bind.
    node: Option<Node>,
    /// Options set before bind, handed to the backend at bind.
    pending: Mutex<Preset>,
    /// Set by bind.
    backend: OnceLock<Backend>,
    nonblocking: AtomicBool,
    rcvtimeo_ns: AtomicU64,
    sndtimeo_ns: AtomicU64,
    timestamps: AtomicBool,
    /// What [`Socket::wait_uncongested`] waits on, on an embedded node (`cong`).
    cong: cong::Slot,
}

fn nanos(d: Option<Duration>) -> u64 {
    d.map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

fn timeout(ns: u64) -> Option<Duration> {
    (ns != 0).then(|| Duration::from_nanos(ns))
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
            pending: Mutex::new(Preset::default()),
            backend: OnceLock::new(),
            nonblocking: AtomicBool::new(false),
            rcvtimeo_ns: AtomicU64::new(0),
            sndtimeo_ns: AtomicU64::new(0),
            timestamps: AtomicBool::new(false),
            cong: cong::Slot::default(),
        }
    }

    fn pending(&self) -> MutexGuard<'_, Preset> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The backend, once bound (`ENOTCONN` before).
    fn bound(&self) -> io::Result<&Backend> {
        self.backend.get().ok_or_else(|| err(libc::ENOTCONN))
    }

    /// A send's blocking mode and timeout: non-blocking if `dontwait` or `O_NONBLOCK`.
    fn send_mode(&self, dontwait: bool) -> (bool, Option<Duration>) {
        let nonblock = dontwait || self.nonblocking.load(Ordering::Relaxed);
        (nonblock, timeout(self.sndtimeo_ns.load(Ordering::Relaxed)))
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
        let preset = self.pending().clone();
        let timing = Timing {
            timestamps: self.timestamps.load(Ordering::Relaxed),
            read_timeout: timeout(self.rcvtimeo_ns.load(Ordering::Relaxed)),
            write_timeout: timeout(self.sndtimeo_ns.load(Ordering::Relaxed)),
        };
        let addr = SocketAddr::new(ip, addr.port());
        let (backend, bound) = Backend::bind(self.node.as_ref(), addr, &preset, timing)?;
        let _ = self.backend.set(backend);
        Ok(bound)
    }

    /// Whether the daemon serves this socket.
    pub fn via_daemon(&self) -> bool {
        matches!(self.backend.get(), Some(Backend::Daemon(_)))
    }

    /// Whether the running kernel's RDS serves this socket.
    pub fn via_kernel(&self) -> bool {
        matches!(self.backend.get(), Some(Backend::Kernel(_)))
    }

    /// Whether the daemon serves this socket's sends and receives through a shared-memory
    /// ring ([`ring`]).
    pub fn via_ring(&self) -> bool {
        matches!(self.backend.get(), Some(Backend::Daemon(r)) if r.has_ring())
    }

    /// The bound address.
    ///
    /// # Errors
    /// `ENOTCONN` when unbound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self.bound()? {
            Backend::Embedded(e) => e.local_addr(),
            Backend::Daemon(r) => r.local_addr(),
            Backend::Kernel(k) => k.local_addr(),
        }
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
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.connect(addr),
            Some(Backend::Daemon(r)) => r.connect(addr),
            Some(Backend::Kernel(k)) => k.connect(addr),
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
        let p = match self.backend.get() {
            Some(Backend::Embedded(e)) => e.peer_addr(),
            Some(Backend::Daemon(r)) => return r.peer_addr(),
            Some(Backend::Kernel(k)) => return k.peer_addr(),
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
        let (nonblock, tmo) = self.send_mode(dontwait);
        match self.bound()? {
            Backend::Embedded(e) => e.send(msg, dest, (nonblock, tmo), &SendExtras::default()),
            Backend::Daemon(r) => r.send(&msg, dest, nonblock, tmo),
            Backend::Kernel(k) => kernel::send(k, &msg, dest, nonblock, tmo),
        }
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
        let how = self.send_mode(false);
        match self.bound()? {
            Backend::Embedded(e) => e.send_ctl(payload, dest, how, ctl),
            Backend::Daemon(_) => Err(err(libc::EOPNOTSUPP)),
            Backend::Kernel(k) => kernel::send_ctl(k, payload, dest, how, ctl),
        }
    }

    /// `RDS_GET_MR`: registers `len` bytes of `buf` at `off` so that peers holding the
    /// returned cookie may read and write them (zero-based, see [`crate::rdma`]). The region
    /// lives until [`Socket::free_mr`], the socket's close, or (use-once) the first message
    /// whose RDMA operation used it.
    ///
    /// # Errors
    /// On the kernel backend, the kernel's. Otherwise `ENOTCONN` when unbound; `EOPNOTSUPP`
    /// when not on the IB transport (or served by the daemon); `EINVAL` for an empty range or
    /// one outside the buffer; the registration's error.
    pub fn get_mr(
        &self,
        buf: &RdmaBuffer,
        off: usize,
        len: usize,
        flags: MrFlags,
    ) -> io::Result<u64> {
        match self.bound()? {
            Backend::Embedded(e) => e.get_mr(buf, off, len, flags),
            Backend::Daemon(_) => Err(err(libc::EOPNOTSUPP)),
            Backend::Kernel(k) => kernel::get_mr(k, buf, off, len, flags),
        }
    }

    /// `RDS_FREE_MR`: releases one of this socket's regions. Cookie 0 does nothing (the
    /// kernel's "flush" form).
    ///
    /// # Errors
    /// On the kernel backend, the kernel's (`EINVAL` on RDS/TCP, even for cookie 0).
    /// Otherwise `ENOTCONN` when unbound; `EOPNOTSUPP` when not on the IB transport; `EINVAL`
    /// when the socket has no such region.
    pub fn free_mr(&self, cookie: u64, invalidate: bool) -> io::Result<()> {
        match self.bound()? {
            Backend::Embedded(e) => e.free_mr(cookie),
            Backend::Daemon(_) => Err(err(libc::EOPNOTSUPP)),
            Backend::Kernel(k) => kernel::free_mr(k, cookie, invalidate),
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
        let (item, timestamp) = self.recv_item(buf.len(), flags)?;
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
            Received::Data {
                msg,
                full_len,
                truncated,
            } => {
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

    /// One receive: what came and its receive time (data only, when
    /// [`Socket::set_timestamps`] asked for it).
    fn recv_item(
        &self,
        max_len: usize,
        flags: RecvFlags,
    ) -> io::Result<(Received, Option<SystemTime>)> {
        let nonblock = flags.dontwait || self.nonblocking.load(Ordering::Relaxed);
        let tmo = timeout(self.rcvtimeo_ns.load(Ordering::Relaxed));
        let stamps = self.timestamps.load(Ordering::Relaxed);
        let (got, ts) = match self.bound()? {
            Backend::Embedded(e) => e.recv(max_len, flags.peek, (nonblock, tmo), stamps)?,
            Backend::Daemon(r) => r.recv(max_len, flags.peek, nonblock, tmo)?,
            Backend::Kernel(k) => kernel::recv(k, max_len, flags.peek, nonblock, tmo)?,
        };
        Ok((got, ts.filter(|_| stamps)))
    }

    /// `O_NONBLOCK`.
    pub fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }

    /// `SO_RCVTIMEO` (`None` = wait forever).
    pub fn set_read_timeout(&self, t: Option<Duration>) {
        self.rcvtimeo_ns.store(nanos(t), Ordering::Relaxed);
        if let Some(Backend::Kernel(k)) = self.backend.get() {
            let _ = k.set_read_timeout(t);
        }
    }

    /// `SO_SNDTIMEO` (`None` = wait forever).
    pub fn set_write_timeout(&self, t: Option<Duration>) {
        self.sndtimeo_ns.store(nanos(t), Ordering::Relaxed);
        if let Some(Backend::Kernel(k)) = self.backend.get() {
            let _ = k.set_write_timeout(t);
        }
    }

    /// `SO_TIMESTAMP`: report receive times.
    pub fn set_timestamps(&self, on: bool) {
        self.timestamps.store(on, Ordering::Relaxed);
        match self.backend.get() {
            Some(Backend::Daemon(r)) => {
                let _ = r.set(SockOpt::Timestamps(on));
            }
            Some(Backend::Kernel(k)) => {
                let _ = k.set_timestamps(on);
            }
            Some(Backend::Embedded(_)) | None => {}
        }
    }

    /// `SO_SNDBUF`: the usable send buffer in bytes (the kernel keeps twice this and uses
    /// half; [`Socket::send_buffer_size`] reports the doubled value as `getsockopt` does), at
    /// least [`SNDBUF_MIN`] as in the kernel.
    pub fn set_send_buffer_size(&self, bytes: usize) {
        let bytes = bytes.max(SNDBUF_MIN);
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.set_sndbuf(bytes),
            Some(Backend::Daemon(r)) => {
                let _ = r.set(SockOpt::Sndbuf(bytes));
            }
            Some(Backend::Kernel(k)) => {
                let _ = k.set_sndbuf(bytes);
            }
            None => self.pending().sndbuf = Some(bytes),
        }
    }

    /// `SO_RCVBUF`: the usable receive buffer in bytes (congestion threshold), at least
    /// [`RCVBUF_MIN`] as in the kernel.
    pub fn set_recv_buffer_size(&self, bytes: usize) {
        let bytes = bytes.max(RCVBUF_MIN);
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.set_rcvbuf(bytes),
            Some(Backend::Daemon(r)) => {
                let _ = r.set(SockOpt::Rcvbuf(bytes));
            }
            Some(Backend::Kernel(k)) => {
                let _ = k.set_rcvbuf(bytes);
            }
            None => self.pending().rcvbuf = Some(bytes),
        }
    }

    /// The usable send and receive buffers.
    fn bufs(&self) -> (usize, usize) {
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.bufs(),
            Some(Backend::Daemon(r)) => r.bufs(),
            Some(Backend::Kernel(k)) => kernel::bufs(k),
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
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.transport(),
            Some(Backend::Daemon(r)) => r.transport(),
            Some(Backend::Kernel(k)) => k.transport(),
            None => self.pending().transport,
        }
    }

    /// `RDS_CONG_MONITOR`.
    pub fn set_cong_monitor(&self, on: bool) {
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.set_cong_monitor(on),
            Some(Backend::Daemon(r)) => {
                let _ = r.set(SockOpt::CongMonitor(on));
            }
            Some(Backend::Kernel(k)) => {
                let _ = k.set_cong_monitor(on);
            }
            None => self.pending().cong_monitor = on,
        }
    }

    /// `RDS_RECVERR` (set).
    pub fn set_recverr(&self, on: bool) {
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.set_recverr(on),
            Some(Backend::Daemon(r)) => {
                // Kept here too: `recverr` answers from it for a daemon socket.
                self.pending().recverr = on;
                let _ = r.set(SockOpt::Recverr(on));
            }
            Some(Backend::Kernel(k)) => {
                let _ = k.set_recverr(on);
            }
            None => self.pending().recverr = on,
        }
    }

    /// `RDS_RECVERR` (get).
    pub fn recverr(&self) -> bool {
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.recverr(),
            Some(Backend::Kernel(k)) => k.recverr(),
            Some(Backend::Daemon(_)) | None => self.pending().recverr,
        }
    }

    /// `RDS_CANCEL_SENT_TO`: drops this socket's queued and unacknowledged messages to `dest`.
    /// Returns how many were dropped.
    ///
    /// # Errors
    /// `ENOTCONN` when unbound.
    pub fn cancel_sent_to(&self, dest: SocketAddr) -> io::Result<usize> {
        match self.bound()? {
            Backend::Embedded(e) => Ok(e.cancel_sent_to(dest)),
            Backend::Daemon(r) => r.cancel(dest),
            // The kernel does not say how many it dropped.
            Backend::Kernel(k) => k.cancel_sent_to(dest).map(|()| 0),
        }
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
        self.wait_how((rx, tx), other.unwrap_or(-1), timeout, false)
    }

    /// [`Socket::wait`] for a caller that must return to the program's signal handlers, as a
    /// blocking call of the kernel's RDS returns to a handler installed without `SA_RESTART`
    /// (the preload library's `recvmsg` and `sendmsg`): a signal that interrupts the wait ends
    /// it with an error of kind `Interrupted` (EINTR).
    ///
    /// # Errors
    /// As [`Socket::wait`]; `Interrupted` for a signal.
    pub fn wait_interruptible(
        &self,
        rx: bool,
        tx: bool,
        timeout: Duration,
    ) -> io::Result<(bool, bool)> {
        self.wait_how((rx, tx), -1, timeout, true)
    }

    /// [`Socket::wait_or`] (`other` -1 for none); `eintr`: a signal is an error, else it
    /// ends the wait with the readiness then.
    fn wait_how(
        &self,
        (rx, tx): (bool, bool),
        ofd: RawFd,
        timeout: Duration,
        eintr: bool,
    ) -> io::Result<(bool, bool)> {
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.wait((rx, tx), ofd, timeout, eintr),
            Some(Backend::Kernel(k)) => kernel::wait(k, (rx, tx), ofd, timeout, eintr),
            // The daemon's readiness descriptors (unbound: ENOTCONN if either is asked for).
            daemon @ (Some(Backend::Daemon(_)) | None) => {
                let rfd = if rx { self.fd()? } else { -1 };
                let tfd = if tx { self.send_fd()? } else { -1 };
                // What the shared ring already shows settles the wait without a poll (the
                // descriptors are kept from here on all the same).
                if let Some(Backend::Daemon(r)) = daemon {
                    if let Some(ready) = r.ready_now(rx, tx) {
                        return Ok(ready);
                    }
                }
                let asks = [
                    (rfd, libc::POLLIN),
                    (tfd, libc::POLLIN),
                    (ofd, libc::POLLIN),
                ];
                let r = if eintr {
                    sys::poll_until_signal(&asks, timeout)?
                } else {
                    sys::poll_for(&asks, timeout)?
                };
                Ok((r[0] != 0, r[1] != 0))
            }
        }
    }

    /// Leaves the readable descriptor ([`Socket::fd`]) unwritten, but for the library's own
    /// waits, until the guard drops; then it shows the socket's state again. For an owner of
    /// the descriptor whose poller (a readiness thread) would otherwise be woken for nothing
    /// by each message while one of its own threads waits to receive on the socket (and sees
    /// the message itself): the preload library's blocking `recvmsg`. `None` where the
    /// library does not write the descriptor itself (the daemon's and the kernel's sockets).
    pub fn quiet_rx_fd(&self) -> Option<QuietRx<'_>> {
        match self.backend.get() {
            Some(Backend::Embedded(e)) => Some(e.quiet_rx_fd()),
            _ => None,
        }
    }

    /// Whether a receive would return something now (POLLIN; also when the socket's node is
    /// gone, as `poll(2)` on [`Socket::fd`] shows).
    pub fn readable(&self) -> bool {
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.ready(true),
            Some(Backend::Daemon(r)) => r.readiness().0,
            Some(Backend::Kernel(k)) => k.ready().0,
            None => false,
        }
    }

    /// Whether the send buffer has room (POLLOUT; also when the socket's node is gone).
    pub fn writable(&self) -> bool {
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.ready(false),
            Some(Backend::Daemon(r)) => r.readiness().1,
            Some(Backend::Kernel(k)) => k.ready().1,
            None => false,
        }
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

    /// Has `hook` told, in the thread that makes the change, each time the socket becomes
    /// readable (`true`) or writable (`false`), from now on (`None` removes it): the daemon's
    /// ring host follows its sockets this way instead of polling their descriptors. `false`:
    /// not on this backend (only a socket of an embedded node has one).
    pub(crate) fn set_ready_hook(&self, hook: Option<crate::node::ReadyHook>) -> bool {
        match self.backend.get() {
            Some(Backend::Embedded(e)) => {
                e.set_ready_hook(hook);
                true
            }
            _ => false,
        }
    }

    /// `(readable, writable)` now, with the readiness the socket's hook follows brought in
    /// line in the same look (under one lock on an embedded node): a change after it is
    /// told to the hook ([`Socket::set_ready_hook`]).
    pub(crate) fn ready_synced(&self) -> (bool, bool) {
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.ready_synced(),
            _ => (self.readable(), self.writable()),
        }
    }

    fn ready_fd(&self, rx: bool) -> io::Result<RawFd> {
        match self.bound()? {
            Backend::Embedded(e) => e.ready_fd(rx),
            Backend::Daemon(r) => r.fd(rx),
            Backend::Kernel(k) => kernel::ready_fd(k, rx),
        }
    }

    /// After a send to `dest` (`None`: the connected destination) failed with `ENOBUFS`,
    /// waits as a blocking send would for the destination's congestion to clear, without a
    /// timer: until the destination's congestion map changes (or the path to it goes down),
    /// then the caller sends again, which may meet congestion again and wait again. A
    /// blocking send ([`Socket::send_bytes`] without `dontwait`) waits this way itself; this
    /// is for a caller that must also return on signals (the preload library's `sendmsg`).
    ///
    /// Returns `true` after the change, `false` at once when the destination is not congested
    /// now (the congestion cleared meanwhile, or the `ENOBUFS` was not congestion but the
    /// node's memory budget: a caller that gets `false` twice in a row around a failed send
    /// should return that `ENOBUFS`).
    ///
    /// On the kernel backend it waits for the socket's `POLLWRBAND` (the kernel reports a
    /// congestion map update there to a socket that met congestion).
    ///
    /// # Errors
    /// `ETIMEDOUT` past `deadline`; `EINTR` when a signal handler ran; `ENETDOWN` when the
    /// node stopped; `ENOTCONN` unbound or without a destination; through the daemon,
    /// `ECONNRESET` when it went away and `EOPNOTSUPP` without a shared ring (`RDS_NO_RING`).
    pub fn wait_uncongested(
        &self,
        dest: Option<SocketAddr>,
        deadline: Option<std::time::Instant>,
    ) -> io::Result<bool> {
        match self.backend.get() {
            Some(Backend::Daemon(r)) => r.wait_uncongested(dest, deadline),
            Some(Backend::Kernel(k)) => kernel::wait_uncongested(k, deadline),
            Some(Backend::Embedded(b)) => self.cong.wait_embedded(&b.node, b.id, dest, deadline),
            None => Err(err(libc::ENOTCONN)),
        }
    }

    /// The embedded backend, once bound to one: the daemon's client sockets, which the ring
    /// host (`ring::host`) serves, are embedded.
    fn embedded(&self) -> Option<&embedded::Embedded> {
        match self.backend.get() {
            Some(Backend::Embedded(e)) => Some(e),
            _ => None,
        }
    }

    /// A send on the embedded backend with `extras` (`ENOTCONN` on another), for the ring
    /// host.
    fn send_local(
        &self,
        msg: Bytes,
        dest: Option<SocketAddr>,
        nonblock: bool,
        extras: &SendExtras,
    ) -> io::Result<usize> {
        let tmo = timeout(self.sndtimeo_ns.load(Ordering::Relaxed));
        let e = self.embedded().ok_or_else(|| err(libc::ENOTCONN))?;
        e.send(msg, dest, (nonblock, tmo), extras)
    }

    /// The node serving this socket (once bound).
    pub fn node(&self) -> Option<&Node> {
        self.embedded().map(|e| &e.node)
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        match self.backend.get() {
            Some(Backend::Embedded(e)) => e.close(),
            Some(Backend::Daemon(r)) => r.close(),
            // The kernel socket closes with its descriptor.
            Some(Backend::Kernel(_)) | None => {}
        }
    }
}
