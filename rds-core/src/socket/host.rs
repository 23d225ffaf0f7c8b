//! The daemon's client-socket service: sockets the host daemon's node opens on behalf of
//! other processes (the daemon backend of [`crate::Socket`], `socket::remote`, is its client).
//! The daemon installs it at node start ([`crate::NodeConfig::client_sockets`], [`service`]);
//! the control server ([`crate::node::admin`]) hands it the `Sock*` requests of each control
//! connection.
//!
//! Security model: a socket belongs to the control connection that opened it, like a file
//! descriptor: its token means nothing on another connection (`EBADF`, as for a token never
//! issued) and it closes when that connection ends. A readiness watcher of the same uid
//! reaches it through a 128-bit capability ([`Request::SockCap`], [`Request::SockAttach`]).
//! Binding a port below 1024 needs uid 0 or `CAP_NET_BIND_SERVICE`. Caps: [`SOCKS_PER_UID`]
//! sockets per unprivileged uid, [`SOCKS_PER_NODE`] in all; [`RINGS_PER_UID`] and
//! [`RINGS_PER_NODE`] shared-memory rings (a socket without one uses the control socket);
//! [`ATTACHED_PER_CONN`] attached sockets per connection.
//!
//! Operations that may wait (send, receive, readiness wait) never block the caller: they
//! answer at once or park the request on the socket's readiness descriptors
//! ([`Action::Park`]). The connection that opened a socket may move its sends and receives to
//! a shared-memory ring ([`Request::SockRing`], `socket::ring::host`), which ends with it.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::{RecvFlags, Socket};
use crate::ctl::{Failed, Reply, Request, SockOpt};
use crate::message::Received;
use crate::node::admin::{Action, ClientSockets, Park, Peer, SockTable};
use crate::node::Node;

/// Client sockets one unprivileged uid may have open through a node.
pub const SOCKS_PER_UID: usize = 256;
/// Client sockets all uids together may have open through a node.
pub const SOCKS_PER_NODE: usize = 4096;
/// Shared-memory rings ([`Request::SockRing`], about 2 MiB each) one unprivileged uid may
/// have; its further sockets use the control socket.
pub const RINGS_PER_UID: usize = 64;
/// Shared-memory rings all uids together may have.
pub const RINGS_PER_NODE: usize = 512;
/// Sockets one control connection may reach through capabilities ([`Request::SockAttach`]; a
/// daemon client uses one per readiness watcher connection).
pub const ATTACHED_PER_CONN: usize = 64;
/// How often a blocking send that found no room (or a congested destination) tries again,
/// besides when its socket's send buffer signals room.
const SEND_RETRY: Duration = Duration::from_millis(10);

/// A client socket opened through the node, registered under its capability.
#[derive(Debug)]
struct CapEntry {
    uid: u32,
    sock: Weak<Socket>,
}

/// Every client socket open through the node, by capability.
type Caps = Arc<Mutex<HashMap<u128, CapEntry>>>;

fn lock(caps: &Caps) -> MutexGuard<'_, HashMap<u128, CapEntry>> {
    caps.lock().unwrap_or_else(|p| p.into_inner())
}

/// Rings open, by uid.
type RingCount = Arc<Mutex<HashMap<u32, usize>>>;

/// The client-socket service of one node.
#[derive(Debug, Default)]
pub struct SocketHost {
    caps: Caps,
    rings: RingCount,
}

impl SocketHost {
    /// A service with no sockets yet.
    pub fn new() -> SocketHost {
        SocketHost::default()
    }
}

/// A fresh service for one node, as [`crate::NodeConfig::client_sockets`] takes it.
pub fn service() -> Arc<dyn ClientSockets> {
    Arc::new(SocketHost::new())
}

impl ClientSockets for SocketHost {
    fn table(&self, peer: Peer) -> Box<dyn SockTable> {
        Box::new(Table {
            peer,
            caps: self.caps.clone(),
            socks: HashMap::new(),
            next_sock: 1,
            attached: 0,
            rings: HashSet::new(),
            ring_count: self.rings.clone(),
        })
    }

