//! An application thread that waits for its socket does the node's I/O itself
//! (leader/follower): it sleeps in one `epoll_wait` on the leader's epoll set, the shadow of
//! the I/O thread's (the same transport descriptors, kept so by `sys::Epoll`), and when a
//! transport descriptor fires it runs the I/O thread's round in its own context. A message
//! for its own socket then costs one wake-up (the waiting thread's) instead of two (the I/O
//! thread's, then the waiting thread's), and one system call to sleep and learn what came.
//! The socket's readiness eventfds are not in that set: while the thread leads, a change
//! towards ready that another thread makes is written to the node's leader eventfd, which is
//! in that set ([`Waiter::lead_on`]). The I/O thread's wake-up eventfd is in both sets: a leader that
//! finds it pending does the work queued for the I/O thread in its round. A caller that also
//! waits for a descriptor of its own (`Socket::wait_or`), and a leader whose last rounds were
//! busy (deep queues), sleep in `poll(2)` on the socket's eventfds, that descriptor and the
//! leader's set instead, then collect the set's events.
//!
//! Before it sleeps, the leader has the transports poll what they will not be woken for
//! ([`Inner::poll_before_sleep`]: RDS/IB's completion queues left unarmed after their last
//! event), so that a reply whose completion is already there is taken without an event, a
//! re-arm and a wake-up; only when nothing is found are the queues armed and the thread sleeps.
//!
//! One thread leads at a time; others wait on their readiness descriptors as before and are
//! woken by whoever delivers to them. While a thread leads, and for [`GRACE`] after the last
//! one left, the I/O thread does not wait on the epoll set (which would wake it for every
//! event as well): it sleeps on its wake-up eventfd, with a timeout of at most [`GRACE`] and
//! the next timer, and runs timers and queued transport work. So a leader that goes back to
//! waiting within [`GRACE`] (a request/response loop) finds the I/O thread out of its way, and
//! transport events that come while nobody leads wait at most [`GRACE`] for the I/O thread.
//! Once one lead has lasted through such a sleep (a thread idle in its wait), the I/O thread
//! sleeps up to [`DEEP_MAX`] instead, and that leader's leaving (or its round, which may set
//! timers) wakes it: an idle waiting process does not wake every millisecond.
//!
//! Two rules keep a dedicated I/O thread where it is faster (measured with rds-stress
//! `--loopback`; docs/performance.md has the figures):
//! - a leader that leaves with transport events already pending (deep queues) hands them to
//!   the I/O thread at once, which works on them while the leader handles its messages;
//! - when two threads wait on the node at once, nobody leads for [`CROWD_HOLD`]: with several
//!   tasks per node the I/O thread serves them all, as before (leading lost a fifth of the
//!   `-t 2 -d 32` rate).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::{lock, try_lock, Inner, Waiter};
use crate::sys;

/// The leader's epoll events, kept between rounds.
pub(crate) type Bufs = Vec<(u64, u32)>;

/// The token of the node's leader eventfd (`Inner::lead_fd`) in the leader's epoll set.
pub(crate) const TOKEN_LEAD: u64 = 5 << 32;

/// How long after the last leader left the I/O thread still stays off the epoll set.
pub(crate) const GRACE: Duration = Duration::from_millis(1);

/// The longest sleep of the I/O thread while one lead lasts past [`GRACE`] (a thread idle in
/// its wait): timers that a leader's round set meanwhile run at most this late.
pub(crate) const DEEP_MAX: Duration = Duration::from_millis(50);

/// How long a thread waiting for its send buffer's room first sleeps before it asks TCP for
/// acknowledgements itself ([`Inner::poll_or_acks`]): on loopback TCP acknowledges a burst
/// about 20 us after it.
const ROOM_SLICE: Duration = Duration::from_micros(25);

/// The longest such sleep (it doubles while no acknowledgement comes): the time the I/O
/// thread's timed polls wait for it.
const ROOM_SLICE_MAX: Duration = super::tcp::ACK_DEFER_MAX;

