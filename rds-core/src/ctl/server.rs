//! The control socket server of a node. One event-loop thread accepts connections and reads
//! requests without blocking (epoll, a buffer per connection bounded by the frame limits). It
//! runs the client-socket operations itself (send, receive, readiness wait, state, options:
//! none of them blocks there) and hands every other complete request (hello, info, counters,
//! tunables, open and bind, trace, ...) to a bounded pool of worker threads, one request at a
//! time per connection. An idle connection costs no thread. A request that has to wait (a
//! blocking receive or send, a readiness wait) parks its connection in the event loop until
//! the socket's readiness descriptor fires, a retry is due or its timeout passes. Only a trace
//! session (privileged) holds a worker for its duration.
//!
//! Limits (each refusal is an error reply naming the cap): [`CONNS_PER_UID`] and
//! [`CONNS_PER_NODE`] control connections, [`SOCKS_PER_UID`] and [`SOCKS_PER_NODE`] client
//! sockets, [`WORKERS`] workers of which an unprivileged uid may keep [`BUSY_PER_UID`] busy
//! and all unprivileged uids together all but [`PRIVILEGED_RESERVE`], [`REQUEST_TIMEOUT`] for
//! the rest of a request whose first bytes came, [`REPLY_TIMEOUT`] for writing a reply.
//! Root and the node's owner ("privileged") are exempt from the per-uid caps. `accept`
//! failing for want of descriptors pauses the listener for [`ACCEPT_BACKOFF`].
//!
//! Requests are handled against the node; see the module documentation of [`super`] for the
//! protocol, the ownership of client sockets and the privilege rules.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nix::fcntl::{Flock, FlockArg};

use super::{read_frame, write_frame, InfoSnapshot, Reply, Request, SockOpt, MAX_DATA, MAX_JSON};
use crate::node::tap::{self, TapBatch, TapChunk, TapFilter};
use crate::node::{Inner, Node, Owner};
use crate::proto::{Received, TransportKind};
use crate::socket::{RecvFlags, Socket};
use crate::sys;
use crate::trace::{Capture, CaptureFile, CaptureLink, TcpCaptureConfig, TraceError};
use crate::tunables::{TunableDef, TUNABLES};

/// Frames a trace session may hold before dropping (and counting) new ones. The queue's
/// bytes are bounded too ([`tap::MAX_QUEUED_BYTES`], 64 MiB); this many of the smallest
/// records (a bare header: 136 bytes) take about as much, so at any snap length the queue can
/// hold what the data path produces in the ~0.3 s a slow write to the file may take.
const TRACE_QUEUE: usize = 1 << 19;

/// Worker threads that run the requests other than socket operations (started as needed,
/// never more).
pub const WORKERS: usize = 8;
/// Workers only root and the node's owner may use: unprivileged uids together keep at most
/// `WORKERS - PRIVILEGED_RESERVE` busy.
pub const PRIVILEGED_RESERVE: usize = 2;
/// Workers one unprivileged uid may keep busy at a time (its further requests wait their
/// turn in the event loop).
pub const BUSY_PER_UID: usize = 3;
/// Control connections one unprivileged uid may hold open on a node (a daemon client socket
/// takes one, plus one per readiness direction it watches).
pub const CONNS_PER_UID: usize = 128;
/// Control connections all unprivileged uids together may hold open on a node; root and the
/// owner get [`PRIVILEGED_HEADROOM`] more.
pub const CONNS_PER_NODE: usize = 1024;
/// Extra control connections for root and the node's owner beyond [`CONNS_PER_NODE`].
pub const PRIVILEGED_HEADROOM: usize = 64;
/// Client sockets one unprivileged uid may have open through a node.
pub const SOCKS_PER_UID: usize = 256;
/// Client sockets all uids together may have open through a node.
pub const SOCKS_PER_NODE: usize = 4096;
/// How long the rest of a request may take to arrive once its first byte came; a connection
/// that sends part of a frame and then stalls is closed (counted, see
/// [`CtlServer::stalled_closed`]).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long writing one reply may block on a client that does not read; the connection is
/// then closed.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the listener pauses after `accept` failed for want of descriptors (EMFILE,
/// ENFILE) or memory.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Entries of each list an info snapshot starts with; fewer when the reply would not fit
/// [`MAX_JSON`] (the count left out is in [`super::InfoOmitted`]).
pub const INFO_LIST_MAX: usize = 1000;
/// How often a blocking send that found no room (or a congested destination) tries again,
/// besides when its socket's send buffer signals room.
const SEND_RETRY: Duration = Duration::from_millis(10);
/// Longest sleep of the event loop (it then checks the stop flag and the timers).
const TICK: Duration = Duration::from_millis(200);
/// Descriptors kept from one request (only a TraceStart uses one).
const MAX_PASSED_FDS: usize = 4;
/// Bytes read from one connection per readiness event.
const READ_CHUNK: usize = 64 * 1024;
/// Largest frame, header included.
const MAX_FRAME: usize = 8 + MAX_JSON + MAX_DATA;

/// Epoll tokens: the listener, the wake-up eventfd, connections (their id), and socket
/// readiness descriptors (`FD_TOKEN | fd`).
const LISTENER: u64 = u64::MAX;
const WAKE: u64 = u64::MAX - 1;
const FD_TOKEN: u64 = 1 << 62;

/// A running control server; stopping it removes the socket file and its lock file.
#[derive(Debug)]
pub struct CtlServer {
    path: PathBuf,
    lock: Option<Flock<File>>,
    ctx: Arc<Ctx>,
    wake: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

/// A client socket opened through the node, registered under its capability.
#[derive(Debug)]
struct CapEntry {
    uid: u32,
    sock: Weak<Socket>,
}

#[derive(Debug)]
struct Ctx {
    inner: Arc<Inner>,
    owner: Weak<Owner>,
    owner_uid: u32,
    stop: AtomicBool,
    /// Every client socket open through this node, by capability.
    caps: Mutex<HashMap<u128, CapEntry>>,
    /// Connections closed because a request stalled half sent.
    stalled: AtomicU64,
    /// Connections refused at a cap.
    refused: AtomicU64,
}

impl Ctx {
    fn node(&self) -> Option<Node> {
        Node::from_parts(self.inner.clone(), self.owner.upgrade()?)
    }