    fn bound_by(&self, uid: u32) -> Vec<SocketAddr> {
        lock(&self.caps)
            .values()
            .filter(|e| e.uid == uid)
            .filter_map(|e| e.sock.upgrade())
            .filter_map(|s| s.local_addr().ok())
            .collect()
    }
}

/// A socket in a connection's table: opened here (closed with the connection), or reached
/// through a capability (the opener's connection keeps it alive).
#[derive(Debug)]
enum Slot {
    Owned(Arc<Socket>, u128),
    Attached(Weak<Socket>),
}

/// The client sockets of one control connection.
#[derive(Debug)]
struct Table {
    peer: Peer,
    caps: Caps,
    socks: HashMap<u64, Slot>,
    next_sock: u64,
    /// Entries of `socks` reached through a capability.
    attached: usize,
    /// Sockets with a shared-memory ring.
    rings: HashSet<u64>,
    ring_count: RingCount,
}

impl Drop for Table {
    fn drop(&mut self) {
        if !self.rings.is_empty() {
            let mut rc = self.ring_count.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = rc.get_mut(&self.peer.uid) {
                *n = n.saturating_sub(self.rings.len());
                if *n == 0 {
                    rc.remove(&self.peer.uid);
                }
            }
        }
        let mut caps = lock(&self.caps);
        for slot in self.socks.values() {
            if let Slot::Owned(_, cap) = slot {
                caps.remove(cap);
            }
        }
    }
}

/// A reply without a data part.
fn reply(r: Reply) -> Action {
    Action::Reply(r, Vec::new())
}

fn answer(r: Result<Action, Failed>) -> Action {
    r.unwrap_or_else(|f| reply(f.into()))
}

impl SockTable for Table {
    fn open(&mut self, node: &Node) -> Action {
        answer(self.sock_open(node))
    }

    fn call(&mut self, req: Request, data: Vec<u8>) -> Action {
        match req {
            Request::SockClose { sock: token } => match self.socks.remove(&token) {
                Some(Slot::Owned(_, cap)) => {
                    lock(&self.caps).remove(&cap);
                    reply(Reply::Ok)
                }
                Some(Slot::Attached(_)) => {
                    self.attached -= 1;
                    reply(Reply::Ok)
                }
                None => reply(Reply::error(
                    libc::EBADF,
                    format!("no client socket {token}"),
                )),
            },
            Request::SockCap { sock: token } => match self.socks.get(&token) {
                Some(Slot::Owned(_, cap)) => reply(Reply::SockCap {
                    cap: format!("{cap:032x}"),
                }),
                _ => reply(Reply::error(
                    libc::EBADF,
                    format!("no client socket {token}"),
                )),
            },
            Request::SockAttach { cap } => self.attach(&cap),
            Request::SockRing { sock: token } => match self.socks.get(&token) {
                // Only the connection that opened the socket sets up its ring, once.
                Some(Slot::Owned(s, _)) if !self.rings.contains(&token) => {
                    let s = s.clone();
                    let mut rc = self.ring_count.lock().unwrap_or_else(|p| p.into_inner());
                    let uid = self.peer.uid;
                    let mine = rc.get(&uid).copied().unwrap_or(0);
                    if rc.values().sum::<usize>() >= RINGS_PER_NODE
                        || (!self.peer.privileged && mine >= RINGS_PER_UID)
                    {
                        return reply(Reply::error(
                            libc::EMFILE,
                            format!(
                                "too many shared-memory rings (cap {RINGS_PER_UID} per uid, \
                                 {RINGS_PER_NODE} per node)"
                            ),
                        ));
                    }
                    let a = answer(super::ring::host::start(&s));
                    if matches!(a, Action::Ring { .. }) {
                        self.rings.insert(token);
                        *rc.entry(uid).or_insert(0) += 1;
                    }
                    a
                }
                Some(Slot::Owned(..)) => reply(Reply::error(
                    libc::EBUSY,
                    format!("client socket {token} already has a ring"),
                )),
                _ => reply(Reply::error(
                    libc::EBADF,
                    format!("no client socket {token}"),
                )),
            },
            other => answer(self.sock_request(other, data)),
        }
    }

