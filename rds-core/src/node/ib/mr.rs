//! The transport's memory registrations: regions registered for peers (`RDS_GET_MR`, keyed by
//! remote key, with the kernel's MR pool counters), and the local memory of RDMA operations,
//! registered when the socket queues the message (as the kernel pins and maps at `sendmsg`)
//! and keyed by [`crate::proto::rdma::RdmaOpId`].
//!
//! An operation's local registrations leave the registry when its work requests are posted
//! (the connection keeps them until the last one completes, or the queue pair is gone). The
//! registry holds the operation itself weakly: registrations of an operation the engine
//! dropped before it was posted (message canceled, connection lost, send refused) go at the
//! transport's next call.

use std::net::IpAddr;
use std::sync::{Arc, Weak};

use crate::ib::{Access, MemMr, OutOfRange, Sge};
use crate::info::SockId;
use crate::proto::rdma::RdmaOp;
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

/// The local registrations of an RDMA operation that is not posted yet.
pub(super) struct OpRegs {
    /// The operation; once nothing else holds it, it can never be posted.
    op: Weak<RdmaOp>,
    /// One per local range, in order.
    pub(super) segs: Vec<LocalSeg>,
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
        self.sweep_ops();
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
        self.ops.insert(
            op.id,
            OpRegs {
                op: Arc::downgrade(op),
                segs,
            },
        );
        Ok(())
    }

    /// Releases the local registrations of operations nobody holds any more.
    pub(super) fn sweep_ops(&mut self) {
        self.ops.retain(|_, r| r.op.strong_count() > 0);
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
