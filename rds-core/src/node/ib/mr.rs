//! The transport's memory registrations: regions registered for peers (`RDS_GET_MR`, keyed by
//! remote key, with the kernel's MR pool counters), and the local memory of RDMA operations,
//! registered when the socket queues the message (as the kernel pins and maps at `sendmsg`)
//! and keyed by [`RdmaOpId`] ([`OpRegistry`]).
//!
//! An operation's local registrations leave the registry when its work requests are posted
//! (the connection keeps them until the last one completes, or the queue pair is gone). The
//! registry holds the operation itself weakly: registrations of an operation dropped before it
//! was posted (message canceled, connection lost, send refused) go at the transport's next
//! call (a CM or completion event, a transmit, a disconnect, the next registration).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Weak};

use crate::ib::{Access, MemMr, OutOfRange, Sge};
use crate::info::SockId;
use crate::proto::rdma_op::{RdmaOp, RdmaOpId};
use crate::rdma::{make_cookie, LocalVec, MrFlags, RdmaBuffer};
use crate::stats::IbCounter;

use super::{to_io, Ib};

/// A region registered for peers (`RDS_GET_MR`).
pub(super) struct RegMr {
    sock: SockId,
    use_once: bool,
    len: usize,
    _mr: MemMr,
}

/// The kernel's two MR pools: up to 8 KiB, and up to 1 MiB.
fn mr_class(len: usize) -> (IbCounter, IbCounter) {
    if len <= 8192 {
        (IbCounter::IbRdmaMr8kAlloc, IbCounter::IbRdmaMr8kUsed)
    } else {
        (IbCounter::IbRdmaMr1mAlloc, IbCounter::IbRdmaMr1mUsed)
    }
}

fn mr_free_class(len: usize) -> IbCounter {
    if len <= 8192 {
        IbCounter::IbRdmaMr8kFree
    } else {
        IbCounter::IbRdmaMr1mFree
    }
}

/// One local range of an RDMA operation and its registration.
pub(super) struct LocalSeg {
    mr: MemMr,
    off: usize,
    len: usize,
}

impl LocalSeg {
    /// The scatter/gather element of the whole range.
    pub(super) fn sge(&self) -> Result<Sge<'_>, OutOfRange> {
        self.mr.sge(self.off, self.len)
    }
}

/// The local registrations of RDMA operations not posted yet, by operation id. `S` is what is
/// kept per operation (the registrations of its local ranges).
///
/// Each entry holds its operation weakly: once nothing else holds the operation it can never
/// be posted, and [`OpRegistry::sweep`] releases its entry.
pub(super) struct OpRegistry<S = Vec<LocalSeg>> {
    ops: HashMap<RdmaOpId, (Weak<RdmaOp>, S)>,
}

impl<S> Default for OpRegistry<S> {
    fn default() -> Self {
        OpRegistry {
            ops: HashMap::new(),
        }
    }
}

impl<S> OpRegistry<S> {
    /// Keeps `regs` for `op` until it is taken or `op` is dropped.
    pub(super) fn insert(&mut self, op: &Arc<RdmaOp>, regs: S) {
        self.ops.insert(op.id, (Arc::downgrade(op), regs));
    }

    /// Takes the registrations of an operation (to post it).
    pub(super) fn take(&mut self, id: RdmaOpId) -> Option<S> {
        self.ops.remove(&id).map(|(_, regs)| regs)
    }

    /// Releases the registrations of operations nobody holds any more.
    pub(super) fn sweep(&mut self) {
        self.ops.retain(|_, (op, _)| op.strong_count() > 0);
    }

    /// Operations with registrations.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.ops.len()
    }
}

