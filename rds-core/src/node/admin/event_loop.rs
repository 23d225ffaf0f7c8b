//! The control server's event loop: one thread accepts connections, reads requests without
//! blocking, runs client-socket operations in place (they answer or park), parks connections
//! whose request waits for its socket, and hands the other requests to a bounded pool of
//! worker threads, within the connection and worker caps of [`super`].

use std::any::Any;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{
    no_client_sockets, requests, send, Action, Conn, Ctx, Park, RingServe, Watch, ACCEPT_BACKOFF,
    BUSY_PER_UID, CONNS_PER_NODE, CONNS_PER_UID, PRIVILEGED_HEADROOM, PRIVILEGED_RESERVE,
    REPLY_TIMEOUT, REQUEST_TIMEOUT, WORKERS,
};
use crate::ctl::frame::FrameHeader;
use crate::ctl::{write_frame, Reply, Request, MAX_DATA, MAX_JSON};
use crate::sys;

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
/// Epoll tokens of shared-memory rings: a ring's doorbell (`RING_TOKEN | ring id`) and a
/// socket readiness descriptor a ring watches (`WATCH_TOKEN | fd`).
const RING_TOKEN: u64 = 1 << 61;
const WATCH_TOKEN: u64 = 1 << 60;

/// A shared-memory ring of a connection's socket.
#[derive(Debug)]
struct RingEntry {
    /// The connection that set it up (it ends with it).
    owner: u64,
    ring: Box<dyn RingServe>,
}

