//! Parking: connections whose request waits for its socket ([`Park`]), registered for
//! hangup only, by the readiness descriptors they wait on and their timers.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use super::{Conn, Park};
use crate::sys;

/// Epoll tokens of the readiness descriptors parked requests wait on: `FD_TOKEN | fd`.
pub(super) const FD_TOKEN: u64 = 1 << 62;

/// The parked connections.
#[derive(Default)]
pub(super) struct Parking {
    /// By connection id.
    parked: HashMap<u64, (Conn, Park)>,
    /// Parked connections by the readiness descriptor they wait on.
    fd_waiters: HashMap<RawFd, Vec<u64>>,
}

impl Parking {
    /// Parks `conn` until `park` can go on: its stream in `ep` for hangup, each descriptor of
    /// `park` under `FD_TOKEN | fd`. `Err`: its stream could not be watched (close it).
    pub(super) fn park(&mut self, ep: &sys::Epoll, conn: Conn, park: Park) -> Result<(), Conn> {
        if ep
            .add(conn.stream.as_raw_fd(), conn.id, sys::EPOLLRDHUP)
            .is_err()
        {
            return Err(conn);
        }
        for &fd in &park.fds {
            let w = self.fd_waiters.entry(fd).or_default();
            if w.is_empty() && ep.add(fd, FD_TOKEN | fd as u64, sys::EPOLLIN).is_err() {
                continue;
            }
            w.push(conn.id);
        }
        self.parked.insert(conn.id, (conn, park));
        Ok(())
    }

    /// Whether connection `id` is parked.
    pub(super) fn contains(&self, id: u64) -> bool {
        self.parked.contains_key(&id)
    }

    /// Unparks connection `id`: off the descriptors it waited on (its stream stays in `ep`).
    pub(super) fn take(&mut self, ep: &sys::Epoll, id: u64) -> Option<(Conn, Park)> {
        let (conn, park) = self.parked.remove(&id)?;
        for fd in &park.fds {
            if let Some(w) = self.fd_waiters.get_mut(fd) {
                w.retain(|&x| x != id);
                if w.is_empty() {
                    self.fd_waiters.remove(fd);
                    let _ = ep.delete(*fd);
                }
            }
        }
        Some((conn, park))
    }

    /// The connections waiting on `fd`, which fired (a descriptor nobody waits on leaves
    /// `ep`).
    pub(super) fn waiting_on(&self, ep: &sys::Epoll, fd: RawFd) -> Vec<u64> {
        let ids = self.fd_waiters.get(&fd).cloned().unwrap_or_default();
        if ids.is_empty() {
            let _ = ep.delete(fd);
        }
        ids
    }

    /// The connections whose deadline (`true`: expired) or retry is due at `now`.
    pub(super) fn due(&self, now: Instant) -> Vec<(u64, bool)> {
        self.parked
            .iter()
            .filter_map(|(&id, (_, p))| {
                if p.deadline.is_some_and(|d| now >= d) {
                    Some((id, true))
                } else if p.retry_at.is_some_and(|r| now >= r) {
                    Some((id, false))
                } else {
                    None
                }
            })
            .collect()
    }

    /// The earliest deadline or retry.
    pub(super) fn next_timer(&self) -> Option<Instant> {
        self.parked
            .values()
            .flat_map(|(_, p)| [p.deadline, p.retry_at])
            .flatten()
            .min()
    }
}
