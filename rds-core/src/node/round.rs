//! The node's I/O round and the driver's two `Io` sides: an application call's engine events
//! (wakeups at once, transport work queued; an idle lane's or an IB connection's frames sent
//! from the caller's thread), one round of the I/O thread (socket events, engine updates,
//! writes), [`AppIo`] (the engine's events where the transport locks are not held) and
//! [`TransportIo`] (transport work under the transport locks).
//!
//! Both transports are called through the transport contract ([`Transport`],
//! `transport.rs`), the same calls in the same order for each; the engine's transport work
//! is routed by [`TransportKind`] in one place ([`Locked::of`]).

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use crate::proto::{ConnId, DropReason, Event, HeldEnd, LinkId, SockId, Stack, TransportKind};
use crate::sys;
use crate::time::Instant;

use super::ib::Ib;
use super::tcp::{Tcp, TOKEN_WAKE};
use super::transport::{Absent, Transport};
use super::{lock, try_lock, Core, Inner, TxHere};

/// The order in which a round calls the transports (IB's events were handled before TCP's
/// reports were applied before the contract, and still are).
const ORDER: [TransportKind; 2] = [TransportKind::Ib, TransportKind::Tcp];

/// The node's transports whose locks this thread holds.
struct Locked<'a> {
    tcp: &'a mut Tcp,
    ib: Option<&'a mut Ib>,
    /// Stands in for RDS/IB where the node runs none.
    no_ib: Absent,
}

impl<'a> Locked<'a> {
    fn new(tcp: &'a mut Tcp, ib: Option<&'a mut Ib>) -> Self {
        Locked {
            tcp,
            ib,
            no_ib: Absent(TransportKind::Ib),
        }
    }

    /// The transport that carries connections of `kind`: the one place the node routes by
    /// kind. Loopback connections never reach a transport (the engine delivers them itself).
    fn of(&mut self, kind: TransportKind) -> &mut dyn Transport {
        match kind {
            TransportKind::Ib => match self.ib.as_deref_mut() {
                Some(t) => t,
                None => &mut self.no_ib,
            },
            TransportKind::Tcp | TransportKind::Loopback => &mut *self.tcp,
        }
    }

    /// The transport that owns an epoll token, if any.
    fn owner(&mut self, token: u64) -> Option<&mut dyn Transport> {
        let kind = ORDER.into_iter().find(|&k| self.of(k).owns_token(token))?;
        Some(self.of(kind))
    }
}

impl Inner {
    /// Drains engine events after an application call: wakes sockets, hands transport work
    /// to the I/O thread, then releases the lock and wakes the I/O thread if needed.
    ///
    /// Transmit work for an idle RDS/TCP lane ([`Transport::lane_idle`]) runs here, in the
    /// caller's thread, while no other thread holds the transport (as the kernel's `sendmsg`
    /// runs `rds_send_xmit`): the frames are pulled and written with one `writev`, and the
    /// I/O thread is not woken. That holds while the I/O thread is awake too: leaving an idle
    /// lane's message to it (as before) made a request/response loop hand every message over
    /// whenever the I/O thread had not gone back to sleep yet, a context switch each on one
    /// CPU (`--loopback -d 1` pinned: 2.1x the rate, 0.93x the CPU per message). An RDS/IB connection's frames are
    /// posted here whenever the IB transport is free (posting never blocks). Everything else
    /// (a busy lane or transport, a partial write, connects) is left to the I/O thread, which
    /// batches it.
    pub(crate) fn after_app_call(&self, core: MutexGuard<'_, Core>) {
        self.after_app_call_inline(core, TxHere::IdleLane);
    }

