//! The node's I/O round and the driver's two `Io` sides: an application call's engine events
//! (wakeups at once, transport work queued; an idle lane's or an IB connection's frames sent
//! from the caller's thread), one round of the I/O thread (socket events, engine updates,
//! writes), [`AppIo`] (the engine's events where the transport locks are not held) and
//! [`TransportIo`] (transport work under the transport locks).

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use crate::proto::{
    ConnId, DropReason, Event, HeldEnd, LinkId, PathState, SockId, Stack, TransportKind,
};
use crate::sys;
use crate::time::Instant;

use super::ib::Ib;
use super::tap::Tap;
use super::tcp::{Tcp, TcpOut, TOKEN_WAKE};
use super::{lock, Core, Inner};

impl Inner {
    /// Drains engine events after an application call: wakes sockets, hands transport work
    /// to the I/O thread, then releases the lock and wakes the I/O thread if needed.
    ///
    /// Transmit work for an idle RDS/TCP lane ([`Tcp::lane_idle`]) runs here, in the caller's
    /// thread, while the I/O thread sleeps and no other thread holds the transport (as the
    /// kernel's `sendmsg` runs `rds_send_xmit`): the frames are pulled and written with one
    /// `writev`, and the I/O thread is not woken. An RDS/IB connection's frames are posted
    /// here whenever the IB transport is free (posting never blocks). Everything else (a busy
    /// lane or transport, a partial write, connects) is left to the I/O thread, which
    /// batches it.
    pub(crate) fn after_app_call(&self, core: MutexGuard<'_, Core>) {
        self.after_app_call_inline(core, true);
    }