impl Ib {
    /// `RDS_GET_MR` for a socket bound to `ip`: registers the range for remote read and
    /// write, zero-based, and returns its cookie.
    ///
    /// # Errors
    /// `EADDRNOTAVAIL`-like `InvalidInput` when no device holds `ip`; the registration's error.
    pub(crate) fn get_mr(
        &mut self,
        ip: IpAddr,
        sock: SockId,
        buf: &RdmaBuffer,
        off: usize,
        len: usize,
        flags: MrFlags,
    ) -> std::io::Result<u64> {
        let ctx = self.ctx_for(ip)?;
        let pd = self.pd_for(&ctx).map_err(to_io)?;
        let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let mr = pd
            .reg_mem(buf.mem(), off, len, access, true)
            .map_err(to_io)?;
        let rkey = mr.rkey();
        let cookie = make_cookie(rkey, buf.page_offset(off));
        let (alloc, used) = mr_class(len);
        self.stats.inc(alloc);
        self.stats.inc(used);
        self.mrs.insert(
            rkey,
            RegMr {
                sock,
                use_once: flags.use_once,
                len,
                _mr: mr,
            },
        );
        Ok(cookie)
    }

    /// Registers the local memory of an RDMA operation (for the adapter's own access) on the
    /// device of `ip`, one registration per range, and keeps them under the operation's id
    /// until the operation is posted or dropped.
    ///
    /// # Errors
    /// No device holds `ip` (`ENODEV`), or a registration failed.
    pub(crate) fn register_local(
        &mut self,
        ip: IpAddr,
        op: &Arc<RdmaOp>,
        local: &[LocalVec],
    ) -> std::io::Result<()> {
        self.ops.sweep();
        let ctx = self.ctx_for(ip)?;
        let pd = self.pd_for(&ctx).map_err(to_io)?;
        let segs = local
            .iter()
            .map(|v| {
                let mr = pd
                    .reg_mem(v.buf.mem(), v.off, v.len, Access::LOCAL_WRITE, false)
                    .map_err(to_io)?;
                Ok(LocalSeg {
                    mr,
                    off: v.off,
                    len: v.len,
                })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        self.ops.insert(op, segs);
        Ok(())
    }

    /// `RDS_FREE_MR`. Returns whether the socket had the region.
    pub(crate) fn free_mr(&mut self, sock: SockId, rkey: u32) -> bool {
        if self.mrs.get(&rkey).is_some_and(|m| m.sock == sock) {
            self.release_mr(rkey);
            return true;
        }
        false
    }

    fn release_mr(&mut self, rkey: u32) {
        if let Some(m) = self.mrs.remove(&rkey) {
            self.stats.inc(mr_free_class(m.len));
        }
    }

    /// Whether `sock` has the region `rkey` (an `RDMA_DEST` cookie must name one).
    pub(crate) fn has_mr(&self, sock: SockId, rkey: u32) -> bool {
        self.mrs.get(&rkey).is_some_and(|m| m.sock == sock)
    }

    /// A message with an RDMA operation on `rkey` reached `sock` (`rds_rdma_unuse`).
    pub(crate) fn unuse(&mut self, sock: SockId, rkey: u32) {
        if self
            .mrs
            .get(&rkey)
            .is_some_and(|m| m.sock == sock && m.use_once)
        {
            self.release_mr(rkey);
        }
    }

    /// A socket closed: its regions go.
    pub(crate) fn free_sock(&mut self, sock: SockId) {
        let keys: Vec<u32> = self
            .mrs
            .iter()
            .filter(|(_, m)| m.sock == sock)
            .map(|(&k, _)| k)
            .collect();
        for k in keys {
            self.release_mr(k);
        }
    }

    /// Regions registered for peers.
    pub(crate) fn mr_count(&self) -> usize {
        self.mrs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(id: u64) -> Arc<RdmaOp> {
        Arc::new(RdmaOp::plain(RdmaOpId(id), SockId(1), 7, 0, vec![16]))
    }

    /// Registrations wait under their operation's id, leave when taken, and go when the
    /// operation is dropped before it was taken.
    #[test]
    fn op_registry_keeps_takes_and_sweeps() {
        let mut reg: OpRegistry<&str> = OpRegistry::default();
        let (a, b) = (op(1), op(2));
        reg.insert(&a, "a");
        reg.insert(&b, "b");
        reg.sweep();
        assert_eq!(reg.len(), 2);
        assert_eq!(reg.take(RdmaOpId(1)), Some("a"));
        assert_eq!(reg.take(RdmaOpId(1)), None);
        reg.insert(&a, "a again");
        drop(b);
        reg.sweep();
        assert_eq!(reg.len(), 1);
        assert_eq!(reg.take(RdmaOpId(2)), None);
    }
}
