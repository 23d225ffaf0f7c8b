//! The control socket server of a node ([`crate::ctl`] is the protocol it speaks). One
//! event-loop thread accepts connections and reads requests without blocking (epoll, a buffer
//! per connection bounded by the frame limits). It runs the client-socket operations itself
//! (send, receive, readiness wait, state, options: none of them blocks there) and hands every
//! other complete request (hello, info, counters, tunables, open and bind, trace, ...) to a
//! bounded pool of worker threads, one request at a time per connection. An idle connection
//! costs no thread. A request that has to wait (a blocking receive or send, a readiness wait)
//! parks its connection in the event loop until the socket's readiness descriptor fires, a
//! retry is due or its timeout passes. Only a trace session (privileged) holds a worker for
//! its duration.
//!
//! Files: this one holds the server's handle, its limits and the hook for client sockets;
//! `event_loop` the epoll loop, which hands each event to `admission` (accepting connections,
//! peer checks, connection caps), `framing` (reading requests, writing replies), `parking`
//! (requests waiting for their socket), `ring_serving` (shared-memory rings) and `workers` (the
//! pool); `requests` the node's own requests (hello, info, counters, tunables, connections);
//! `trace` trace sessions; `ras` the sampler that fills the node's RAS event ring.
//!
//! Client sockets are not the node's business: a node serves them only when it was started
//! with a [`ClientSockets`] service ([`crate::NodeConfig::client_sockets`]; the daemon's is
//! `crate::socket::host`). The server keeps one [`SockTable`] per control connection and
//! drops it with the connection, which closes the sockets the connection opened.
//!
//! Limits (each refusal is an error reply naming the cap): [`CONNS_PER_UID`] and
//! [`CONNS_PER_NODE`] control connections, [`WORKERS`] workers of which an unprivileged uid
//! may keep [`BUSY_PER_UID`] busy and all unprivileged uids together all but
//! [`PRIVILEGED_RESERVE`], [`REQUEST_TIMEOUT`] for the rest of a request whose first bytes
//! came, [`REPLY_TIMEOUT`] for writing a reply. Root and the node's owner ("privileged") are
//! exempt from the per-uid caps. `accept` failing for want of descriptors pauses the listener
//! for [`ACCEPT_BACKOFF`]. The client-socket service adds its own caps on sockets.
//!
//! See the module documentation of [`crate::ctl`] for the protocol, the ownership of client
//! sockets and the privilege rules.

mod admission;
mod event_loop;
mod framing;
mod introspect;
mod parking;
mod peer;
mod ras;
mod requests;
mod ring_serving;
mod trace;
mod workers;

use std::any::Any;
use std::fmt;
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

use crate::ctl::{self, write_frame, Reply, Request, MAX_DATA, MAX_JSON};
use crate::node::{Inner, Node, Owner};
use crate::sys;

pub use introspect::snapshot;
pub use trace::TRACE_NICE;

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
/// [`MAX_JSON`] (the count left out is in [`crate::ctl::InfoOmitted`]).
pub const INFO_LIST_MAX: usize = 1000;

/// Who is at the other end of a control connection (`SO_PEERCRED`, see `peer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// User id.
    pub uid: u32,
    /// Process id (0 when unknown).
    pub pid: i32,
    /// Root or the node's owner.
    pub privileged: bool,
    /// May bind RDS ports below 1024: uid 0, or `CAP_NET_BIND_SERVICE` in the node's user
    /// namespace when it connected (`peer`).
    pub bind_service: bool,
}

/// What a request leads to.
#[derive(Debug)]
pub enum Action {
    /// Answer with this reply and data part.
    Reply(Reply, Vec<u8>),
    /// Wait: park the connection until the request can go on.
    Park(Park),
    /// Answer with this reply, pass `fds` along with it (`SCM_RIGHTS`), and serve `ring`
    /// from now on, for as long as the connection lives.
    Ring {
        /// The reply.
        reply: Reply,
        /// Descriptors passed with the reply.
        fds: Vec<OwnedFd>,
        /// The ring the event loop serves.
        ring: Box<dyn RingServe>,
    },
}