    fn caps(&self) -> std::sync::MutexGuard<'_, HashMap<u128, CapEntry>> {
        self.caps.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Who is at the other end of a control connection (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy)]
struct Peer {
    uid: u32,
    pid: i32,
    privileged: bool,
}

/// A socket in a connection's table: opened here (closed with the connection), or reached
/// through a capability (the opener's connection keeps it alive).
#[derive(Debug)]
enum Slot {
    Owned(Arc<Socket>, u128),
    Attached(Weak<Socket>),
}

/// One control connection.
#[derive(Debug)]
struct Conn {
    id: u64,
    stream: UnixStream,
    peer: Peer,
    /// Bytes of requests not yet run (at most one frame's worth is read ahead).
    buf: Vec<u8>,
    /// Descriptors passed with those bytes.
    fds: Vec<OwnedFd>,
    /// When the first byte of the incomplete request in `buf` came.
    partial_since: Option<Instant>,
    socks: HashMap<u64, Slot>,
    next_sock: u64,
}

/// A request waiting for its socket.
#[derive(Debug)]
struct Park {
    req: Request,
    data: Vec<u8>,
    /// Keeps the socket (and so the descriptors in `fds`) alive while parked.
    _sock: Arc<Socket>,
    /// Readiness descriptors that end the wait.
    fds: Vec<RawFd>,
    deadline: Option<Instant>,
    retry_at: Option<Instant>,
}

/// What a worker runs.
#[derive(Debug)]
enum Work {
    Frame {
        /// The request, or why it is malformed.
        req: Result<Request, String>,
        data: Vec<u8>,
        file: Option<OwnedFd>,
    },
    /// The rest of a reply the event loop could not write without blocking.
    Flush(Vec<u8>),
}

#[derive(Debug)]
struct Job {
    conn: Conn,
    work: Work,
}

/// A connection back from a worker.
#[derive(Debug)]
enum Done {
    Idle(Conn),
    Park(Conn, Park),
    Close(Conn),
}

impl CtlServer {
    /// Serves `name.sock` in the runtime directory for the node.
    ///
    /// # Errors
    /// The directory is unsafe or cannot be created ([`super::ensure_runtime_dir`]), a live
    /// node of that name holds its lock, or the socket cannot be created.
    pub(crate) fn start(
        inner: Arc<Inner>,
        owner: Weak<Owner>,
        name: &str,
    ) -> io::Result<CtlServer> {
        let dir = super::ensure_runtime_dir()?;
        let path = dir.join(format!("{name}.sock"));
        let lock = take_lock(&path, name)?;
        // Holding the lock proves any socket file there is a dead node's.
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        // Open to local users: every socket belongs to its connection, privileged requests
        // are checked per request.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
        listener.set_nonblocking(true)?;
        let ctx = Arc::new(Ctx {
            inner,
            owner,
            owner_uid: nix::unistd::geteuid().as_raw(),
            stop: AtomicBool::new(false),
            caps: Mutex::new(HashMap::new()),
            stalled: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let wake = Arc::new(sys::eventfd()?);
        let ep = sys::Epoll::new()?;
        ep.add(listener.as_raw_fd(), LISTENER, sys::EPOLLIN)?;
        ep.add(wake.as_raw_fd(), WAKE, sys::EPOLLIN)?;
        let (done_tx, done_rx) = mpsc::channel();
        let (job_tx, job_rx) = mpsc::channel();
        let ev = EventLoop {
            ctx: ctx.clone(),
            ep,
            listener,
            listening: true,
            backoff_until: None,
            wake: wake.clone(),
            idle: HashMap::new(),
            parked: HashMap::new(),
            fd_waiters: HashMap::new(),
            waiting: VecDeque::new(),
            conns_by_uid: HashMap::new(),
            conns_total: 0,
            conns_unpriv: 0,
            busy_by_uid: HashMap::new(),
            busy_total: 0,
            busy_unpriv: 0,
            workers: 0,
            job_tx,
            job_rx: Arc::new(Mutex::new(job_rx)),
            done_tx,
            done_rx,
            next_id: 1,
            scratch: vec![0u8; READ_CHUNK],
        };
        let thread = std::thread::Builder::new()
            .name("rds-ctl".into())
            .spawn(move || ev.run())?;
        Ok(CtlServer {
            path,
            lock: Some(lock),
            ctx,
            wake,
            thread: Some(thread),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Connections closed so far because a request stalled half sent ([`REQUEST_TIMEOUT`]).
    pub fn stalled_closed(&self) -> u64 {
        self.ctx.stalled.load(Ordering::Relaxed)
    }

    /// Connections refused so far at a connection cap.
    pub fn refused(&self) -> u64 {
        self.ctx.refused.load(Ordering::Relaxed)
    }

    /// Stops serving, closes every connection (and the client sockets they own) and removes
    /// the socket file and the lock file.
    pub fn stop(&mut self) {
        self.ctx.stop.store(true, Ordering::SeqCst);
        sys::eventfd_signal(self.wake.as_raw_fd());
        if let Some(h) = self.thread.take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        if let Some(lock) = self.lock.take() {
            // Removed while still held: a node starting meanwhile finds the file gone (or a
            // new one) and locks again (see `take_lock`).
            let _ = std::fs::remove_file(&self.path);
            let _ = std::fs::remove_file(super::lock_path(&self.path));
            drop(lock);
        }
    }
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Takes the lock file of the socket `path` for the node's lifetime.
fn take_lock(path: &Path, name: &str) -> io::Result<Flock<File>> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let lp = super::lock_path(path);
    for _ in 0..8 {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&lp)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("opening the lock file {}: {e}", lp.display()),
                )
            })?;
        let l = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "a node named '{name}' already serves {} (it holds {})",
                        path.display(),
                        lp.display()
                    ),
                ))
            }
            Err((_, e)) => return Err(e.into()),
        };
        // The file may have been removed (by a node stopping) between open and lock: the
        // lock counts only on the file still at the path.
        let ours = l.metadata()?;
        match std::fs::symlink_metadata(&lp) {
            Ok(m) if m.ino() == ours.ino() && m.dev() == ours.dev() => return Ok(l),
            _ => continue,
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("the lock file {} keeps changing", lp.display()),
    ))
}

struct EventLoop {
    ctx: Arc<Ctx>,
    ep: sys::Epoll,
    listener: UnixListener,
    listening: bool,
    backoff_until: Option<Instant>,
    wake: Arc<OwnedFd>,
    /// Connections waiting for a request (registered for input).
    idle: HashMap<u64, Conn>,
    /// Connections whose request waits for its socket (registered for hangup only).
    parked: HashMap<u64, (Conn, Park)>,
    /// Parked connections by the readiness descriptor they wait on.
    fd_waiters: HashMap<RawFd, Vec<u64>>,
    /// Complete requests waiting for a worker.
    waiting: VecDeque<Job>,
    conns_by_uid: HashMap<u32, usize>,
    conns_total: usize,
    conns_unpriv: usize,
    busy_by_uid: HashMap<u32, usize>,
    busy_total: usize,
    busy_unpriv: usize,
    workers: usize,
    job_tx: mpsc::Sender<Job>,
    job_rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    done_tx: mpsc::Sender<Done>,
    done_rx: mpsc::Receiver<Done>,
    next_id: u64,
    /// Where requests are read into before they join their connection's buffer.
    scratch: Vec<u8>,
}

fn peer_of(stream: &UnixStream, owner_uid: u32) -> Peer {
    match nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials) {
        Ok(c) => Peer {
            uid: c.uid(),
            pid: c.pid(),
            privileged: c.uid() == 0 || c.uid() == owner_uid,
        },
        Err(_) => Peer {
            uid: u32::MAX,
            pid: 0,
            privileged: false,
        },
    }
}

/// Writes an error frame without blocking (best effort: the connection is being dropped).
fn refuse(stream: &UnixStream, errno: i32, message: String) {
    if let Ok(json) = serde_json::to_vec(&error(errno, message)) {
        let mut all = Vec::new();
        if write_frame(&mut all, &json, &[]).is_ok() {
            let _ = nix::sys::socket::send(
                stream.as_raw_fd(),
                &all,
                nix::sys::socket::MsgFlags::MSG_NOSIGNAL | nix::sys::socket::MsgFlags::MSG_DONTWAIT,
            );
        }
    }
}

