//! One RDS descriptor and the table of them: an [`Entry`] is an `rds_core::Socket` with the
//! socket pair whose first end the program holds, kept readable while a receive would return
//! something and writable while the send buffer has room; the table maps the program's
//! descriptors (several after `dup`) to their entry; once the program polls a descriptor
//! ([`Entry::arm`]), the readiness thread follows the socket's readiness eventfds and brings
//! its pair in step when the socket becomes ready, the program's own calls when it becomes
//! not ready (a blocked receiver, which the message wakes anyway, also when it becomes
//! readable).
//!
//! The table answers "is this descriptor ours" with one atomic load, so that the
//! interposed `read`, `write` and `close` of every other descriptor cost nothing more.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use rds_core::Socket;

use crate::ffi::sys;

/// Descriptors at or above this are never ours (`socket(AF_RDS)` then fails with EMFILE).
pub const MAX_FD: usize = 1 << 20;

static OURS: [AtomicU64; MAX_FD / 64] = [const { AtomicU64::new(0) }; MAX_FD / 64];
static MAP: Mutex<BTreeMap<RawFd, Arc<Entry>>> = Mutex::new(BTreeMap::new());
/// This process is a forked child of a process that had used RDS.
static FORKED: AtomicBool = AtomicBool::new(false);
/// This process has created an RDS socket.
static USED: AtomicBool = AtomicBool::new(false);
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);
/// Entries alive that no poll, select or epoll of the program has named yet ([`Entry::arm`]):
/// while there are none, the interposed polls pass through without looking at descriptors.
static UNARMED: AtomicUsize = AtomicUsize::new(0);

/// What a descriptor is to this library.
pub enum Lookup {
    /// Not an RDS descriptor: pass the call through.
    NotOurs,
    /// An RDS descriptor inherited from the parent across `fork`: unusable here.
    Inherited,
    /// An RDS descriptor of this process.
    Ours(Arc<Entry>),
}

fn bit(fd: RawFd) -> Option<(usize, u64)> {
    let i = usize::try_from(fd).ok().filter(|&i| i < MAX_FD)?;
    Some((i / 64, 1u64 << (i % 64)))
}

/// Whether some RDS socket of this process has not been polled by the program yet.
pub fn any_unarmed() -> bool {
    UNARMED.load(Ordering::Relaxed) > 0
}

/// The program names `fd` in a poll, select or epoll: if it is an RDS descriptor of this
/// process, its readiness is followed from now on ([`Entry::arm`]). Any other descriptor
/// costs one atomic load ([`lookup`]).
pub fn polled(fd: RawFd) {
    if let Lookup::Ours(e) = lookup(fd) {
        e.arm();
    }
}

/// Whether `fd` is an RDS descriptor (of this process or inherited).
pub fn is_ours(fd: RawFd) -> bool {
    bit(fd).is_some_and(|(w, m)| OURS[w].load(Ordering::Acquire) & m != 0)
}

fn set_bit(fd: RawFd, on: bool) {
    if let Some((w, m)) = bit(fd) {
        if on {
            OURS[w].fetch_or(m, Ordering::AcqRel);
        } else {
            OURS[w].fetch_and(!m, Ordering::AcqRel);
        }
    }
}

fn map() -> std::sync::MutexGuard<'static, BTreeMap<RawFd, Arc<Entry>>> {
    MAP.lock().unwrap_or_else(|p| p.into_inner())
}

/// The entry of `fd`.
pub fn lookup(fd: RawFd) -> Lookup {
    if !is_ours(fd) {
        return Lookup::NotOurs;
    }
    if FORKED.load(Ordering::Relaxed) {
        return Lookup::Inherited;
    }
    match map().get(&fd) {
        Some(e) => Lookup::Ours(e.clone()),
        None => Lookup::NotOurs,
    }
}

/// Makes `fd` a descriptor of `e`.
pub fn insert(fd: RawFd, e: Arc<Entry>) {
    map().insert(fd, e);
    set_bit(fd, true);
}

/// Forgets `fd` (closed, or replaced by `dup2`); returns its entry, to be dropped by the caller
/// outside the table's lock.
pub fn remove(fd: RawFd) -> Option<Arc<Entry>> {
    if !is_ours(fd) {
        return None;
    }
    set_bit(fd, false);
    if FORKED.load(Ordering::Relaxed) {
        // The parent's entries are never dropped here: their sockets live in the parent.
        return None;
    }
    map().remove(&fd)
}

/// Marks this process a forked child (from the `pthread_atfork` child handler; touches only
/// atomics).
pub fn after_fork_child() {
    if USED.load(Ordering::Relaxed) {
        FORKED.store(true, Ordering::Relaxed);
    }
}

/// Whether this process may create RDS sockets (not a forked child of a process that used
/// them).
pub fn usable() -> bool {
    !FORKED.load(Ordering::Relaxed)
}

/// What the program's end of the pair currently shows.
#[derive(Debug)]
struct Mirror {
    readable: bool,
    writable: bool,
}

