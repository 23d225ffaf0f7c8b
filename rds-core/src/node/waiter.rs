//! A socket's wait state: the condition variable of threads blocked in a receive or send,
//! the readiness flags a waiting thread of this library checks, and the readiness eventfds
//! that `poll(2)` sees, written only when somebody may be blocked on them ([`Waiter`]).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::sys;

/// Told, in the thread that made the change and under the engine lock, each time the socket
/// becomes readable (`true`) or writable (`false`): the daemon's ring host, which then pushes
/// the socket's messages to its client without an eventfd and an epoll round
/// ([`Waiter::set_hook`]). It must be quick and take no lock but its own.
pub(crate) type ReadyHook = Arc<dyn Fn(bool) + Send + Sync>;

/// Per-socket wait state (lives under the engine lock).
///
/// The socket's readiness is kept twice: as flags ([`Waiter::signaled`], what a thread of
/// this library waiting for the socket checks) and in its readiness eventfds, which are
/// written only when somebody may be blocked in `poll(2)` on them: a thread of this library
/// inside its poll ([`Waiter::polling`]), or anybody, once the descriptors were handed out
/// ([`Waiter::hand_out`]: `Socket::fd`, the daemon, the preload library). So a thread that
/// delivers a message to the socket it waits for itself (a leader, `lead.rs`), or a socket
/// whose owner is busy, costs no eventfd write and no read to clear it.
#[derive(Debug, Default)]
pub(crate) struct Waiter {
    pub cv: Condvar,
    /// Threads blocked on `cv` (changed under the engine lock): a wakeup with nobody
    /// waiting costs no `futex` call.
    pub waiting: AtomicUsize,
    /// Readable eventfd (POLLIN readiness), created on demand.
    pub rx_fd: Mutex<Option<OwnedFd>>,
    /// Writable eventfd (POLLOUT readiness), created on demand.
    pub tx_fd: Mutex<Option<OwnedFd>>,
    /// The readiness as last brought in line: [`READABLE`] and [`WRITABLE`] bits.
    ready: AtomicU8,
    /// Which eventfds are signalled now (the same bits; a bit changes only under its
    /// eventfd's lock, and is read without it).
    fds_on: AtomicU8,
    /// Threads of this library in `poll(2)` on the eventfds now ([`Waiter::polling`]).
    pollers: AtomicUsize,
    /// The eventfds were handed out: every change is written to them.
    handed_out: AtomicBool,
    /// Threads of the owner of handed-out descriptors that wait to receive on the socket
    /// themselves ([`Waiter::quiet_rx`]): meanwhile POLLIN is written to the readable eventfd
    /// only for the library's own pollers.
    quiet_rx: AtomicUsize,
    /// The socket sent a message since its last blocking receive waited (that wait then
    /// reads the transport itself: `Embedded::wait_readable`).
    pub sent: AtomicBool,
    /// Whether `hook` is set (read without its lock on every change).
    hooked: AtomicBool,
    /// Called on each change towards ready ([`ReadyHook`]).
    hook: HookSlot,
    /// The node's leader eventfd and the readiness bits its leader waits for, while a
    /// thread leads in a wait for this socket ([`Waiter::lead_on`]).
    lead: LeadSlot,
    /// The leader eventfd was written for this socket since the last lead ended.
    lead_hit: AtomicBool,
}

/// [`Waiter`]'s leader eventfd (low 32 bits) and readiness bits (the next 8), -1 for none.
#[derive(Debug)]
struct LeadSlot(AtomicI64);

impl Default for LeadSlot {
    fn default() -> Self {
        LeadSlot(AtomicI64::new(-1))
    }
}

/// A thread leads in a wait for the socket ([`Waiter::lead_on`]) until this drops or
/// [`LeadOn::end`]s; then what was written to the leader eventfd for it is cleared (one read,
/// only if written).
pub(crate) struct LeadOn<'a>(&'a Waiter, RawFd);