/// A socket's shared-memory ring (`crate::socket::ring`), served by the event loop: when the
/// client rings [`RingServe::doorbell`], and when a socket readiness descriptor the ring
/// asked to watch fires.
pub trait RingServe: Send + fmt::Debug {
    /// The descriptor the client rings, registered edge-triggered for input: the event loop
    /// never reads or writes it (a client holds the same open file description).
    fn doorbell(&self) -> RawFd;

    /// Runs what the client queued. `Err`: the client broke the ring's rules (its
    /// connection is closed and counted).
    fn serve(&mut self) -> Result<Served, String>;

    /// A descriptor from [`Served::watch`] fired, or the socket became ready as the hook
    /// given to [`RingServe::follow`] told (`rx`: the receive side); what to watch next.
    fn fired(&mut self, rx: bool) -> Vec<Watch>;

    /// Has `ready` called (with `true` for the receive side) each time the ring's socket
    /// becomes ready, instead of asking for descriptors to watch. `false`: the socket
    /// cannot (the ring keeps asking for [`Served::watch`]).
    fn follow(&mut self, ready: Arc<dyn Fn(bool) + Send + Sync>) -> bool;

    /// The client's connection ended: sends it posted (already reported sent) go out, a
    /// bounded number per call; nothing else is answered. Returns whether it is done (else
    /// the event loop calls again on its next turn). The first call is made while the
    /// connection still holds the socket (the ring keeps it open from then until it is done).
    fn finish(&mut self) -> bool;
}

/// What one [`RingServe::serve`] asks of the event loop.
#[derive(Default)]
pub struct Served {
    /// Socket readiness descriptors to watch once each.
    pub watch: Vec<Watch>,
    /// Work is left (served in turns with other connections): serve again soon.
    pub more: bool,
}

/// A readiness descriptor a ring waits on once.
pub struct Watch {
    /// The descriptor.
    pub fd: RawFd,
    /// The receive side (else the send side).
    pub rx: bool,
    /// Keeps `fd` open while watched (the socket).
    pub hold: Box<dyn Any + Send>,
}

/// A request waiting for its socket: the event loop retries it ([`SockTable::resume`]) when
/// one of `fds` becomes readable, at `retry_at`, or (expired) at `deadline`.
pub struct Park {
    /// The request to run again.
    pub req: Request,
    /// Its data part.
    pub data: Vec<u8>,
    /// Kept while parked: whatever keeps the descriptors in `fds` open (the socket).
    pub hold: Box<dyn Any + Send>,
    /// Readiness descriptors that end the wait.
    pub fds: Vec<RawFd>,
    /// When the request gives up (`None`: never).
    pub deadline: Option<Instant>,
    /// When to try again regardless of the descriptors.
    pub retry_at: Option<Instant>,
}

impl fmt::Debug for Park {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Park")
            .field("req", &self.req)
            .field("data", &self.data.len())
            .field("fds", &self.fds)
            .field("deadline", &self.deadline)
            .field("retry_at", &self.retry_at)
            .finish_non_exhaustive()
    }
}

/// Client sockets a node opens on behalf of other processes (the daemon's service,
/// `crate::socket::host`). One service serves one node.
pub trait ClientSockets: Send + Sync + fmt::Debug {
    /// An empty socket table for a new control connection of `peer`. Dropping the table
    /// closes the sockets it opened.
    fn table(&self, peer: Peer) -> Box<dyn SockTable>;

    /// The bound addresses of the sockets `uid` opened through this node (the sockets and
    /// queue entries [`Request::Info`] shows an unprivileged uid).
    fn bound_by(&self, uid: u32) -> Vec<SocketAddr>;
}

/// The client sockets of one control connection.
pub trait SockTable: Send + fmt::Debug {
    /// [`Request::SockOpen`]: a new socket served by `node` (on a worker).
    fn open(&mut self, node: &Node) -> Action;

    /// Any other client-socket request, first try. Requests that may wait (send, receive,
    /// readiness wait) never block: they answer or park.
    fn call(&mut self, req: Request, data: Vec<u8>) -> Action;

    /// A parked request again: its descriptor fired or its retry is due, or (`expired`) its
    /// `deadline` passed and it must answer now.
    fn resume(
        &mut self,
        req: Request,
        data: Vec<u8>,
        deadline: Option<Instant>,
        expired: bool,
    ) -> Action;
}