impl EventLoop {
    fn run(mut self) {
        let mut events = Vec::new();
        while !self.ctx.stop.load(Ordering::SeqCst) {
            let timeout = self.next_timer().min(TICK);
            events.clear();
            if self.ep.wait(&mut events, Some(timeout)).is_err() {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            for &(token, ev) in &events {
                match token {
                    LISTENER => self.accept(),
                    WAKE => sys::eventfd_clear(self.wake.as_raw_fd()),
                    t if t & FD_TOKEN != 0 => self.fd_ready((t & !FD_TOKEN) as RawFd),
                    id => self.conn_event(id, ev),
                }
            }
            while let Ok(d) = self.done_rx.try_recv() {
                self.done(d);
            }
            self.timers();
            self.schedule();
        }
    }

    /// How long until the next timer (a parked deadline or retry, a stalled request, the end
    /// of an accept back-off).
    fn next_timer(&self) -> Duration {
        let now = Instant::now();
        let mut next: Option<Instant> = self.backoff_until;
        for (_, p) in self.parked.values() {
            for t in [p.deadline, p.retry_at].into_iter().flatten() {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        for c in self.idle.values() {
            if let Some(t) = c.partial_since {
                let t = t + REQUEST_TIMEOUT;
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next.map_or(TICK, |t| t.saturating_duration_since(now))
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.admit(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The client left before it was accepted.
                Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {}
                Err(_) => {
                    // Out of descriptors (EMFILE, ENFILE) or memory, or another failure:
                    // pause the listener rather than retry at once.
                    if self.listening {
                        let _ = self.ep.delete(self.listener.as_raw_fd());
                        self.listening = false;
                    }
                    self.backoff_until = Some(Instant::now() + ACCEPT_BACKOFF);
                    break;
                }
            }
        }
    }

    fn admit(&mut self, stream: UnixStream) {
        let peer = peer_of(&stream, self.ctx.owner_uid);
        let uid_conns = self.conns_by_uid.get(&peer.uid).copied().unwrap_or(0);
        let cap = if peer.privileged {
            (self.conns_total >= CONNS_PER_NODE + PRIVILEGED_HEADROOM).then(|| {
                format!(
                    "too many control connections on this node (cap {})",
                    CONNS_PER_NODE + PRIVILEGED_HEADROOM
                )
            })
        } else if uid_conns >= CONNS_PER_UID {
            Some(format!(
                "too many control connections for uid {} (cap {CONNS_PER_UID} per uid)",
                peer.uid
            ))
        } else if self.conns_unpriv >= CONNS_PER_NODE {
            Some(format!(
                "too many control connections on this node (cap {CONNS_PER_NODE})"
            ))
        } else {
            None
        };
        if let Some(m) = cap {
            self.ctx.refused.fetch_add(1, Ordering::Relaxed);
            refuse(&stream, libc::EAGAIN, m);
            return;
        }
        if stream.set_nonblocking(true).is_err()
            || stream.set_write_timeout(Some(REPLY_TIMEOUT)).is_err()
        {
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        if self.ep.add(stream.as_raw_fd(), id, sys::EPOLLIN).is_err() {
            return;
        }
        *self.conns_by_uid.entry(peer.uid).or_insert(0) += 1;
        self.conns_total += 1;
        if !peer.privileged {
            self.conns_unpriv += 1;
        }
        self.idle.insert(
            id,
            Conn {
                id,
                stream,
                peer,
                buf: Vec::new(),
                fds: Vec::new(),
                partial_since: None,
                socks: HashMap::new(),
                next_sock: 1,
            },
        );
    }

    /// Forgets a connection (already out of the maps and of epoll): its sockets close.
    fn close(&mut self, conn: Conn) {
        let _ = self.ep.delete(conn.stream.as_raw_fd());
        {
            let mut caps = self.ctx.caps();
            for slot in conn.socks.values() {
                if let Slot::Owned(_, cap) = slot {
                    caps.remove(cap);
                }
            }
        }
        if let Some(n) = self.conns_by_uid.get_mut(&conn.peer.uid) {
            *n -= 1;
            if *n == 0 {
                self.conns_by_uid.remove(&conn.peer.uid);
            }
        }
        self.conns_total -= 1;
        if !conn.peer.privileged {
            self.conns_unpriv -= 1;
        }
    }

    fn conn_event(&mut self, id: u64, ev: u32) {
        if let Some((conn, park)) = self.parked.remove(&id) {
            // Parked connections are registered for hangup only.
            if ev & (sys::EPOLLHUP | sys::EPOLLRDHUP | sys::EPOLLERR) != 0 {
                self.unwait(id, &park);
                drop(park);
                self.close(conn);
            } else {
                self.parked.insert(id, (conn, park));
            }
            return;
        }
        let Some(mut conn) = self.idle.remove(&id) else {
            return;
        };
        let mut eof = false;
        let room = MAX_FRAME.saturating_sub(conn.buf.len()).min(READ_CHUNK);
        if room > 0 {
            let scratch = &mut self.scratch[..room];
            match sys::recv_with_fds(conn.stream.as_raw_fd(), scratch, &mut conn.fds) {
                Ok(0) => eof = true,
                Ok(n) => {
                    conn.buf.extend_from_slice(&scratch[..n]);
                    if conn.partial_since.is_none() {
                        conn.partial_since = Some(Instant::now());
                    }
                }
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => eof = true,
            }
            if conn.fds.len() > MAX_PASSED_FDS {
                conn.fds.truncate(MAX_PASSED_FDS);
            }
        }
        if eof {
            self.close(conn);
            return;
        }
        self.after_input(conn);
    }

    /// Dispatches the connection's next complete request, or keeps it idle.
    fn after_input(&mut self, mut conn: Conn) {
        loop {
            match take_frame(&mut conn) {
                Ok(Some((json, data))) => {
                    let req = match serde_json::from_slice::<Request>(&json) {
                        // Socket operations never block here: they run in the event loop.
                        Ok(r) if inline_ok(&r) => {
                            match self.inline(conn, r, data, None, false, true) {
                                Some(c) => {
                                    conn = c;
                                    continue;
                                }
                                None => return,
                            }
                        }
                        other => other,
                    };
                    let _ = self.ep.delete(conn.stream.as_raw_fd());
                    // The capture file's descriptor comes with a TraceStart's bytes; any other
                    // is closed.
                    let file = conn.fds.pop();
                    conn.fds.clear();
                    self.waiting.push_back(Job {
                        conn,
                        work: Work::Frame {
                            req: req.map_err(|e| e.to_string()),
                            data,
                            file,
                        },
                    });
                }
                Ok(None) => {
                    self.idle.insert(conn.id, conn);
                }
                Err((json, data)) => {
                    refuse(
                        &conn.stream,
                        libc::EMSGSIZE,
                        format!("frame too large ({json} + {data} bytes)"),
                    );
                    self.close(conn);
                }
            }
            return;
        }
    }

    /// Runs a socket operation ([`inline_ok`]) in the event loop: it never blocks, it
    /// answers at once or parks. Returns the connection, registered for input, when it was
    /// answered; `None` when it was parked, handed to a worker to finish writing a long
    /// reply, or closed. `registered`: the connection is in epoll for input now.
    fn inline(
        &mut self,
        mut conn: Conn,
        req: Request,
        data: Vec<u8>,
        deadline: Option<Option<Instant>>,
        expired: bool,
        registered: bool,
    ) -> Option<Conn> {
        let action = match deadline {
            None => sock_request(&mut conn, req, &data),
            Some(d) => sock_io(&mut conn, req, data, Some(d), expired),
        };
        let (reply, out) = match action {
            Ok(Action::Park(p)) => {
                if registered {
                    let _ = self.ep.delete(conn.stream.as_raw_fd());
                }
                self.park(conn, p);
                return None;
            }
            Ok(Action::Reply(r, out)) => (r, out),
            Err(f) => (f.into(), Vec::new()),
        };
        let mut frame = Vec::new();
        if send(&mut frame, &reply, &out).is_err() {
            if registered {
                let _ = self.ep.delete(conn.stream.as_raw_fd());
            }
            self.close(conn);
            return None;
        }
        let sent = match nix::sys::socket::send(
            conn.stream.as_raw_fd(),
            &frame,
            nix::sys::socket::MsgFlags::MSG_NOSIGNAL | nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(n) => n,
            Err(nix::errno::Errno::EAGAIN) => 0,
            Err(_) => {
                if registered {
                    let _ = self.ep.delete(conn.stream.as_raw_fd());
                }
                self.close(conn);
                return None;
            }
        };
        if sent < frame.len() {
            // The client's buffer is full: a worker writes the rest (bounded by
            // REPLY_TIMEOUT) and gives the connection back.
            if registered {
                let _ = self.ep.delete(conn.stream.as_raw_fd());
            }
            frame.drain(..sent);
            self.waiting.push_back(Job {
                conn,
                work: Work::Flush(frame),
            });
            return None;
        }
        if !registered
            && self
                .ep
                .add(conn.stream.as_raw_fd(), conn.id, sys::EPOLLIN)
                .is_err()
        {
            self.close(conn);
            return None;
        }
        Some(conn)
    }

    fn done(&mut self, d: Done) {
        let peer = match &d {
            Done::Idle(c) | Done::Park(c, _) | Done::Close(c) => c.peer,
        };
        self.busy_total -= 1;
        if !peer.privileged {
            self.busy_unpriv -= 1;
        }
        if let Some(n) = self.busy_by_uid.get_mut(&peer.uid) {
            *n -= 1;
            if *n == 0 {
                self.busy_by_uid.remove(&peer.uid);
            }
        }
        match d {
            Done::Close(c) => self.close(c),
            Done::Idle(c) => {
                if self
                    .ep
                    .add(c.stream.as_raw_fd(), c.id, sys::EPOLLIN)
                    .is_err()
                {
                    self.close(c);
                    return;
                }
                self.after_input(c);
            }
            Done::Park(c, p) => self.park(c, p),
        }
    }

    fn park(&mut self, conn: Conn, park: Park) {
        if self
            .ep
            .add(conn.stream.as_raw_fd(), conn.id, sys::EPOLLRDHUP)
            .is_err()
        {
            self.close(conn);
            return;
        }
        for &fd in &park.fds {
            let w = self.fd_waiters.entry(fd).or_default();
            if w.is_empty() && self.ep.add(fd, FD_TOKEN | fd as u64, sys::EPOLLIN).is_err() {
                continue;
            }
            w.push(conn.id);
        }
        self.parked.insert(conn.id, (conn, park));
    }

    /// Takes a parked connection off the descriptors it waits on.
    fn unwait(&mut self, id: u64, park: &Park) {
        for fd in &park.fds {
            if let Some(w) = self.fd_waiters.get_mut(fd) {
                w.retain(|&x| x != id);
                if w.is_empty() {
                    self.fd_waiters.remove(fd);
                    let _ = self.ep.delete(*fd);
                }
            }
        }
    }

    fn unpark(&mut self, id: u64, expired: bool) {
        let Some((conn, park)) = self.parked.remove(&id) else {
            return;
        };
        self.unwait(id, &park);
        let _ = self.ep.delete(conn.stream.as_raw_fd());
        let Park {
            req,
            data,
            deadline,
            ..
        } = park;
        if let Some(c) = self.inline(conn, req, data, Some(deadline), expired, false) {
            self.after_input(c);
        }
    }

    fn fd_ready(&mut self, fd: RawFd) {
        let ids = self.fd_waiters.get(&fd).cloned().unwrap_or_default();
        if ids.is_empty() {
            let _ = self.ep.delete(fd);
        }
        for id in ids {
            self.unpark(id, false);
        }
    }

    fn timers(&mut self) {
        let now = Instant::now();
        if self.backoff_until.is_some_and(|t| now >= t) {
            self.backoff_until = None;
            if !self.listening
                && self
                    .ep
                    .add(self.listener.as_raw_fd(), LISTENER, sys::EPOLLIN)
                    .is_ok()
            {
                self.listening = true;
                self.accept();
            }
        }
        let due: Vec<(u64, bool)> = self
            .parked
            .iter()
            .filter_map(|(&id, (_, p))| {
                if p.deadline.is_some_and(|d| now >= d) {
                    Some((id, true))
                } else if p.retry_at.is_some_and(|r| now >= r) {
                    Some((id, false))
                } else {
                    None
                }
            })
            .collect();
        for (id, expired) in due {
            self.unpark(id, expired);
        }
        let stalled: Vec<u64> = self
            .idle
            .iter()
            .filter(|(_, c)| c.partial_since.is_some_and(|t| now >= t + REQUEST_TIMEOUT))
            .map(|(&id, _)| id)
            .collect();
        for id in stalled {
            if let Some(c) = self.idle.remove(&id) {
                self.ctx.stalled.fetch_add(1, Ordering::Relaxed);
                refuse(
                    &c.stream,
                    libc::ETIMEDOUT,
                    format!(
                        "request not completed within {} s; closing the connection",
                        REQUEST_TIMEOUT.as_secs()
                    ),
                );
                self.close(c);
            }
        }
    }

    /// Hands waiting requests to workers as the caps allow, oldest first.
    fn schedule(&mut self) {
        let mut keep = VecDeque::new();
        while let Some(job) = self.waiting.pop_front() {
            let p = job.conn.peer;
            let uid_busy = self.busy_by_uid.get(&p.uid).copied().unwrap_or(0);
            let fits = self.busy_total < WORKERS
                && (p.privileged
                    || (self.busy_unpriv < WORKERS - PRIVILEGED_RESERVE
                        && uid_busy < BUSY_PER_UID));
            if !fits {
                keep.push_back(job);
                continue;
            }
            self.busy_total += 1;
            if !p.privileged {
                self.busy_unpriv += 1;
            }
            *self.busy_by_uid.entry(p.uid).or_insert(0) += 1;
            if self.workers < self.busy_total {
                self.spawn_worker();
            }
            if let Err(mpsc::SendError(job)) = self.job_tx.send(job) {
                // No worker can take it (the pool is gone): drop the connection.
                self.done(Done::Close(job.conn));
            }
        }
        self.waiting = keep;
    }

    fn spawn_worker(&mut self) {
        let rx = self.job_rx.clone();
        let tx = self.done_tx.clone();
        let ctx = self.ctx.clone();
        let wake = self.wake.clone();
        if std::thread::Builder::new()
            .name("rds-ctl-work".into())
            .spawn(move || loop {
                let job = {
                    let g = rx.lock().unwrap_or_else(|p| p.into_inner());
                    g.recv()
                };
                let Ok(job) = job else { break };
                let d = work(&ctx, job);
                if tx.send(d).is_err() {
                    break;
                }
                sys::eventfd_signal(wake.as_raw_fd());
            })
            .is_ok()
        {
            self.workers += 1;
        }
    }
}

/// Whether the event loop runs `req` itself: the socket operations, which never block there
/// (a request that has to wait parks) and cost about as much as handing them to a worker.
fn inline_ok(req: &Request) -> bool {
    matches!(
        req,
        Request::SockSend { .. }
            | Request::SockRecv { .. }
            | Request::SockWait { .. }
            | Request::SockState { .. }
            | Request::SockSet { .. }
            | Request::SockConnect { .. }
            | Request::SockCancel { .. }
    )
}

/// A request's JSON and data parts.
type Frame = (Vec<u8>, Vec<u8>);

/// Takes the first complete frame out of the connection's buffer. `Err((json, data))`: the
/// header claims more than the limits allow.
fn take_frame(conn: &mut Conn) -> Result<Option<Frame>, (usize, usize)> {
    if conn.buf.len() < 8 {
        if conn.buf.is_empty() {
            conn.partial_since = None;
        }
        return Ok(None);
    }
    let json = u32::from_be_bytes([conn.buf[0], conn.buf[1], conn.buf[2], conn.buf[3]]) as usize;
    let data = u32::from_be_bytes([conn.buf[4], conn.buf[5], conn.buf[6], conn.buf[7]]) as usize;
    if json > MAX_JSON || data > MAX_DATA {
        return Err((json, data));
    }
    let total = 8 + json + data;
    if conn.buf.len() < total {
        return Ok(None);
    }
    let j = conn.buf[8..8 + json].to_vec();
    let d = conn.buf[8 + json..total].to_vec();
    conn.buf.drain(..total);
    if conn.buf.is_empty() && conn.buf.capacity() > READ_CHUNK {
        // An idle connection keeps no large buffer.
        conn.buf = Vec::new();
    }
    // The next request's clock starts with its first byte.
    conn.partial_since = (!conn.buf.is_empty()).then(Instant::now);
    Ok(Some((j, d)))
}

fn error(errno: i32, message: impl Into<String>) -> Reply {
    Reply::Error {
        errno,
        message: message.into(),
    }
}

/// Sends a reply; one too large for a frame becomes an `EMSGSIZE` error.
fn send(stream: &mut impl io::Write, reply: &Reply, data: &[u8]) -> io::Result<()> {
    let json = serde_json::to_vec(reply).map_err(io::Error::other)?;
    if json.len() > MAX_JSON || data.len() > MAX_DATA {
        let e = error(
            libc::EMSGSIZE,
            format!(
                "the reply is too large for a control frame ({} + {} bytes)",
                json.len(),
                data.len()
            ),
        );
        let json = serde_json::to_vec(&e).map_err(io::Error::other)?;
        return write_frame(stream, &json, &[]);
    }
    write_frame(stream, &json, data)
}

/// What a request leads to.
enum Action {
    Reply(Reply, Vec<u8>),
    Park(Park),
}

/// Runs one job on a worker.
fn work(ctx: &Ctx, job: Job) -> Done {
    let Job { mut conn, work } = job;
    if conn.stream.set_nonblocking(false).is_err() {
        return Done::Close(conn);
    }
    let next = match work {
        Work::Frame { req, data, file } => frame(ctx, &mut conn, req, &data, file),
        Work::Flush(rest) => {
            use std::io::Write;
            conn.stream
                .write_all(&rest)
                .ok()
                .map(|()| Action::Reply(Reply::Ok, Vec::new()))
        }
    };
    match next {
        None => Done::Close(conn),
        Some(_) if conn.stream.set_nonblocking(true).is_err() => Done::Close(conn),
        Some(Action::Park(p)) => Done::Park(conn, p),
        Some(Action::Reply(..)) => Done::Idle(conn),
    }
}

/// Answers `action`'s reply (or passes a park on); `None` when the connection must close.
fn answer(conn: &mut Conn, action: Action) -> Option<Action> {
    match action {
        Action::Reply(reply, out) => {
            send(&mut conn.stream, &reply, &out).ok()?;
            Some(Action::Reply(Reply::Ok, Vec::new()))
        }
        park => Some(park),
    }
}

fn reply_of(r: Result<Action, Failed>) -> Action {
    r.unwrap_or_else(|f| Action::Reply(f.into(), Vec::new()))
}

fn frame(
    ctx: &Ctx,
    conn: &mut Conn,
    req: Result<Request, String>,
    data: &[u8],
    file: Option<OwnedFd>,
) -> Option<Action> {
    let req: Request = match req {
        Ok(r) => r,
        Err(e) => {
            let r = error(libc::EINVAL, format!("malformed request: {e}"));
            return answer(conn, Action::Reply(r, Vec::new()));
        }
    };
    let Some(node) = ctx.node() else {
        let _ = send(
            &mut conn.stream,
            &error(libc::ENETDOWN, "the node is shutting down"),
            &[],
        );
        return None;
    };
    let privileged = conn.peer.privileged;
    if let Request::TraceStart {
        snaplen,
        peer,
        port,
        output,
    } = req
    {
        if !privileged {
            return answer(conn, Action::Reply(denied(), Vec::new()));
        }
        let output = output.map(|o| (o, file));
        // The session runs on a thread of its own at a lower priority ([`TRACE_NICE`],
        // then `SCHED_IDLE` while it captures; see `trace`).
        let filter = TapFilter { peer, port };
        let stream = &mut conn.stream;
        let go_on = std::thread::scope(|sc| {
            std::thread::Builder::new()
                .name("rds-trace-out".into())
                .spawn_scoped(sc, || {
                    let _ = sys::set_thread_nice(TRACE_NICE);
                    trace(stream, &node, snaplen, filter, output)
                })
                .map(|h| h.join().unwrap_or(false))
                .unwrap_or(false)
        });
        return go_on.then_some(Action::Reply(Reply::Ok, Vec::new()));
    }
    let shutdown = matches!(req, Request::Shutdown) && privileged;
    let action = handle(ctx, &node, conn, req, data);
    drop(node);
    let next = answer(conn, action)?;
    if shutdown {
        if let Some(n) = ctx.node() {
            std::thread::spawn(move || n.shutdown());
        }
    }
    Some(next)
}

fn denied() -> Reply {
    error(
        libc::EPERM,
        "permission denied: this needs root or the node's owner",
    )
}

/// How long the trace loop waits for a full chunk of trace records before it sends what
/// there is (the latency of a live capture at low traffic).
const TRACE_BATCH_WAIT: Duration = Duration::from_millis(20);

// Every batch the tap hands out fits the data part of one control frame.
const _: () = assert!(tap::CHUNK_SIZE <= super::MAX_DATA && tap::MAX_RECORD <= super::MAX_DATA);

/// The nice value of a trace session's threads. The capture yields the CPU to the data path it
/// observes: the session thread, which turns the tap's records into pcap packets, and the
/// capture file's writer run under `SCHED_IDLE` while it captures (only on CPU time the
/// traffic leaves), back at this nice value to write out what was queued once the session
/// stops (when the node may leave `SCHED_IDLE`: root, `CAP_SYS_NICE` or `RLIMIT_NICE` ≥ 10).
/// At full load it drops, and counts, what it cannot keep up with rather than slow the
/// traffic (measured in `cargo bench -p rds-trace --bench capture_overhead`).
pub const TRACE_NICE: i32 = 10;

/// Where a trace session's frames go.
enum TraceSink {
    /// To the client, as [`Reply::TraceFrames`].
    Stream,
    /// Into the capture file the client passed (see [`super::TraceOutput`]).
    File(Box<Capture<CaptureFile>>),
}

/// Moves a capture file's writer thread to or from `SCHED_IDLE` with the session thread
/// (best effort, as for the session thread).
fn set_writer_idle(sink: &TraceSink, idle: bool) {
    if let TraceSink::File(c) = sink {
        if let Some(f) = c.get_ref() {
            let _ = f.set_idle(idle);
        }
    }
}

/// How often a capture file gets its held-back segments and gathered blocks written.
const FILE_FLUSH: Duration = Duration::from_secs(1);

/// The errno of a failed capture write.
fn trace_errno(e: &TraceError) -> i32 {
    e.io_error()
        .and_then(std::io::Error::raw_os_error)
        .unwrap_or(libc::EIO)
}

/// Opens the capture of a session that writes the file: the pcap header goes out now.
fn open_capture(
    node: &Node,
    out: &super::TraceOutput,
    file: Option<OwnedFd>,
) -> Result<Capture<CaptureFile>, Failed> {
    let file = file.ok_or_else(|| {
        Failed(
            libc::EBADF,
            "no capture file descriptor came with the request".into(),
        )
    })?;
    let link = out
        .link
        .unwrap_or_else(|| CaptureLink::default_for(&transports(node)));
    let cf = CaptureFile::new(std::fs::File::from(file)).map_err(|e| failed(&e))?;
    Capture::new(cf, link, out.count, TcpCaptureConfig::default())
        .map_err(|e| Failed(trace_errno(&e), format!("writing the capture: {e}")))
}

/// Runs a trace session until the client stops or leaves, or (writing a file) the count is
/// reached. Frames go to the client or into the file the client passed. Returns whether the
/// connection may continue.
fn trace(
    stream: &mut UnixStream,
    node: &Node,
    snaplen: u32,
    filter: TapFilter,
    output: Option<(super::TraceOutput, Option<OwnedFd>)>,
) -> bool {
    let mut sink = match output {
        None => TraceSink::Stream,
        Some((out, file)) => match open_capture(node, &out, file) {
            Ok(c) => TraceSink::File(Box::new(c)),
            Err(f) => return send(stream, &Reply::from(f), &[]).is_ok(),
        },
    };
    if let Err(e) = node
        .tap()
        .start(snaplen.max(48) as usize, TRACE_QUEUE, filter)
    {
        return send(stream, &error(libc::EBUSY, e.to_string()), &[]).is_ok();
    }
    // The session thread and the file's writer now only take CPU time the traffic leaves.
    let _ = sys::set_thread_idle(true);
    set_writer_idle(&sink, true);
    let started = Reply::TraceStarted {
        transports: transports(node),
        link: match &sink {
            TraceSink::Stream => None,
            TraceSink::File(c) => Some(c.link()),
        },
    };
    if send(stream, &started, &[]).is_err() {
        node.tap().stop();
        return false;
    }
    let mut alive = true;
    let mut write_error: Option<TraceError> = None;
    let mut last_flush = std::time::Instant::now();
    loop {
        // A TraceStop (or the client leaving) ends the session.
        if sys::wait_readable(stream.as_raw_fd(), Duration::ZERO).unwrap_or(false) {
            match read_frame(stream) {
                Ok((json, _)) => {
                    if matches!(serde_json::from_slice(&json), Ok(Request::TraceStop)) {
                        break;
                    }
                }
                Err(_) => {
                    alive = false;
                    break;
                }
            }
        }
        match &mut sink {
            TraceSink::Stream => {
                let Some(batches) = node.tap().take_batches(TRACE_BATCH_WAIT) else {
                    break;
                };
                if send_batches(stream, node, batches).is_err() {
                    alive = false;
                }
            }
            TraceSink::File(c) => {
                let Some(chunks) = node.tap().take_chunks(TRACE_BATCH_WAIT) else {
                    break;
                };
                write_chunks(c, node, chunks, &mut write_error);
                if write_error.is_none() && last_flush.elapsed() >= FILE_FLUSH {
                    last_flush = std::time::Instant::now();
                    write_error = c.flush().err();
                }
                if write_error.is_some() || c.full() {
                    break;
                }
            }
        }
        if !alive || !node.is_running() {
            break;
        }
    }
    let st = node.tap().stop();
    // What is queued is bounded: write it out at the nice value again (best effort).
    let _ = sys::set_thread_idle(false);
    set_writer_idle(&sink, false);
    // Deliver the frames captured before the stop (they are counted as captured), then end;
    // the queue is emptied either way so that the next session starts empty.
    loop {
        let more = match &mut sink {
            TraceSink::Stream => match node.tap().take_batches(Duration::ZERO) {
                Some(batches) if !batches.is_empty() => {
                    if alive && send_batches(stream, node, batches).is_err() {
                        alive = false;
                    }
                    true
                }
                _ => false,
            },
            TraceSink::File(c) => match node.tap().take_chunks(Duration::ZERO) {
                Some(chunks) if !chunks.is_empty() => {
                    write_chunks(c, node, chunks, &mut write_error);
                    true
                }
                _ => false,
            },
        };
        if !more {
            break;
        }
    }
    let written = match sink {
        TraceSink::Stream => None,
        TraceSink::File(c) => match c.finish() {
            Ok((cf, tally)) => match cf.finish() {
                Ok(_) => Some(tally),
                Err(e) => {
                    write_error.get_or_insert(TraceError::Io(e));
                    None
                }
            },
            Err(e) => {
                write_error.get_or_insert(e);
                None
            }
        },
    };
    if alive {
        let reply = match write_error {
            Some(e) => error(trace_errno(&e), format!("writing the capture: {e}")),
            None => Reply::TraceEnd {
                captured: st.captured,
                dropped: st.dropped,
                written,
            },
        };
        alive = send(stream, &reply, &[]).is_ok();
    }
    alive
}

/// Writes each chunk into the capture file, reading the records in place (nothing more after
/// the first write error), and gives the buffers back to the tap.
fn write_chunks(
    c: &mut Capture<CaptureFile>,
    node: &Node,
    chunks: Vec<TapChunk>,
    write_error: &mut Option<TraceError>,
) {
    for chunk in chunks {
        if write_error.is_none() {
            if let Err(e) = c.write_chunk(&chunk) {
                *write_error = Some(e);
            }
        }
        node.tap().recycle_chunk(chunk);
    }
}

/// Sends each batch of trace records unchanged as one [`Reply::TraceFrames`] (one write per
/// batch of up to a chunk), and gives the buffers back to the tap.
fn send_batches(stream: &mut UnixStream, node: &Node, batches: Vec<TapBatch>) -> io::Result<()> {
    let mut res = Ok(());
    for b in batches {
        if res.is_ok() {
            res = send(stream, &Reply::TraceFrames { frames: b.frames }, &b.data);
        }
        node.tap().recycle(b.data);
    }
    res
}

/// A failed request: errno and message (turned into [`Reply::Error`]).
struct Failed(i32, String);

impl From<Failed> for Reply {
    fn from(f: Failed) -> Reply {
        error(f.0, f.1)
    }
}

fn failed(e: &io::Error) -> Failed {
    Failed(e.raw_os_error().unwrap_or(libc::EIO), e.to_string())
}

/// `EBADF` for a token this connection does not have: the same answer whether the token
/// never existed or belongs to another connection.
fn sock(conn: &Conn, token: u64) -> Result<Arc<Socket>, Failed> {
    let s = match conn.socks.get(&token) {
        Some(Slot::Owned(s, _)) => Some(s.clone()),
        Some(Slot::Attached(w)) => w.upgrade(),
        None => None,
    };
    s.ok_or_else(|| Failed(libc::EBADF, format!("no client socket {token}")))
}

fn ready(s: &Socket) -> (bool, bool) {
    (s.readable(), s.writable())
}

/// A fresh capability: 128 bits from the kernel's random source.
fn new_cap() -> Result<u128, Failed> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| failed(&e))?;
    Ok(u128::from_be_bytes(b))
}

/// Whether the process `pid` has `CAP_NET_BIND_SERVICE` in its effective set (false when
/// that cannot be read).
fn can_bind_service(pid: i32) -> bool {
    const CAP_NET_BIND_SERVICE: u32 = 10;
    if pid <= 0 {
        return false;
    }
    let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    st.lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_NET_BIND_SERVICE) != 0)
}

/// The deadline of a request that may block: `None` waits forever (a zero timeout too, as
/// for `SO_RCVTIMEO`).
fn deadline_of(timeout_ms: Option<u64>) -> Option<Instant> {
    timeout_ms
        .filter(|&t| t != 0)
        .and_then(|t| Instant::now().checked_add(Duration::from_millis(t)))
}

fn handle(ctx: &Ctx, node: &Node, conn: &mut Conn, req: Request, data: &[u8]) -> Action {
    let r = |reply| Action::Reply(reply, Vec::new());
    let privileged = conn.peer.privileged;
    let needs_priv = matches!(
        req,
        Request::StatsReset
            | Request::TunableSet { .. }
            | Request::TunableDefault { .. }
            | Request::ConnRestart { .. }
            | Request::ConnKill { .. }
            | Request::Shutdown
    );
    if needs_priv && !privileged {
        return r(denied());
    }
    match req {
        Request::Hello { v } => {
            if v != super::PROTO_VERSION {
                return r(error(
                    libc::EPROTONOSUPPORT,
                    format!(
                        "protocol version {v} not supported (this node speaks {})",
                        super::PROTO_VERSION
                    ),
                ));
            }
            r(Reply::Hello {
                v: super::PROTO_VERSION,
                node: node.name().to_string(),
                version: env!("CARGO_PKG_VERSION").into(),
                rds_protocol: "3.1".into(),
                pid: std::process::id(),
                owner_uid: ctx.owner_uid,
                addrs: node.addrs(),
            })
        }
        Request::Info => r(info(ctx, node, conn.peer)),
        Request::Stats => r(Reply::Stats {
            counters: counters(node),
        }),
        Request::StatsReset => {
            node.reset_stats();
            r(Reply::Ok)
        }
        Request::TunablesGet => {
            let t = node.tunables();
            r(Reply::Tunables {
                values: TUNABLES
                    .iter()
                    .map(|d| (d.name.to_string(), d.get(&t)))
                    .collect(),
            })
        }
        Request::TunableSet { name, value } => {
            let Some(def) = TunableDef::find(&name) else {
                return r(error(libc::ENOENT, format!("unknown tunable '{name}'")));
            };
            let mut t = node.tunables();
            match def.set(&mut t, value) {
                Ok(()) => {
                    node.set_tunables(t);
                    r(Reply::Ok)
                }
                Err(e) => r(error(libc::EINVAL, e.to_string())),
            }
        }
        Request::TunableDefault { name } => {
            let mut t = node.tunables();
            let defaults = crate::tunables::Tunables::default();
            let defs: Vec<&TunableDef> = match &name {
                Some(n) => match TunableDef::find(n) {
                    Some(d) => vec![d],
                    None => return r(error(libc::ENOENT, format!("unknown tunable '{n}'"))),
                },
                None => TUNABLES.iter().collect(),
            };
            if name.is_none() {
                t = defaults;
            } else {
                for d in defs {
                    if let Err(e) = d.set(&mut t, d.default_value()) {
                        return r(error(libc::EINVAL, e.to_string()));
                    }
                }
            }
            node.set_tunables(t);
            r(Reply::Ok)
        }
        Request::ConnRestart { laddr, faddr } => {
            if node.restart_conn(laddr, faddr) {
                r(Reply::Ok)
            } else {
                r(error(
                    libc::ENOENT,
                    format!("no connection {laddr} -> {faddr}"),
                ))
            }
        }
        Request::ConnKill { laddr, faddr } => match node.kill_conn(laddr, faddr) {
            Some(n) => r(Reply::Dropped { messages: n }),
            None => r(error(
                libc::ENOENT,
                format!("no connection {laddr} -> {faddr}"),
            )),
        },
        Request::Shutdown => r(Reply::Ok),
        Request::TraceStart { .. } | Request::TraceStop => {
            r(error(libc::EINVAL, "no trace runs on this connection"))
        }
        Request::SockOpen => reply_of(sock_open(ctx, node, conn)),
        Request::SockClose { sock: token } => match conn.socks.remove(&token) {
            Some(Slot::Owned(_, cap)) => {
                ctx.caps().remove(&cap);
                r(Reply::Ok)
            }
            Some(Slot::Attached(_)) => r(Reply::Ok),
            None => r(error(libc::EBADF, format!("no client socket {token}"))),
        },
        Request::SockCap { sock: token } => match conn.socks.get(&token) {
            Some(Slot::Owned(_, cap)) => r(Reply::SockCap {
                cap: format!("{cap:032x}"),
            }),
            _ => r(error(libc::EBADF, format!("no client socket {token}"))),
        },
        Request::SockAttach { cap } => {
            let found = u128::from_str_radix(&cap, 16)
                .ok()
                .filter(|_| cap.len() == 32)
                .and_then(|c| {
                    ctx.caps()
                        .get(&c)
                        .filter(|e| e.uid == conn.peer.uid)
                        .map(|e| e.sock.clone())
                })
                .filter(|w| w.strong_count() > 0);
            match found {
                Some(w) => {
                    let token = conn.next_sock;
                    conn.next_sock += 1;
                    conn.socks.insert(token, Slot::Attached(w));
                    r(Reply::Sock { sock: token })
                }
                None => r(error(libc::EBADF, "no client socket with this capability")),
            }
        }
        other => reply_of(sock_request(conn, other, data)),
    }
}

fn sock_open(ctx: &Ctx, node: &Node, conn: &mut Conn) -> Result<Action, Failed> {
    let cap = new_cap()?;
    let s = Arc::new(Socket::with_node(node));
    {
        let mut caps = ctx.caps();
        if caps.len() >= SOCKS_PER_NODE {
            return Err(Failed(
                libc::ENFILE,
                format!("too many RDS sockets open through this node (cap {SOCKS_PER_NODE})"),
            ));
        }
        let uid = conn.peer.uid;
        if !conn.peer.privileged && caps.values().filter(|e| e.uid == uid).count() >= SOCKS_PER_UID
        {
            return Err(Failed(
                libc::EMFILE,
                format!(
                    "too many RDS sockets for uid {uid} through this node (cap {SOCKS_PER_UID} \
                     per uid)"
                ),
            ));
        }
        caps.insert(
            cap,
            CapEntry {
                uid,
                sock: Arc::downgrade(&s),
            },
        );
    }
    let token = conn.next_sock;
    conn.next_sock += 1;
    conn.socks.insert(token, Slot::Owned(s, cap));
    Ok(Action::Reply(Reply::Sock { sock: token }, Vec::new()))
}

fn sock_request(conn: &mut Conn, req: Request, data: &[u8]) -> Result<Action, Failed> {
    let ok = |reply| Ok(Action::Reply(reply, Vec::new()));
    match req {
        Request::SockBind {
            sock: t,
            addr,
            transport,
        } => {
            let s = sock(conn, t)?;
            let p = conn.peer;
            if addr.port() != 0 && addr.port() < 1024 && p.uid != 0 && !can_bind_service(p.pid) {
                return Err(Failed(
                    libc::EACCES,
                    format!(
                        "binding RDS port {} (below 1024) needs root or CAP_NET_BIND_SERVICE",
                        addr.port()
                    ),
                ));
            }
            if let Some(k) = transport {
                s.set_transport(k).map_err(|e| failed(&e))?;
            }
            s.bind(addr).map_err(|e| failed(&e))?;
            ok(state(&s))
        }
        Request::SockConnect { sock: t, addr } => {
            let s = sock(conn, t)?;
            s.connect(addr).map_err(|e| failed(&e))?;
            ok(Reply::Ok)
        }
        Request::SockSet { sock: t, opt } => {
            let s = sock(conn, t)?;
            match opt {
                SockOpt::Sndbuf(v) => s.set_send_buffer_size(v),
                SockOpt::Rcvbuf(v) => s.set_recv_buffer_size(v),
                SockOpt::CongMonitor(v) => s.set_cong_monitor(v),
                SockOpt::Recverr(v) => s.set_recverr(v),
                SockOpt::Timestamps(v) => s.set_timestamps(v),
            }
            ok(Reply::Ok)
        }
        Request::SockState { sock: t } => {
            let s = sock(conn, t)?;
            ok(state(&s))
        }
        Request::SockCancel { sock: t, dest } => {
            let s = sock(conn, t)?;
            let n = s.cancel_sent_to(dest).map_err(|e| failed(&e))?;
            ok(Reply::Dropped { messages: n })
        }
        r @ (Request::SockSend { .. } | Request::SockRecv { .. } | Request::SockWait { .. }) => {
            sock_io(conn, r, data.to_vec(), None, false)
        }
        _ => Err(Failed(libc::EINVAL, "unexpected request".into())),
    }
}

/// The requests that may wait: each tries without blocking, and parks its connection when it
/// has to wait. `deadline`: `None` on the first try (taken from the request), else the
/// parked request's. `expired`: the deadline passed, answer now.
fn sock_io(
    conn: &mut Conn,
    req: Request,
    data: Vec<u8>,
    deadline: Option<Option<Instant>>,
    expired: bool,
) -> Result<Action, Failed> {
    let timed_out = || Failed(libc::ETIMEDOUT, "timed out".into());
    match req {
        Request::SockSend {
            sock: t,
            dest,
            dontwait,
            timeout_ms,
        } => {
            let s = sock(conn, t)?;
            match s.send_bytes(Bytes::copy_from_slice(&data), dest, true) {
                Ok(len) => {
                    let (readable, writable) = ready(&s);
                    Ok(Action::Reply(
                        Reply::Sent {
                            len,
                            readable,
                            writable,
                        },
                        Vec::new(),
                    ))
                }
                Err(e)
                    if !dontwait
                        && matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS)) =>
                {
                    if expired {
                        return Err(timed_out());
                    }
                    let deadline = deadline.unwrap_or_else(|| deadline_of(timeout_ms));
                    let req = Request::SockSend {
                        sock: t,
                        dest,
                        dontwait,
                        timeout_ms,
                    };
                    // A full buffer (EAGAIN, not writable) signals room on its descriptor;
                    // congestion (ENOBUFS), or a message larger than the room there is, is
                    // retried on the timer only (its descriptor may stay signalled).
                    let full = e.raw_os_error() == Some(libc::EAGAIN) && !s.writable();
                    let fds = if full {
                        vec![s.send_fd().map_err(|e| failed(&e))?]
                    } else {
                        Vec::new()
                    };
                    Ok(Action::Park(Park {
                        req,
                        data,
                        _sock: s,
                        fds,
                        deadline,
                        retry_at: Some(Instant::now() + SEND_RETRY),
                    }))
                }
                Err(e) => Err(failed(&e)),
            }
        }
        Request::SockRecv {
            sock: t,
            max,
            peek,
            dontwait,
            timeout_ms,
        } => {
            let s = sock(conn, t)?;
            let flags = RecvFlags {
                peek,
                trunc: false,
                dontwait: true,
            };
            let got = match s.recv_bytes(max.min(crate::wire::MAX_MSG_SIZE), flags) {
                Ok(g) => g,
                Err(e) if !dontwait && e.raw_os_error() == Some(libc::EAGAIN) => {
                    if expired {
                        return Err(timed_out());
                    }
                    let deadline = deadline.unwrap_or_else(|| deadline_of(timeout_ms));
                    let fd = s.fd().map_err(|e| failed(&e))?;
                    let req = Request::SockRecv {
                        sock: t,
                        max,
                        peek,
                        dontwait,
                        timeout_ms,
                    };
                    return Ok(Action::Park(Park {
                        req,
                        data,
                        _sock: s,
                        fds: vec![fd],
                        deadline,
                        retry_at: None,
                    }));
                }
                Err(e) => return Err(failed(&e)),
            };
            let (readable, writable) = ready(&s);
            let node = s.node().cloned();
            match got {
                // Daemon sockets cannot start RDMA operations (EOPNOTSUPP), so they never
                // get their notifications.
                Received::RdmaStatus(_) => {
                    Err(failed(&io::Error::from_raw_os_error(libc::EOPNOTSUPP)))
                }
                Received::CongUpdate(mask) => Ok(Action::Reply(
                    Reply::Recv {
                        full_len: 0,
                        from: None,
                        truncated: false,
                        cong_update: Some(mask),
                        rdma_dest: None,
                        ts_ns: None,
                        readable,
                        writable,
                    },
                    Vec::new(),
                )),
                Received::Data {
                    msg,
                    full_len,
                    truncated,
                } => Ok(Action::Reply(
                    Reply::Recv {
                        full_len,
                        from: Some(msg.from),
                        truncated,
                        cong_update: None,
                        rdma_dest: msg.rdma_dest,
                        ts_ns: node.map(|n| n.wall_ns(msg.rx_time)),
                        readable,
                        writable,
                    },
                    msg.payload.to_vec(),
                )),
            }
        }
        Request::SockWait {
            sock: t,
            rx,
            tx,
            timeout_ms,
        } => {
            let s = sock(conn, t)?;
            let (readable, writable) = ready(&s);
            let now_ready = (rx && readable) || (tx && writable);
            let deadline =
                deadline.unwrap_or_else(|| deadline_of(Some(timeout_ms.clamp(1, 60_000))));
            if now_ready || expired || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Action::Reply(
                    Reply::Ready { readable, writable },
                    Vec::new(),
                ));
            }
            let mut fds = Vec::new();
            if rx {
                fds.push(s.fd().map_err(|e| failed(&e))?);
            }
            if tx {
                fds.push(s.send_fd().map_err(|e| failed(&e))?);
            }
            // With neither direction asked, only the timeout ends the wait.
            Ok(Action::Park(Park {
                req: Request::SockWait {
                    sock: t,
                    rx,
                    tx,
                    timeout_ms,
                },
                data,
                _sock: s,
                fds,
                deadline,
                retry_at: None,
            }))
        }
        _ => Err(Failed(libc::EINVAL, "unexpected request".into())),
    }
}

