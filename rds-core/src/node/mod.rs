//! A running RDS node: the engine ([`crate::proto::Stack`]) behind a lock, driven by one I/O
//! thread over epoll that runs the TCP transport, timers and wakeups; loopback traffic between
//! the node's own addresses is handled inside the engine.
//!
//! Locking: the I/O thread holds the transport lock while it works and takes the engine lock
//! inside it; application threads take the engine lock, briefly (to queue or dequeue a
//! message), and, while the I/O thread sleeps, `try_lock` the TCP transport to write a small
//! message on an idle lane themselves (`Inner::after_app_call_inline`), and post RDS/IB
//! frames when no other thread holds the IB transport. Blocking socket calls wait on a
//! per-socket condition variable tied to the engine lock. The I/O thread is woken through an
//! eventfd only when it sleeps.
//!
//! This file keeps the threads, the locks and their order; the I/O round and the driver's two
//! `Io` sides (`AppIo`, `TransportIo`) are in `round.rs`, which calls RDS/TCP (`tcp/`) and
//! RDS/IB (`ib/`) through one contract (`transport.rs`: `Transport`); each transport applies
//! its own reports to the engine (`tcp/apply.rs`, `ib/apply.rs`), and the public getters
//! that only read are in `view.rs`.

pub mod admin;
pub(crate) mod ib;
mod lead;
mod round;
pub mod tap;
mod tcp;
mod transport;
mod tx_here;
mod view;
mod waiter;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::proto::{ConnId, DropReason, Event, SockId, Stack, TransportKind};
use crate::stats::{IbStats, TcpStats};
use crate::sys;
use crate::time::Instant;
use crate::tunables::Tunables;

pub use ib::IbQpInfo;
use tap::Tap;
pub use tcp::TcpSockInfo;

use ib::Ib;
use tcp::{Tcp, TOKEN_WAKE};
use transport::Transport;
pub(crate) use tx_here::TxHere;
pub(crate) use waiter::{ReadyHook, Waiter};

/// Whether and under which name a node serves a control socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CtlMode {
    /// `embedded-<pid>[-<n>]` in the runtime directory; the node runs even if that fails.
    Auto,
    /// This name; failing to serve it fails [`Node::start`] (the daemon uses "daemon").
    Named(String),
    /// No control socket.
    Off,
}

/// Which transports a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transports {
    /// RDS/TCP: a listener on `addr:16385` for every address.
    pub tcp: bool,
    /// RDS/IB: an RDMA CM listener (18634 for IPv4, 16385 for IPv6) on every address an RDMA
    /// device's GID table holds. Where rdma-core or a device is missing the node still runs,
    /// without IB ([`Node::ib_unavailable`] says why).
    pub ib: bool,
}

impl Default for Transports {
    /// TCP only.
    fn default() -> Self {
        Transports {
            tcp: true,
            ib: false,
        }
    }
}

/// How a node is set up.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Addresses the node owns (IPv4 and/or IPv6). Each gets a TCP listener on port 16385.
    pub addrs: Vec<IpAddr>,
    /// Tunables.
    pub tunables: Tunables,
    /// Seed for the engine's randomness (ports, jitter, generation number); random if `None`.
    pub seed: Option<u64>,
    /// A name for logs (the control socket's name when it serves one).
    pub name: String,
    /// The control socket.
    pub ctl: CtlMode,
    /// Which transports run.
    pub transports: Transports,
    /// Client sockets the node opens for other processes through its control socket; only
    /// the host daemon serves them (`rds_core::socket::host::service()`). `None`: the node
    /// refuses `SockOpen`.
    pub client_sockets: Option<Arc<dyn admin::ClientSockets>>,
}

impl NodeConfig {
    /// A node for these addresses with default tunables.
    pub fn new(addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        NodeConfig {
            addrs: addrs.into_iter().collect(),
            tunables: Tunables::default(),
            seed: None,
            name: "embedded".into(),
            ctl: CtlMode::Auto,
            transports: Transports::default(),
            client_sockets: None,
        }
    }
}

