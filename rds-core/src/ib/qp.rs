//! Queue pairs: [`Qp`] (reliable connected), its capacities and creation attributes, and the
//! send and receive work requests posted on it.
//!
//! A [`Qp`] keeps its [`Pd`] and [`Cq`]s alive (and, when the connection manager made it, its
//! id), so it is always destroyed first. `post_send` and `post_recv` call the provider through
//! `context->ops`, as the inline functions of `verbs.h` do.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::cq::Cq;
use super::error::{check, VerbsError};
use super::ffi;
use super::handle::CmIdInner;
use super::pd::{Pd, Sge};

/// Queue pair capacities (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather elements per send.
    pub max_send_sge: u32,
    /// Scatter/gather elements per receive.
    pub max_recv_sge: u32,
    /// Inline data bytes.
    pub max_inline_data: u32,
}

impl From<QpCap> for ffi::ibv_qp_cap {
    fn from(c: QpCap) -> Self {
        ffi::ibv_qp_cap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    }
}

impl From<ffi::ibv_qp_cap> for QpCap {
    fn from(c: ffi::ibv_qp_cap) -> Self {
        QpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    }
}

/// What to create a reliable-connected queue pair with.
#[derive(Clone, Copy)]
pub struct QpInit<'a> {
    /// Send completions go here.
    pub send_cq: &'a Cq,
    /// Receive completions go here.
    pub recv_cq: &'a Cq,
    /// Requested capacities (the provider may round up; see [`Qp::cap`]).
    pub cap: QpCap,
    /// Signal every send (otherwise only those posted with `signaled`).
    pub sq_sig_all: bool,
}

impl QpInit<'_> {
    pub(crate) fn to_raw(
        self,
        pd: &Pd,
        op: &'static str,
    ) -> Result<ffi::ibv_qp_init_attr, VerbsError> {
        let ctx = pd.context().as_ptr();
        if self.send_cq.context().as_ptr() != ctx || self.recv_cq.context().as_ptr() != ctx {
            return Err(VerbsError::invalid(
                op,
                "completion queues and protection domain are on different devices",
            ));
        }
        Ok(ffi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: self.send_cq.as_ptr(),
            recv_cq: self.recv_cq.as_ptr(),
            srq: ptr::null_mut(),
            cap: self.cap.into(),
            qp_type: ffi::IBV_QPT_RC,
            sq_sig_all: c_int::from(self.sq_sig_all),
        })
    }
}

impl Pd {
    /// `ibv_create_qp` (a queue pair not managed by the connection manager; see
    /// [`super::cm::CmId::create_qp`] for the RDS way).
    ///
    /// # Errors
    /// The queues belong to another device, or the creation failed.
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp, VerbsError> {
        let mut attr = init.to_raw(self, "ibv_create_qp")?;
        // SAFETY: a valid PD and a fully initialised init attribute whose CQs are alive
        // (borrowed by `init`, then kept by the Qp).
        let qp = unsafe { (self.context().lib().verbs.ibv_create_qp)(self.as_ptr(), &mut attr) };
        let ptr = NonNull::new(qp).ok_or_else(|| VerbsError::errno("ibv_create_qp"))?;
        Ok(Qp::new(ptr, self, init, attr.cap, QpOwner::Verbs))
    }
}

/// Who destroys a queue pair.
pub(crate) enum QpOwner {
    /// `ibv_destroy_qp`.
    Verbs,
    /// `rdma_destroy_qp` on this id (kept alive until then).
    Cm(Arc<CmIdInner>),
}

/// A reliable-connected queue pair.
pub struct Qp {
    ptr: NonNull<ffi::ibv_qp>,
    owner: QpOwner,
    cap: QpCap,
    pd: Pd,
    _send_cq: Cq,
    _recv_cq: Cq,
}