/// The info snapshot for `peer`: everything for root and the owner; for another uid, only the
/// sockets (and their queue entries) its uid opened through this node. The lists are cut so
/// that the reply fits one frame.
fn info(ctx: &Ctx, node: &Node, peer: Peer) -> Reply {
    let mut snap = snapshot(node);
    if !peer.privileged {
        let mine: Vec<SocketAddr> = ctx
            .caps()
            .values()
            .filter(|e| e.uid == peer.uid)
            .filter_map(|e| e.sock.upgrade())
            .filter_map(|s| s.local_addr().ok())
            .collect();
        let has =
            |ip: std::net::IpAddr, port: u16| mine.iter().any(|a| a.ip() == ip && a.port() == port);
        snap.sockets
            .retain(|s| s.bound.is_some_and(|b| has(b.ip(), b.port())));
        for q in [&mut snap.send, &mut snap.retrans, &mut snap.recv] {
            q.retain(|m| has(m.laddr, m.lport));
        }
    }
    fit(snap)
}

/// Cuts the snapshot's lists until its reply fits [`MAX_JSON`].
fn fit(mut snap: InfoSnapshot) -> Reply {
    fn cut<T>(v: &mut Vec<T>, limit: usize, omitted: &mut u64) {
        if v.len() > limit {
            *omitted += (v.len() - limit) as u64;
            v.truncate(limit);
        }
    }
    let mut limit = INFO_LIST_MAX;
    loop {
        let o = &mut snap.omitted;
        cut(&mut snap.connections, limit, &mut o.connections);
        cut(&mut snap.sockets, limit, &mut o.sockets);
        cut(&mut snap.send, limit, &mut o.send);
        cut(&mut snap.retrans, limit, &mut o.retrans);
        cut(&mut snap.recv, limit, &mut o.recv);
        cut(&mut snap.tcp, limit, &mut o.tcp);
        let reply = Reply::Info(Box::new(snap));
        match serde_json::to_vec(&reply) {
            Ok(j) if j.len() <= MAX_JSON => return reply,
            Ok(_) if limit > 0 => {
                let Reply::Info(s) = reply else {
                    return error(libc::EIO, "snapshot lost");
                };
                snap = *s;
                limit /= 4;
            }
            Ok(j) => {
                return error(
                    libc::EMSGSIZE,
                    format!(
                        "the info snapshot does not fit a control frame ({} bytes)",
                        j.len()
                    ),
                )
            }
            Err(e) => return error(libc::EIO, format!("encoding the snapshot: {e}")),
        }
    }
}