/// One RDS socket of the program.
pub struct Entry {
    /// The stack's socket.
    pub sock: Socket,
    /// A private duplicate of the program's end (the program may close its own).
    a: OwnedFd,
    /// This library's end.
    b: OwnedFd,
    key: u64,
    mirror: Mutex<Mirror>,
    /// The socket's readiness eventfds (POLLIN, POLLOUT), once bound and armed.
    ev: OnceLock<[RawFd; 2]>,
    /// Bound: the socket has readiness to follow.
    bound: AtomicBool,
    /// The program has named the descriptor in a poll, select or epoll: the readiness thread
    /// keeps the pair in step. Until then nothing does (the library's own blocking calls
    /// wait on the socket itself), so a program that only sends and receives costs no
    /// readiness descriptor writes and no wake-ups of that thread.
    armed: AtomicBool,
    /// Threads blocked in [`Entry::wait_rx`]: while there are any, the readiness thread does
    /// not follow the socket's POLLIN (each receiver brings the pair in step when it
    /// returns), so that a message handed to a blocked receiver wakes one thread, not two.
    rx_waiters: Mutex<usize>,
    /// `SIOCRDSSETTOS` value.
    pub tos: Mutex<Option<u8>>,
    /// `SO_RCVTIMEO`, `SO_SNDTIMEO` as set (for getsockopt).
    pub timeouts: Mutex<[Option<Duration>; 2]>,
    /// `SO_TIMESTAMP` as set: `Some(new)` with `new` telling `SO_TIMESTAMP_NEW`.
    pub timestamps: Mutex<Option<bool>>,
    /// `O_NONBLOCK` (shared by the descriptors of this socket, as a file description's is).
    pub nonblock: AtomicBool,
    /// A send succeeded (the kernel's socket then has a connection: its TOS is fixed).
    pub sent: AtomicBool,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("key", &self.key).finish()
    }
}

impl Entry {
    /// A new unbound socket and its pair; returns the entry and the program's descriptor.
    ///
    /// # Errors
    /// The errno of `socketpair` or `dup`.
    pub fn create(cloexec: bool) -> Result<(Arc<Entry>, RawFd), i32> {
        let sock = Socket::new().map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
        let (a, b) = sys::socketpair()?;
        // A small send buffer on the program's end: filling it (not writable) is cheap.
        sys::set_sndbuf(a.as_raw_fd(), 4096);
        let fd = sys::dup(a.as_raw_fd(), cloexec)?;
        USED.store(true, Ordering::Relaxed);
        UNARMED.fetch_add(1, Ordering::Relaxed);
        let e = Arc::new(Entry {
            sock,
            a,
            b,
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            mirror: Mutex::new(Mirror {
                readable: false,
                writable: true,
            }),
            ev: OnceLock::new(),
            bound: AtomicBool::new(false),
            armed: AtomicBool::new(false),
            rx_waiters: Mutex::new(0),
            tos: Mutex::new(None),
            timeouts: Mutex::new([None, None]),
            timestamps: Mutex::new(None),
            nonblock: AtomicBool::new(false),
            sent: AtomicBool::new(false),
        });
        Ok((e, fd))
    }

    /// After bind: the socket's readiness is followed from now on if the program polls the
    /// descriptor ([`Entry::arm`]).
    ///
    /// # Errors
    /// The errno of the readiness descriptors' creation.
    pub fn attach(self: &Arc<Self>) -> Result<(), i32> {
        self.bound.store(true, Ordering::SeqCst);
        if self.armed.load(Ordering::SeqCst) {
            self.follow()?;
        }
        Ok(())
    }

    /// Whether the socket is bound.
    pub fn is_bound(&self) -> bool {
        self.bound.load(Ordering::SeqCst)
    }

    /// The program polls the descriptor: the pair follows the socket's readiness from now on
    /// (at once if bound, else from its bind). Errors creating the readiness descriptors
    /// leave the pair as it is, as a poll before bind sees it.
    pub fn arm(self: &Arc<Self>) {
        if self.armed.swap(true, Ordering::SeqCst) {
            return;
        }
        UNARMED.fetch_sub(1, Ordering::Relaxed);
        if self.bound.load(Ordering::SeqCst) {
            let _ = self.follow();
        }
    }

