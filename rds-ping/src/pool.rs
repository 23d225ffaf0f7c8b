//! The RDS sockets the several-destination form shares between its destinations.
//!
//! A pong comes from the address of the destination pinged, to the port of the socket that
//! sent the ping, so one socket can carry one ping to each destination at the same time: the
//! destinations of one source address share its `-n` sockets. Each destination uses one
//! socket per slot. When a ping times out, its destination stops using that socket (a late
//! pong on it must not be taken for the answer to a later ping) and takes another of the
//! source address that it has not used, or a new one; a socket no destination uses any more
//! is closed. A destination's pings thus never go twice through a socket where one was lost,
//! as the one-destination form replaces such a socket.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::os::fd::RawFd;

use rds_core::Socket;

use crate::ping::{open_socket, Fatal};

/// A socket of the pool, named by a number never used again in the run.
pub type SockId = u64;

struct Entry {
    group: usize,
    sock: Socket,
    fd: RawFd,
    /// Destination slots using it.
    refs: usize,
}

/// The sockets of every source address (a group each).
pub struct Pool {
    srcs: Vec<IpAddr>,
    socks: BTreeMap<SockId, Entry>,
    next_id: SockId,
}

impl Pool {
    /// Opens `n` sockets on each of `srcs` (the groups, in that order); returns the pool and
    /// the ids of each group's sockets.
    ///
    /// # Errors
    /// As [`open_socket`].
    pub fn open(srcs: &[IpAddr], n: usize) -> Result<(Pool, Vec<Vec<SockId>>), Fatal> {
        let mut pool = Pool {
            srcs: srcs.to_vec(),
            socks: BTreeMap::new(),
            next_id: 0,
        };
        let mut ids = Vec::with_capacity(srcs.len());
        for g in 0..srcs.len() {
            ids.push((0..n).map(|_| pool.add(g)).collect::<Result<Vec<_>, _>>()?);
        }
        Ok((pool, ids))
    }

    fn add(&mut self, group: usize) -> Result<SockId, Fatal> {
        let (sock, fd) = open_socket(self.srcs[group])?;
        let id = self.next_id;
        self.next_id += 1;
        self.socks.insert(
            id,
            Entry {
                group,
                sock,
                fd,
                refs: 0,
            },
        );
        Ok(id)
    }

    /// One more destination slot uses `id`.
    pub fn hold(&mut self, id: SockId) {
        if let Some(e) = self.socks.get_mut(&id) {
            e.refs += 1;
        }
    }

    /// A slot of group `group` leaves socket `old`: returns the socket it uses instead, the
    /// first of the group's that is not in `avoid` (the destination's other slots and the
    /// sockets where it lost a ping), else a new one. `old` is closed when nothing uses it.
    ///
    /// # Errors
    /// As [`open_socket`].
    pub fn replace(
        &mut self,
        group: usize,
        old: SockId,
        avoid: &[SockId],
    ) -> Result<SockId, Fatal> {
        let found = self
            .socks
            .iter()
            .find(|(id, e)| e.group == group && **id != old && !avoid.contains(id))
            .map(|(id, _)| *id);
        let new = match found {
            Some(id) => id,
            None => self.add(group)?,
        };
        self.hold(new);
        if let Some(e) = self.socks.get_mut(&old) {
            e.refs = e.refs.saturating_sub(1);
            if e.refs == 0 {
                self.socks.remove(&old);
            }
        }
        Ok(new)
    }

    /// Whether `id` is still open.
    pub fn is_open(&self, id: SockId) -> bool {
        self.socks.contains_key(&id)
    }

    /// The socket `id`, while open.
    pub fn get(&self, id: SockId) -> Option<&Socket> {
        self.socks.get(&id).map(|e| &e.sock)
    }

    /// The open sockets and the descriptors to poll for their replies.
    pub fn fds(&self) -> Vec<(SockId, RawFd)> {
        self.socks.iter().map(|(id, e)| (*id, e.fd)).collect()
    }

    /// Open sockets of `group`.
    pub fn of_group(&self, group: usize) -> impl Iterator<Item = &Socket> {
        self.socks
            .values()
            .filter(move |e| e.group == group)
            .map(|e| &e.sock)
    }

    /// Open sockets in all.
    pub fn len(&self) -> usize {
        self.socks.len()
    }

    /// Whether no socket is open.
    pub fn is_empty(&self) -> bool {
        self.socks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sockets on a loopback address of an embedded node (no peer needed: nothing is sent).
    #[test]
    fn a_lost_ping_moves_its_destination_to_another_socket() {
        std::env::set_var(rds_core::env::NO_DAEMON, "1");
        let src: IpAddr = "127.66.0.1".parse().unwrap();
        let (mut pool, ids) = Pool::open(&[src], 2).unwrap();
        assert_eq!(ids, [vec![0, 1]]);
        // Two destinations use both sockets.
        for _ in 0..2 {
            pool.hold(0);
            pool.hold(1);
        }
        // Destination A lost a ping on 0: it needs a socket other than 0 and 1, a new one.
        let a = pool.replace(0, 0, &[0, 1]).unwrap();
        assert_eq!(a, 2);
        assert!(pool.is_open(0), "B still uses 0");
        // Destination B lost one on 0 too: it takes 2, which A uses but B never lost on, and
        // 0 is closed.
        let b = pool.replace(0, 0, &[0, 1]).unwrap();
        assert_eq!(b, 2);
        assert!(!pool.is_open(0));
        assert_eq!(pool.len(), 2);
        // A loses on 2 (having lost on 0 before): 1 is its other slot, so a new socket.
        let a2 = pool.replace(0, 2, &[0, 1, 2]).unwrap();
        assert_eq!(a2, 3);
        assert!(pool.is_open(2), "B uses 2");
        assert_eq!(
            pool.fds().iter().map(|f| f.0).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        rds_core::socket::shutdown_default_node();
    }
}