// SAFETY: posting and modifying are thread-safe verbs; the pointer only goes to them.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Drop for Qp {
    fn drop(&mut self) {
        match &self.owner {
            // SAFETY: created by ibv_create_qp, destroyed once, before its PD and CQs (held by
            // this struct and dropped after this body).
            QpOwner::Verbs => unsafe {
                (self.pd.context().lib().verbs.ibv_destroy_qp)(self.ptr.as_ptr());
            },
            // SAFETY: created by rdma_create_qp on this id, which is alive (held by `owner`);
            // rdma_destroy_qp destroys id->qp once.
            QpOwner::Cm(id) => unsafe { (id.lib.cm.rdma_destroy_qp)(id.ptr.as_ptr()) },
        }
    }
}

/// The operation of a [`SendWr`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// `IBV_WR_SEND`.
    Send,
    /// `IBV_WR_SEND_WITH_IMM` (immediate in host order).
    SendWithImm(u32),
    /// `IBV_WR_RDMA_WRITE` to a peer's region.
    RdmaWrite {
        /// Peer address.
        remote_addr: u64,
        /// Peer's remote key.
        rkey: u32,
    },
    /// `IBV_WR_RDMA_READ` from a peer's region into the local elements.
    RdmaRead {
        /// Peer address.
        remote_addr: u64,
        /// Peer's remote key.
        rkey: u32,
    },
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` on a peer's 8 bytes (old value lands in the element).
    AtomicCmpSwap {
        /// Peer address (8-byte aligned).
        remote_addr: u64,
        /// Peer's remote key.
        rkey: u32,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` on a peer's 8 bytes (old value lands in the element).
    AtomicFetchAdd {
        /// Peer address (8-byte aligned).
        remote_addr: u64,
        /// Peer's remote key.
        rkey: u32,
        /// Addend.
        add: u64,
    },
}

/// A send-queue work request.
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Local memory (gathered for sends and writes, scattered into for reads and atomics).
    pub sges: &'a [Sge<'a>],
    /// `IBV_SEND_SIGNALED`: produce a completion.
    pub signaled: bool,
    /// `IBV_SEND_SOLICITED`: wake a peer waiting for solicited events.
    pub solicited: bool,
    /// `IBV_SEND_FENCE`: wait for earlier RDMA reads and atomics first.
    pub fence: bool,
}

impl<'a> SendWr<'a> {
    /// A plain signaled send of `sges`.
    pub fn send(wr_id: u64, sges: &'a [Sge<'a>]) -> Self {
        SendWr {
            wr_id,
            op: SendOp::Send,
            sges,
            signaled: true,
            solicited: false,
            fence: false,
        }
    }

    fn to_raw(self) -> Result<ffi::ibv_send_wr, VerbsError> {
        let num_sge = c_int::try_from(self.sges.len())
            .map_err(|_| VerbsError::invalid("post_send", "too many elements"))?;
        let mut flags = 0;
        if self.signaled {
            flags |= ffi::IBV_SEND_SIGNALED;
        }
        if self.solicited {
            flags |= ffi::IBV_SEND_SOLICITED;
        }
        if self.fence {
            flags |= ffi::IBV_SEND_FENCE;
        }
        let rdma = |remote_addr, rkey| ffi::ibv_send_wr_wr {
            rdma: ffi::ibv_send_wr_rdma { remote_addr, rkey },
        };
        let (opcode, imm, wr) = match self.op {
            SendOp::Send => (ffi::IBV_WR_SEND, 0, rdma(0, 0)),
            SendOp::SendWithImm(imm) => (ffi::IBV_WR_SEND_WITH_IMM, imm.to_be(), rdma(0, 0)),
            SendOp::RdmaWrite { remote_addr, rkey } => {
                (ffi::IBV_WR_RDMA_WRITE, 0, rdma(remote_addr, rkey))
            }
            SendOp::RdmaRead { remote_addr, rkey } => {
                (ffi::IBV_WR_RDMA_READ, 0, rdma(remote_addr, rkey))
            }
            SendOp::AtomicCmpSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => (
                ffi::IBV_WR_ATOMIC_CMP_AND_SWP,
                0,
                ffi::ibv_send_wr_wr {
                    atomic: ffi::ibv_send_wr_atomic {
                        remote_addr,
                        compare_add: compare,
                        swap,
                        rkey,
                    },
                },
            ),
            SendOp::AtomicFetchAdd {
                remote_addr,
                rkey,
                add,
            } => (
                ffi::IBV_WR_ATOMIC_FETCH_AND_ADD,
                0,
                ffi::ibv_send_wr_wr {
                    atomic: ffi::ibv_send_wr_atomic {
                        remote_addr,
                        compare_add: add,
                        swap: 0,
                        rkey,
                    },
                },
            ),
        };
        Ok(ffi::ibv_send_wr {
            wr_id: self.wr_id,
            next: ptr::null_mut(),
            // The provider only reads the elements while posting.
            sg_list: self.sges.as_ptr().cast::<ffi::ibv_sge>().cast_mut(),
            num_sge,
            opcode,
            send_flags: flags,
            imm_data: imm,
            wr,
            qp_type: ffi::ibv_send_wr_qp_type::default(),
            ext: ffi::ibv_send_wr_ext {
                tso: ffi::ibv_send_wr_tso {
                    hdr: ptr::null_mut(),
                    hdr_sz: 0,
                    mss: 0,
                },
            },
        })
    }
}