    /// Starts following the socket's readiness (once; `attach` and `arm` may both get here).
    fn follow(self: &Arc<Self>) -> Result<(), i32> {
        let rx = self.sock.fd().map_err(errno)?;
        let tx = self.sock.send_fd().map_err(errno)?;
        if self.ev.set([rx, tx]).is_err() {
            return Ok(());
        }
        let p = pump()?;
        p.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.key, Arc::downgrade(self));
        for fd in [rx, tx] {
            sys::epoll_add(p.ep.as_raw_fd(), fd, self.key)?;
        }
        // A daemon's shared ring signals the readiness descriptors a moment after they are
        // first watched: this once, the socket's own state counts too, so that a socket polls
        // writable right after bind (as the kernel's does).
        self.sync_dirs(
            true,
            true,
            false,
            [self.sock.readable(), self.sock.writable()],
        );
        Ok(())
    }

    /// Runs `wait` (a blocking wait for the socket's POLLIN) without waking the readiness
    /// thread for what it receives: on an embedded node the readable eventfd is left
    /// unwritten meanwhile (`Socket::quiet_rx_fd`, no system call), else the thread's watch
    /// on it is paused (two `epoll_ctl`); either way the watch sees the socket's state again
    /// afterwards.
    pub fn wait_rx<T>(&self, wait: impl FnOnce() -> T) -> T {
        if let Some(_quiet) = self.sock.quiet_rx_fd() {
            return wait();
        }
        let pump = match (self.ev.get(), PUMP.get()) {
            (Some(&[rx, _]), Some(Ok(p))) => Some((rx, p.ep.as_raw_fd())),
            _ => None,
        };
        if let Some((rx, ep)) = pump {
            let mut n = self.rx_waiters.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            if *n == 1 {
                sys::epoll_watch(ep, rx, self.key, false);
            }
        }
        let r = wait();
        if let Some((rx, ep)) = pump {
            let mut n = self.rx_waiters.lock().unwrap_or_else(|p| p.into_inner());
            *n -= 1;
            if *n == 0 {
                sys::epoll_watch(ep, rx, self.key, true);
            }
        }
        r
    }

    /// Brings the program's end in step with the socket's readiness.
    pub fn sync(&self) {
        self.sync_dirs(true, true, false, [false; 2]);
    }

    /// After a call that can only have made the socket less ready, POLLIN (`rx`, a receive)
    /// or POLLOUT (`tx`, a send): brings that side of the program's end in step. A side
    /// that already shows not ready needs nothing (the socket becoming ready is the readiness
    /// thread's to follow, or a blocked receiver's).
    pub fn sync_after(&self, rx: bool, tx: bool) {
        self.sync_dirs(rx, tx, true, [false; 2]);
    }

    /// `ready`: POLLIN and POLLOUT known to hold whatever the socket says. The socket's
    /// readiness is read from the socket (its flags, no system call), not from its eventfds,
    /// which show the same a moment later.
    fn sync_dirs(&self, rx: bool, tx: bool, only_ready: bool, ready: [bool; 2]) {
        if self.ev.get().is_none() {
            return;
        }
        let mut m = self.mirror.lock().unwrap_or_else(|p| p.into_inner());
        let rx = rx && (m.readable || !only_ready);
        let tx = tx && (m.writable || !only_ready);
        if !rx && !tx {
            return;
        }
        let r = if rx {
            ready[0] || self.sock.readable()
        } else {
            m.readable
        };
        let w = if tx {
            ready[1] || self.sock.writable()
        } else {
            m.writable
        };
        if r != m.readable {
            if r {
                let _ = sys::send_nb(self.b.as_raw_fd(), &[1]);
            } else {
                sys::drain(self.a.as_raw_fd());
            }
            m.readable = r;
        }
        if w != m.writable {
            if w {
                sys::drain(self.b.as_raw_fd());
            } else {
                sys::fill(self.a.as_raw_fd());
            }
            m.writable = w;
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if !self.armed.load(Ordering::Relaxed) {
            UNARMED.fetch_sub(1, Ordering::Relaxed);
        }
        if let (Some(&[rx, tx]), Some(Ok(p))) = (self.ev.get(), PUMP.get()) {
            sys::epoll_del(p.ep.as_raw_fd(), rx);
            sys::epoll_del(p.ep.as_raw_fd(), tx);
            p.entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.key);
        }
    }
}

/// An `io::Error` as an errno.
pub fn errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The readiness thread's epoll set and the entries it serves.
struct Pump {
    ep: OwnedFd,
    entries: Mutex<HashMap<u64, Weak<Entry>>>,
}

static PUMP: OnceLock<Result<Arc<Pump>, i32>> = OnceLock::new();

fn pump() -> Result<Arc<Pump>, i32> {
    PUMP.get_or_init(|| {
        let p = Arc::new(Pump {
            ep: sys::epoll_create()?,
            entries: Mutex::new(HashMap::new()),
        });
        let q = p.clone();
        std::thread::Builder::new()
            .name("rds-preload".into())
            .spawn(move || pump_loop(&q))
            .map_err(errno)?;
        Ok(p)
    })
    .clone()
}

/// Waits for readiness eventfds to be signalled (edge-triggered: a socket that became
/// readable or writable) and syncs their entries. Becoming not ready happens only in the
/// program's own calls, which sync themselves.
fn pump_loop(p: &Pump) {
    let mut keys = Vec::with_capacity(64);
    loop {
        keys.clear();
        if sys::epoll_wait(p.ep.as_raw_fd(), &mut keys).is_err() {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        for k in &keys {
            let e = p
                .entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(k)
                .and_then(Weak::upgrade);
            if let Some(e) = e {
                e.sync();
            }
        }
    }
}
