//! The daemon backend of [`super::Socket`]: the socket lives in the daemon's node and every
//! call is a request on the daemon's control socket. Readiness descriptors are eventfds kept
//! up to date from each reply and, while the caller waits, by a watcher thread that asks the
//! daemon (on its own control connection) to report readiness changes. The daemon's socket
//! belongs to the control connection that opened it; a watcher reaches it through the
//! socket's capability ([`Request::SockCap`], [`Request::SockAttach`]).
//!
//! When the daemon offers it ([`Request::SockRing`]), sends and receives go through the
//! socket's shared-memory ring instead ([`RingClient`], [`super::ring`]): the payload is
//! copied into the ring once, nothing is encoded as JSON, the daemon's doorbell is rung only
//! while it sleeps, and the readiness descriptors are the ones the daemon keeps up to date
//! (no watcher threads). The control connection keeps setup and the rare operations. A send
//! to a destination the last waited-for send reached, within the send-buffer room the daemon
//! last reported, is posted without waiting for its result; a receive brings every whole
//! message queued (up to 32) and the client serves the next receives from them; while the
//! client watches its receive side, the daemon pushes messages into the ring as they arrive,
//! so that a receive usually finds its message there without asking. Before an
//! operation on the control connection that must follow the posted sends (options, connect,
//! cancel, close), the client waits until the daemon has taken them all.
//!
//! When the daemon goes away (stopped or crashed), every later call fails with `ECONNRESET`
//! and the first one also says so on stderr, naming the daemon's socket; the watchers end.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::ring::{
    Fault, Rec, RingEnd, F_BATCH, F_CONG, F_MORE, F_PEEK, F_POSTED, F_PUSHED, F_TRUNCATED, F_TS,
    OP_RECV, OP_RESULT, OP_SEND, OP_SYNC, REC_HDR, RING_CAP, SEG_LEN, WANT_RX, WANT_TX,
};
use crate::ctl::client::{CtlClient, CtlError};
use crate::ctl::{NodeEndpoint, Reply, Request, SockOpt};
use crate::info::TransportKind;
use crate::message::{InMsg, Received};
use crate::sys;
use crate::time::Instant;
use crate::wire::MAX_MSG_SIZE;

#[derive(Debug, Default)]
struct Fds {
    rx: Option<(OwnedFd, bool)>,
    tx: Option<(OwnedFd, bool)>,
    watching_rx: bool,
    watching_tx: bool,
}

/// The readiness descriptors and a condition the watcher waits on while nothing is to be
/// watched (both descriptors signalled): a receive or send that clears one wakes it at once.
#[derive(Debug, Default)]
struct FdState {
    fds: Mutex<Fds>,
    cleared: Condvar,
}