/// A readiness descriptor a ring watches once.
struct Watched {
    ring: u64,
    rx: bool,
    _hold: Box<dyn Any + Send>,
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

/// The event loop's state (owned by its thread).
pub(super) struct EventLoop {
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
    /// Shared-memory rings, by id.
    rings: HashMap<u64, RingEntry>,
    /// Readiness descriptors rings watch.
    watched: HashMap<RawFd, Watched>,
    /// Connections to close as soon as a worker gives them back (a ring of theirs faulted).
    doomed: HashSet<u64>,
    next_ring: u64,
    /// Rings with work left from their last turn: served again before the loop sleeps.
    again: Vec<u64>,
    /// Rings of closed connections still running the sends their clients posted.
    closing: Vec<Box<dyn RingServe>>,
}

/// Writes an error frame without blocking (best effort: the connection is being dropped).
fn refuse(stream: &UnixStream, errno: i32, message: String) {
    if let Ok(json) = serde_json::to_vec(&Reply::error(errno, message)) {
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
    /// The loop of a server listening on `listener`, woken through `wake`.
    pub(super) fn new(
        ctx: Arc<Ctx>,
        listener: UnixListener,
        wake: Arc<OwnedFd>,
    ) -> io::Result<EventLoop> {
        let ep = sys::Epoll::new()?;
        ep.add(listener.as_raw_fd(), LISTENER, sys::EPOLLIN)?;
        ep.add(wake.as_raw_fd(), WAKE, sys::EPOLLIN)?;
        let (done_tx, done_rx) = mpsc::channel();
        let (job_tx, job_rx) = mpsc::channel();
        Ok(EventLoop {
            ctx,
            ep,
            listener,
            listening: true,
            backoff_until: None,
            wake,
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
            rings: HashMap::new(),
            watched: HashMap::new(),
            doomed: HashSet::new(),
            next_ring: 1,
            again: Vec::new(),
            closing: Vec::new(),
        })
    }

    /// Runs until the server stops.
    pub(super) fn run(mut self) {
        // A write to a pipe whose reader is gone (a ring client's doorbell) fails with EPIPE
        // here instead of killing the process, whatever the program does with SIGPIPE.
        let mut pipe = nix::sys::signal::SigSet::empty();
        pipe.add(nix::sys::signal::Signal::SIGPIPE);
        let _ = pipe.thread_block();
        let mut events = Vec::new();
        while !self.ctx.stop.load(Ordering::SeqCst) {
            let timeout = if self.again.is_empty() && self.closing.is_empty() {
                self.next_timer().min(TICK)
            } else {
                Duration::ZERO
            };
            events.clear();
            if self.ep.wait(&mut events, Some(timeout)).is_err() {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            for &(token, ev) in &events {
                match token {
                    LISTENER => self.accept(),
                    // The wake-up eventfd is this process's own (no client holds it).
                    WAKE => sys::eventfd_clear(self.wake.as_raw_fd()),
                    t if t & FD_TOKEN != 0 => self.fd_ready((t & !FD_TOKEN) as RawFd),
                    t if t & RING_TOKEN != 0 => self.serve_ring(t & !RING_TOKEN),
                    t if t & WATCH_TOKEN != 0 => self.watch_fired((t & !WATCH_TOKEN) as RawFd),
                    id => self.conn_event(id, ev),
                }
            }
            for id in std::mem::take(&mut self.again) {
                self.serve_ring(id);
            }
            self.closing.retain_mut(|r| !r.finish());
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
        let peer = super::peer::peer_of(&stream, self.ctx.owner_uid);
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
                socks: self.ctx.sockets.as_ref().map(|s| s.table(peer)),
            },
        );
    }

    /// Forgets a connection (already out of the maps and of epoll): its sockets close with
    /// its socket table.
    fn close(&mut self, conn: Conn) {
        let _ = self.ep.delete(conn.stream.as_raw_fd());
        let ids: Vec<u64> = self
            .rings
            .iter()
            .filter(|(_, r)| r.owner == conn.id)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            // Its posted sends run now and in later turns, a bounded number each; the first
            // turn runs while the connection still holds the socket.
            if let Some(mut r) = self.drop_ring(id) {
                if !r.finish() {
                    self.closing.push(r);
                }
            }
        }
        self.doomed.remove(&conn.id);
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
        let action = match (conn.socks.as_mut(), deadline) {
            (None, _) => Action::Reply(no_client_sockets(&req), Vec::new()),
            (Some(t), None) => t.call(req, data),
            (Some(t), Some(d)) => t.resume(req, data, d, expired),
        };
        let (reply, out) = match action {
            Action::Ring { reply, fds, ring } => {
                return self.start_ring(conn, &reply, &fds, ring, registered);
            }
            Action::Park(p) => {
                if registered {
                    let _ = self.ep.delete(conn.stream.as_raw_fd());
                }
                self.park(conn, p);
                return None;
            }
            Action::Reply(r, out) => (r, out),
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
        self.watch(conn, registered)
    }

    /// Watches `conn`'s stream for requests again unless it still is (`registered`); a
    /// connection that cannot be watched is closed.
    fn watch(&mut self, conn: Conn, registered: bool) -> Option<Conn> {
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

    /// Answers a ring's setup (its descriptors go with the reply) and starts serving it.
    fn start_ring(
        &mut self,
        conn: Conn,
        reply: &Reply,
        fds: &[OwnedFd],
        ring: Box<dyn RingServe>,
        registered: bool,
    ) -> Option<Conn> {
        let mut frame = Vec::new();
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let id = self.next_ring;
        self.next_ring += 1;
        let ok = send(&mut frame, reply, &[]).is_ok()
            && sys::send_with_fds(conn.stream.as_raw_fd(), &frame, &raw).is_ok()
            && self
                .ep
                .add(
                    ring.doorbell(),
                    RING_TOKEN | id,
                    sys::EPOLLIN | sys::EPOLLET,
                )
                .is_ok();
        if !ok {
            if registered {
                let _ = self.ep.delete(conn.stream.as_raw_fd());
            }
            self.close(conn);
            return None;
        }
        self.rings.insert(
            id,
            RingEntry {
                owner: conn.id,
                ring,
            },
        );
        self.watch(conn, registered)
    }

    /// Forgets a ring: its doorbell and the descriptors it watches leave epoll. Returns it.
    fn drop_ring(&mut self, id: u64) -> Option<Box<dyn RingServe>> {
        let ring = self.rings.remove(&id).map(|r| {
            let _ = self.ep.delete(r.ring.doorbell());
            r.ring
        });
        let fds: Vec<RawFd> = self
            .watched
            .iter()
            .filter(|(_, w)| w.ring == id)
            .map(|(&fd, _)| fd)
            .collect();
        for fd in fds {
            let _ = self.ep.delete(fd);
            self.watched.remove(&fd);
        }
        ring
    }

    /// The client rang a ring's doorbell (or its turn came again).
    fn serve_ring(&mut self, id: u64) {
        let Some(entry) = self.rings.get_mut(&id) else {
            return;
        };
        match entry.ring.serve() {
            Ok(served) => {
                if served.more && !self.again.contains(&id) {
                    self.again.push(id);
                }
                self.add_watches(id, served.watch);
            }
            Err(_) => {
                let owner = entry.owner;
                self.ctx.ring_faults.fetch_add(1, Ordering::Relaxed);
                let _faulted = self.drop_ring(id);
                self.close_id(owner);
            }
        }
    }

    /// Watches socket readiness descriptors once each for ring `id`.
    fn add_watches(&mut self, id: u64, watch: Vec<Watch>) {
        for w in watch {
            if self.watched.contains_key(&w.fd)
                || self
                    .ep
                    .add(w.fd, WATCH_TOKEN | w.fd as u64, sys::EPOLLIN)
                    .is_err()
            {
                continue;
            }
            self.watched.insert(
                w.fd,
                Watched {
                    ring: id,
                    rx: w.rx,
                    _hold: w.hold,
                },
            );
        }
    }

    /// A readiness descriptor a ring watched fired: tell the ring (which may watch again),
    /// stop watching.
    fn watch_fired(&mut self, fd: RawFd) {
        let _ = self.ep.delete(fd);
        if let Some(w) = self.watched.remove(&fd) {
            if let Some(r) = self.rings.get_mut(&w.ring) {
                let again = r.ring.fired(w.rx);
                self.add_watches(w.ring, again);
            }
        }
    }

    /// Closes the connection `id` wherever it is (a worker's: when it comes back).
    fn close_id(&mut self, id: u64) {
        if let Some(c) = self.idle.remove(&id) {
            self.close(c);
        } else if let Some((c, p)) = self.parked.remove(&id) {
            self.unwait(id, &p);
            drop(p);
            self.close(c);
        } else {
            self.doomed.insert(id);
        }
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
        if let Done::Idle(c) | Done::Park(c, _) = &d {
            if self.doomed.contains(&c.id) {
                let (Done::Idle(c) | Done::Park(c, _) | Done::Close(c)) = d;
                self.close(c);
                return;
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
            | Request::SockRing { .. }
    )
}

/// A request's JSON and data parts.
type Frame = (Vec<u8>, Vec<u8>);

/// Takes the first complete frame out of the connection's buffer. `Err((json, data))`: the
/// header claims more than the limits allow.
fn take_frame(conn: &mut Conn) -> Result<Option<Frame>, (usize, usize)> {
    let Some(h) = FrameHeader::peek(&conn.buf) else {
        if conn.buf.is_empty() {
            conn.partial_since = None;
        }
        return Ok(None);
    };
    if !h.within_limits() {
        return Err((h.json, h.data));
    }
    let Some((j, d)) = h.parts(&conn.buf) else {
        return Ok(None);
    };
    let (j, d) = (j.to_vec(), d.to_vec());
    conn.buf.drain(..h.frame_len());
    if conn.buf.is_empty() && conn.buf.capacity() > READ_CHUNK {
        // An idle connection keeps no large buffer.
        conn.buf = Vec::new();
    }
    // The next request's clock starts with its first byte.
    conn.partial_since = (!conn.buf.is_empty()).then(Instant::now);
    Ok(Some((j, d)))
}

/// Runs one job on a worker.
fn work(ctx: &Ctx, job: Job) -> Done {
    let Job { mut conn, work } = job;
    if conn.stream.set_nonblocking(false).is_err() {
        return Done::Close(conn);
    }
    let next = match work {
        Work::Frame { req, data, file } => requests::frame(ctx, &mut conn, req, data, file),
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
        // Rings are set up in the event loop only.
        Some(Action::Ring { .. }) => Done::Close(conn),
        Some(Action::Reply(..)) => Done::Idle(conn),
    }
}
