//! The embedded backend of [`super::Socket`]: a socket of a node in this process (the one
//! named at creation, or the process's default node, [`default_node`]). Every call locks the
//! node's engine (`crate::node::Core`), acts on the socket there and lets the node act on
//! what changed (`after_app_call`); a blocking call waits on the socket's [`Waiter`], or, for
//! a socket waiting for an answer, leads the node's transport I/O itself
//! ([`Embedded::wait`]). The readiness descriptors are eventfds the node keeps in line with
//! the socket.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::preset::Preset;
use crate::errno::err;
use crate::info::{SockId, TransportKind};
use crate::message::Received;
use crate::node::{Core, Node, NodeConfig, TxHere, Waiter};
use crate::proto::{SendError, SendExtras};
use crate::rdma::{cookie_rkey, MrFlags, RdmaBuffer, RdmaOp, SendCtl, Sent};
use crate::sys;

/// Most local ranges an RDMA operation may have (`UIO_MAXIOV`/2, enough for rds-stress's
/// 512).
const MAX_RDMA_IOVECS: usize = 512;

static DEFAULT_NODE: Mutex<Option<Node>> = Mutex::new(None);

/// The process's default embedded node (started on first use, with no addresses; sockets
/// add theirs at bind). It runs RDS/TCP and, where rdma-core and an RDMA device are present,
/// RDS/IB: as in the kernel, a socket bound to an address an RDMA device holds gets IB, any
/// other TCP (`SO_RDS_TRANSPORT`, [`super::Socket::set_transport`], overrides).
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

fn node_down() -> io::Error {
    err(libc::ENETDOWN)
}

/// A socket of a node in this process.
#[derive(Debug)]
pub(super) struct Embedded {
    /// The node.
    pub(super) node: Node,
    /// The socket in the node's engine.
    pub(super) id: SockId,
    /// Its wake-ups and readiness descriptors.
    pub(super) waiter: Arc<Waiter>,
}

impl Embedded {
    /// Binds a socket of the default node to `addr`, which the node takes on first if it
    /// does not hold it yet (`EADDRNOTAVAIL` when it cannot).
    pub(super) fn bind_default(addr: SocketAddr, p: &Preset) -> io::Result<(Embedded, SocketAddr)> {
        let n = default_node()?;
        if !n.owns(addr.ip()) {
            n.add_addr(addr.ip()).map_err(|e| match e.kind() {
                io::ErrorKind::AddrNotAvailable => err(libc::EADDRNOTAVAIL),
                _ => e,
            })?;
        }
        Self::bind(n, addr, p)
    }

    /// Opens a socket on `node`, hands it the options set so far and binds it to `addr`;
    /// returns it with its bound address.
    pub(super) fn bind(
        node: Node,
        addr: SocketAddr,
        p: &Preset,
    ) -> io::Result<(Embedded, SocketAddr)> {
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
            core.stack.bind(id, addr)
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
        Ok((Embedded { node, id, waiter }, bound))
    }

