//! The node's memory budget and each user's share of it. Every byte the engine holds for a
//! socket (a queued message either way, with its bookkeeping) is charged to the socket's
//! owner; what the node holds for itself (pongs, reassembly, connections) to [`NODE`].
//!
//! Rules, with the budget `B` (`net.rds.mem_budget`):
//! - everything together stays within `B`;
//! - the sockets of one user other than root hold at most `B * uid_mem_share / 100`;
//! - users other than root cannot use the last `B * root_mem_reserve / 100`: root's sockets
//!   and the node itself still find room when other users filled theirs.

use std::collections::BTreeMap;

use crate::tunables::Tunables;

/// The owner of what the node holds for itself, and of root's sockets (uid 0).
pub const NODE: u32 = 0;

/// Bytes held, in all and per owner.
#[derive(Debug, Default, Clone)]
pub(crate) struct Budget {
    used: usize,
    /// Owners other than [`NODE`] holding something.
    by_owner: BTreeMap<u32, usize>,
}

/// The limits of one budget, from the tunables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The whole budget.
    pub total: usize,
    /// What one owner other than [`NODE`] may hold.
    pub share: usize,
    /// What owners other than [`NODE`] may hold together.
    pub others: usize,
}

impl Limits {
    /// The limits for a budget of `total` bytes under `tun`'s percentages.
    pub fn new(total: usize, tun: &Tunables) -> Limits {
        let pct = |p: u8| total / 100 * usize::from(p.min(100));
        Limits {
            total,
            share: pct(tun.uid_mem_share),
            others: total - pct(tun.root_mem_reserve),
        }
    }
}

impl Budget {
    /// Bytes held in all.
    #[inline]
    pub fn used(&self) -> usize {
        self.used
    }

    /// Bytes held for `owner`'s sockets (for [`NODE`]: what the others do not hold).
    pub fn used_by(&self, owner: u32) -> usize {
        if owner == NODE {
            self.used - self.others()
        } else {
            self.by_owner.get(&owner).copied().unwrap_or(0)
        }
    }

    fn others(&self) -> usize {
        self.by_owner.values().sum()
    }

    /// Whether `bytes` more may be charged to `owner`.
    pub fn fits(&self, owner: u32, bytes: usize, lim: &Limits) -> bool {
        let total = self.used.saturating_add(bytes);
        if total > lim.total {
            return false;
        }
        if owner == NODE {
            return true;
        }
        self.used_by(owner).saturating_add(bytes) <= lim.share
            && self.others().saturating_add(bytes) <= lim.others
    }

    /// Charges `bytes` to `owner` (callers checked [`Budget::fits`] where a limit applies).
    #[inline]
    pub fn charge(&mut self, owner: u32, bytes: usize) {
        self.used = self.used.saturating_add(bytes);
        if owner != NODE && bytes > 0 {
            *self.by_owner.entry(owner).or_insert(0) += bytes;
        }
    }

    /// Gives `bytes` of `owner`'s back.
    #[inline]
    pub fn release(&mut self, owner: u32, bytes: usize) {
        debug_assert!(self.used >= bytes, "budget accounting underflow");
        self.used = self.used.saturating_sub(bytes);
        if owner != NODE {
            if let Some(n) = self.by_owner.get_mut(&owner) {
                debug_assert!(*n >= bytes, "owner accounting underflow");
                *n = n.saturating_sub(bytes);
                if *n == 0 {
                    self.by_owner.remove(&owner);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim() -> Limits {
        let tun = Tunables {
            uid_mem_share: 25,
            root_mem_reserve: 10,
            ..Tunables::default()
        };
        Limits::new(1000, &tun)
    }

    #[test]
    fn shares_and_the_reserve() {
        let l = lim();
        assert_eq!((l.total, l.share, l.others), (1000, 250, 900));
        let mut b = Budget::default();
        // One user fills its share and no more.
        assert!(b.fits(1000, 250, &l));
        b.charge(1000, 250);
        assert!(!b.fits(1000, 1, &l));
        // Three more users: the last finds only what the reserve leaves.
        for u in [1001, 1002] {
            b.charge(u, 250);
        }
        assert!(b.fits(1003, 150, &l));
        assert!(!b.fits(1003, 151, &l));
        b.charge(1003, 150);
        // Root and the node still have the reserve.
        assert!(b.fits(NODE, 100, &l));
        assert!(!b.fits(NODE, 101, &l));
        assert_eq!(b.used_by(NODE), 0);
        b.charge(NODE, 60);
        assert_eq!(b.used_by(NODE), 60);
        assert_eq!(b.used(), 960);
        // Releases give back per owner.
        b.release(1000, 250);
        assert_eq!(b.used_by(1000), 0);
        assert!(b.fits(1003, 100, &l));
        assert!(!b.fits(1003, 101, &l), "its share is 250");
    }
}
