//! The transport connection lifecycle: what the engine answers to each accepted or connected
//! transport connection, and the accepted ones it holds unread.
//!
//! The transport only performs system calls; every decision that could lose or reorder data
//! is taken here, so that the simulator (`crate::sim`) runs exactly the node's rules.
//!
//! # The rule
//! A connection that the peer may have written to is read to its end before it is closed,
//! and a path's connections are read one after the other, oldest first. RDS/TCP releases a
//! message once the receiver's TCP acknowledged it, so bytes acknowledged on a connection we
//! then close unread are lost, and bytes of a newer connection read before an older one's make
//! the older messages look like duplicates. Rule by rule:
//!
//! 1. **Accepted while the lane is busy** ([`Incoming::Hold`]): held unread (its data waits in
//!    the TCP receive buffer) and offered again every [`HELD_RETRY`] and as soon as a drain
//!    ends, for at most [`super::STASH_MAX`]. Within the caps ([`HELD_PER_ADDR`],
//!    [`HELD_MAX`]) nothing held is reset. The kernel resets such a connection at once (base
//!    kernels) or stashes one per path (newer ones); we keep a few per peer. One accepted
//!    before the peer's generation changed and adopted after is the old incarnation's: its
//!    frames are checked against that incarnation's sequence (`Stack::peer_gen_update`).
//! 2. **Accepted for a lane that is up** (the peer dropped the old connection, or restarted):
//!    the old connection is half-closed and read to its end (`DropReason::Superseded`), the
//!    newcomer held until then (rule 1). The kernel drops the old connection and whatever its
//!    receive buffer holds.
//! 3. **Dropped while connecting** (an operator restart, a tunable, a reset racing the
//!    connect): the attempt is half-closed and read to its end like an established
//!    connection, and the path reconnects only after it ended. `shutdown(2)` aborts an attempt
//!    still in `SYN_SENT` (nothing can have been acknowledged on it, and it ends at once) and
//!    sends a FIN on one that completed, whose peer may have adopted it and written to it. The
//!    kernel closes such a connection outright: what the peer wrote in the window between its
//!    accept and our close is acknowledged by our TCP and lost.
//! 4. **Connected after the path moved on** ([`Established::Drain`]): the same as rule 3 (it
//!    is the same race, seen from the other order of events).
//! 5. **A connection that only asks the peer to connect back** (the larger address's
//!    trigger) is closed at once ([`Established::Close`]): the peer, as the smaller address,
//!    resets it without writing to it.
//!
//! The transport reads a connection it was told to drain until the peer's end of stream
//! (bounded by its own drain timeout, for a peer that never closes) and then reports
//! [`Stack::handle_disconnected`] for the drained epoch.

use std::collections::HashMap;
use std::net::IpAddr;

use core::time::Duration;

use crate::info::PathState;
use crate::proto::{canonical, AcceptError, ConnId, Established, Event, HeldEnd, Incoming};
use crate::proto::{LinkId, TransportKind};
use crate::time::Instant;

use super::{Stack, STASH_MAX};

/// How often held connections are offered to the engine again.
pub const HELD_RETRY: Duration = Duration::from_millis(2);

/// Accepted connections held unread for one peer address at most; beyond, its oldest is reset.
pub const HELD_PER_ADDR: usize = 8;

/// Accepted connections held unread by the node at most; beyond, the oldest of the address
/// holding the most is reset.
pub const HELD_MAX: usize = 256;

/// An accepted connection waiting, unread, for a lane.
#[derive(Debug, Clone)]
pub(super) struct Held {
    link: LinkId,
    laddr: IpAddr,
    faddr: IpAddr,
    kind: TransportKind,
    client_port: u16,
    since: Instant,
    /// The peer's generation number when it was accepted (0: not known yet).
    peer_gen: u32,
}

impl Stack {
    /// A transport connection from `faddr` to our `laddr` was accepted; `link` is the
    /// transport's name for it and `client_port` the peer's source port (lane selection).
    /// See the module documentation for what each answer means.
    pub fn link_accepted(
        &mut self,
        now: Instant,
        link: LinkId,
        laddr: IpAddr,
        faddr: IpAddr,
        kind: TransportKind,
        client_port: u16,
    ) -> Incoming {
        match self.handle_accept(now, laddr, faddr, kind, client_port, Duration::ZERO) {
            Ok((conn, path, epoch)) => Incoming::Read { conn, path, epoch },
            Err(AcceptError::Wait) if kind == TransportKind::Tcp => {
                let peer_gen = self
                    .find_conn(laddr, faddr, kind)
                    .map_or(0, |c| self.conns[c.0 as usize].peer_gen);
                let held = Held {
                    link,
                    laddr,
                    faddr: canonical(faddr),
                    kind,
                    client_port,
                    since: now,
                    peer_gen,
                };
                match self.hold(now, held) {
                    true => Incoming::Hold,
                    false => Incoming::Refuse(AcceptError::Wait),
                }
            }
            Err(AcceptError::Wait) => Incoming::Refuse(AcceptError::Wait),
            Err(e) => Incoming::Refuse(e),
        }
    }