/// How long after two threads waited at once nobody leads.
const CROWD_HOLD: Duration = Duration::from_millis(20);

/// How long a leading thread polls before it sleeps ([`crate::tunables::Tunables::busy_poll`]), in
/// nanoseconds: none where this process may run on one CPU only ([`sys::may_spin`]). The CPUs
/// are looked up only when the tunable asks for a busy poll (the default does not).
pub(crate) fn busy_poll_ns(t: &crate::tunables::Tunables) -> u64 {
    if t.busy_poll.is_zero() || !sys::may_spin() {
        0
    } else {
        t.busy_poll.as_nanos() as u64
    }
}

/// Clears the leader flag when the leader returns (or unwinds).
struct Leading<'a> {
    inner: &'a Inner,
    /// A round of this leader was busy ([`Inner::lead_round`]): more may have come in
    /// meanwhile.
    busy: bool,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let inner = self.inner;
        inner.leave_armed();
        // Transport events already waiting (deep queues: more came in while this thread
        // handled the last ones): the I/O thread takes them on now, in parallel with this
        // thread's work, instead of after the grace period. A leader whose rounds were not
        // busy (a request/response loop) does not ask: that question cost such a loop a
        // system call per message.
        let pending = inner.crowded()
            || (self.busy
                && sys::poll_for(&[(inner.lead_set(), libc::POLLIN)], Duration::ZERO)
                    .is_ok_and(|r| r[0] != 0));
        inner.lead_deep.store(self.busy, Ordering::Relaxed);
        let at = if pending { 0 } else { inner.stamp() };
        inner.led_at.store(at, Ordering::SeqCst);
        inner.leader.store(false, Ordering::SeqCst);
        // An I/O thread that sleeps past GRACE while this lead lasted learns that it ended.
        let deep = inner.io_deep.swap(false, Ordering::SeqCst);
        if pending || deep {
            sys::eventfd_signal(inner.wake_fd.as_raw_fd());
        }
    }
}

/// Counts a thread in [`Inner::wait_leading`]; a second one marks the node crowded.
struct Waiting<'a>(&'a Inner);