    /// [`Inner::after_app_call`], transmitting in the caller's thread only if `inline` (a
    /// sender passes whether its message is small: a large one is written by the I/O thread
    /// while the sender goes on, and does not hold the transport from it).
    pub(crate) fn after_app_call_inline(&self, mut core: MutexGuard<'_, Core>, inline: bool) {
        if !self.drain_events(&mut core, true) {
            return;
        }
        // Posting to an IB queue pair never blocks: a sender posts its frames itself whenever
        // no other thread holds the IB transport, as the kernel's `sendmsg` posts them.
        if ib_transmit_first(&core) {
            let ib = match self.ib.try_lock() {
                Ok(ib) => Some(ib),
                Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            };
            if let Some(mut ib) = ib {
                self.post_here(&mut ib, &mut core);
                drop(ib);
                if core.io_work.is_empty() {
                    return;
                }
            }
        }
        // An I/O thread that is awake takes the work without a wakeup, and batches it.
        if inline && self.io_sleeping.load(Ordering::SeqCst) && tcp_transmit_first(&core) {
            match self.tcp.try_lock() {
                Ok(tcp) => return self.transmit_here(tcp, core),
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    return self.transmit_here(p.into_inner(), core)
                }
                Err(std::sync::TryLockError::WouldBlock) => {}
            }
        }
        drop(core);
        self.wake_io();
    }

    /// [`Inner::after_app_call`]'s transmit with the transport lock held: pulls the leading
    /// TCP transmit work of `io_work`, writes outside the engine lock, applies what the writes
    /// reported (acknowledgements, closes) and repeats while lanes ask for more frames. Wakes
    /// the I/O thread for whatever is left.
    fn transmit_here<'a>(&'a self, mut tcp: MutexGuard<'_, Tcp>, mut core: MutexGuard<'a, Core>) {
        let now = self.now();
        let mut outs = Vec::new();
        for round in 0..4 {
            while tcp_transmit_first(&core) {
                let Some(&Event::Transmit { conn, path }) = core.io_work.front() else {
                    break;
                };
                if !tcp.lane_idle(conn, path) {
                    break;
                }
                core.io_work.pop_front();
                tcp.pull(&mut core.stack, conn, path, now, &self.tap);
                self.drain_events(&mut core, true);
            }
            drop(core);
            let refill = tcp.flush(now, &mut outs);
            core = lock(&self.core);
            if outs.is_empty() && refill.is_empty() {
                break;
            }
            self.apply(&mut tcp, &mut core, &mut outs, now);
            for (conn, path) in refill {
                if round == 3 {
                    // Lanes still asking for frames after the last round go to the I/O thread.
                    core.io_work.push_back(Event::Transmit { conn, path });
                } else {
                    tcp.pull(&mut core.stack, conn, path, now, &self.tap);
                }
            }
            self.drain_events(&mut core, true);
        }
        let left = !core.io_work.is_empty() || tcp.has_pending();
        drop(core);
        drop(tcp);
        if left {
            self.wake_io();
        }
    }

    /// [`Inner::after_app_call`]'s IB transmit with the IB transport lock held: posts the
    /// frames of the leading IB transmit work of `io_work` (RDS/IB connections only).
    fn post_here(&self, ib: &mut Option<Ib>, core: &mut Core) {
        let Some(t) = ib.as_mut() else {
            return;
        };
        let now = self.now();
        while ib_transmit_first(core) {
            let Some(Event::Transmit { conn, path }) = core.io_work.pop_front() else {
                break;
            };
            t.pull(&mut core.stack, now, conn, path);
            self.drain_events(core, true);
        }
    }

    /// One round of the I/O thread: socket events, engine updates, writes. Returns whether
    /// more work is pending right away.
    pub(super) fn io_round(&self, evs: &[(u64, u32)], outs: &mut Vec<TcpOut>) -> bool {
        self.io_round_with(lock(&self.tcp), evs, outs)
    }

    /// [`Inner::io_round`] with the TCP transport lock already taken.
    pub(super) fn io_round_with(
        &self,
        mut tcp: MutexGuard<'_, Tcp>,
        evs: &[(u64, u32)],
        outs: &mut Vec<TcpOut>,
    ) -> bool {
        let mut ib = lock(&self.ib);
        let now = self.now();
        outs.clear();
        for &(token, bits) in evs {
            if token == TOKEN_WAKE {
                sys::eventfd_clear(self.wake_fd.as_raw_fd());
                continue;
            }
            if Ib::owns_token(token) {
                continue;
            }
            tcp.handle_event(token, bits, now, outs);
        }
        tcp.timers(now, outs);
        {
            let mut core = lock(&self.core);
            let stalled = core.stack.tunables().partial_timeout;
            tcp.expire_partials(now, stalled, outs);
            tcp.set_partial_cap(core.stack.reasm_room());
            if let Some(ib) = ib.as_mut() {
                for &(token, _) in evs {
                    if Ib::owns_token(token) {
                        ib.handle_event(token, &mut core.stack, now);
                    }
                }
            }
            self.apply(&mut tcp, &mut core, outs, now);
            crate::proto::driver::handle_due(&mut core.stack, now);
            self.run_io_work(&mut tcp, &mut ib, &mut core, now);
        }
        // Write outside the engine lock; acknowledgements and refills come back in.
        for _ in 0..4 {
            outs.clear();
            let refill = tcp.flush(now, outs);
            if outs.is_empty() && refill.is_empty() {
                break;
            }
            let mut core = lock(&self.core);
            self.apply(&mut tcp, &mut core, outs, now);
            for (c, p) in refill {
                tcp.pull(&mut core.stack, c, p, now, &self.tap);
            }
            self.run_io_work(&mut tcp, &mut ib, &mut core, now);
        }
        tcp.has_pending()
    }

    /// Applies what the sockets told us to the engine (`Tcp::apply`), counting the frames.
    fn apply(&self, tcp: &mut Tcp, core: &mut Core, outs: &mut Vec<TcpOut>, now: Instant) {
        let n = tcp.apply(&mut core.stack, outs, now, &self.tap);
        self.frames_in.fetch_add(n, Ordering::Relaxed);
    }

    /// Executes the engine's transport work (connect, disconnect, transmit) and wakes sockets.
    fn run_io_work(&self, tcp: &mut Tcp, ib: &mut Option<Ib>, core: &mut Core, now: Instant) {
        self.drain_events(core, false);
        while let Some(ev) = core.io_work.pop_front() {
            let mut io = TransportIo {
                tap: &self.tap,
                tcp: &mut *tcp,
                ib: &mut *ib,
                core: &mut *core,
                now,
            };
            crate::proto::driver::dispatch(&mut io, ev);
            self.drain_events(core, false);
        }
    }
}

/// Whether the next transport work is a transmit on an RDS/TCP lane (what an application
/// thread may do itself).
fn tcp_transmit_first(core: &Core) -> bool {
    transmit_first(core, TransportKind::Tcp)
}

/// Whether the next transport work is a transmit on an RDS/IB connection.
fn ib_transmit_first(core: &Core) -> bool {
    transmit_first(core, TransportKind::Ib)
}

fn transmit_first(core: &Core, kind: TransportKind) -> bool {
    matches!(core.io_work.front(), Some(&Event::Transmit { conn, .. })
        if core.stack.conn_addrs(conn).2 == kind)
}

impl Inner {
    /// Handles the engine's events: socket wakeups at once, transport work into `io_work`.
    /// Returns whether transport work was queued.
    pub(super) fn drain_events(&self, core: &mut Core, _from_app: bool) -> bool {
        let mut io = AppIo {
            core,
            inner: self,
            queued: false,
        };
        crate::proto::driver::pump(&mut io);
        io.queued
    }
}

/// The engine's events where the transport locks are not held (application threads, and the
/// I/O thread between two pieces of transport work): sockets are woken at once, transport
/// work waits in `io_work` for [`TransportIo`].
struct AppIo<'a> {
    core: &'a mut Core,
    inner: &'a Inner,
    /// Transport work was queued.
    queued: bool,
}

