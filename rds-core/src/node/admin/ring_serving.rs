//! Ring serving: the shared-memory rings of client sockets ([`RingServe`]) the event loop
//! serves when their client rings the doorbell, when their socket becomes ready (told by the
//! socket's hook, [`Told`], or for a socket without one by a readiness descriptor the ring
//! watches), and in turns while work is left; rings of closed connections finish the sends
//! their clients posted.

use std::any::Any;
use std::cell::Cell;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use super::{RingServe, Watch};
use crate::sys;

/// Epoll tokens of a ring's doorbell: `RING_TOKEN | ring id`.
pub(super) const RING_TOKEN: u64 = 1 << 61;
/// Epoll tokens of a socket readiness descriptor a ring watches: `WATCH_TOKEN | fd`.
pub(super) const WATCH_TOKEN: u64 = 1 << 60;

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

thread_local! {
    /// Set in the event loop's thread: a hook called there needs no wake-up.
    static IN_LOOP: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as the event loop's.
pub(super) fn on_loop_thread() {
    IN_LOOP.with(|f| f.set(true));
}

/// Rings whose socket became ready, told by the sockets' hooks from whichever thread made the
/// change (the event loop itself for a message one client sent another through the node's
/// loopback, which then costs no system call; the node's I/O thread for a message from the
/// network, which wakes the loop once for all it tells before the loop looks).
pub(super) struct Told {
    /// `(ring id, receive side)`, in the order told. Bounded by the loop: a socket is told
    /// again only after it was not ready, and only the loop's own receives and sends on it
    /// make it so.
    list: Mutex<Vec<(u64, bool)>>,
    /// The event loop's wake-up eventfd.
    wake: Arc<OwnedFd>,
}

impl Told {
    fn tell(&self, ring: u64, rx: bool) {
        let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        let first = l.is_empty();
        l.push((ring, rx));
        drop(l);
        // Whoever made the list non-empty wakes the loop, unless it is the loop, which
        // looks at the list before it sleeps.
        if first && !IN_LOOP.with(Cell::get) {
            sys::eventfd_signal(self.wake.as_raw_fd());
        }
    }

    fn take(&self) -> Vec<(u64, bool)> {
        std::mem::take(&mut *self.list.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn is_empty(&self) -> bool {
        self.list
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }
}

/// The rings being served.
pub(super) struct Rings {
    /// By ring id.
    rings: HashMap<u64, RingEntry>,
    /// Readiness descriptors rings watch.
    watched: HashMap<RawFd, Watched>,
    next_ring: u64,
    /// Rings with work left from their last turn: served again before the loop sleeps.
    again: Vec<u64>,
    /// Rings of closed connections still running the sends their clients posted.
    closing: Vec<Box<dyn RingServe>>,
    /// Rings whose followed socket became ready.
    told: Arc<Told>,
}

impl Rings {
    /// No rings yet; hooks wake the event loop through `wake`.
    pub(super) fn new(wake: Arc<OwnedFd>) -> Self {
        Rings {
            rings: HashMap::new(),
            watched: HashMap::new(),
            next_ring: 1,
            again: Vec::new(),
            closing: Vec::new(),
            told: Arc::new(Told {
                list: Mutex::new(Vec::new()),
                wake,
            }),
        }
    }

    /// Whether a ring has work left (the loop must not sleep).
    pub(super) fn busy(&self) -> bool {
        !self.again.is_empty() || !self.closing.is_empty() || !self.told.is_empty()
    }

    /// Tells the rings whose socket became ready ([`RingServe::fired`]), until none is left.
    pub(super) fn serve_told(&mut self, ep: &sys::Epoll) {
        loop {
            let told = self.told.take();
            if told.is_empty() {
                return;
            }
            for (id, rx) in told {
                if let Some(r) = self.rings.get_mut(&id) {
                    let again = r.ring.fired(rx);
                    self.add_watches(ep, id, again);
                }
            }
        }
    }

    /// Starts serving `ring` of connection `owner`: its doorbell joins `ep`, edge-triggered.
    pub(super) fn add(
        &mut self,
        ep: &sys::Epoll,
        owner: u64,
        mut ring: Box<dyn RingServe>,
    ) -> io::Result<()> {
        let id = self.next_ring;
        self.next_ring += 1;
        ep.add(
            ring.doorbell(),
            RING_TOKEN | id,
            sys::EPOLLIN | sys::EPOLLET,
        )?;
        let told = Arc::downgrade(&self.told);
        ring.follow(Arc::new(move |rx| {
            if let Some(t) = told.upgrade() {
                t.tell(id, rx);
            }
        }));
        self.rings.insert(id, RingEntry { owner, ring });
        Ok(())
    }

    /// Connection `owner` closed: its rings leave `ep`; their posted sends run now and in
    /// later turns ([`Rings::finish_closing`]), a bounded number each. The first turn runs
    /// while the connection still holds the socket.
    pub(super) fn end_owner(&mut self, ep: &sys::Epoll, owner: u64) {
        let ids: Vec<u64> = self
            .rings
            .iter()
            .filter(|(_, r)| r.owner == owner)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            if let Some(mut r) = self.drop_ring(ep, id) {
                if !r.finish() {
                    self.closing.push(r);
                }
            }
        }
    }

    /// Runs a turn of the rings of closed connections; drops those done.
    pub(super) fn finish_closing(&mut self) {
        self.closing.retain_mut(|r| !r.finish());
    }

    /// Forgets a ring: its doorbell and the descriptors it watches leave `ep`. Returns it.
    fn drop_ring(&mut self, ep: &sys::Epoll, id: u64) -> Option<Box<dyn RingServe>> {
        let ring = self.rings.remove(&id).map(|r| {
            let _ = ep.delete(r.ring.doorbell());
            r.ring
        });
        let fds: Vec<RawFd> = self
            .watched
            .iter()
            .filter(|(_, w)| w.ring == id)
            .map(|(&fd, _)| fd)
            .collect();
        for fd in fds {
            let _ = ep.delete(fd);
            self.watched.remove(&fd);
        }
        ring
    }

    /// The rings whose turn came again.
    pub(super) fn take_again(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.again)
    }

    /// The client rang ring `id`'s doorbell (or its turn came again). `Some(owner)`: the
    /// client broke the ring's rules; the ring is dropped and its connection must close.
    pub(super) fn serve(&mut self, ep: &sys::Epoll, id: u64) -> Option<u64> {
        let entry = self.rings.get_mut(&id)?;
        match entry.ring.serve() {
            Ok(served) => {
                if served.more && !self.again.contains(&id) {
                    self.again.push(id);
                }
                self.add_watches(ep, id, served.watch);
                None
            }
            Err(_) => {
                let owner = entry.owner;
                let _faulted = self.drop_ring(ep, id);
                Some(owner)
            }
        }
    }

    /// Watches socket readiness descriptors once each for ring `id`.
    fn add_watches(&mut self, ep: &sys::Epoll, id: u64, watch: Vec<Watch>) {
        for w in watch {
            if self.watched.contains_key(&w.fd)
                || ep
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
    pub(super) fn fired(&mut self, ep: &sys::Epoll, fd: RawFd) {
        let _ = ep.delete(fd);
        if let Some(w) = self.watched.remove(&fd) {
            if let Some(r) = self.rings.get_mut(&w.ring) {
                let again = r.ring.fired(w.rx);
                self.add_watches(ep, w.ring, again);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::admin::Served;

    type Hook = Arc<dyn Fn(bool) + Send + Sync>;

    /// A ring that records what it was told.
    struct Fake {
        bell: OwnedFd,
        hook: Arc<Mutex<Option<Hook>>>,
        fired: Arc<Mutex<Vec<bool>>>,
    }

    impl std::fmt::Debug for Fake {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Fake")
        }
    }

    impl RingServe for Fake {
        fn doorbell(&self) -> RawFd {
            self.bell.as_raw_fd()
        }
        fn serve(&mut self) -> Result<Served, String> {
            Ok(Served::default())
        }
        fn fired(&mut self, rx: bool) -> Vec<super::super::Watch> {
            self.fired.lock().unwrap().push(rx);
            Vec::new()
        }
        fn follow(&mut self, ready: Hook) -> bool {
            *self.hook.lock().unwrap() = Some(ready);
            true
        }
        fn finish(&mut self) -> bool {
            true
        }
    }

    fn woken(fd: &OwnedFd) -> bool {
        sys::poll_for(&[(fd.as_raw_fd(), libc::POLLIN)], std::time::Duration::ZERO).expect("poll")
            [0]
            != 0
    }

    /// A followed socket's changes reach its ring through [`Rings::serve_told`]: told from
    /// another thread they wake the event loop once; told in the loop's own thread they
    /// cost no wake-up; told for a ring that is gone, nothing.
    #[test]
    fn a_told_ring_is_served_and_only_another_thread_wakes_the_loop() {
        let wake = Arc::new(sys::eventfd().expect("eventfd"));
        let ep = sys::Epoll::new().expect("epoll");
        let mut rings = Rings::new(wake.clone());
        let hook = Arc::new(Mutex::new(None));
        let fired = Arc::new(Mutex::new(Vec::new()));
        let fake = Fake {
            bell: sys::eventfd().expect("eventfd"),
            hook: hook.clone(),
            fired: fired.clone(),
        };
        rings.add(&ep, 7, Box::new(fake)).expect("add");
        let h = hook
            .lock()
            .unwrap()
            .clone()
            .expect("the ring follows its socket");
        let h2 = h.clone();
        std::thread::spawn(move || {
            h2(true);
            h2(false);
        })
        .join()
        .unwrap();
        assert!(woken(&wake), "another thread's change wakes the loop");
        assert!(rings.busy());
        rings.serve_told(&ep);
        assert_eq!(*fired.lock().unwrap(), vec![true, false]);
        assert!(!rings.busy());
        sys::eventfd_clear(wake.as_raw_fd());
        std::thread::spawn(move || {
            on_loop_thread();
            h(true);
        })
        .join()
        .unwrap();
        assert!(!woken(&wake), "the loop's own change needs no wake-up");
        rings.end_owner(&ep, 7);
        rings.serve_told(&ep);
        assert_eq!(
            *fired.lock().unwrap(),
            vec![true, false],
            "the ring is gone"
        );
    }
}