    fn resume(
        &mut self,
        req: Request,
        data: Vec<u8>,
        deadline: Option<Instant>,
        expired: bool,
    ) -> Action {
        answer(self.sock_io(req, data, Some(deadline), expired))
    }
}

impl Table {
    /// `EBADF` for a token this connection does not have: the same answer whether the token
    /// never existed or belongs to another connection.
    fn sock(&self, token: u64) -> Result<Arc<Socket>, Failed> {
        let s = match self.socks.get(&token) {
            Some(Slot::Owned(s, _)) => Some(s.clone()),
            Some(Slot::Attached(w)) => w.upgrade(),
            None => None,
        };
        s.ok_or_else(|| Failed(libc::EBADF, format!("no client socket {token}")))
    }

    /// Reaches a socket of another connection of the same uid through its capability.
    fn attach(&mut self, cap: &str) -> Action {
        if self.attached >= ATTACHED_PER_CONN {
            return reply(Reply::error(
                libc::EMFILE,
                format!("too many attached sockets on this connection (cap {ATTACHED_PER_CONN})"),
            ));
        }
        let found = u128::from_str_radix(cap, 16)
            .ok()
            .filter(|_| cap.len() == 32)
            .and_then(|c| {
                lock(&self.caps)
                    .get(&c)
                    .filter(|e| e.uid == self.peer.uid)
                    .map(|e| e.sock.clone())
            })
            .filter(|w| w.strong_count() > 0);
        match found {
            Some(w) => {
                let token = self.next_sock;
                self.next_sock += 1;
                self.socks.insert(token, Slot::Attached(w));
                self.attached += 1;
                reply(Reply::Sock { sock: token })
            }
            None => reply(Reply::error(
                libc::EBADF,
                "no client socket with this capability",
            )),
        }
    }