    /// [`Inner::after_app_call`], transmitting on RDS/TCP in the caller's thread as `here`
    /// says (a sender passes the rule for its message and socket, [`TxHere::for_send`]).
    pub(crate) fn after_app_call_inline<'a>(
        &'a self,
        mut core: MutexGuard<'a, Core>,
        here: TxHere,
    ) {
        if !self.drain_events(&mut core, true) {
            return;
        }
        // Posting to an IB queue pair never blocks: a sender posts its frames itself whenever
        // no other thread holds the IB transport, as the kernel's `sendmsg` posts them.
        if leading_transmit(&core, TransportKind::Ib).is_some() {
            if let Some(mut ib) = try_lock(&self.ib) {
                if let Some(t) = ib.as_mut() {
                    core = self.transmit_here(t, core, false);
                }
                drop(ib);
                if core.io_work.is_empty() {
                    return;
                }
            }
        }
        // A busy lane's work is the I/O thread's (it batches it); an idle lane's is sent
        // here (`transmit_here` stops at the first lane that is not idle).
        let tcp_first = leading_transmit(&core, TransportKind::Tcp).is_some();
        if here != TxHere::No && tcp_first {
            if let Some(mut tcp) = try_lock(&self.tcp) {
                let left = self.transmit_rest(&mut *tcp, core, here == TxHere::OpenLane);
                drop(tcp);
                if left {
                    self.wake_io();
                }
                return;
            }
        }
        drop(core);
        self.wake_io();
    }

    /// [`Inner::transmit_here`], then releases the engine lock and says whether work is
    /// left for the I/O thread (transport work queued, or writes `t` still has pending); the
    /// caller wakes it once it released `t`'s lock too, so that it finds the transport free.
    fn transmit_rest(&self, t: &mut dyn Transport, core: MutexGuard<'_, Core>, open: bool) -> bool {
        let core = self.transmit_here(t, core, open);
        !core.io_work.is_empty() || t.has_pending()
    }

    /// [`Inner::after_app_call`]'s transmit with the lock of `t` held: takes the leading
    /// transmit work of `io_work` for `t`'s idle lanes, writes outside the engine lock
    /// ([`Transport::flush`]: nothing for IB, whose posts went out with the transmit),
    /// applies what the writes reported (acknowledgements, closes) and repeats while lanes
    /// ask for more frames; those still asking after the fourth time go to the I/O thread.
    /// `open`: any lane with nothing waiting to be written counts as idle
    /// ([`TxHere::OpenLane`]).
    fn transmit_here<'a>(
        &'a self,
        t: &mut dyn Transport,
        mut core: MutexGuard<'a, Core>,
        open: bool,
    ) -> MutexGuard<'a, Core> {
        let now = self.now();
        let kind = t.kind();
        for round in 0..4 {
            while let Some((conn, path)) = leading_transmit(&core, kind) {
                if !t.lane_idle(conn, path, open) {
                    break;
                }
                core.io_work.pop_front();
                t.transmit(&mut core.stack, conn, path, now);
                self.drain_events(&mut core, true);
            }
            if !t.has_pending() {
                break;
            }
            drop(core);
            let refill = t.flush(now);
            core = lock(&self.core);
            if !t.has_reports() && refill.is_empty() {
                break;
            }
            self.apply(t, &mut core, now);
            for (conn, path) in refill {
                if round == 3 {
                    core.io_work.push_back(Event::Transmit { conn, path });
                } else {
                    t.transmit(&mut core.stack, conn, path, now);
                }
            }
            self.drain_events(&mut core, true);
        }
        core
    }

    /// Before a thread that runs the node's I/O sleeps (the I/O thread before `epoll_wait`, a
    /// leader before `poll`): the transports poll what they will not be woken for
    /// ([`Transport::poll_before_sleep`]); what they find is applied, sockets are woken, and
    /// transport work is done as after an application call (the IB transport's transmits
    /// here, anything else by the I/O thread). Returns whether anything was found: the thread
    /// then looks at its work again instead of sleeping, and calls this again before it does.
    ///
    /// Only RDS/IB polls anything (RDS/TCP's sockets wake the epoll set themselves, and its
    /// default polls nothing), so only its lock is taken, not the round's (TCP's), as for an
    /// application call's transmit, and only where it runs (a round holds it throughout:
    /// half of a leader's lock waits at `--loopback -d 8` were here, on a node without
    /// RDS/IB); the engine lock only when it has something to poll.
    pub(crate) fn poll_before_sleep(&self) -> bool {
        if !self.ib_on {
            return false;
        }
        let mut ib = lock(&self.ib);
        let Some(t) = ib.as_mut() else {
            return false;
        };
        let t: &mut dyn Transport = t;
        if !t.polls_before_sleep() {
            return false;
        }
        let now = self.now();
        let mut core = lock(&self.core);
        let found = t.poll_before_sleep(&mut core.stack, now);
        if !self.drain_events(&mut core, true) {
            return found;
        }
        core = self.transmit_here(t, core, false);
        let left = !core.io_work.is_empty();
        drop(core);
        drop(ib);
        if left {
            self.wake_io();
        }
        found
    }

    /// A thread waiting for its send buffer's room learns RDS/TCP's acknowledgements itself
    /// (`SIOCOUTQ` of every connection with bytes unacknowledged), instead of waiting for
    /// the I/O thread's poll and then for the wake-up it sends: what came is applied and the
    /// sockets are woken, as in the I/O thread's round. Nothing when another thread holds the
    /// TCP transport (it runs a round and applies what it learns itself). Returns whether
    /// acknowledgements came.
    pub(crate) fn acks_here(&self) -> bool {
        let Some(mut tcp) = try_lock(&self.tcp) else {
            return false;
        };
        if !tcp.acks_now() {
            return false;
        }
        let now = self.now();
        let mut core = lock(&self.core);
        self.apply(&mut *tcp, &mut core, now);
        if !self.drain_events(&mut core, true) {
            return true;
        }
        let left = self.transmit_rest(&mut *tcp, core, false);
        drop(tcp);
        if left {
            self.wake_io();
        }
        true
    }

    /// One round of the I/O thread: socket events, engine updates, writes. Returns whether
    /// more work is pending right away.
    pub(super) fn io_round(&self, evs: &[(u64, u32)]) -> bool {
        self.io_round_with(lock(&self.tcp), evs)
    }

    /// [`Inner::io_round`] with the TCP transport lock already taken: each transport's
    /// events and timers without the engine lock, then with it the engine's bounds, the
    /// transports' reports, the engine's timers and its transport work, then the writes
    /// outside it (the order of `transport.rs`).
    pub(super) fn io_round_with(&self, mut tcp: MutexGuard<'_, Tcp>, evs: &[(u64, u32)]) -> bool {
        let now = self.now();
        tcp.defer_ack_polls(self.room_waiters.load(Ordering::SeqCst) > 0, now);
        let mut ib = lock(&self.ib);
        let mut set = Locked::new(&mut tcp, ib.as_mut());
        for &(token, bits) in evs {
            if token == TOKEN_WAKE {
                sys::eventfd_clear(self.wake_fd.as_raw_fd());
                continue;
            }
            if let Some(t) = set.owner(token) {
                t.handle_event(token, bits, now);
            }
        }
        for kind in ORDER {
            set.of(kind).timers(now);
        }
        {
            let mut core = lock(&self.core);
            for kind in ORDER {
                set.of(kind).limits(&core.stack, now);
            }
            for kind in ORDER {
                self.apply(set.of(kind), &mut core, now);
            }
            crate::proto::driver::handle_due(&mut core.stack, now);
            self.run_io_work(&mut set, &mut core, now);
        }
        // Write outside the engine lock; acknowledgements and refills come back in.
        for kind in ORDER {
            for _ in 0..4 {
                let t = set.of(kind);
                let refill = t.flush(now);
                if !t.has_reports() && refill.is_empty() {
                    break;
                }
                let mut core = lock(&self.core);
                self.apply(t, &mut core, now);
                for (c, p) in refill {
                    t.transmit(&mut core.stack, c, p, now);
                }
                self.run_io_work(&mut set, &mut core, now);
            }
        }
        ORDER.into_iter().any(|k| set.of(k).has_pending())
    }

    /// Applies what a transport learnt to the engine, counting the frames.
    fn apply(&self, t: &mut dyn Transport, core: &mut Core, now: Instant) {
        let n = t.apply(&mut core.stack, now);
        self.frames_in.fetch_add(n, Ordering::Relaxed);
    }

    /// Executes the engine's transport work (connect, disconnect, transmit) and wakes sockets.
    fn run_io_work(&self, set: &mut Locked<'_>, core: &mut Core, now: Instant) {
        self.drain_events(core, false);
        while let Some(ev) = core.io_work.pop_front() {
            let mut io = TransportIo {
                set: &mut *set,
                core: &mut *core,
                now,
            };
            crate::proto::driver::dispatch(&mut io, ev);
            self.drain_events(core, false);
        }
    }
}