/// A receive-queue work request.
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where the incoming message is scattered.
    pub sges: &'a [Sge<'a>],
}

/// A post that failed at one work request; those before it were posted.
#[derive(Debug, thiserror::Error)]
#[error("work request {index} of the batch: {source}")]
pub struct PostError {
    /// Index (in the slice given) of the first request not posted.
    pub index: usize,
    /// Why.
    #[source]
    pub source: VerbsError,
}

/// Work requests chained per provider call.
const POST_CHUNK: usize = 16;

impl Qp {
    pub(crate) fn new(
        ptr: NonNull<ffi::ibv_qp>,
        pd: &Pd,
        init: &QpInit<'_>,
        cap: ffi::ibv_qp_cap,
        owner: QpOwner,
    ) -> Qp {
        Qp {
            ptr,
            owner,
            cap: cap.into(),
            pd: pd.clone(),
            _send_cq: init.send_cq.clone(),
            _recv_cq: init.recv_cq.clone(),
        }
    }

    fn ops(&self) -> &ffi::ibv_context_ops {
        &self.pd.context().raw().ops
    }

    /// The queue pair number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: alive while `self` lives; set at creation.
        unsafe { self.ptr.as_ref().qp_num }
    }

    /// The capacities actually granted.
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    /// The protection domain.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// `ibv_post_send` through `context->ops.post_send`.
    ///
    /// # Errors
    /// The first request the provider refused (queue full, too many elements, bad opcode).
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let f = self.ops().post_send.ok_or(PostError {
            index: 0,
            source: VerbsError::invalid("post_send", "provider has no post_send"),
        })?;
        for (chunk_no, chunk) in wrs.chunks(POST_CHUNK).enumerate() {
            let base = chunk_no * POST_CHUNK;
            let mut raw = Vec::with_capacity(chunk.len());
            for (i, wr) in chunk.iter().enumerate() {
                raw.push(wr.to_raw().map_err(|source| PostError {
                    index: base + i,
                    source,
                })?);
            }
            let head = link_send(&mut raw);
            let mut bad: *mut ffi::ibv_send_wr = ptr::null_mut();
            // SAFETY: a live QP of this context; `head` is a NULL-terminated chain in `raw`,
            // whose elements point to Sge arrays borrowed for this call.
            let rc = unsafe { f(self.ptr.as_ptr(), head, &mut bad) };
            if rc != 0 {
                let index = base + index_in(&raw, bad);
                return Err(PostError {
                    index,
                    source: VerbsError::rc("post_send", rc),
                });
            }
        }
        Ok(())
    }

    /// `ibv_post_recv` through `context->ops.post_recv`.
    ///
    /// # Errors
    /// The first request the provider refused (queue full, too many elements).
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let f = self.ops().post_recv.ok_or(PostError {
            index: 0,
            source: VerbsError::invalid("post_recv", "provider has no post_recv"),
        })?;
        for (chunk_no, chunk) in wrs.chunks(POST_CHUNK).enumerate() {
            let base = chunk_no * POST_CHUNK;
            let mut raw = Vec::with_capacity(chunk.len());
            for (i, wr) in chunk.iter().enumerate() {
                let num_sge = c_int::try_from(wr.sges.len()).map_err(|_| PostError {
                    index: base + i,
                    source: VerbsError::invalid("post_recv", "too many elements"),
                })?;
                raw.push(ffi::ibv_recv_wr {
                    wr_id: wr.wr_id,
                    next: ptr::null_mut(),
                    sg_list: wr.sges.as_ptr().cast::<ffi::ibv_sge>().cast_mut(),
                    num_sge,
                });
            }
            let n = raw.len();
            let base_ptr = raw.as_mut_ptr();
            for i in 0..n.saturating_sub(1) {
                // SAFETY: `i + 1 < n`, inside `raw`, which is not resized below.
                unsafe { (*base_ptr.add(i)).next = base_ptr.add(i + 1) };
            }
            let mut bad: *mut ffi::ibv_recv_wr = ptr::null_mut();
            // SAFETY: a live QP of this context; a NULL-terminated chain in `raw` pointing to
            // Sge arrays borrowed for this call.
            let rc = unsafe { f(self.ptr.as_ptr(), base_ptr, &mut bad) };
            if rc != 0 {
                let off = if bad.is_null() {
                    0
                } else {
                    (bad as usize).saturating_sub(base_ptr as usize)
                        / std::mem::size_of::<ffi::ibv_recv_wr>()
                };
                return Err(PostError {
                    index: base + off.min(n),
                    source: VerbsError::rc("post_recv", rc),
                });
            }
        }
        Ok(())
    }

    /// Moves the queue pair to the error state (`ibv_modify_qp`, `IBV_QPS_ERR`): outstanding
    /// work requests complete with [`super::cq::WcStatus::WrFlushErr`].
    ///
    /// # Errors
    /// The transition was refused.
    pub fn set_error_state(&self) -> Result<(), VerbsError> {
        // SAFETY: ibv_qp_attr is plain old data; zero is valid for every field.
        let mut attr: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ffi::IBV_QPS_ERR;
        // SAFETY: a live QP and an attribute with the fields named by the mask set.
        let rc = unsafe {
            (self.pd.context().lib().verbs.ibv_modify_qp)(
                self.ptr.as_ptr(),
                &mut attr,
                ffi::IBV_QP_STATE,
            )
        };
        check("ibv_modify_qp", rc)
    }
}

fn link_send(raw: &mut [ffi::ibv_send_wr]) -> *mut ffi::ibv_send_wr {
    let n = raw.len();
    let base = raw.as_mut_ptr();
    for i in 0..n.saturating_sub(1) {
        // SAFETY: `i + 1 < n`: both inside `raw`.
        unsafe { (*base.add(i)).next = base.add(i + 1) };
    }
    base
}

fn index_in(raw: &[ffi::ibv_send_wr], bad: *mut ffi::ibv_send_wr) -> usize {
    if bad.is_null() {
        return 0;
    }
    let off = (bad as usize).saturating_sub(raw.as_ptr() as usize)
        / std::mem::size_of::<ffi::ibv_send_wr>();
    off.min(raw.len())
}

impl fmt::Debug for Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Qp")
            .field("qp_num", &self.qp_num())
            .field("cap", &self.cap)
            .finish()
    }
}