fn state(s: &Socket) -> Reply {
    let bound: Option<SocketAddr> = s.local_addr().ok();
    let (readable, writable) = ready(s);
    Reply::SockState {
        bound,
        connected: s.peer_addr().ok(),
        sndbuf: s.send_buffer_size() / 2,
        rcvbuf: s.recv_buffer_size() / 2,
        transport: s.transport(),
        readable,
        writable,
    }
}

fn counters(node: &Node) -> Vec<(String, u64)> {
    node.stats()
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect()
}

/// The transports the node runs ("tcp", "ib").
fn transports(node: &Node) -> Vec<String> {
    [
        (node.tcp_running(), TransportKind::Tcp),
        (node.ib_running(), TransportKind::Ib),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, k)| k.name().to_string())
    .collect()
}

/// The node's state for `rds-info` (every socket and queue entry, uncut).
pub fn snapshot(node: &Node) -> InfoSnapshot {
    InfoSnapshot {
        connections: node.connections(),
        sockets: node.sockets(),
        send: node.send_queue(),
        retrans: node.retrans_queue(),
        recv: node.recv_queue(),
        tcp: node.tcp_sockets(),
        counters: counters(node),
        transports: transports(node),
        ib_unavailable: node.ib_unavailable(),
        ib_qps: node.ib_qps(),
        omitted: Default::default(),
    }
}