/// The path of the next transport work if it is a transmit on a connection of `kind` (what
/// an application thread may do itself).
fn leading_transmit(core: &Core, kind: TransportKind) -> Option<(ConnId, usize)> {
    match core.io_work.front() {
        Some(&Event::Transmit { conn, path }) if core.stack.conn_addrs(conn).2 == kind => {
            Some((conn, path))
        }
        _ => None,
    }
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

/// The node's transports on the I/O thread (every lock held): each event goes to the
/// transport of its connection's kind ([`Locked::of`]).
struct TransportIo<'a, 'b> {
    set: &'a mut Locked<'b>,
    core: &'a mut Core,
    now: Instant,
}

impl TransportIo<'_, '_> {
    /// The transport that carries `conn`, and the engine.
    fn route(&mut self, conn: ConnId) -> (&mut dyn Transport, &mut Stack) {
        let kind = self.core.stack.conn_addrs(conn).2;
        (self.set.of(kind), &mut self.core.stack)
    }
}

impl crate::proto::driver::Io for TransportIo<'_, '_> {
    fn stack(&mut self) -> &mut Stack {
        &mut self.core.stack
    }

    fn connect(&mut self, conn: ConnId, path: usize, epoch: u32) {
        let now = self.now;
        let (t, stack) = self.route(conn);
        t.connect(stack, conn, path, epoch, now);
    }

    fn disconnect(&mut self, conn: ConnId, path: usize, epoch: u32, reason: DropReason) {
        let now = self.now;
        let (t, _) = self.route(conn);
        t.disconnect(conn, path, epoch, reason, now);
    }

    fn transmit(&mut self, conn: ConnId, path: usize) {
        let now = self.now;
        let (t, stack) = self.route(conn);
        t.transmit(stack, conn, path, now);
    }

    /// RDMA memory registrations are RDS/IB's alone.
    fn rdma_unuse(&mut self, sock: SockId, rkey: u32) {
        if let Some(t) = self.set.ib.as_deref_mut() {
            t.unuse(sock, rkey);
        }
    }

    fn adopt(&mut self, link: LinkId, conn: ConnId, path: usize, epoch: u32) {
        let now = self.now;
        let (t, stack) = self.route(conn);
        t.adopt(stack, link, conn, path, epoch, now);
    }

    /// A held link names no connection to route by; only RDS/TCP's accepted connections
    /// are held ([`Stack::link_accepted`]).
    fn refuse(&mut self, link: LinkId, why: HeldEnd) {
        self.set.of(TransportKind::Tcp).refuse(link, why);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::node::ib::TOKEN_IB_CM;
    use crate::node::tap::Tap;
    use crate::stats::TcpStats;

    /// Each kind goes to its transport (loopback to TCP, as before the contract, though the
    /// engine gives a transport no loopback work); IB to its stand-in on a node without one,
    /// which owns no token, so IB's tokens and the wake token reach no transport.
    #[test]
    fn work_is_routed_by_kind_and_tokens_by_owner() {
        let epoll = Arc::new(sys::Epoll::new().expect("epoll"));
        let tap = Arc::new(Tap::default());
        let mut tcp = Tcp::new(epoll, Arc::new(TcpStats::new()), tap, 1).expect("transport");
        let mut set = Locked::new(&mut tcp, None);
        assert_eq!(set.of(TransportKind::Tcp).kind(), TransportKind::Tcp);
        assert_eq!(set.of(TransportKind::Loopback).kind(), TransportKind::Tcp);
        let ib = set.of(TransportKind::Ib);
        assert_eq!(ib.kind(), TransportKind::Ib);
        assert!(
            !ib.lane_idle(crate::proto::ConnId(0), 0, true),
            "the stand-in"
        );
        assert!(set.owner(TOKEN_WAKE).is_none());
        assert!(set.owner(TOKEN_IB_CM).is_none());
        assert!(set.owner(TOKEN_IB_CM | 5).is_none());
    }
}