/// Engine state shared by the I/O thread and application threads.
#[derive(Debug)]
pub(crate) struct Core {
    pub stack: Stack,
    /// Transport work queued by application threads for the I/O thread.
    pub io_work: VecDeque<Event>,
    pub waiters: HashMap<SockId, Arc<Waiter>>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub name: String,
    pub core: Mutex<Core>,
    /// Senders blocked on a congested port wait here.
    pub cong_cv: Condvar,
    tcp: Mutex<Tcp>,
    /// The IB transport, if configured and available.
    ib: Mutex<Option<Ib>>,
    /// Whether `ib` holds a transport (fixed at start): a node without one never takes
    /// that lock to poll before sleeping.
    ib_on: bool,
    /// Why IB is not running, if it was asked for and is not.
    ib_unavailable: Option<String>,
    transports: Transports,
    /// The I/O thread's epoll set (the transports' descriptors and `wake_fd`), with its
    /// shadow, the leader's set (the same descriptors and `lead_fd`, `lead.rs`).
    epoll: Arc<sys::Epoll>,
    wake_fd: OwnedFd,
    /// Wakes the leader, in its set only: written when the socket it waits for becomes ready
    /// by another thread's hand ([`Waiter::lead_on`]) and at shutdown.
    lead_fd: OwnedFd,
    io_sleeping: AtomicBool,
    /// A send found no room in its socket's send buffer since the last one that did: the
    /// room comes back with TCP's acknowledgements, which the I/O thread learns on a timer
    /// (`SIOCOUTQ`), so meanwhile its sleeps keep that timer to the microsecond
    /// ([`Inner::want_room`]); otherwise they are rounded up to whole milliseconds, which
    /// spares the I/O thread a wake-up per message where nobody waits for room.
    room_wanted: AtomicBool,
    /// Threads waiting for room that ask TCP for acknowledgements themselves (`lead.rs`):
    /// while there is one, the timed polls are left to them ([`Tcp::defer_ack_polls`]).
    room_waiters: AtomicUsize,
    /// The I/O thread polled before sleeping and sleeps on the epoll set (not in led mode,
    /// `lead.rs`): a leader that leaves a completion queue unarmed must arm it (no event
    /// would wake the I/O thread for it).
    io_epoll: AtomicBool,
    /// An application thread does the transport I/O while it waits (`lead.rs`).
    leader: AtomicBool,
    /// Leads taken so far: the I/O thread tells one long lead from a run of short ones.
    leads: AtomicU64,
    /// The I/O thread sleeps past [`lead::GRACE`] while a long lead lasts: the leader leaving
    /// must wake it (`lead.rs`).
    io_deep: AtomicBool,
    /// When the last leader left (engine nanoseconds; 0: never).
    led_at: AtomicU64,
    /// Threads in `wait_leading`, leader or not.
    waiting: AtomicUsize,
    /// When two of them last waited at once (engine nanoseconds; 0: never).
    crowded_at: AtomicU64,
    /// The last lead had a busy round: the next one sleeps in `poll(2)` (`lead.rs`).
    lead_deep: AtomicBool,
    /// The leader's event buffer.
    lead_bufs: Mutex<lead::Bufs>,
    running: AtomicBool,
    origin: std::time::Instant,
    origin_wall_ns: u64,
    pub tcp_stats: Arc<TcpStats>,
    /// The `ib_*` counters (listed when the IB transport runs).
    pub ib_stats: Arc<IbStats>,
    pub tap: Arc<Tap>,
    pub addrs: Mutex<Vec<IpAddr>>,
    pub frames_in: AtomicU64,
    /// Of `frames_in`, those read by a waiting application thread (`lead.rs`).
    frames_led: AtomicU64,
    /// How long a leading thread polls before it sleeps, in nanoseconds (`lead.rs`).
    busy_poll_ns: AtomicU64,
    thread: Mutex<Option<JoinHandle<()>>>,
    ctl: Mutex<Option<admin::CtlServer>>,
}