    fn core(&self) -> MutexGuard<'_, Core> {
        self.node.inner.lock_core()
    }

    /// Brings the readiness descriptors in line with the socket.
    fn update_fds(&self, core: &Core) {
        let (r, w) = (core.stack.readable(self.id), core.stack.writable(self.id));
        self.waiter.update_fds(r, w);
    }

    pub(super) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.core()
            .stack
            .sock_name(self.id)
            .ok_or_else(|| err(libc::ENOTCONN))
    }

    pub(super) fn connect(&self, addr: SocketAddr) -> io::Result<()> {
        self.core().stack.connect(self.id, addr)?;
        Ok(())
    }

    pub(super) fn peer_addr(&self) -> Option<SocketAddr> {
        self.core().stack.peer_name(self.id)
    }

    pub(super) fn set_sndbuf(&self, bytes: usize) {
        let mut core = self.core();
        core.stack.set_sndbuf(self.id, bytes);
        self.node.inner.after_app_call(core);
    }

    pub(super) fn set_rcvbuf(&self, bytes: usize) {
        self.core().stack.set_rcvbuf(self.id, bytes);
    }

    pub(super) fn bufs(&self) -> (usize, usize) {
        self.core().stack.bufs(self.id).unwrap_or_default()
    }

    pub(super) fn transport(&self) -> Option<TransportKind> {
        self.core().stack.sock_transport(self.id)
    }

    pub(super) fn set_cong_monitor(&self, on: bool) {
        let mut core = self.core();
        core.stack.set_cong_monitor(self.id, on);
        // A congestion notification already noted becomes (or stops being) something to
        // receive: the readiness flags that a receive looks at first follow.
        self.update_fds(&core);
    }

    pub(super) fn set_recverr(&self, on: bool) {
        self.core().stack.set_recverr(self.id, on);
    }

    pub(super) fn recverr(&self) -> bool {
        self.core().stack.recverr(self.id)
    }

    /// `RDS_CANCEL_SENT_TO`; how many messages were dropped.
    pub(super) fn cancel_sent_to(&self, dest: SocketAddr) -> usize {
        let mut core = self.core();
        let n = core.stack.cancel_sent_to(self.id, dest);
        self.update_fds(&core);
        self.node.inner.after_app_call(core);
        n
    }

    /// [`Socket::quiet_rx_fd`] on the embedded backend.
    pub(super) fn quiet_rx_fd(&self) -> QuietRx<'_> {
        self.waiter.quiet_rx(true);
        QuietRx(self)
    }

    /// Whether a receive would return something now (`rx`), or the send buffer has room; a
    /// node gone counts as ready, as its readiness descriptors show (the next call says
    /// ENETDOWN).
    pub(super) fn ready(&self, rx: bool) -> bool {
        let core = self.core();
        if !self.node.inner.is_running() {
            true
        } else if rx {
            core.stack.readable(self.id)
        } else {
            core.stack.writable(self.id)
        }
    }

    /// Sends `msg` (with `extras`, RDMA control data) to `dest` or the connected
    /// destination; blocks, unless `nonblock`, while the send buffer is full or the
    /// destination congested, up to `tmo` (`ETIMEDOUT` past it).
    pub(super) fn send(
        &self,
        msg: Bytes,
        dest: Option<SocketAddr>,
        (nonblock, tmo): (bool, Option<Duration>),
        extras: &SendExtras,
    ) -> io::Result<usize> {
        let deadline = tmo.map(|t| Instant::now() + t);
        let inner = &self.node.inner;
        // The first clone of a payload made from a vector allocates its shared count: done
        // here, before the engine lock; the engine's clones of it only count.
        let mut payload = msg.clone();
        let mut core = inner.lock_core();
        let mut retry = false;
        loop {
            if !inner.is_running() {
                return Err(node_down());
            }
            let now = inner.now();
            match core
                .stack
                .send_full(now, self.id, dest, payload, nonblock, retry, extras)
            {
                Ok(n) => {
                    self.update_fds(&core);
                    inner.want_room(false);
                    let sndbuf = core.stack.bufs(self.id).map_or(0, |b| b.0);
                    let here = TxHere::for_send(msg.len(), sndbuf);
                    inner.after_app_call_inline(core, here);
                    self.waiter.sent.store(true, Ordering::Relaxed);
                    return Ok(n);
                }
                Err(SendError::WouldBlock) if !nonblock => {
                    retry = true;
                    // Space comes back with TCP's acknowledgements, which the I/O thread
                    // polls: it must be awake to see them, and poll on time.
                    inner.want_room(true);
                    core = wait_on(&self.waiter, core, deadline)?;
                }
                Err(SendError::CongestedWait) => {
                    retry = true;
                    // Start the connection that will bring the peer's new map.
                    inner.after_app_call(core);
                    core = inner.lock_core();
                    let dst = match dest.or_else(|| core.stack.peer_name(self.id)) {
                        Some(d) => d,
                        None => return Err(err(libc::ENOTCONN)),
                    };
                    // Woken when a congestion map changes or a path goes down; then the
                    // next try reconnects a connection that went down meanwhile (the new
                    // connection brings the peer's current map).
                    if core.stack.dest_congested(self.id, dst) && inner.is_running() {
                        core = wait(&inner.cong_cv, core, deadline)?;
                    }
                }
                Err(e) => {
                    self.update_fds(&core);
                    inner.after_app_call(core);
                    // Buffer space and memory come back with TCP's acknowledgements, which
                    // the I/O thread polls (on time while a sender waits for room).
                    if matches!(e, SendError::WouldBlock) {
                        inner.want_room(true);
                    } else {
                        inner.wake_io();
                    }
                    return Err(e.into());
                }
            }
            // Only a retry comes here: the engine kept or dropped the last clone.
            payload = msg.clone();
        }
    }

    /// One receive of at most `max_len` bytes: what came and, with `timestamps`, its receive
    /// time (data only); blocks, unless `nonblock`, up to `tmo` (`ETIMEDOUT` past it).
    pub(super) fn recv(
        &self,
        max_len: usize,
        peek: bool,
        (nonblock, tmo): (bool, Option<Duration>),
        timestamps: bool,
    ) -> io::Result<(Received, Option<SystemTime>)> {
        let deadline = tmo.map(|t| Instant::now() + t);
        let inner = &self.node.inner;
        if !inner.is_running() {
            return Err(node_down());
        }
        // A non-blocking receive on a socket with nothing to receive answers without the
        // engine's lock: the readiness flags follow every change of what a receive would find
        // (each delivery's wake, each receive), under that lock. A message whose delivery is
        // under way in another thread is not seen yet, as a message still in the kernel's
        // softirq is not seen by its `recvmsg`; its wake comes after. An event loop's last
        // receive of a round (rds-stress drains until EAGAIN; the preload library tries one
        // before it waits) then no longer waits for the I/O thread's hold of the engine
        // (receives were that lock's most frequent waiters at `--loopback -t 2 -d 32`).
        if nonblock && !self.waiter.signaled().0 {
            return Err(err(libc::EAGAIN));
        }
        let mut core = inner.lock_core();
        loop {
            if !inner.is_running() {
                return Err(node_down());
            }
            match core.stack.recv(self.id, max_len, peek) {
                Ok(r) => {
                    self.update_fds(&core);
                    inner.after_app_call(core);
                    let ts = match &r {
                        Received::Data { msg, .. } if timestamps => {
                            Some(UNIX_EPOCH + Duration::from_nanos(self.node.wall_ns(msg.rx_time)))
                        }
                        _ => None,
                    };
                    return Ok((r, ts));
                }
                Err(e) if nonblock => {
                    drop(core);
                    return Err(e.into());
                }
                Err(_) => core = self.wait_readable(core, deadline)?,
            }
        }
    }

    /// `Socket::wait_or` on the embedded backend: the waiting thread does the node's
    /// transport I/O itself while no other thread does; `other` is -1 for none. A signal ends
    /// the wait: with an error of kind `Interrupted` if `eintr`, else with the readiness then.
    pub(super) fn wait(
        &self,
        (rx, tx): (bool, bool),
        other: RawFd,
        timeout: Duration,
        eintr: bool,
    ) -> io::Result<(bool, bool)> {
        let rfd = if rx { self.fd(true)? } else { -1 };
        let tfd = if tx { self.fd(false)? } else { -1 };
        let inner = &self.node.inner;
        let ready = || {
            let (r, w) = self.waiter.signaled();
            (rx && r, tx && w)
        };
        // A blocking call's wait (`eintr`: the preload library's `recvmsg` and `sendmsg`)
        // leads as a blocking receive does (`wait_readable`): only to receive, and only after
        // a send; a sink, and a sender blocked for room, leave the transport to the I/O
        // thread (a blocked sender that led measured a third of qperf's `rds_bw`). An event
        // loop's wait always leads (rds-stress `-d 8` lost 14% with the sink rule).
        let lead = !eintr || (rx && self.waiter.sent.swap(false, Ordering::Relaxed));
        let r = match inner.wait_leading([rfd, tfd, other], &self.waiter, timeout, lead, ready) {
            Err(e) if !eintr && e.kind() == io::ErrorKind::Interrupted => ready(),
            r => r?,
        };
        // A node gone: ready, as a socket with an error (the next call says ENETDOWN).
        Ok(if inner.is_running() { r } else { (rx, tx) })
    }

    /// The readiness eventfd (`rx`: POLLIN, else POLLOUT), created on demand and brought in
    /// line with the socket, handed out of the library (`Socket::fd`): it is written on every
    /// change from now on.
    pub(super) fn ready_fd(&self, rx: bool) -> io::Result<RawFd> {
        let core = self.core();
        self.waiter.hand_out();
        self.ready_fd_locked(&core, rx)
    }

    /// `(readable, writable)`, the readiness flags brought in line under the same lock.
    pub(super) fn ready_synced(&self) -> (bool, bool) {
        let core = self.core();
        if !self.node.inner.is_running() {
            return (true, true);
        }
        self.update_fds(&core);
        self.waiter.signaled()
    }

    /// Sets or removes the socket's readiness hook ([`crate::node::Waiter::set_hook`]).
    pub(super) fn set_ready_hook(&self, hook: Option<crate::node::ReadyHook>) {
        self.waiter.set_hook(hook);
    }

    /// [`Embedded::ready_fd`] with the engine, `core`, locked, not handed out: written only
    /// while a thread of this library polls it ([`crate::node::Waiter::polling`]).
    fn ready_fd_locked(&self, core: &Core, rx: bool) -> io::Result<RawFd> {
        let mut g = self
            .waiter
            .slot(rx)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(sys::eventfd()?);
        }
        let fd = g.as_ref().map(AsRawFd::as_raw_fd).expect("just set");
        drop(g);
        if self.node.inner.is_running() {
            self.update_fds(core);
        } else {
            // A node gone: readable and writable, as a socket with an error.
            self.waiter.update_fds(true, true);
        }
        Ok(fd)
    }

    /// [`Embedded::ready_fd`] without the engine lock once the descriptor exists (every wake
    /// of the socket keeps it in line): a wait loop asks for it on every round.
    fn fd(&self, rx: bool) -> io::Result<RawFd> {
        let known = self
            .waiter
            .slot(rx)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(AsRawFd::as_raw_fd);
        match known {
            Some(fd) => Ok(fd),
            None => self.ready_fd_locked(&self.core(), rx),
        }
    }

    /// A blocking receive's wait until the socket is readable or `deadline` (`ETIMEDOUT`
    /// past it): for a socket that sent since its last wait, through the node's leading wait,
    /// so that this thread reads the answer itself while no other thread leads
    /// ([`Embedded::wait`]).
    fn wait_readable<'a>(
        &'a self,
        core: MutexGuard<'a, Core>,
        deadline: Option<Instant>,
    ) -> io::Result<MutexGuard<'a, Core>> {
        let left = match deadline {
            None => Duration::from_secs(1),
            Some(d) => {
                let now = Instant::now();
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
        let Ok(fd) = self.ready_fd_locked(&core, true) else {
            // No descriptor to spare: the condition variable.
            return wait_on(&self.waiter, core, deadline);
        };
        drop(core);
        let inner = &self.node.inner;
        match inner.wait_leading([fd, -1, -1], &self.waiter, left, true, || {
            (self.waiter.signaled().0, false)
        }) {
            // A signal: the receive goes on (its caller did not ask to be interrupted).
            Err(e) if e.kind() != io::ErrorKind::Interrupted => return Err(e),
            _ => {}
        }
        Ok(inner.lock_core())
    }

    /// `sendmsg` with RDMA control data (at least one of its parts set): checks it, registers
    /// what it names and sends; a region registered for `RDMA_MAP` goes again if the send
    /// fails.
    pub(super) fn send_ctl(
        &self,
        payload: &[u8],
        dest: Option<SocketAddr>,
        how: (bool, Option<Duration>),
        ctl: &SendCtl,
    ) -> io::Result<Sent> {
        let ip = self.rdma_addr()?;
        let cookies = usize::from(ctl.rdma_dest.is_some()) + usize::from(ctl.rdma_map.is_some());
        if cookies > 1 || (cookies == 1 && ctl.rdma.is_some()) {
            return Err(err(libc::EINVAL));
        }
        let inner = &self.node.inner;
        let mut extras = SendExtras::default();
        if let Some(c) = ctl.rdma_dest {
            if !inner.with_ib(|t| Ok(t.has_mr(self.id, cookie_rkey(c))))? {
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
            let op = Arc::new(RdmaOp::new(self.id, a));
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
        match self.send(crate::buf::copy(payload), dest, how, &extras) {
            Ok(len) => Ok(Sent { len, map_cookie }),
            Err(e) => {
                if let Some(c) = map_cookie {
                    let _ = self.free_mr(c);
                }
                Err(e)
            }
        }
    }

    /// `RDS_GET_MR` on the embedded backend.
    pub(super) fn get_mr(
        &self,
        buf: &RdmaBuffer,
        off: usize,
        len: usize,
        flags: MrFlags,
    ) -> io::Result<u64> {
        let ip = self.rdma_addr()?;
        if len == 0 || !buf.contains(off, len) {
            return Err(err(libc::EINVAL));
        }
        self.node
            .inner
            .with_ib(|t| t.get_mr(ip, self.id, buf, off, len, flags))
    }

    /// `RDS_FREE_MR` on the embedded backend (cookie 0 does nothing).
    pub(super) fn free_mr(&self, cookie: u64) -> io::Result<()> {
        self.rdma_addr()?;
        if cookie == 0 {
            return Ok(());
        }
        if self
            .node
            .inner
            .with_ib(|t| Ok(t.free_mr(self.id, cookie_rkey(cookie))))?
        {
            Ok(())
        } else {
            Err(err(libc::EINVAL))
        }
    }

    /// The bound address, if the socket may use RDMA (IB transport): `ENOTCONN` when it has
    /// none, `EOPNOTSUPP` on another transport.
    fn rdma_addr(&self) -> io::Result<IpAddr> {
        let (name, kind) = {
            let core = self.core();
            (
                core.stack.sock_name(self.id),
                core.stack.sock_transport(self.id),
            )
        };
        let name = name.ok_or_else(|| err(libc::ENOTCONN))?;
        if kind != Some(TransportKind::Ib) {
            return Err(err(libc::EOPNOTSUPP));
        }
        Ok(name.ip())
    }

    /// Closes the socket on its node; its RDMA regions go with it.
    pub(super) fn close(&self) {
        let mut core = self.core();
        let ib = core.stack.sock_transport(self.id) == Some(TransportKind::Ib);
        core.waiters.remove(&self.id);
        core.stack.close(self.id);
        self.node.inner.after_app_call(core);
        if ib {
            // Its regions go with it (the transport lock is taken without the engine's).
            let _ = self.node.inner.with_ib(|t| {
                t.free_sock(self.id);
                Ok(())
            });
        }
    }
}

/// Waits on a socket's condition variable as one of its counted waiters (see
/// [`Waiter::waiting`]); as [`wait`].
fn wait_on<'a, T>(
    w: &Waiter,
    guard: MutexGuard<'a, T>,
    deadline: Option<Instant>,
) -> io::Result<MutexGuard<'a, T>> {
    w.waiting.fetch_add(1, Ordering::Relaxed);
    let r = wait(&w.cv, guard, deadline);
    w.waiting.fetch_sub(1, Ordering::Relaxed);
    r
}

/// Waits on `cv` until woken or `deadline`; `ETIMEDOUT` past the deadline.
fn wait<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    deadline: Option<Instant>,
) -> io::Result<MutexGuard<'a, T>> {
    match deadline {
        None => Ok(cv.wait(guard).unwrap_or_else(|p| p.into_inner())),
        Some(d) => {
            let now = Instant::now();
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

/// The readable descriptor of a socket left unwritten while its owner's thread waits to
/// receive ([`Socket::quiet_rx_fd`]); when dropped, the descriptor shows the socket's state
/// again.
#[must_use = "the descriptor is quiet only while the guard lives"]
pub struct QuietRx<'a>(&'a Embedded);

impl Drop for QuietRx<'_> {
    fn drop(&mut self) {
        let e = self.0;
        let core = e.core();
        e.waiter.quiet_rx(false);
        if e.node.inner.is_running() {
            e.update_fds(&core);
        } else {
            e.waiter.update_fds(true, true);
        }
    }
}
