//! Admission: the listener, accepting control connections (with an [`ACCEPT_BACKOFF`] pause
//! when descriptors run out), the peer check of each ([`super::peer`]) and the connection
//! caps ([`CONNS_PER_UID`], [`CONNS_PER_NODE`], [`PRIVILEGED_HEADROOM`]).

use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::framing::refuse;
use super::{
    peer, Conn, Ctx, Peer, ACCEPT_BACKOFF, CONNS_PER_NODE, CONNS_PER_UID, PRIVILEGED_HEADROOM,
    REPLY_TIMEOUT,
};
use crate::sys;

/// The listener's epoll token.
pub(super) const LISTENER: u64 = u64::MAX;

/// The listener and the count of open connections the caps are held against.
pub(super) struct Admission {
    listener: UnixListener,
    /// The listener is in epoll (it leaves during a back-off).
    listening: bool,
    backoff_until: Option<Instant>,
    by_uid: HashMap<u32, usize>,
    total: usize,
    unpriv: usize,
    next_id: u64,
}

impl Admission {
    /// Admission on `listener`, registered in `ep` under [`LISTENER`].
    pub(super) fn new(listener: UnixListener, ep: &sys::Epoll) -> io::Result<Self> {
        ep.add(listener.as_raw_fd(), LISTENER, sys::EPOLLIN)?;
        Ok(Admission {
            listener,
            listening: true,
            backoff_until: None,
            by_uid: HashMap::new(),
            total: 0,
            unpriv: 0,
            next_id: 1,
        })
    }

    /// When the accept back-off ends, if one runs.
    pub(super) fn backoff_until(&self) -> Option<Instant> {
        self.backoff_until
    }

    /// Accepts every pending connection; returns those admitted, non-blocking and registered
    /// in `ep` for input under their id. A connection over a cap gets an error frame and is
    /// dropped (counted in `ctx.refused`).
    pub(super) fn accept(&mut self, ep: &sys::Epoll, ctx: &Ctx) -> Vec<Conn> {
        let mut admitted = Vec::new();
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => admitted.extend(self.admit(ep, ctx, stream)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The client left before it was accepted.
                Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {}
                Err(_) => {
                    // Out of descriptors (EMFILE, ENFILE) or memory, or another failure:
                    // pause the listener rather than retry at once.
                    if self.listening {
                        let _ = ep.delete(self.listener.as_raw_fd());
                        self.listening = false;
                    }
                    self.backoff_until = Some(Instant::now() + ACCEPT_BACKOFF);
                    break;
                }
            }
        }
        admitted
    }

    /// Ends a back-off that is due: true when the listener is back in `ep` and the caller
    /// should accept.
    pub(super) fn resume(&mut self, ep: &sys::Epoll, now: Instant) -> bool {
        if self.backoff_until.is_none_or(|t| now < t) {
            return false;
        }
        self.backoff_until = None;
        if !self.listening
            && ep
                .add(self.listener.as_raw_fd(), LISTENER, sys::EPOLLIN)
                .is_ok()
        {
            self.listening = true;
            return true;
        }
        false
    }

    /// Why `peer` may not open one more connection, if a cap stops it.
    fn over_cap(&self, peer: &Peer) -> Option<String> {
        let uid_conns = self.by_uid.get(&peer.uid).copied().unwrap_or(0);
        if peer.privileged {
            (self.total >= CONNS_PER_NODE + PRIVILEGED_HEADROOM).then(|| {
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
        } else if self.unpriv >= CONNS_PER_NODE {
            Some(format!(
                "too many control connections on this node (cap {CONNS_PER_NODE})"
            ))
        } else {
            None
        }
    }

    fn admit(&mut self, ep: &sys::Epoll, ctx: &Ctx, stream: UnixStream) -> Option<Conn> {
        let peer = peer::peer_of(&stream, ctx.owner_uid);
        if let Some(m) = self.over_cap(&peer) {
            ctx.refused.fetch_add(1, Ordering::Relaxed);
            refuse(&stream, libc::EAGAIN, m);
            return None;
        }
        if stream.set_nonblocking(true).is_err()
            || stream.set_write_timeout(Some(REPLY_TIMEOUT)).is_err()
        {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        if ep.add(stream.as_raw_fd(), id, sys::EPOLLIN).is_err() {
            return None;
        }
        *self.by_uid.entry(peer.uid).or_insert(0) += 1;
        self.total += 1;
        if !peer.privileged {
            self.unpriv += 1;
        }
        Some(Conn {
            id,
            stream,
            peer,
            buf: Vec::new(),
            fds: Vec::new(),
            partial_since: None,
            socks: ctx.sockets.as_ref().map(|s| s.table(peer)),
        })
    }

    /// A connection of `peer` closed: it no longer counts against the caps.
    pub(super) fn left(&mut self, peer: &Peer) {
        if let Some(n) = self.by_uid.get_mut(&peer.uid) {
            *n -= 1;
            if *n == 0 {
                self.by_uid.remove(&peer.uid);
            }
        }
        self.total -= 1;
        if !peer.privileged {
            self.unpriv -= 1;
        }
    }
}
