//! Ring serving: the shared-memory rings of client sockets ([`RingServe`]) the event loop
//! serves when their client rings the doorbell, when a socket readiness descriptor a ring
//! watches fires, and in turns while work is left; rings of closed connections finish the
//! sends their clients posted.

use std::any::Any;
use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;

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
}

impl Rings {
    pub(super) fn new() -> Self {
        Rings {
            rings: HashMap::new(),
            watched: HashMap::new(),
            next_ring: 1,
            again: Vec::new(),
            closing: Vec::new(),
        }
    }

    /// Whether a ring has work left (the loop must not sleep).
    pub(super) fn busy(&self) -> bool {
        !self.again.is_empty() || !self.closing.is_empty()
    }

    /// Starts serving `ring` of connection `owner`: its doorbell joins `ep`, edge-triggered.
    pub(super) fn add(
        &mut self,
        ep: &sys::Epoll,
        owner: u64,
        ring: Box<dyn RingServe>,
    ) -> io::Result<()> {
        let id = self.next_ring;
        self.next_ring += 1;
        ep.add(
            ring.doorbell(),
            RING_TOKEN | id,
            sys::EPOLLIN | sys::EPOLLET,
        )?;
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