/// A running node. Cheap to clone (shared). Shut down with [`Node::shutdown`] or by dropping
/// the last handle.
#[derive(Debug, Clone)]
pub struct Node {
    pub(crate) inner: Arc<Inner>,
    _owner: Arc<Owner>,
}

/// A [`Node`] handle that does not keep it running ([`Node::downgrade`]).
#[derive(Debug, Clone)]
pub struct WeakNode(std::sync::Weak<Inner>);

impl WeakNode {
    /// Shuts the node down (see [`Node::shutdown`]), removing its control socket, if it
    /// still exists.
    pub fn shutdown(&self) {
        if let Some(inner) = self.0.upgrade() {
            inner.shutdown();
        }
    }
}

/// Shuts the node down when the last user handle goes away.
#[derive(Debug)]
pub(crate) struct Owner(Arc<Inner>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes `m` if no other thread holds it.
fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

impl Node {
    /// Starts a node: listeners on every address, the I/O thread.
    ///
    /// # Errors
    /// A listener cannot bind (the address is not configured here, or port 16385 is taken,
    /// for example by the kernel's `rds_tcp`), or a system resource is missing.
    pub fn start(cfg: NodeConfig) -> io::Result<Node> {
        let seed = cfg.seed.unwrap_or_else(random_seed);
        let mut stack = Stack::new(resolve_tunables(cfg.tunables.clone()), seed);
        let tcp_stats = Arc::new(TcpStats::new());
        let ib_stats = Arc::new(IbStats::new());
        let tap = Arc::new(Tap::default());
        let epoll = Arc::new(sys::Epoll::with_shadow()?);
        let mut tcp = Tcp::new(
            epoll.clone(),
            tcp_stats.clone(),
            tap.clone(),
            seed.rotate_left(17),
        )?;
        let (mut ib, ib_unavailable) = if cfg.transports.ib {
            match Ib::new(epoll.clone(), ib_stats.clone(), tap.clone()) {
                Ok(t) => (Some(t), None),
                Err(e) => (None, Some(e)),
            }
        } else {
            (None, None)
        };
        for &a in &cfg.addrs {
            let on_ib = match ib.as_mut() {
                Some(t) => t.listen(a)?,
                None => false,
            };
            if cfg.transports.tcp {
                tcp.listen(a)?;
            }
            stack.add_local_addr(a, cfg.transports.tcp, on_ib);
        }
        let wake_fd = sys::eventfd()?;
        // In the leader's set too: a leader that finds the I/O thread's wake-up pending
        // (transmits a sender queued for a busy lane) does that work in its round, often
        // before the I/O thread runs (three times the context switches per message at
        // `--loopback -d 8` without it).
        epoll.add(wake_fd.as_raw_fd(), TOKEN_WAKE, sys::EPOLLIN)?;
        let lead_fd = sys::eventfd()?;
        epoll.add_shadow_own(lead_fd.as_raw_fd(), lead::TOKEN_LEAD, sys::EPOLLIN)?;
        let origin = std::time::Instant::now();
        let origin_wall_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        stack.set_seq_origin(origin_wall_ns);
        let inner = Arc::new(Inner {
            name: cfg.name,
            core: Mutex::new(Core {
                stack,
                io_work: VecDeque::new(),
                waiters: HashMap::new(),
            }),
            cong_cv: Condvar::new(),
            tcp: Mutex::new(tcp),
            ib_on: ib.is_some(),
            ib: Mutex::new(ib),
            ib_unavailable,
            transports: cfg.transports,
            epoll,
            wake_fd,
            lead_fd,
            io_sleeping: AtomicBool::new(false),
            room_wanted: AtomicBool::new(false),
            room_waiters: AtomicUsize::new(0),
            io_epoll: AtomicBool::new(false),
            leader: AtomicBool::new(false),
            leads: AtomicU64::new(0),
            io_deep: AtomicBool::new(false),
            led_at: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            crowded_at: AtomicU64::new(0),
            lead_deep: AtomicBool::new(false),
            lead_bufs: Mutex::new(Vec::new()),
            running: AtomicBool::new(true),
            origin,
            origin_wall_ns,
            tcp_stats,
            ib_stats,
            tap,
            addrs: Mutex::new(cfg.addrs),
            frames_in: AtomicU64::new(0),
            frames_led: AtomicU64::new(0),
            busy_poll_ns: AtomicU64::new(lead::busy_poll_ns(&cfg.tunables)),
            thread: Mutex::new(None),
            ctl: Mutex::new(None),
        });
        let io = inner.clone();
        let h = std::thread::Builder::new()
            .name("rds-io".into())
            .spawn(move || {
                // Woken by an application thread (a transmit handed over, a timer set), the I/O
                // thread does not preempt it: that thread goes on queueing, and the I/O thread
                // runs on another CPU or when it blocks, and writes the batch. At the normal
                // policy it preempted the waker at each hand-over on one CPU (pinned,
                // `--loopback -d 32` ran at 1.5x the rate and 0.2x the context switches under
                // SCHED_BATCH). Best effort: the policy needs no privilege.
                let _ = sys::set_thread_batch();
                io.io_loop()
            })?;
        *lock(&inner.thread) = Some(h);
        let owner = Arc::new(Owner(inner.clone()));
        let weak = Arc::downgrade(&owner);
        let sockets = cfg.client_sockets;
        let server = match &cfg.ctl {
            CtlMode::Off => None,
            CtlMode::Named(n) => Some(admin::CtlServer::start(inner.clone(), weak, n, sockets)?),
            CtlMode::Auto => {
                let n = NODE_SEQ.fetch_add(1, Ordering::Relaxed);
                let name = if n == 0 {
                    format!("embedded-{}", std::process::id())
                } else {
                    format!("embedded-{}-{}", std::process::id(), n + 1)
                };
                admin::CtlServer::start(inner.clone(), weak, &name, sockets).ok()
            }
        };
        *lock(&inner.ctl) = server;
        Ok(Node {
            _owner: owner,
            inner,
        })
    }

    pub(crate) fn from_parts(inner: Arc<Inner>, owner: Arc<Owner>) -> Option<Node> {
        inner.is_running().then_some(Node {
            inner,
            _owner: owner,
        })
    }

    /// Takes on another address: a listener on `ip:16385` and the address in the engine.
    ///
    /// # Errors
    /// The listener cannot bind (the address is not configured here, or the port is taken).
    pub fn add_addr(&self, ip: IpAddr) -> io::Result<()> {
        let ip = crate::proto::canonical(ip);
        let mut addrs = lock(&self.inner.addrs);
        if addrs.contains(&ip) {
            return Ok(());
        }
        let tcp_on = self.inner.transports.tcp;
        if tcp_on {
            lock(&self.inner.tcp).listen(ip)?;
        }
        let on_ib = match lock(&self.inner.ib).as_mut() {
            Some(t) => t.listen(ip)?,
            None => false,
        };
        lock(&self.inner.core)
            .stack
            .add_local_addr(ip, tcp_on, on_ib);
        addrs.push(ip);
        Ok(())
    }

    /// Test hook: open outgoing RDS/TCP connections to the peer `faddr` to `via` instead of
    /// `faddr:16385` (`None` restores that), for a relay such as the fault-injecting proxy of
    /// the workspace tests (`tests/src/faultnet.rs`). The engine still keys the connection by
    /// `faddr`; the relay must connect on to the peer *from this node's address*, keeping the
    /// source port's lane (`port mod 8`), so that the peer sees the usual address pair.
    /// Incoming connections are not affected.
    pub fn set_peer_route(&self, faddr: IpAddr, via: Option<std::net::SocketAddr>) {
        lock(&self.inner.tcp).set_route(crate::proto::canonical(faddr), via);
    }

    /// Closes every connection (half-closing and draining briefly) and stops the I/O thread.
    /// Sockets of this node fail afterwards.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }

    /// A handle that does not keep the node running, to shut it down from elsewhere (a tool
    /// that exits from a signal handler thread).
    pub fn downgrade(&self) -> WeakNode {
        WeakNode(Arc::downgrade(&self.inner))
    }

    /// Zeroes every counter.
    pub fn reset_stats(&self) {
        lock(&self.inner.core).stack.reset_stats();
        self.inner.tcp_stats.reset();
        self.inner.ib_stats.reset();
    }

    /// Replaces the tunables. Changing the TCP buffer sizes drops every RDS/TCP connection so
    /// that it reconnects with them, as the kernel does (`rds_tcp_sysctl_reset`); so does
    /// changing the lanes offered (`mprds_paths`), which the next handshake announces.
    pub fn set_tunables(&self, t: Tunables) {
        let mut core = lock(&self.inner.core);
        let old = core.stack.tunables().clone();
        let t = resolve_tunables(t);
        self.inner
            .busy_poll_ns
            .store(lead::busy_poll_ns(&t), Ordering::Relaxed);
        core.stack.set_tunables(t.clone());
        if old.tcp_sndbuf != t.tcp_sndbuf
            || old.tcp_rcvbuf != t.tcp_rcvbuf
            || old.mprds_paths != t.mprds_paths
        {
            let now = self.inner.now();
            core.stack
                .restart_all(now, TransportKind::Tcp, DropReason::Tunable);
        }
        self.inner.after_app_call(core);
    }

    /// Restarts the connection between `laddr` and `faddr`: it reconnects and retransmits.
    /// Returns whether such a connection exists.
    pub fn restart_conn(&self, laddr: IpAddr, faddr: IpAddr) -> bool {
        self.with_conn(laddr, faddr, |st, c, now| {
            st.restart_conn(now, c, DropReason::Restart);
        })
        .is_some()
    }

    /// Ends the connection between `laddr` and `faddr` and drops its queued messages (their
    /// senders get their send-buffer space back). Returns how many messages were dropped, or
    /// `None` if there is no such connection.
    pub fn kill_conn(&self, laddr: IpAddr, faddr: IpAddr) -> Option<usize> {
        self.with_conn(laddr, faddr, |st, c, now| st.kill_conn(now, c))
    }

    fn with_conn<R>(
        &self,
        laddr: IpAddr,
        faddr: IpAddr,
        f: impl FnOnce(&mut Stack, ConnId, Instant) -> R,
    ) -> Option<R> {
        let mut core = lock(&self.inner.core);
        let c = core
            .stack
            .find_conn(laddr, faddr, TransportKind::Tcp)
            .or_else(|| core.stack.find_conn(laddr, faddr, TransportKind::Ib))?;
        let now = self.inner.now();
        let r = f(&mut core.stack, c, now);
        self.inner.after_app_call(core);
        Some(r)
    }
}

static NODE_SEQ: AtomicU64 = AtomicU64::new(0);

/// When the I/O thread gives the C library's free memory back to the system: the budget's use
/// fell by [`HeapTrim::DROP`] from its highest since the last trim, at most once a second.
#[derive(Default)]
struct HeapTrim {
    peak: usize,
    last: Option<Instant>,
}

impl HeapTrim {
    const DROP: usize = 8 << 20;

    fn observe(&mut self, now: Instant, used: usize) {
        self.peak = self.peak.max(used);
        let due = self.last.is_none_or(|t| now >= t + Duration::from_secs(1));
        if due && self.peak - used >= Self::DROP {
            sys::trim_heap();
            self.peak = used;
            self.last = Some(now);
        }
    }
}

/// The node's memory budget when `net.rds.mem_budget` is 0: min(256 MiB, RAM / 8).
pub fn default_mem_budget() -> u64 {
    let cap = crate::proto::stack::DEFAULT_MEM_BUDGET;
    match ram_bytes() {
        Some(ram) => (ram / 8).clamp(1 << 20, cap),
        None => cap,
    }
}

/// Total RAM from `/proc/meminfo` (`MemTotal`).
fn ram_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The tunables the engine gets: an automatic memory budget (0) becomes a number of bytes.
fn resolve_tunables(mut t: Tunables) -> Tunables {
    if t.mem_budget == 0 {
        t.mem_budget = default_mem_budget();
    }
    t
}

fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        return t ^ u64::from(std::process::id()).rotate_left(32);
    }
    u64::from_ne_bytes(b)
}