    /// Holds an accepted connection within the caps. Returns `false` when the newcomer itself
    /// is the one to go (every address holds one, and it would be the oldest of the one
    /// holding most).
    fn hold(&mut self, now: Instant, held: Held) -> bool {
        let ip = held.faddr;
        let oldest_of = |h: &[Held], ip: IpAddr| {
            h.iter()
                .enumerate()
                .filter(|(_, x)| x.faddr == ip)
                .min_by_key(|(_, x)| x.since)
                .map(|(i, _)| i)
        };
        let same = self.held.iter().filter(|x| x.faddr == ip).count();
        if same >= HELD_PER_ADDR {
            if let Some(i) = oldest_of(&self.held, ip) {
                let gone = self.held.remove(i);
                self.events.push_back(Event::Refuse {
                    link: gone.link,
                    why: HeldEnd::AddrEvicted,
                });
            }
        } else if self.held.len() >= HELD_MAX {
            // The newcomer counts for its address: a flood from one address evicts its own.
            let mut counts: HashMap<IpAddr, (usize, Instant)> = HashMap::new();
            counts.insert(ip, (1, held.since));
            for x in &self.held {
                let e = counts.entry(x.faddr).or_insert((0, x.since));
                e.0 += 1;
                e.1 = e.1.min(x.since);
            }
            let victim = counts
                .iter()
                .max_by(|a, b| a.1 .0.cmp(&b.1 .0).then(b.1 .1.cmp(&a.1 .1)))
                .and_then(|(&v, _)| oldest_of(&self.held, v));
            match victim {
                Some(i) => {
                    let gone = self.held.remove(i);
                    self.events.push_back(Event::Refuse {
                        link: gone.link,
                        why: HeldEnd::NodeEvicted,
                    });
                }
                None => return false,
            }
        }
        if self.held.is_empty() {
            self.held_retry_at = Some(now + HELD_RETRY);
        }
        self.held.push(held);
        true
    }

    /// Accepted connections the engine holds unread.
    pub fn held_links(&self) -> usize {
        self.held.len()
    }

    /// Offers every held connection to the engine again, oldest first: each is adopted
    /// ([`Event::Adopt`]), kept, or given up ([`Event::Refuse`]).
    pub(super) fn retry_held(&mut self, now: Instant) {
        self.held_retry_at = None;
        let mut held = std::mem::take(&mut self.held);
        held.sort_by_key(|h| h.since);
        for h in held {
            let waited = now - h.since;
            // The adoption goes ahead of what taking the lane queued (its first transmit).
            let at = self.events.len();
            let r = self.handle_accept(now, h.laddr, h.faddr, h.kind, h.client_port, waited);
            match r {
                Ok((conn, path, epoch)) => {
                    let gen = self.conns[conn.0 as usize].peer_gen;
                    if h.peer_gen != 0 && gen != h.peer_gen {
                        // Accepted before the peer's generation changed: the old incarnation's.
                        self.carry_rx(conn, path, epoch);
                    }
                    self.events.insert(
                        at,
                        Event::Adopt {
                            link: h.link,
                            conn,
                            path,
                            epoch,
                        },
                    );
                }
                Err(AcceptError::Wait) if waited < STASH_MAX => self.held.push(h),
                Err(AcceptError::Wait) => self.events.push_back(Event::Refuse {
                    link: h.link,
                    why: HeldEnd::Expired,
                }),
                Err(e) => self.events.push_back(Event::Refuse {
                    link: h.link,
                    why: HeldEnd::Refused(e),
                }),
            }
        }
        if !self.held.is_empty() {
            self.held_retry_at = Some(now + HELD_RETRY);
        }
    }

    /// A drain ended: held connections may take their lane now rather than at the next retry.
    pub(super) fn held_due_now(&mut self, now: Instant) {
        if !self.held.is_empty() {
            self.held_retry_at = Some(now);
        }
    }

    /// When the held connections are offered again.
    pub(super) fn held_timer(&self) -> Option<Instant> {
        self.held_retry_at
    }

    /// An outgoing transport connection for `(conn, path)` attempted with `epoch` completed.
    /// See the module documentation for what each answer means.
    pub fn link_connected(
        &mut self,
        now: Instant,
        conn: ConnId,
        path: usize,
        epoch: u32,
    ) -> Established {
        if !self.path_exists(conn, path) {
            return Established::Close;
        }
        if self.is_trigger_only(conn) {
            // Rule 5: the peer resets it without writing to it.
            self.handle_connect_failed(now, conn, path, epoch);
            return Established::Close;
        }
        if self.handle_connected(now, conn, path, epoch) {
            let (_, epoch) = self.path_state(conn, path);
            return Established::Read { epoch };
        }
        let p = &self.conns[conn.0 as usize].paths[path];
        if p.drain_epoch == Some(epoch) {
            // Rule 4: the engine dropped the attempt and waits for its end.
            Established::Drain
        } else {
            // Dropped on purpose (an operator's kill, a protocol error): nothing to keep.
            Established::Close
        }
    }

    /// Whether a dropped attempt of a path in `state` is drained (rule 3) rather than closed.
    pub(super) fn drains_attempt(kind: TransportKind, state: PathState) -> bool {
        kind == TransportKind::Tcp && state == PathState::Connecting
    }
}