impl LeadOn<'_> {
    /// Ends the lead; returns whether the leader eventfd was cleared.
    pub(crate) fn end(self) -> bool {
        let cleared = self.finish();
        std::mem::forget(self);
        cleared
    }

    fn finish(&self) -> bool {
        self.0.lead.0.store(-1, Ordering::SeqCst);
        let hit = self.0.lead_hit.swap(false, Ordering::SeqCst);
        if hit {
            sys::eventfd_clear(self.1);
        }
        hit
    }
}

impl Drop for LeadOn<'_> {
    fn drop(&mut self) {
        self.finish();
    }
}

/// [`Waiter`]'s hook slot (a closure has no `Debug`).
#[derive(Default)]
struct HookSlot(Mutex<Option<ReadyHook>>);

impl std::fmt::Debug for HookSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookSlot")
    }
}

/// [`Waiter`]'s readiness bit for POLLIN.
const READABLE: u8 = 1;
/// [`Waiter`]'s readiness bit for POLLOUT.
const WRITABLE: u8 = 2;

/// Counts a thread of this library in `poll(2)` on a socket's eventfds
/// ([`Waiter::polling`]).
pub(crate) struct Polling<'a>(&'a Waiter);

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        self.0.pollers.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Waiter {
    /// The socket's readiness, `(readable, writable)`, as last brought in line with it
    /// ([`Waiter::update_fds`]).
    pub(crate) fn signaled(&self) -> (bool, bool) {
        let r = self.ready.load(Ordering::SeqCst);
        (r & READABLE != 0, r & WRITABLE != 0)
    }

    /// The readable (`rx`) or the writable eventfd's slot.
    pub(crate) fn slot(&self, rx: bool) -> &Mutex<Option<OwnedFd>> {
        if rx {
            &self.rx_fd
        } else {
            &self.tx_fd
        }
    }

    /// Marks the eventfds as polled by others from now on (they were handed out of the
    /// library); the caller, holding the engine lock, then brings them in line.
    pub(crate) fn hand_out(&self) {
        self.handed_out.store(true, Ordering::SeqCst);
    }

    /// While `on` (counted: several threads may), the readable eventfd, though handed out,
    /// is written only for the library's own pollers: its owner (the preload library, whose
    /// readiness thread polls it) has a thread waiting to receive on the socket itself,
    /// which sees the socket's flags, and would wake its poller for nothing. When the last
    /// such thread is done, the caller brings the eventfd in line ([`Waiter::update_fds`]).
    pub(crate) fn quiet_rx(&self, on: bool) {
        if on {
            self.quiet_rx.fetch_add(1, Ordering::SeqCst);
        } else {
            self.quiet_rx.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// A thread of this library is about to `poll(2)` the eventfds (until the guard drops):
    /// changes are written to them meanwhile, and those that came before are written now.
    /// The caller checks [`Waiter::signaled`] again before it polls (a change made between
    /// its last check and this call may have seen no poller).
    pub(crate) fn polling(&self) -> Polling<'_> {
        self.pollers.fetch_add(1, Ordering::SeqCst);
        Polling(self)
    }

    /// A thread that leads the node's I/O (`lead.rs`) is about to sleep in the leader's
    /// epoll set, which holds `fd` and not the socket's eventfds: until the guard drops, a
    /// change towards readable (if `rx`) or writable (if `tx`) is written to `fd` instead
    /// (one leader at a time, so one socket's at a time). As with [`Waiter::polling`], the
    /// caller checks [`Waiter::signaled`] again before it sleeps.
    pub(crate) fn lead_on(&self, fd: RawFd, rx: bool, tx: bool) -> LeadOn<'_> {
        let bits = (u8::from(rx) * READABLE) | (u8::from(tx) * WRITABLE);
        self.lead.0.store(
            i64::from(fd as u32) | i64::from(bits) << 32,
            Ordering::SeqCst,
        );
        LeadOn(self, fd)
    }

    /// Sets (or with `None` removes) the hook told of every change towards ready from now
    /// on. The caller then looks at the socket's readiness itself: a change made before
    /// this call is not told.
    pub(crate) fn set_hook(&self, hook: Option<ReadyHook>) {
        let mut g = self.hook.0.lock().unwrap_or_else(|p| p.into_inner());
        self.hooked.store(hook.is_some(), Ordering::SeqCst);
        *g = hook;
    }

    /// Brings the readiness flags, and the eventfds if somebody may poll them, in line with
    /// the socket's state; tells the hook of a change towards ready.
    pub(crate) fn update_fds(&self, readable: bool, writable: bool) {
        let want = (u8::from(readable) * READABLE) | (u8::from(writable) * WRITABLE);
        let was = self.ready.swap(want, Ordering::SeqCst);
        if want & !was != 0 {
            let lead = self.lead.0.load(Ordering::SeqCst);
            if lead >= 0 && (lead >> 32) as u8 & want & !was != 0 {
                self.lead_hit.store(true, Ordering::SeqCst);
                sys::eventfd_signal(lead as u32 as RawFd);
            }
        }
        if want & !was != 0 && self.hooked.load(Ordering::SeqCst) {
            let hook = self
                .hook
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if let Some(h) = hook {
                for (bit, rx) in [(READABLE, true), (WRITABLE, false)] {
                    if want & !was & bit != 0 {
                        h(rx);
                    }
                }
            }
        }
        let ours = self.pollers.load(Ordering::SeqCst) > 0;
        let handed_out = self.handed_out.load(Ordering::SeqCst);
        // Per eventfd (READABLE, WRITABLE): whether somebody may poll it now.
        let polled = [
            ours || (handed_out && self.quiet_rx.load(Ordering::SeqCst) == 0),
            ours || handed_out,
        ];
        let on = self.fds_on.load(Ordering::SeqCst);
        // Nobody polls and nothing to clear: the flags are all.
        if !polled[0] && !polled[1] && on & !want == 0 {
            return;
        }
        for ((bit, slot), polled) in [(READABLE, &self.rx_fd), (WRITABLE, &self.tx_fd)]
            .into_iter()
            .zip(polled)
        {
            let want = want & bit != 0;
            let g = slot.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(fd) = g.as_ref() {
                let signaled = self.fds_on.load(Ordering::SeqCst) & bit != 0;
                if want && !signaled && polled {
                    sys::eventfd_signal(fd.as_raw_fd());
                    self.fds_on.fetch_or(bit, Ordering::SeqCst);
                } else if !want && signaled {
                    sys::eventfd_clear(fd.as_raw_fd());
                    self.fds_on.fetch_and(!bit, Ordering::SeqCst);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `fd` polls readable now.
    fn readable(fd: &OwnedFd) -> bool {
        sys::poll_for(&[(fd.as_raw_fd(), libc::POLLIN)], std::time::Duration::ZERO).expect("poll")
            [0]
            != 0
    }

    fn with_rx_fd() -> Waiter {
        let w = Waiter::default();
        *w.rx_fd.lock().unwrap() = Some(sys::eventfd().expect("eventfd"));
        w
    }

    /// A change that nobody polls for sets the flags only; one made while a thread of the
    /// library polls is written, and cleared again when the socket is drained.
    #[test]
    fn the_eventfd_is_written_only_while_somebody_polls_it() {
        let w = with_rx_fd();
        w.update_fds(true, false);
        assert_eq!(w.signaled(), (true, false));
        let g = w.rx_fd.lock().unwrap();
        assert!(!readable(g.as_ref().unwrap()), "nobody polls: no write");
        drop(g);
        w.update_fds(false, false);
        {
            let _p = w.polling();
            w.update_fds(true, false);
        }
        let g = w.rx_fd.lock().unwrap();
        assert!(readable(g.as_ref().unwrap()), "written for the poller");
        drop(g);
        // Drained with nobody polling: the signal is cleared all the same.
        w.update_fds(false, true);
        assert_eq!(w.signaled(), (false, true));
        let g = w.rx_fd.lock().unwrap();
        assert!(!readable(g.as_ref().unwrap()), "cleared");
    }

    /// Descriptors handed out of the library are written on every change.
    #[test]
    fn handed_out_descriptors_follow_every_change() {
        let w = with_rx_fd();
        w.hand_out();
        w.update_fds(true, false);
        let g = w.rx_fd.lock().unwrap();
        assert!(readable(g.as_ref().unwrap()));
        drop(g);
        w.update_fds(false, false);
        let g = w.rx_fd.lock().unwrap();
        assert!(!readable(g.as_ref().unwrap()));
    }

    /// While the owner of handed-out descriptors waits to receive itself, POLLIN is not
    /// written (its poller is not woken for nothing), except for a poller of the library;
    /// POLLOUT still is; bringing the eventfd in line afterwards writes what is true then.
    #[test]
    fn a_quiet_readable_eventfd_is_written_only_for_our_pollers() {
        let w = with_rx_fd();
        *w.tx_fd.lock().unwrap() = Some(sys::eventfd().expect("eventfd"));
        w.hand_out();
        w.quiet_rx(true);
        w.update_fds(true, true);
        let rx = |w: &Waiter| readable(w.rx_fd.lock().unwrap().as_ref().unwrap());
        assert!(!rx(&w), "quiet: not written");
        assert!(readable(w.tx_fd.lock().unwrap().as_ref().unwrap()));
        w.update_fds(false, true);
        {
            let _p = w.polling();
            w.update_fds(true, true);
        }
        assert!(rx(&w), "written for the library's poller");
        w.update_fds(false, true);
        assert!(!rx(&w), "cleared");
        w.update_fds(true, true);
        assert!(!rx(&w));
        w.quiet_rx(false);
        w.update_fds(true, true);
        assert!(rx(&w), "in line again");
    }

    /// A poller that registers and then finds the socket not ready is woken by a change made
    /// by another thread, whichever comes first (no lost wake-up): 2,000 rounds.
    #[test]
    fn a_registered_poller_is_never_missed() {
        let w = std::sync::Arc::new(with_rx_fd());
        for _ in 0..2000 {
            w.update_fds(false, false);
            let w2 = w.clone();
            let t = std::thread::spawn(move || w2.update_fds(true, false));
            let fd = w.rx_fd.lock().unwrap().as_ref().unwrap().as_raw_fd();
            let woke = {
                let _p = w.polling();
                w.signaled().0
                    || sys::poll_for(&[(fd, libc::POLLIN)], std::time::Duration::from_secs(5))
                        .expect("poll")[0]
                        != 0
            };
            t.join().unwrap();
            assert!(woke, "the change was neither seen nor written");
        }
    }

    /// The hook hears each change towards ready once, in the thread that made it, and
    /// nothing after it is removed; it costs no eventfd.
    #[test]
    fn the_hook_is_told_of_each_change_towards_ready() {
        let w = with_rx_fd();
        let told = Arc::new(Mutex::new(Vec::new()));
        let t = told.clone();
        w.set_hook(Some(Arc::new(move |rx| t.lock().unwrap().push(rx))));
        w.update_fds(true, false);
        w.update_fds(true, false);
        w.update_fds(true, true);
        w.update_fds(false, true);
        w.update_fds(true, false);
        w.set_hook(None);
        w.update_fds(false, false);
        w.update_fds(true, true);
        assert_eq!(*told.lock().unwrap(), vec![true, false, true]);
        let fd = w.rx_fd.lock().unwrap();
        assert!(!readable(fd.as_ref().unwrap()), "nobody polled the eventfd");
    }

    /// While a leader waits for the socket, a change towards what it waits for is written
    /// to the leader's eventfd (and not to the socket's); the end of the lead clears it;
    /// after that, nothing is written.
    #[test]
    fn a_leader_hears_changes_towards_ready_on_its_own_eventfd() {
        let w = with_rx_fd();
        let lead = sys::eventfd().expect("eventfd");
        {
            let _on = w.lead_on(lead.as_raw_fd(), true, false);
            w.update_fds(false, false);
            assert!(!readable(&lead), "no change towards ready");
            w.update_fds(false, true);
            assert!(!readable(&lead), "writable: not what the leader waits for");
            w.update_fds(true, true);
            assert!(readable(&lead));
            assert!(!readable(w.rx_fd.lock().unwrap().as_ref().unwrap()));
        }
        assert!(!readable(&lead), "cleared as the lead ended");
        let on = w.lead_on(lead.as_raw_fd(), true, true);
        assert!(!on.end(), "nothing written: nothing to clear");
        w.update_fds(false, false);
        w.update_fds(true, true);
        assert!(!readable(&lead), "the lead ended");
    }
}