    fn sock_open(&mut self, node: &Node) -> Result<Action, Failed> {
        let cap = new_cap()?;
        let s = Arc::new(Socket::with_node_for(node, self.peer.uid));
        {
            let mut caps = lock(&self.caps);
            if caps.len() >= SOCKS_PER_NODE {
                return Err(Failed(
                    libc::ENFILE,
                    format!("too many RDS sockets open through this node (cap {SOCKS_PER_NODE})"),
                ));
            }
            let uid = self.peer.uid;
            if !self.peer.privileged
                && caps.values().filter(|e| e.uid == uid).count() >= SOCKS_PER_UID
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
        let token = self.next_sock;
        self.next_sock += 1;
        self.socks.insert(token, Slot::Owned(s, cap));
        Ok(Action::Reply(Reply::Sock { sock: token }, Vec::new()))
    }

    fn sock_request(&mut self, req: Request, data: Vec<u8>) -> Result<Action, Failed> {
        let ok = |reply| Ok(Action::Reply(reply, Vec::new()));
        match req {
            Request::SockBind {
                sock: t,
                addr,
                transport,
            } => {
                let s = self.sock(t)?;
                let p = self.peer;
                if addr.port() != 0 && addr.port() < 1024 && !p.bind_service {
                    return Err(Failed(
                        libc::EACCES,
                        format!(
                            "binding RDS port {} (below 1024) needs root or CAP_NET_BIND_SERVICE",
                            addr.port()
                        ),
                    ));
                }
                if let Some(k) = transport {
                    s.set_transport(k).map_err(|e| Failed::io(&e))?;
                }
                s.bind(addr).map_err(|e| Failed::io(&e))?;
                ok(state(&s))
            }
            Request::SockConnect { sock: t, addr } => {
                let s = self.sock(t)?;
                s.connect(addr).map_err(|e| Failed::io(&e))?;
                ok(Reply::Ok)
            }
            Request::SockSet { sock: t, opt } => {
                let s = self.sock(t)?;
                // Other users get the kernel's caps for SO_SNDBUF/SO_RCVBUF (root may go
                // further, as with SO_SNDBUFFORCE).
                let unpriv = !self.peer.privileged;
                match opt {
                    SockOpt::Sndbuf(v) if unpriv => s.set_send_buffer_size(v.min(wmem_max())),
                    SockOpt::Rcvbuf(v) if unpriv => s.set_recv_buffer_size(v.min(rmem_max())),
                    SockOpt::Sndbuf(v) => s.set_send_buffer_size(v),
                    SockOpt::Rcvbuf(v) => s.set_recv_buffer_size(v),
                    SockOpt::CongMonitor(v) => s.set_cong_monitor(v),
                    SockOpt::Recverr(v) => s.set_recverr(v),
                    SockOpt::Timestamps(v) => s.set_timestamps(v),
                }
                ok(Reply::Ok)
            }
            Request::SockState { sock: t } => {
                let s = self.sock(t)?;
                ok(state(&s))
            }
            Request::SockCancel { sock: t, dest } => {
                let s = self.sock(t)?;
                let n = s.cancel_sent_to(dest).map_err(|e| Failed::io(&e))?;
                ok(Reply::Dropped { messages: n })
            }
            r
            @ (Request::SockSend { .. } | Request::SockRecv { .. } | Request::SockWait { .. }) => {
                self.sock_io(r, data, None, false)
            }
            _ => Err(Failed(libc::EINVAL, "unexpected request".into())),
        }
    }

    /// The requests that may wait: each tries without blocking, and parks its connection when it
    /// has to wait. `deadline`: `None` on the first try (taken from the request), else the
    /// parked request's. `expired`: the deadline passed, answer now.
    fn sock_io(
        &mut self,
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
                let s = self.sock(t)?;
                match s.send_bytes(crate::buf::copy(&data), dest, true) {
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
                            vec![s.send_fd().map_err(|e| Failed::io(&e))?]
                        } else {
                            Vec::new()
                        };
                        Ok(Action::Park(Park {
                            req,
                            data,
                            hold: Box::new(s),
                            fds,
                            deadline,
                            retry_at: Some(Instant::now() + SEND_RETRY),
                        }))
                    }
                    Err(e) => Err(Failed::io(&e)),
                }
            }
            Request::SockRecv {
                sock: t,
                max,
                peek,
                dontwait,
                timeout_ms,
            } => {
                let s = self.sock(t)?;
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
                        let fd = s.fd().map_err(|e| Failed::io(&e))?;
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
                            hold: Box::new(s),
                            fds: vec![fd],
                            deadline,
                            retry_at: None,
                        }));
                    }
                    Err(e) => return Err(Failed::io(&e)),
                };
                let (readable, writable) = ready(&s);
                let node = s.node().cloned();
                match got {
                    // Daemon sockets cannot start RDMA operations (EOPNOTSUPP), so they never
                    // get their notifications.
                    Received::RdmaStatus(_) => {
                        Err(Failed::io(&io::Error::from_raw_os_error(libc::EOPNOTSUPP)))
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
                let s = self.sock(t)?;
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
                    fds.push(s.fd().map_err(|e| Failed::io(&e))?);
                }
                if tx {
                    fds.push(s.send_fd().map_err(|e| Failed::io(&e))?);
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
                    hold: Box::new(s),
                    fds,
                    deadline,
                    retry_at: None,
                }))
            }
            _ => Err(Failed(libc::EINVAL, "unexpected request".into())),
        }
    }
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
        .map_err(|e| Failed::io(&e))?;
    Ok(u128::from_be_bytes(b))
}

/// The kernel's caps for unprivileged socket buffers (`net.core.wmem_max`, `rmem_max`), read
/// from the host; 212992 (the kernel's default) when they cannot be read.
fn wmem_max() -> usize {
    core_sysctl("wmem_max")
}

fn rmem_max() -> usize {
    core_sysctl("rmem_max")
}

fn core_sysctl(name: &str) -> usize {
    std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(212_992)
}

/// The deadline of a request that may block: `None` waits forever (a zero timeout too, as
/// for `SO_RCVTIMEO`).
fn deadline_of(timeout_ms: Option<u64>) -> Option<Instant> {
    timeout_ms
        .filter(|&t| t != 0)
        .and_then(|t| Instant::now().checked_add(Duration::from_millis(t)))
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