impl AppIo<'_> {
    fn defer(&mut self, ev: Event) {
        self.core.io_work.push_back(ev);
        self.queued = true;
    }
}

impl crate::proto::driver::Io for AppIo<'_> {
    fn stack(&mut self) -> &mut Stack {
        &mut self.core.stack
    }

    fn connect(&mut self, conn: ConnId, path: usize, epoch: u32) {
        self.defer(Event::Connect { conn, path, epoch });
    }

    fn disconnect(&mut self, conn: ConnId, path: usize, epoch: u32, reason: DropReason) {
        self.defer(Event::Disconnect {
            conn,
            path,
            epoch,
            reason,
        });
    }

    fn transmit(&mut self, conn: ConnId, path: usize) {
        self.defer(Event::Transmit { conn, path });
    }

    fn rdma_unuse(&mut self, sock: SockId, rkey: u32) {
        self.defer(Event::RdmaUnuse { sock, rkey });
    }

    fn wake(&mut self, sock: SockId) {
        if let Some(w) = self.core.waiters.get(&sock) {
            if w.waiting.load(Ordering::Relaxed) > 0 {
                w.cv.notify_all();
            }
            let r = self.core.stack.readable(sock);
            let wr = self.core.stack.writable(sock);
            w.update_fds(r, wr);
        }
    }

    fn cong_changed(&mut self) {
        self.inner.cong_cv.notify_all();
    }

    fn adopt(&mut self, link: LinkId, conn: ConnId, path: usize, epoch: u32) {
        self.defer(Event::Adopt {
            link,
            conn,
            path,
            epoch,
        });
    }

    fn refuse(&mut self, link: LinkId, why: HeldEnd) {
        self.defer(Event::Refuse { link, why });
    }
}

/// The node's transports on the I/O thread (every lock held): TCP, or IB for an IB
/// connection. A connect the path has moved on from is skipped: for TCP it would replace a
/// connection (an accepted one that took the path over, say) after its peer's TCP had
/// acknowledged data on it.
struct TransportIo<'a> {
    tap: &'a Tap,
    tcp: &'a mut Tcp,
    ib: &'a mut Option<Ib>,
    core: &'a mut Core,
    now: Instant,
}

impl TransportIo<'_> {
    fn is_ib(&self, conn: ConnId) -> bool {
        self.core.stack.conn_addrs(conn).2 == TransportKind::Ib
    }

    fn is_current(&self, conn: ConnId, path: usize, epoch: u32) -> bool {
        self.core.stack.path_state(conn, path) == (PathState::Connecting, epoch)
    }
}

impl crate::proto::driver::Io for TransportIo<'_> {
    fn stack(&mut self) -> &mut Stack {
        &mut self.core.stack
    }

    fn connect(&mut self, conn: ConnId, path: usize, epoch: u32) {
        let now = self.now;
        let current = self.is_current(conn, path, epoch);
        if self.is_ib(conn) {
            match self.ib.as_mut() {
                Some(t) if current => t.connect(&mut self.core.stack, now, conn, path, epoch),
                Some(_) => {}
                None => self
                    .core
                    .stack
                    .handle_connect_failed(now, conn, path, epoch),
            }
            return;
        }
        if !current {
            // The engine dropped the attempt before it started: its drain (the engine waits
            // for the end of a dropped attempt) ends here, with no connection to read.
            self.core.stack.handle_disconnected(now, conn, path, epoch);
            return;
        }
        self.tcp
            .connect_path(&mut self.core.stack, conn, path, epoch, now);
    }

    fn disconnect(&mut self, conn: ConnId, path: usize, epoch: u32, reason: DropReason) {
        if !self.is_ib(conn) {
            self.tcp.disconnect(conn, path, epoch, reason, self.now);
        } else if let Some(t) = self.ib.as_mut() {
            t.disconnect(conn, path, epoch);
        }
    }

    fn transmit(&mut self, conn: ConnId, path: usize) {
        if !self.is_ib(conn) {
            self.tcp
                .pull(&mut self.core.stack, conn, path, self.now, self.tap);
        } else if let Some(t) = self.ib.as_mut() {
            t.pull(&mut self.core.stack, self.now, conn, path);
        }
    }

    fn rdma_unuse(&mut self, sock: SockId, rkey: u32) {
        if let Some(t) = self.ib.as_mut() {
            t.unuse(sock, rkey);
        }
    }

    fn adopt(&mut self, link: LinkId, conn: ConnId, path: usize, epoch: u32) {
        self.tcp
            .adopt_held(&mut self.core.stack, link, conn, path, epoch, self.now);
    }

    fn refuse(&mut self, link: LinkId, why: HeldEnd) {
        self.tcp.refuse_held(link, why);
    }
}
