//! The control server's event loop: one thread waits on epoll and hands each event to the
//! part that owns it: [`admission`](super::admission) accepts connections,
//! [`framing`](super::framing) reads requests without blocking, client-socket operations run
//! here in place (they answer or park), [`parking`](super::parking) holds connections whose
//! request waits for its socket, [`ring_serving`](super::ring_serving) serves shared-memory
//! rings and [`workers`](super::workers) runs the other requests on a bounded pool, within
//! the connection and worker caps of [`super`].
//!
//! Epoll tokens: the listener ([`LISTENER`]), the wake-up eventfd ([`WAKE`]), connections
//! (their id), readiness descriptors of parked requests ([`FD_TOKEN`]` | fd`), ring doorbells
//! ([`RING_TOKEN`]` | ring id`) and descriptors rings watch ([`WATCH_TOKEN`]` | fd`).

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::admission::{Admission, LISTENER};
use super::framing::{read_some, refuse, send_nowait, take_frame, READ_CHUNK};
use super::parking::{Parking, FD_TOKEN};
use super::ring_serving::{on_loop_thread, Rings, RING_TOKEN, WATCH_TOKEN};
use super::workers::{Done, Job, Pool, Work};
use super::{no_client_sockets, send, Action, Conn, Ctx, Park, RingServe, REQUEST_TIMEOUT};
use crate::ctl::{Reply, Request};
use crate::sys;

/// Longest sleep of the event loop (it then checks the stop flag and the timers).
const TICK: Duration = Duration::from_millis(200);
/// The epoll token of the wake-up eventfd.
const WAKE: u64 = u64::MAX - 1;

/// The event loop's state (owned by its thread).
pub(super) struct EventLoop {
    ctx: Arc<Ctx>,
    ep: sys::Epoll,
    wake: Arc<OwnedFd>,
    admission: Admission,
    /// Connections waiting for a request (registered for input).
    idle: HashMap<u64, Conn>,
    /// Connections whose request waits for its socket (registered for hangup only).
    parking: Parking,
    pool: Pool,
    rings: Rings,
    /// Connections to close as soon as a worker gives them back (a ring of theirs faulted).
    doomed: HashSet<u64>,
    /// Where requests are read into before they join their connection's buffer.
    scratch: Vec<u8>,
}

impl EventLoop {
    /// The loop of a server listening on `listener`, woken through `wake`.
    pub(super) fn new(
        ctx: Arc<Ctx>,
        listener: UnixListener,
        wake: Arc<OwnedFd>,
    ) -> io::Result<EventLoop> {
        let ep = sys::Epoll::new()?;
        let admission = Admission::new(listener, &ep)?;
        ep.add(wake.as_raw_fd(), WAKE, sys::EPOLLIN)?;
        Ok(EventLoop {
            pool: Pool::new(ctx.clone(), wake.clone()),
            rings: Rings::new(wake.clone()),
            ctx,
            ep,
            wake,
            admission,
            idle: HashMap::new(),
            parking: Parking::default(),
            doomed: HashSet::new(),
            scratch: vec![0u8; READ_CHUNK],
        })
    }