/// The answer to a client-socket request on a node without a [`ClientSockets`] service:
/// `SockOpen` is not supported, and no token or capability names a socket.
fn no_client_sockets(req: &Request) -> Reply {
    match req {
        Request::SockOpen => Reply::error(
            libc::EOPNOTSUPP,
            "this node serves no client sockets (the host daemon does)",
        ),
        Request::SockAttach { .. } => {
            Reply::error(libc::EBADF, "no client socket with this capability")
        }
        r => match r.sock_token() {
            Some(t) => Reply::error(libc::EBADF, format!("no client socket {t}")),
            None => Reply::error(libc::EINVAL, "unexpected request"),
        },
    }
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
    /// Its client sockets (none on a node without a client-socket service).
    socks: Option<Box<dyn SockTable>>,
}

/// A running control server; stopping it removes the socket file and its lock file.
#[derive(Debug)]
pub struct CtlServer {
    path: PathBuf,
    lock: Option<Flock<File>>,
    ctx: Arc<Ctx>,
    wake: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

/// What the event loop and the workers share.
#[derive(Debug)]
struct Ctx {
    inner: Arc<Inner>,
    owner: Weak<Owner>,
    owner_uid: u32,
    stop: AtomicBool,
    /// The client-socket service, if the node serves client sockets.
    sockets: Option<Arc<dyn ClientSockets>>,
    /// Connections closed because a request stalled half sent.
    stalled: AtomicU64,
    /// Connections refused at a cap.
    refused: AtomicU64,
    /// The RAS event ring (filled by `ras`).
    ras: std::sync::Mutex<crate::ras::Ring>,
    /// Connections closed for a fault in a shared-memory ring.
    ring_faults: AtomicU64,
}

impl Ctx {
    fn node(&self) -> Option<Node> {
        Node::from_parts(self.inner.clone(), self.owner.upgrade()?)
    }
}

impl CtlServer {
    /// Serves `name.sock` in the runtime directory for the node, with client sockets when
    /// `sockets` is given.
    ///
    /// # Errors
    /// The directory is unsafe or cannot be created ([`ctl::ensure_runtime_dir`]), a live
    /// node of that name holds its lock, or the socket cannot be created.
    pub(crate) fn start(
        inner: Arc<Inner>,
        owner: Weak<Owner>,
        name: &str,
        sockets: Option<Arc<dyn ClientSockets>>,
    ) -> io::Result<CtlServer> {
        let dir = ctl::ensure_runtime_dir()?;
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
            sockets,
            stalled: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            ras: Default::default(),
            ring_faults: AtomicU64::new(0),
        });
        ras::spawn(Arc::downgrade(&ctx), name == ctl::DAEMON_NAME)?;
        let wake = Arc::new(sys::eventfd()?);
        let ev = event_loop::EventLoop::new(ctx.clone(), listener, wake.clone())?;
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

    /// Connections closed so far for a fault in one of their shared-memory rings.
    pub fn ring_faults(&self) -> u64 {
        self.ctx.ring_faults.load(Ordering::Relaxed)
    }

    /// Stops serving, closes every connection (and the client sockets they own) and removes
    /// the socket file and the lock file.
    pub fn stop(&mut self) {
        self.ctx.stop.store(true, Ordering::SeqCst);
        sys::eventfd_signal(self.wake.as_raw_fd());
        if let Some(h) = self.thread.take() {
            crate::threads::join_within(h, crate::threads::JOIN_LIMIT);
        }
        if let Some(lock) = self.lock.take() {
            // Removed while still held: a node starting meanwhile finds the file gone (or a
            // new one) and locks again (see `take_lock`).
            let _ = std::fs::remove_file(&self.path);
            let _ = std::fs::remove_file(ctl::lock_path(&self.path));
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
    let lp = ctl::lock_path(path);
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

/// Sends a reply; one too large for a frame becomes an `EMSGSIZE` error.
fn send(stream: &mut impl io::Write, reply: &Reply, data: &[u8]) -> io::Result<()> {
    let json = serde_json::to_vec(reply).map_err(io::Error::other)?;
    if json.len() > MAX_JSON || data.len() > MAX_DATA {
        let e = Reply::error(
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

/// The answer to a privileged request from an unprivileged peer.
fn denied() -> Reply {
    Reply::error(
        libc::EPERM,
        "permission denied: this needs root or the node's owner",
    )
}
