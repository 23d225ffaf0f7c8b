//! The engine's view of an RDMA operation attached to a message: plain data (ids, keys,
//! lengths, flags) that the engine queues with the message and hands to the transport in the
//! message's first [`super::Transmit`].
//!
//! The memory behind the operation is not here: the socket layer ([`crate::rdma`]) builds the
//! operation from the application's buffers, and the IB transport keeps the buffers'
//! registrations itself, keyed by [`RdmaOpId`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::info::SockId;
pub use crate::message::{RdmaNotify, RdmaStatus};

/// Names an RDMA operation for its whole life: the transport keys the operation's memory
/// registrations by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RdmaOpId(pub u64);

/// An RDMA operation queued with a message: what the transport performs before the
/// message's first SEND. Shared between the engine and the transport; notified at most once.
#[derive(Debug)]
pub struct RdmaOp {
    /// The operation's id.
    pub id: RdmaOpId,
    /// The sending socket.
    pub sock: SockId,
    /// The peer region's key.
    pub rkey: u32,
    /// The peer address of the first byte (`remote_addr` + the cookie's offset).
    pub remote_addr: u64,
    /// Lengths of the local memory segments, in order (one per `struct rds_iovec`).
    pub local: Vec<usize>,
    /// Total bytes.
    pub bytes: u64,
    /// Write (else read).
    pub write: bool,
    /// Fence the SEND.
    pub fence: bool,
    /// Notify on completion.
    pub notify: bool,
    /// Returned in the notification.
    pub user_token: u64,
    notified: AtomicBool,
}

impl RdmaOp {
    /// A read of `sock` from the peer region `rkey` at `remote_addr` into local segments of
    /// these lengths, without fence or notification; the public fields say otherwise.
    pub fn plain(
        id: RdmaOpId,
        sock: SockId,
        rkey: u32,
        remote_addr: u64,
        local: Vec<usize>,
    ) -> RdmaOp {
        RdmaOp {
            id,
            sock,
            rkey,
            remote_addr,
            bytes: local.iter().map(|&l| l as u64).sum(),
            local,
            write: false,
            fence: false,
            notify: false,
            user_token: 0,
            notified: AtomicBool::new(false),
        }
    }

    /// Marks the operation notified; true the first time only.
    pub fn take_notify(&self) -> bool {
        !self.notified.swap(true, Ordering::AcqRel)
    }
}

/// A shared [`RdmaOp`], compared by identity.
#[derive(Debug, Clone)]
pub struct RdmaRef(pub Arc<RdmaOp>);

impl PartialEq for RdmaRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for RdmaRef {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_op_sums_lengths_and_notifies_once() {
        let op = RdmaOp::plain(RdmaOpId(1), SockId(3), 7, 20, vec![10, 30]);
        assert_eq!((op.rkey, op.remote_addr, op.bytes), (7, 20, 40));
        assert!(!op.write && !op.fence && !op.notify);
        assert!(op.take_notify());
        assert!(!op.take_notify());
        let a = RdmaRef(Arc::new(op));
        assert_eq!(a, a.clone());
        let b = RdmaRef(Arc::new(RdmaOp::plain(
            RdmaOpId(1),
            SockId(3),
            7,
            20,
            vec![10, 30],
        )));
        assert_ne!(a, b);
    }
}