    /// Runs until the server stops.
    pub(super) fn run(mut self) {
        // A write to a pipe whose reader is gone (a ring client's doorbell) fails with EPIPE
        // here instead of killing the process, whatever the program does with SIGPIPE.
        let mut pipe = nix::sys::signal::SigSet::empty();
        pipe.add(nix::sys::signal::Signal::SIGPIPE);
        let _ = pipe.thread_block();
        on_loop_thread();
        let mut events = Vec::new();
        while !self.ctx.stop.load(Ordering::SeqCst) {
            let timeout = if self.rings.busy() {
                Duration::ZERO
            } else {
                self.next_timer().min(TICK)
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
                    t if t & WATCH_TOKEN != 0 => {
                        self.rings.fired(&self.ep, (t & !WATCH_TOKEN) as RawFd);
                    }
                    id => self.conn_event(id, ev),
                }
            }
            for id in self.rings.take_again() {
                self.serve_ring(id);
            }
            self.rings.serve_told(&self.ep);
            self.rings.finish_closing();
            while let Some(d) = self.pool.next_done() {
                self.done(d);
            }
            self.timers();
            for conn in self.pool.schedule() {
                // No worker can take it (the pool is gone): drop the connection.
                self.close(conn);
            }
        }
    }

    /// How long until the next timer (a parked deadline or retry, a stalled request, the end
    /// of an accept back-off).
    fn next_timer(&self) -> Duration {
        let now = Instant::now();
        let stalls = self
            .idle
            .values()
            .filter_map(|c| c.partial_since.map(|t| t + REQUEST_TIMEOUT));
        [self.admission.backoff_until(), self.parking.next_timer()]
            .into_iter()
            .flatten()
            .chain(stalls)
            .min()
            .map_or(TICK, |t| t.saturating_duration_since(now))
    }

    fn accept(&mut self) {
        for conn in self.admission.accept(&self.ep, &self.ctx) {
            self.idle.insert(conn.id, conn);
        }
    }

    /// Forgets a connection (already out of the maps and of epoll): its sockets close with
    /// its socket table.
    fn close(&mut self, conn: Conn) {
        let _ = self.ep.delete(conn.stream.as_raw_fd());
        self.rings.end_owner(&self.ep, conn.id);
        self.doomed.remove(&conn.id);
        self.admission.left(&conn.peer);
    }

    fn conn_event(&mut self, id: u64, ev: u32) {
        if self.parking.contains(id) {
            // Parked connections are registered for hangup only.
            if ev & (sys::EPOLLHUP | sys::EPOLLRDHUP | sys::EPOLLERR) != 0 {
                if let Some((conn, park)) = self.parking.take(&self.ep, id) {
                    drop(park);
                    self.close(conn);
                }
            }
            return;
        }
        let Some(mut conn) = self.idle.remove(&id) else {
            return;
        };
        if !read_some(&mut conn, &mut self.scratch) {
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
                    self.pool.push(Job {
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
        let sent = match send(&mut frame, &reply, &out) {
            Ok(()) => send_nowait(&conn.stream, &frame).ok(),
            Err(_) => None,
        };
        let Some(sent) = sent else {
            if registered {
                let _ = self.ep.delete(conn.stream.as_raw_fd());
            }
            self.close(conn);
            return None;
        };
        if sent < frame.len() {
            // The client's buffer is full: a worker writes the rest (bounded by
            // REPLY_TIMEOUT) and gives the connection back.
            if registered {
                let _ = self.ep.delete(conn.stream.as_raw_fd());
            }
            frame.drain(..sent);
            self.pool.push(Job {
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
        let ok = send(&mut frame, reply, &[]).is_ok()
            && sys::send_with_fds(conn.stream.as_raw_fd(), &frame, &raw).is_ok()
            && self.rings.add(&self.ep, conn.id, ring).is_ok();
        if !ok {
            if registered {
                let _ = self.ep.delete(conn.stream.as_raw_fd());
            }
            self.close(conn);
            return None;
        }
        self.watch(conn, registered)
    }

    /// The client rang a ring's doorbell (or its turn came again); a ring that faults
    /// closes its connection (counted).
    fn serve_ring(&mut self, id: u64) {
        if let Some(owner) = self.rings.serve(&self.ep, id) {
            self.ctx.ring_faults.fetch_add(1, Ordering::Relaxed);
            self.close_id(owner);
        }
    }

    /// Closes the connection `id` wherever it is (a worker's: when it comes back).
    fn close_id(&mut self, id: u64) {
        if let Some(c) = self.idle.remove(&id) {
            self.close(c);
        } else if let Some((c, p)) = self.parking.take(&self.ep, id) {
            drop(p);
            self.close(c);
        } else {
            self.doomed.insert(id);
        }
    }

    /// A connection a worker gave back.
    fn done(&mut self, d: Done) {
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
        if let Err(conn) = self.parking.park(&self.ep, conn, park) {
            self.close(conn);
        }
    }

    /// Runs a parked request again (`expired`: its deadline passed).
    fn unpark(&mut self, id: u64, expired: bool) {
        let Some((conn, park)) = self.parking.take(&self.ep, id) else {
            return;
        };
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
        for id in self.parking.waiting_on(&self.ep, fd) {
            self.unpark(id, false);
        }
    }

    fn timers(&mut self) {
        let now = Instant::now();
        if self.admission.resume(&self.ep, now) {
            self.accept();
        }
        for (id, expired) in self.parking.due(now) {
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