impl Inner {
    pub(crate) fn now(&self) -> Instant {
        Instant::from_nanos(self.origin.elapsed().as_nanos() as u64)
    }

    pub(crate) fn lock_core(&self) -> MutexGuard<'_, Core> {
        lock(&self.core)
    }

    pub(crate) fn is_running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }

    /// Runs `f` on the IB transport (`EOPNOTSUPP` without one). Takes the transport lock:
    /// never call with the engine lock held.
    pub(crate) fn with_ib<R>(&self, f: impl FnOnce(&mut Ib) -> io::Result<R>) -> io::Result<R> {
        match lock(&self.ib).as_mut() {
            Some(t) => f(t),
            None => Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
        }
    }

    /// A send found its socket's send buffer full (`room`), or found room again: while room
    /// is wanted the I/O thread's timers (the acknowledgement poll) keep their microseconds;
    /// a send that wants it wakes the I/O thread to look.
    pub(crate) fn want_room(&self, room: bool) {
        if room {
            self.room_wanted.store(true, Ordering::SeqCst);
            self.wake_io();
        } else if self.room_wanted.load(Ordering::Relaxed) {
            self.room_wanted.store(false, Ordering::SeqCst);
        }
    }

    pub(crate) fn wake_io(&self) {
        if self.io_sleeping.load(Ordering::SeqCst) {
            sys::eventfd_signal(self.wake_fd.as_raw_fd());
        }
    }

    fn shutdown(&self) {
        if !self.running.load(Ordering::SeqCst) {
            return;
        }
        let server = lock(&self.ctl).take();
        if let Some(mut s) = server {
            s.stop();
        }
        {
            let mut core = lock(&self.core);
            let now = self.now();
            core.stack.shutdown(now);
            self.drain_events(&mut core, true);
        }
        self.wake_io();
        // Give half-closed connections a moment to drain, then stop.
        let deadline = std::time::Instant::now() + Duration::from_millis(500);
        while std::time::Instant::now() < deadline {
            if lock(&self.tcp).len() == 0 {
                break;
            }
            self.wake_io();
            std::thread::sleep(Duration::from_millis(5));
        }
        self.running.store(false, Ordering::SeqCst);
        sys::eventfd_signal(self.wake_fd.as_raw_fd());
        sys::eventfd_signal(self.lead_fd.as_raw_fd());
        let h = lock(&self.thread).take();
        if let Some(h) = h {
            crate::threads::join_within(h, crate::threads::JOIN_LIMIT);
        }
        lock(&self.tcp).close_all();
        if let Some(ib) = lock(&self.ib).as_mut() {
            ib.close_all();
        }
        // Wake every blocked caller so that it sees the node gone, and every poller of a
        // readiness descriptor (its next call fails with ENETDOWN, as a socket with an error
        // polls readable).
        let core = lock(&self.core);
        for w in core.waiters.values() {
            w.cv.notify_all();
            w.update_fds(true, true);
        }
        self.cong_cv.notify_all();
    }

    /// The I/O thread.
    fn io_loop(self: Arc<Self>) {
        let mut evs = Vec::new();
        let mut busy = true;
        let mut trim = HeapTrim::default();
        // The lead seen at the last sleep in led mode (`u64::MAX`: none).
        let mut last_lead = u64::MAX;
        while self.running.load(Ordering::SeqCst) {
            let timeout = if busy {
                Some(Duration::ZERO)
            } else {
                let now = self.now();
                let (t_engine, used) = {
                    let core = lock(&self.core);
                    (core.stack.poll_timeout(), core.stack.mem_used())
                };
                trim.observe(now, used);
                let t_tcp = lock(&self.tcp).next_timer();
                let next = match (t_engine, t_tcp) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let t = next
                    .map_or(Duration::from_millis(500), |t| t - now)
                    .min(Duration::from_millis(500));
                // Whole milliseconds unless a sender waits for room (`room_wanted`).
                Some(if self.room_wanted.load(Ordering::SeqCst) {
                    t
                } else {
                    Duration::from_millis(t.as_micros().div_ceil(1000) as u64)
                })
            };
            let led = !busy && self.led();
            if !busy {
                // What the transports will not be woken for (IB completion queues not armed)
                // is polled before sleeping, on the epoll set or in led mode (a queue this
                // thread's round left unarmed while a leader sleeps would wake nobody); if
                // something came, no sleep. Marked first when the sleep is on the epoll set:
                // a leader that leaves a queue unarmed after this poll sees the mark and arms
                // it ([`Inner::leave_armed`]).
                if !led {
                    self.io_epoll.store(true, Ordering::SeqCst);
                }
                if self.poll_before_sleep() {
                    self.io_epoll.store(false, Ordering::SeqCst);
                    busy = true;
                    continue;
                }
            }
            self.io_sleeping.store(true, Ordering::SeqCst);
            // Work queued between the last check and sleeping must not be missed.
            let queued = !lock(&self.core).io_work.is_empty();
            let timeout = if queued {
                Some(Duration::ZERO)
            } else {
                timeout
            };
            if !queued && led {
                // An application thread does the transport I/O (`lead.rs`): wait for work
                // handed over and for timers only, looking again after GRACE (a leader that
                // left is not seen otherwise); past GRACE while one lead lasts longer (a
                // thread idle in its wait), which the leader's leaving ends.
                let deep = self.sleep_deep(&mut last_lead);
                let cap = if deep { lead::DEEP_MAX } else { lead::GRACE };
                let t = timeout.map_or(cap, |t| t.min(cap));
                let woke = sys::wait_readable(self.wake_fd.as_raw_fd(), t).unwrap_or(false);
                self.io_deep.store(false, Ordering::SeqCst);
                evs.clear();
                if woke {
                    evs.push((TOKEN_WAKE, sys::EPOLLIN));
                }
            } else {
                last_lead = u64::MAX;
                if self.epoll.wait(&mut evs, timeout).is_err() {
                    evs.clear();
                }
            }
            self.io_sleeping.store(false, Ordering::SeqCst);
            self.io_epoll.store(false, Ordering::SeqCst);
            if !self.running.load(Ordering::SeqCst) {
                break;
            }
            busy = self.io_round(&evs);
        }
    }
}

#[cfg(test)]
mod mem_budget_tests {
    use super::*;

    #[test]
    fn an_automatic_budget_becomes_min_of_256_mib_and_an_eighth_of_ram() {
        let b = default_mem_budget();
        assert!((1 << 20..=crate::proto::stack::DEFAULT_MEM_BUDGET).contains(&b));
        if let Some(ram) = ram_bytes() {
            assert_eq!(b, (ram / 8).clamp(1 << 20, 256 << 20));
        }
        assert_eq!(resolve_tunables(Tunables::default()).mem_budget, b);
        let set = Tunables {
            mem_budget: 5 << 20,
            ..Tunables::default()
        };
        assert_eq!(resolve_tunables(set).mem_budget, 5 << 20);
    }
}