impl<'a> Waiting<'a> {
    fn new(inner: &'a Inner) -> Self {
        if inner.waiting.fetch_add(1, Ordering::SeqCst) > 0 {
            inner.crowded_at.store(inner.stamp(), Ordering::SeqCst);
        }
        Waiting(inner)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Inner {
    /// Whether several threads waited on the node at once within [`CROWD_HOLD`]: then
    /// nobody leads, and the I/O thread serves them all.
    fn crowded(&self) -> bool {
        self.within(&self.crowded_at, CROWD_HOLD)
    }

    /// Engine nanoseconds now, for `led_at` and `crowded_at` (never 0, which means never).
    fn stamp(&self) -> u64 {
        self.now().as_nanos().max(1)
    }

    /// Whether the stamp in `at` is less than `window` old.
    fn within(&self, at: &AtomicU64, window: Duration) -> bool {
        let at = at.load(Ordering::SeqCst);
        at != 0 && self.now().as_nanos().saturating_sub(at) < window.as_nanos() as u64
    }

    /// Waits up to `timeout` until `ready()` reports something (a readable or writable socket,
    /// as `(readable, writable)`) or `fds[2]` is readable, with `fds[0..2]` the readiness
    /// descriptors of the socket whose wait state is `waiter` (negative ones skipped), which
    /// signal a change of `ready()` while this thread polls them ([`Waiter::polling`]). If no
    /// other thread leads and `may_lead`, this one does the node's transport I/O while it
    /// waits (module docs).
    ///
    /// A signal that interrupts the wait ends it (the caller decides whether that is an
    /// answer or a reason to wait again).
    ///
    /// # Errors
    /// `poll(2)` errors, EINTR (kind `Interrupted`) included.
    pub(crate) fn wait_leading(
        &self,
        fds: [RawFd; 3],
        waiter: &Waiter,
        timeout: Duration,
        may_lead: bool,
        ready: impl Fn() -> (bool, bool),
    ) -> io::Result<(bool, bool)> {
        let now = ready();
        if now.0 || now.1 || timeout.is_zero() {
            return Ok(now);
        }
        let _waiting = Waiting::new(self);
        let leads = may_lead
            && self.is_running()
            && !self.crowded()
            && self
                .leader
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok();
        if leads {
            self.leads.fetch_add(1, Ordering::SeqCst);
        }
        // The socket's descriptors, the other one, and (for the leader) its epoll set.
        let [a, b, c] = fds.map(|fd| (fd, libc::POLLIN));
        let asks = [a, b, c, (self.lead_set(), libc::POLLIN)];
        if !leads {
            let _polling = waiter.polling();
            let now = ready();
            if now.0 || now.1 {
                return Ok(now);
            }
            self.poll_or_acks(&asks[..3], timeout, fds[1] >= 0, &ready)?;
            return Ok(ready());
        }
        let mut leading = Leading {
            inner: self,
            busy: false,
        };
        // A thread that waits for its send buffer's room asks TCP for acknowledgements once
        // before it sleeps (`SIOCOUTQ` on the lanes with bytes unacknowledged): a lane whose
        // reads were taken as answers ([`super::tcp`]'s `TcpConn::answered`) learns TCP's
        // count only from its timed poll, up to a millisecond later, and a socket with a send
        // buffer of a few messages (`rds-stress` sizes it to its depth) would wait for it.
        if fds[1] >= 0 && self.acks_here() {
            let now = ready();
            if now.0 || now.1 {
                return Ok(now);
            }
        }
        let mut evs = lock(&self.lead_bufs);
        // A timeout too long to add to the clock (Duration::MAX, say) waits without end.
        let deadline = std::time::Instant::now().checked_add(timeout);
        loop {
            let left = deadline.map_or(timeout, |d| {
                d.saturating_duration_since(std::time::Instant::now())
            });
            // Run to completion: what the transports expect and will not be woken for (IB
            // completions) is polled before sleeping; if something came, look again first.
            if self.poll_before_sleep() {
                let now = ready();
                if now.0 || now.1 || left.is_zero() || !self.is_running() {
                    return Ok(now);
                }
                continue;
            }
            // A message this thread delivers to its own socket in its round is seen by
            // `ready()` below, with no eventfd written: the guards end before the round.
            // One system call, `epoll_wait` on the leader's set, where another thread's change
            // of the socket's readiness comes as the leader eventfd: for a caller with no
            // descriptor of its own while its rounds are not busy (request/response: 0.76x
            // the system calls and 0.86-0.89x the CPU per request at `--loopback -d 1`).
            // Deep queues sleep in `poll(2)` and collect after it as before: sleeping in
            // `epoll_wait` there cost `-d 32` 0.62x the rate with 2.7x the context switches
            // (the I/O thread was woken four times as often; why is not established).
            let direct = fds[2] < 0 && !leading.busy && !self.lead_deep.load(Ordering::Relaxed);
            let (other, cleared) = if direct {
                let on = waiter.lead_on(self.lead_fd.as_raw_fd(), fds[0] >= 0, fds[1] >= 0);
                let now = ready();
                if now.0 || now.1 {
                    return Ok(now);
                }
                let events = |t| {
                    self.epoll
                        .wait_shadow(&mut evs, Some(t))
                        .map(|()| evs.len())
                };
                self.spin_then(left, events, |&n| n > 0)?;
                (false, on.end())
            } else {
                // `poll(2)` on the socket's eventfds, the caller's descriptor and the
                // leader's set, whose events are then collected.
                let _polling = waiter.polling();
                let now = ready();
                if now.0 || now.1 {
                    return Ok(now);
                }
                let r = self.spin_then(
                    left,
                    |t| sys::poll_until_signal(&asks, t),
                    |r| r.iter().any(|&x| x != 0),
                )?;
                evs.clear();
                if r[3] != 0 {
                    self.collect_lead_events(&mut evs);
                }
                (r[2] != 0, false)
            };
            leading.busy |= self.lead_round(&mut evs, cleared);
            let now = ready();
            if now.0 || now.1 || other || left.is_zero() || !self.is_running() {
                return Ok(now);
            }
        }
    }

    /// The leader's set's pending events into `evs`, without sleeping (none if the set
    /// cannot be read).
    fn collect_lead_events(&self, evs: &mut Bufs) {
        if self.epoll.wait_shadow(evs, Some(Duration::ZERO)).is_err() {
            evs.clear();
        }
    }

    /// The descriptor of the leader's epoll set (the node's shadow set).
    fn lead_set(&self) -> RawFd {
        self.epoll
            .shadow_fd()
            .unwrap_or_else(|| self.epoll.raw_fd())
    }

    /// `poll(2)` on `asks` for up to `timeout`. A thread that waits for its socket's send
    /// buffer (`for_room`) while a send found one full ([`Inner::want_room`]) wakes after
    /// [`ROOM_SLICE`], then twice as long each time up to [`ROOM_SLICE_MAX`], to learn TCP's
    /// acknowledgements itself ([`Inner::acks_here`]), and returns once they made `ready()`
    /// report something: the room then costs no wake-up of the I/O thread and none of this
    /// one by it (qperf `rds_bw` waited about 140 us after TCP's acknowledgement that way).
    /// A signal ends it (EINTR).
    fn poll_or_acks(
        &self,
        asks: &[(RawFd, i16)],
        timeout: Duration,
        for_room: bool,
        ready: &impl Fn() -> (bool, bool),
    ) -> io::Result<()> {
        if !for_room || !self.room_wanted.load(Ordering::SeqCst) {
            sys::poll_until_signal(asks, timeout)?;
            return Ok(());
        }
        // The I/O thread leaves its timed acknowledgement polls to this thread meanwhile.
        let _asking = Asking::new(&self.room_waiters);
        let deadline = std::time::Instant::now().checked_add(timeout);
        let mut slice = ROOM_SLICE;
        loop {
            let left = deadline.map_or(timeout, |d| {
                d.saturating_duration_since(std::time::Instant::now())
            });
            let r = sys::poll_until_signal(asks, slice.min(left))?;
            if r.iter().any(|&x| x != 0) || left <= slice {
                return Ok(());
            }
            if self.acks_here() {
                let now = ready();
                if now.0 || now.1 {
                    return Ok(());
                }
                slice = ROOM_SLICE;
            } else {
                slice = (slice * 2).min(ROOM_SLICE_MAX);
            }
        }
    }

    /// `wait(t)` for up to `left`, first with `t` zero for up to the node's busy-poll time
    /// while `found` says nothing came (a thread that sleeps while the other CPU goes idle
    /// costs both a wake-up: on this project's two-vCPU VM, an `rds-stress -d 1` round trip
    /// spent most of its CPU there). A signal ends it (EINTR).
    fn spin_then<T>(
        &self,
        left: Duration,
        mut wait: impl FnMut(Duration) -> io::Result<T>,
        found: impl Fn(&T) -> bool,
    ) -> io::Result<T> {
        let spin = Duration::from_nanos(self.busy_poll_ns.load(Ordering::Relaxed)).min(left);
        if !spin.is_zero() {
            let t0 = std::time::Instant::now();
            loop {
                let r = wait(Duration::ZERO)?;
                if found(&r) || t0.elapsed() >= spin {
                    return Ok(r);
                }
                std::hint::spin_loop();
            }
        }
        wait(left.saturating_sub(spin))
    }

    /// The I/O thread's round, run by the leader on the events it collected from its set
    /// (`evs`). The leader eventfd's event is taken out, and the eventfd cleared unless the
    /// end of the sleep did (`cleared`, [`super::waiter::LeadOn`]: it clears what was
    /// written for its socket; what a thread wrote for the socket of a lead that had just
    /// ended is cleared here, or every sleep of the next leader would end at once).
    ///
    /// The events were collected without the transport lock, as the I/O thread's are. If
    /// another thread's round holds it, the leader waits for it and then collects the events
    /// again (one more `epoll_wait`, without sleeping): that round may have handled them (the
    /// descriptors are level-triggered), and a second round on them would take the engine
    /// lock for nothing while the other thread's work waits. Stale events are harmless all
    /// the same (the transports take a read that finds nothing, a reused slot included, as
    /// nothing to do).
    ///
    /// Returns whether the round was busy: more than one event, more than two frames read
    /// (a request/response loop of `rds-stress` reads two in a quarter of its rounds), or
    /// writes left for the I/O thread.
    fn lead_round(&self, evs: &mut Bufs, cleared: bool) -> bool {
        if without_lead_event(evs) && !cleared {
            sys::eventfd_clear(self.lead_fd.as_raw_fd());
        }
        if evs.is_empty() || !self.is_running() {
            return false;
        }
        let tcp = match try_lock(&self.tcp) {
            Some(g) => g,
            None => {
                let g = lock(&self.tcp);
                self.collect_lead_events(evs);
                // A leader eventfd written meanwhile stays written: the next sleep's round
                // clears it (the guard of this one has ended).
                without_lead_event(evs);
                if evs.is_empty() {
                    return false;
                }
                g
            }
        };
        let before = self.frames_in.load(Ordering::Relaxed);
        let more = self.io_round_with(tcp, evs);
        let events = evs.len();
        let read = self.frames_in.load(Ordering::Relaxed).wrapping_sub(before);
        self.frames_led.fetch_add(read, Ordering::Relaxed);
        // Partial writes: the I/O thread goes on with them. One that sleeps past GRACE
        // looks again at the timers this round may have set.
        if self.io_deep.swap(false, Ordering::SeqCst) || more {
            sys::eventfd_signal(self.wake_fd.as_raw_fd());
        }
        more || events > 1 || read > 2
    }

    /// A leader leaving while the I/O thread sleeps on the epoll set: what the transports
    /// left unwatched (IB completion queues this leader drained and did not arm, since it did
    /// not sleep) is polled and armed now, or else no event would wake the I/O thread for
    /// it. If the poll finds something (so it armed nothing), the I/O thread is woken to do
    /// its own poll before it sleeps again. In led mode the I/O thread polls before each of
    /// its short sleeps itself (`io_loop`).
    fn leave_armed(&self) {
        if self.io_epoll.load(Ordering::SeqCst) && self.poll_before_sleep() {
            sys::eventfd_signal(self.wake_fd.as_raw_fd());
        }
    }

    /// Whether the I/O thread, about to sleep in led mode, may sleep past [`GRACE`]: the
    /// lead it saw at its last such sleep (`last`, updated) still lasts. Marks the sleep
    /// first ([`Inner::io_deep`]), then looks at the lead again: a leader that leaves after
    /// that look sees the mark and wakes it.
    pub(crate) fn sleep_deep(&self, last: &mut u64) -> bool {
        let lead = self.leads.load(Ordering::SeqCst);
        let seen = std::mem::replace(last, lead);
        if !self.leader.load(Ordering::SeqCst) || lead != seen {
            return false;
        }
        self.io_deep.store(true, Ordering::SeqCst);
        if self.leader.load(Ordering::SeqCst) && self.leads.load(Ordering::SeqCst) == lead {
            return true;
        }
        self.io_deep.store(false, Ordering::SeqCst);
        false
    }

    /// Whether the I/O thread stays off the epoll set now (a thread leads or left less than
    /// [`GRACE`] ago).
    pub(crate) fn led(&self) -> bool {
        self.leader.load(Ordering::SeqCst) || self.within(&self.led_at, GRACE)
    }
}

/// A thread in [`Inner::poll_or_acks`] that asks for acknowledgements itself, counted in
/// `Inner::room_waiters` while it lives.
struct Asking<'a>(&'a AtomicUsize);

impl<'a> Asking<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Asking(count)
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Takes the leader eventfd's event out of `evs` (the transports know nothing of it);
/// returns whether it was there.
fn without_lead_event(evs: &mut Bufs) -> bool {
    let all = evs.len();
    evs.retain(|&(token, _)| token != TOKEN_LEAD);
    evs.len() != all
}