impl FdState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Fds> {
        self.fds.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A socket served by the daemon.
#[derive(Debug)]
pub(crate) struct Remote {
    client: Mutex<CtlClient>,
    endpoint: NodeEndpoint,
    token: u64,
    fds: Arc<FdState>,
    stop: Arc<AtomicBool>,
    ring: Option<Box<RingClient>>,
}

/// How long a client that waits for a result spins before it sleeps on its doorbell (only
/// with more than one CPU: on one, spinning only delays the daemon).
const SPIN: Duration = Duration::from_micros(30);
/// Longest single sleep of a ring wait (it then checks again).
const WAIT_CHUNK: Duration = Duration::from_secs(1);
/// How often a blocking send to a congested destination tries again, at most
/// ([`CONG_RETRY_FIRST`] the first time, doubling).
const SEND_RETRY: Duration = Duration::from_millis(10);
const CONG_RETRY_FIRST: Duration = Duration::from_micros(50);

/// What a ring's requests are serialised under.
#[derive(Debug)]
struct RingState {
    end: RingEnd,
    /// The last request's sequence number (one waited-for request at a time).
    seq: u64,
    /// The readiness directions the daemon keeps up to date (`WANT_*`).
    want: u64,
    /// A result came since the daemon keeps the receive descriptor: it can be trusted.
    rx_synced: bool,
    /// Send-buffer room as the last result reported it, less what was posted since.
    room: usize,
    /// The destination (as the caller named it) that the last waited-for send reached:
    /// sends to it may be posted. `None` until one did, and after a failure or a change of
    /// the socket's options.
    post_dest: Option<Option<SocketAddr>>,
    /// Messages the daemon handed (brought by a batched receive or pushed) and no receive
    /// took yet, in the order they left the socket.
    held: VecDeque<(Rec, Vec<u8>)>,
}

impl RingState {
    /// Whether a send of `len` bytes to `dest` may be posted: the destination was reached
    /// before, the send buffer has room for it as last reported, and the ring keeps room
    /// for a waited-for request after it.
    fn may_post(&self, dest: Option<SocketAddr>, len: usize) -> bool {
        self.post_dest == Some(dest)
            && len <= self.room
            && self
                .end
                .room()
                .is_ok_and(|r| r >= 2 * REC_HDR + len + MAX_MSG_SIZE)
    }
}

/// The client's end of a socket's shared-memory ring.
#[derive(Debug)]
struct RingClient {
    state: Mutex<RingState>,
    /// The daemon's doorbell.
    bell: OwnedFd,
    /// This side's result doorbell.
    done: OwnedFd,
    /// Receive and send readiness, kept by the daemon.
    rx: OwnedFd,
    tx: OwnedFd,
    /// The control connection (its hangup means the daemon went away).
    ctl: OwnedFd,
    path: std::path::PathBuf,
    spin: bool,
}

impl RingClient {
    /// Sets up the ring of socket `token`; `None` when the daemon offers none.
    fn setup(client: &mut CtlClient, token: u64) -> Option<RingClient> {
        if std::env::var_os("RDS_NO_RING").is_some() {
            return None;
        }
        let (reply, _, fds) = client.call_fds(&Request::SockRing { sock: token }).ok()?;
        if !matches!(reply, Reply::SockRing { seg_len } if seg_len == SEG_LEN) || fds.len() != 5 {
            return None;
        }
        let mut fds = fds.into_iter();
        let seg = fds.next()?;
        let end = RingEnd::client(sys::Shm::map(seg.as_raw_fd(), SEG_LEN).ok()?)?;
        let ctl = OwnedFd::from(client.stream().try_clone().ok()?);
        Some(RingClient {
            state: Mutex::new(RingState {
                end,
                seq: 0,
                want: 0,
                rx_synced: false,
                room: 0,
                post_dest: None,
                held: VecDeque::new(),
            }),
            bell: fds.next()?,
            done: fds.next()?,
            rx: fds.next()?,
            tx: fds.next()?,
            ctl,
            path: client.path().to_path_buf(),
            spin: std::thread::available_parallelism().is_ok_and(|n| n.get() > 1),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RingState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the receive descriptor, kept by the daemon, says nothing is queued (then a
    /// receive need not ask the daemon).
    fn surely_empty(&self) -> bool {
        self.lock().rx_synced
            && !sys::poll_readable(&[self.rx.as_raw_fd()], Duration::ZERO).is_ok_and(|r| r[0])
    }

    fn gone(&self) -> io::Error {
        io(CtlError::Gone {
            path: self.path.clone(),
        })
    }

    /// Runs one request through the ring and waits for its results (several only for a
    /// batched receive); the last one's send-buffer room becomes the account.
    fn rpc(
        &self,
        st: &mut RingState,
        mut rec: Rec,
        payload: &[u8],
    ) -> io::Result<Vec<(Rec, Vec<u8>)>> {
        let rx_wanted = st.want & WANT_RX != 0;
        let end = &mut st.end;
        st.seq += 1;
        rec.seq = st.seq;
        end.push(rec, payload).map_err(broken)?;
        if end.must_ring() {
            sys::eventfd_signal(self.bell.as_raw_fd());
        }
        let spin_until = self.spin.then(|| std::time::Instant::now() + SPIN);
        let mut got = Vec::new();
        loop {
            match end.pop().map_err(broken)? {
                Some((r, data)) if r.op == OP_RESULT && r.flags & F_PUSHED != 0 => {
                    st.held.push_back((r, data));
                    continue;
                }
                Some((r, data)) if r.op == OP_RESULT && r.seq == st.seq => {
                    let last = r.flags & F_MORE == 0;
                    st.room = r.room as usize;
                    got.push((r, data));
                    if last {
                        st.rx_synced |= rx_wanted;
                        return Ok(got);
                    }
                    continue;
                }
                Some(_) => return Err(broken(Fault("an unexpected result"))),
                None => {}
            }
            if spin_until.is_some_and(|t| std::time::Instant::now() < t) {
                std::hint::spin_loop();
                continue;
            }
            if !end.may_sleep() {
                continue;
            }
            let (_, hup) = sys::wait_readable_or_hangup(
                self.done.as_raw_fd(),
                self.ctl.as_raw_fd(),
                WAIT_CHUNK,
            )?;
            sys::eventfd_clear(self.done.as_raw_fd());
            end.awake();
            if hup && !end.incoming() {
                return Err(self.gone());
            }
        }
    }

    /// Waits until the daemon has taken every posted send (before an operation on the
    /// control connection that must come after them), and forgets the posting destination
    /// when `reset` (the socket's options or destination change).
    fn sync(&self, reset: bool) -> io::Result<()> {
        let mut g = self.lock();
        if reset {
            g.post_dest = None;
        }
        let rec = Rec {
            op: OP_SYNC,
            ..Rec::default()
        };
        self.rpc(&mut g, rec, &[]).map(drop)
    }

    /// The readiness descriptor of one direction, which the daemon keeps up to date from the
    /// first call on.
    fn watch(&self, rx: bool) -> RawFd {
        let mut g = self.lock();
        let bit = if rx { WANT_RX } else { WANT_TX };
        if g.want & bit == 0 {
            g.want |= bit;
            if g.end.want(bit) {
                sys::eventfd_signal(self.bell.as_raw_fd());
            }
        }
        if rx {
            self.rx.as_raw_fd()
        } else {
            self.tx.as_raw_fd()
        }
    }

    /// Waits until one direction is ready (`None`: only for time to pass), `deadline`
    /// passes (`ETIMEDOUT`) or `most` has gone by.
    fn wait(
        &self,
        rx: Option<bool>,
        deadline: Option<std::time::Instant>,
        most: Duration,
    ) -> io::Result<()> {
        // poll(2) skips a negative descriptor.
        let fd = rx.map_or(-1, |rx| self.watch(rx));
        let left = match deadline {
            Some(d) => {
                let now = std::time::Instant::now();
                if now >= d {
                    return Err(crate::errno::err(libc::ETIMEDOUT));
                }
                (d - now).min(most)
            }
            None => most,
        };
        let (_, hup) = sys::wait_readable_or_hangup(fd, self.ctl.as_raw_fd(), left)?;
        if hup {
            return Err(self.gone());
        }
        Ok(())
    }

    fn send(
        &self,
        msg: &[u8],
        dest: Option<SocketAddr>,
        dontwait: bool,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let deadline = deadline_of(timeout);
        let mut backoff = CONG_RETRY_FIRST;
        loop {
            let mut g = self.lock();
            let st = &mut *g;
            if let Some(e) = st.end.take_post_error() {
                st.post_dest = None;
                return Err(io::Error::from_raw_os_error(e));
            }
            if st.end.take_post_stop() {
                st.post_dest = None;
            }
            let rec = Rec {
                op: OP_SEND,
                addr: dest,
                ..Rec::default()
            };
            if st.may_post(dest, msg.len()) {
                let rec = Rec {
                    flags: F_POSTED,
                    ..rec
                };
                let was_empty = st.end.room().map_err(broken)? == RING_CAP;
                st.end.push(rec, msg).map_err(broken)?;
                let ring = st.end.must_ring();
                // A posted send has no result that would tell that the daemon went away:
                // look when it sleeps (it needs waking anyway) or should have nothing to do
                // (it may have died before it said it sleeps).
                if ring || was_empty {
                    let (_, hup) = sys::wait_readable_or_hangup(
                        self.done.as_raw_fd(),
                        self.ctl.as_raw_fd(),
                        Duration::ZERO,
                    )?;
                    if hup {
                        st.post_dest = None;
                        return Err(self.gone());
                    }
                }
                if ring {
                    sys::eventfd_signal(self.bell.as_raw_fd());
                }
                st.room -= msg.len();
                return Ok(msg.len());
            }
            let r = self.rpc(st, rec, msg)?.remove(0).0;
            st.post_dest = (r.a == 0).then_some(dest);
            drop(g);
            match r.a as i32 {
                0 => return Ok(r.c as usize),
                libc::EAGAIN if !dontwait => self.wait(Some(false), deadline, WAIT_CHUNK)?,
                libc::ENOBUFS if !dontwait => {
                    // Congestion is not signalled to the client: retry on a timer, sooner
                    // at first.
                    self.wait(None, deadline, backoff)?;
                    backoff = (backoff * 2).min(SEND_RETRY);
                }
                e => return Err(io::Error::from_raw_os_error(e)),
            }
        }
    }

    /// The next message the daemon handed (pushed, or brought by a batched receive), if any
    /// (`peek` leaves it queued). Taking the last one while the daemon's socket was empty
    /// clears the receive descriptor.
    fn take_held(&self, max: usize, peek: bool) -> io::Result<Option<(Rec, Vec<u8>)>> {
        let mut g = self.lock();
        let st = &mut *g;
        while let Some((r, data)) = st.end.pop().map_err(broken)? {
            if r.op != OP_RESULT || r.flags & F_PUSHED == 0 {
                return Err(broken(Fault("a result without a request")));
            }
            st.held.push_back((r, data));
        }
        let (mut r, mut data) = if peek {
            match st.held.front() {
                Some(item) => item.clone(),
                None => return Ok(None),
            }
        } else {
            let Some(item) = st.held.pop_front() else {
                return Ok(None);
            };
            st.end.taken();
            let more = |e: &RingEnd| e.client_holds() || e.incoming() || e.sock_readable();
            if st.held.is_empty() && st.want & WANT_RX != 0 && !more(&st.end) {
                let fd = self.rx.as_raw_fd();
                sys::eventfd_clear(fd);
                // Handed or queued meanwhile: the daemon signalled before this clear.
                if more(&st.end) {
                    sys::eventfd_signal(fd);
                }
            }
            item
        };
        if data.len() > max {
            data.truncate(max);
            r.flags |= F_TRUNCATED;
        }
        Ok(Some((r, data)))
    }

    fn recv(
        &self,
        max: usize,
        peek: bool,
        dontwait: bool,
        timeout: Option<Duration>,
    ) -> io::Result<(Received, Option<SystemTime>)> {
        let deadline = deadline_of(timeout);
        loop {
            if let Some((r, data)) = self.take_held(max, peek)? {
                return received(r, data);
            }
            if self.surely_empty() {
                if dontwait {
                    return Err(io::Error::from_raw_os_error(libc::EAGAIN));
                }
                self.wait(Some(true), deadline, WAIT_CHUNK)?;
                continue;
            }
            let rec = Rec {
                op: OP_RECV,
                c: max as u64,
                flags: if peek { F_PEEK } else { F_BATCH },
                ..Rec::default()
            };
            let mut g = self.lock();
            if !g.held.is_empty() || g.end.incoming() {
                // Handed meanwhile (to another thread's request, or pushed).
                continue;
            }
            let mut got = self.rpc(&mut g, rec, &[])?;
            let status = got.last().map_or(0, |(r, _)| r.a as i32);
            if status == 0 && !peek {
                // Behind anything pushed while the request ran: the order they left the
                // socket in.
                g.held.extend(got);
                continue;
            }
            if !g.held.is_empty() {
                // Pushed while the request ran: older than a peeked message.
                continue;
            }
            drop(g);
            match status {
                0 => {
                    let (r, data) = got.swap_remove(0);
                    return received(r, data);
                }
                libc::EAGAIN if !dontwait => {
                    self.wait(Some(true), deadline, WAIT_CHUNK)?;
                }
                e => return Err(io::Error::from_raw_os_error(e)),
            }
        }
    }
}

/// A ring the daemon wrote something inconsistent into: `EIO`, as before any ring fault.
fn broken(_: Fault) -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

/// What a receive result record says.
fn received(r: Rec, data: Vec<u8>) -> io::Result<(Received, Option<SystemTime>)> {
    if r.a != 0 {
        return Err(io::Error::from_raw_os_error(r.a as i32));
    }
    if r.flags & F_CONG != 0 {
        return Ok((Received::CongUpdate(r.c), None));
    }
    let from = r
        .addr
        .ok_or_else(|| io::Error::other("receive result without a sender"))?;
    let ts = (r.flags & F_TS != 0).then(|| UNIX_EPOCH + Duration::from_nanos(r.d));
    let full_len = usize::try_from(r.c).unwrap_or(usize::MAX);
    let truncated = r.flags & F_TRUNCATED != 0;
    Ok((data_from(from, data, None, full_len, truncated), ts))
}

/// A message the daemon handed over.
fn data_from(
    from: SocketAddr,
    data: Vec<u8>,
    rdma_dest: Option<u64>,
    full_len: usize,
    truncated: bool,
) -> Received {
    Received::Data {
        msg: InMsg {
            from,
            payload: Bytes::from(data),
            seq: 0,
            rx_time: Instant::ZERO,
            rdma_dest,
        },
        full_len,
        truncated,
    }
}

/// When a blocking call with `timeout` gives up (`None` or zero: never, as for
/// `SO_RCVTIMEO`).
fn deadline_of(timeout: Option<Duration>) -> Option<std::time::Instant> {
    timeout
        .filter(|t| !t.is_zero())
        .and_then(|t| std::time::Instant::now().checked_add(t))
}

/// Whether this process was told that the daemon went away.
static GONE_TOLD: AtomicBool = AtomicBool::new(false);

fn io(e: CtlError) -> io::Error {
    if e.is_gone() {
        // Socket calls carry only an errno: say once what it means.
        if !GONE_TOLD.swap(true, Ordering::Relaxed) {
            eprintln!("rds: {e}");
        }
        return io::Error::from_raw_os_error(libc::ECONNRESET);
    }
    e.into_io()
}

/// [`update`] for one direction only.
fn update_one(st: &FdState, rx: bool, ready: bool) {
    let mut guard = st.lock();
    let slot = if rx { &mut guard.rx } else { &mut guard.tx };
    if let Some((fd, sig)) = slot.as_mut() {
        if ready && !*sig {
            sys::eventfd_signal(fd.as_raw_fd());
            *sig = true;
        } else if !ready && *sig {
            sys::eventfd_clear(fd.as_raw_fd());
            *sig = false;
            st.cleared.notify_all();
        }
    }
}

fn update(st: &FdState, readable: bool, writable: bool) {
    let mut guard = st.lock();
    let f = &mut *guard;
    let mut cleared = false;
    for (slot, want) in [(&mut f.rx, readable), (&mut f.tx, writable)] {
        if let Some((fd, sig)) = slot.as_mut() {
            if want && !*sig {
                sys::eventfd_signal(fd.as_raw_fd());
                *sig = true;
            } else if !want && *sig {
                sys::eventfd_clear(fd.as_raw_fd());
                *sig = false;
                cleared = true;
            }
        }
    }
    if cleared {
        st.cleared.notify_all();
    }
}

impl Remote {
    /// Opens a client socket on the daemon at `endpoint` and binds it.
    pub(crate) fn bind(
        endpoint: &NodeEndpoint,
        addr: SocketAddr,
        transport: Option<TransportKind>,
        opts: &[SockOpt],
        connected: Option<SocketAddr>,
    ) -> io::Result<(Remote, SocketAddr)> {
        let mut client = CtlClient::connect(&endpoint.path).map_err(io)?;
        let token = match client.call(&Request::SockOpen, &[]).map_err(io)?.0 {
            Reply::Sock { sock } => sock,
            other => return Err(io::Error::other(format!("unexpected reply {other:?}"))),
        };
        for &opt in opts {
            client
                .call(&Request::SockSet { sock: token, opt }, &[])
                .map_err(io)?;
        }
        let bound = match client
            .call(
                &Request::SockBind {
                    sock: token,
                    addr,
                    transport,
                },
                &[],
            )
            .map_err(io)?
            .0
        {
            Reply::SockState { bound: Some(b), .. } => b,
            other => return Err(io::Error::other(format!("unexpected reply {other:?}"))),
        };
        if let Some(c) = connected {
            client
                .call(
                    &Request::SockConnect {
                        sock: token,
                        addr: c,
                    },
                    &[],
                )
                .map_err(io)?;
        }
        let ring = RingClient::setup(&mut client, token).map(Box::new);
        Ok((
            Remote {
                ring,
                client: Mutex::new(client),
                endpoint: endpoint.clone(),
                token,
                fds: Arc::new(FdState::default()),
                stop: Arc::new(AtomicBool::new(false)),
            },
            bound,
        ))
    }

    /// Whether sends and receives go through the shared-memory ring.
    pub(crate) fn has_ring(&self) -> bool {
        self.ring.is_some()
    }

    fn call(&self, req: &Request, data: &[u8]) -> io::Result<(Reply, Vec<u8>)> {
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .call(req, data)
            .map_err(io)
    }

    fn state(&self) -> io::Result<Reply> {
        Ok(self.call(&Request::SockState { sock: self.token }, &[])?.0)
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        match self.state()? {
            Reply::SockState { bound: Some(b), .. } => Ok(b),
            _ => Err(crate::errno::err(libc::ENOTCONN)),
        }
    }

    pub(crate) fn peer_addr(&self) -> io::Result<SocketAddr> {
        match self.state()? {
            Reply::SockState {
                connected: Some(c), ..
            } => Ok(c),
            _ => Err(crate::errno::err(libc::ENOTCONN)),
        }
    }

    pub(crate) fn bufs(&self) -> (usize, usize) {
        match self.state() {
            Ok(Reply::SockState { sndbuf, rcvbuf, .. }) => (sndbuf, rcvbuf),
            _ => (0, 0),
        }
    }

    pub(crate) fn transport(&self) -> Option<TransportKind> {
        match self.state() {
            Ok(Reply::SockState { transport, .. }) => transport,
            _ => None,
        }
    }

    pub(crate) fn readiness(&self) -> (bool, bool) {
        // Messages the daemon handed are readable here, whatever the socket says.
        let held = self.ring.as_ref().is_some_and(|r| {
            let g = r.lock();
            !g.held.is_empty() || g.end.incoming()
        });
        match self.state() {
            Ok(Reply::SockState {
                readable, writable, ..
            }) => (readable || held, writable),
            _ => (held, false),
        }
    }

    /// Before a call on the control connection that must follow every posted send.
    fn sync_ring(&self, reset: bool) -> io::Result<()> {
        self.ring.as_ref().map_or(Ok(()), |r| r.sync(reset))
    }

    pub(crate) fn connect(&self, addr: SocketAddr) -> io::Result<()> {
        self.sync_ring(true)?;
        self.call(
            &Request::SockConnect {
                sock: self.token,
                addr,
            },
            &[],
        )
        .map(drop)
    }

    pub(crate) fn set(&self, opt: SockOpt) -> io::Result<()> {
        self.sync_ring(true)?;
        self.call(
            &Request::SockSet {
                sock: self.token,
                opt,
            },
            &[],
        )
        .map(drop)
    }

    pub(crate) fn send(
        &self,
        msg: &Bytes,
        dest: Option<SocketAddr>,
        dontwait: bool,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        if let Some(r) = &self.ring {
            return r.send(msg, dest, dontwait, timeout);
        }
        let (reply, _) = self.call(
            &Request::SockSend {
                sock: self.token,
                dest,
                dontwait,
                timeout_ms: timeout.map(|t| t.as_millis() as u64),
            },
            msg,
        )?;
        match reply {
            Reply::Sent {
                len,
                readable,
                writable,
            } => {
                update(&self.fds, readable, writable);
                Ok(len)
            }
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    pub(crate) fn recv(
        &self,
        max: usize,
        peek: bool,
        dontwait: bool,
        timeout: Option<Duration>,
    ) -> io::Result<(Received, Option<SystemTime>)> {
        if let Some(r) = &self.ring {
            return r.recv(max, peek, dontwait, timeout);
        }
        let r = self.call(
            &Request::SockRecv {
                sock: self.token,
                max,
                peek,
                dontwait,
                timeout_ms: timeout.map(|t| t.as_millis() as u64),
            },
            &[],
        );
        let (reply, data) = match r {
            Ok(v) => v,
            Err(e) => {
                if e.raw_os_error() == Some(libc::EAGAIN) {
                    update(&self.fds, false, true);
                }
                return Err(e);
            }
        };
        match reply {
            Reply::Recv {
                full_len,
                from,
                truncated,
                cong_update,
                rdma_dest,
                ts_ns,
                readable,
                writable,
            } => {
                update(&self.fds, readable, writable);
                let ts = ts_ns.map(|n| UNIX_EPOCH + Duration::from_nanos(n));
                Ok(match (cong_update, from) {
                    (Some(mask), _) => (Received::CongUpdate(mask), None),
                    (None, Some(from)) => {
                        (data_from(from, data, rdma_dest, full_len, truncated), ts)
                    }
                    (None, None) => return Err(io::Error::other("receive reply without a sender")),
                })
            }
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    pub(crate) fn cancel(&self, dest: SocketAddr) -> io::Result<usize> {
        self.sync_ring(false)?;
        match self
            .call(
                &Request::SockCancel {
                    sock: self.token,
                    dest,
                },
                &[],
            )?
            .0
        {
            Reply::Dropped { messages } => Ok(messages),
            other => Err(io::Error::other(format!("unexpected reply {other:?}"))),
        }
    }

    /// A readiness descriptor (POLLIN when `rx`, POLLOUT otherwise).
    pub(crate) fn fd(&self, rx: bool) -> io::Result<RawFd> {
        if let Some(r) = &self.ring {
            return Ok(r.watch(rx));
        }
        let fd = {
            let mut f = self.fds.lock();
            let slot = if rx { &mut f.rx } else { &mut f.tx };
            if slot.is_none() {
                *slot = Some((sys::eventfd()?, false));
            }
            let fd = slot.as_ref().map(|(f, _)| f.as_raw_fd()).expect("just set");
            let watching = if rx {
                &mut f.watching_rx
            } else {
                &mut f.watching_tx
            };
            if !*watching {
                *watching = true;
                self.start_watcher(rx)?;
            }
            fd
        };
        let (r, w) = self.readiness();
        update(&self.fds, r, w);
        Ok(fd)
    }

    /// Starts the thread that keeps one readiness descriptor (`rx`: POLLIN, else POLLOUT)
    /// signalled: while it is clear, it waits on the daemon for the socket to become ready;
    /// while it is signalled, it waits for the application to clear it (a receive or send
    /// that found nothing to do). One thread per direction, so that clearing one never waits
    /// behind a wait for the other.
    fn start_watcher(&self, rx: bool) -> io::Result<()> {
        let cap = match self.call(&Request::SockCap { sock: self.token }, &[])?.0 {
            Reply::SockCap { cap } => cap,
            other => return Err(io::Error::other(format!("unexpected reply {other:?}"))),
        };
        let mut client = CtlClient::connect(&self.endpoint.path).map_err(io)?;
        let token = match client
            .call(&Request::SockAttach { cap }, &[])
            .map_err(io)?
            .0
        {
            Reply::Sock { sock } => sock,
            other => return Err(io::Error::other(format!("unexpected reply {other:?}"))),
        };
        let fds = self.fds.clone();
        let stop = self.stop.clone();
        let signalled = move |f: &Fds| {
            let slot = if rx { &f.rx } else { &f.tx };
            slot.as_ref().is_some_and(|x| x.1)
        };
        std::thread::Builder::new()
            .name("rds-sock-watch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    {
                        // Signalled: wait until the application clears it (bounded, to
                        // notice a stop).
                        let g = fds.lock();
                        let (g, _) = fds
                            .cleared
                            .wait_timeout_while(g, Duration::from_millis(200), |f| {
                                !stop.load(Ordering::Relaxed) && signalled(f)
                            })
                            .unwrap_or_else(|p| p.into_inner());
                        if signalled(&g) {
                            continue;
                        }
                    }
                    let req = Request::SockWait {
                        sock: token,
                        rx,
                        tx: !rx,
                        timeout_ms: 200,
                    };
                    match client.call(&req, &[]) {
                        Ok((Reply::Ready { readable, writable }, _)) => {
                            update_one(&fds, rx, if rx { readable } else { writable });
                        }
                        _ => break,
                    }
                }
            })?;
        Ok(())
    }

    pub(crate) fn close(&self) {
        self.stop.store(true, Ordering::Relaxed);
        // Posted sends are the application's sent messages: the daemon takes them first.
        let _ = self.sync_ring(false);
        let _ = self.call(&Request::SockClose { sock: self.token }, &[]);
    }
}
