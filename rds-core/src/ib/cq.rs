//! Completion queues: [`Cq`] with its completion channel (for epoll) and the
//! [`WorkCompletion`]s polled from it.
//!
//! A completion queue created with a channel owns that channel (one channel per queue); its fd
//! is non-blocking, for epoll. The events taken from it are acknowledged in batches of
//! [`ACK_BATCH`] (`ibv_ack_cq_events` takes a lock), and whatever is left unacknowledged when
//! the queue is dropped is acknowledged before it is destroyed, so destroying it never waits.
//! `poll_cq` and `req_notify_cq` call the provider through `context->ops`, as the inline
//! functions of `verbs.h` do.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::device::Context;
use super::error::{c_enum, check, set_nonblocking, VerbsError};
use super::ffi;
use super::ffi::IbLib;

c_enum!(
    /// `enum ibv_wc_status`.
    WcStatus: u32 {
        /// Success.
        Success = ffi::IBV_WC_SUCCESS,
        /// Local length error.
        LocLenErr = ffi::IBV_WC_LOC_LEN_ERR,
        /// Local QP operation error.
        LocQpOpErr = ffi::IBV_WC_LOC_QP_OP_ERR,
        /// Local EE context operation error.
        LocEecOpErr = ffi::IBV_WC_LOC_EEC_OP_ERR,
        /// Local protection error.
        LocProtErr = ffi::IBV_WC_LOC_PROT_ERR,
        /// Flushed (the QP went to the error state).
        WrFlushErr = ffi::IBV_WC_WR_FLUSH_ERR,
        /// Memory window bind error.
        MwBindErr = ffi::IBV_WC_MW_BIND_ERR,
        /// Bad response.
        BadRespErr = ffi::IBV_WC_BAD_RESP_ERR,
        /// Local access error.
        LocAccessErr = ffi::IBV_WC_LOC_ACCESS_ERR,
        /// Remote invalid request.
        RemInvReqErr = ffi::IBV_WC_REM_INV_REQ_ERR,
        /// Remote access error.
        RemAccessErr = ffi::IBV_WC_REM_ACCESS_ERR,
        /// Remote operation error.
        RemOpErr = ffi::IBV_WC_REM_OP_ERR,
        /// Transport retry counter exceeded.
        RetryExcErr = ffi::IBV_WC_RETRY_EXC_ERR,
        /// RNR retry counter exceeded.
        RnrRetryExcErr = ffi::IBV_WC_RNR_RETRY_EXC_ERR,
        /// Local RDD violation.
        LocRddViolErr = ffi::IBV_WC_LOC_RDD_VIOL_ERR,
        /// Remote invalid RD request.
        RemInvRdReqErr = ffi::IBV_WC_REM_INV_RD_REQ_ERR,
        /// Remote aborted.
        RemAbortErr = ffi::IBV_WC_REM_ABORT_ERR,
        /// Invalid EE context number.
        InvEecnErr = ffi::IBV_WC_INV_EECN_ERR,
        /// Invalid EE context state.
        InvEecStateErr = ffi::IBV_WC_INV_EEC_STATE_ERR,
        /// Fatal error.
        FatalErr = ffi::IBV_WC_FATAL_ERR,
        /// Response timeout.
        RespTimeoutErr = ffi::IBV_WC_RESP_TIMEOUT_ERR,
        /// General error.
        GeneralErr = ffi::IBV_WC_GENERAL_ERR,
        /// Tag matching error.
        TmErr = ffi::IBV_WC_TM_ERR,
        /// Tag matching rendezvous incomplete.
        TmRndvIncomplete = ffi::IBV_WC_TM_RNDV_INCOMPLETE,
    }
);

c_enum!(
    /// `enum ibv_wc_opcode`.
    WcOpcode: u32 {
        /// A send completed.
        Send = ffi::IBV_WC_SEND,
        /// An RDMA write completed.
        RdmaWrite = ffi::IBV_WC_RDMA_WRITE,
        /// An RDMA read completed.
        RdmaRead = ffi::IBV_WC_RDMA_READ,
        /// A compare-and-swap completed.
        CompSwap = ffi::IBV_WC_COMP_SWAP,
        /// A fetch-and-add completed.
        FetchAdd = ffi::IBV_WC_FETCH_ADD,
        /// A memory window bind completed.
        BindMw = ffi::IBV_WC_BIND_MW,
        /// A local invalidate completed.
        LocalInv = ffi::IBV_WC_LOCAL_INV,
        /// A receive completed.
        Recv = ffi::IBV_WC_RECV,
        /// An RDMA write with immediate was received.
        RecvRdmaWithImm = ffi::IBV_WC_RECV_RDMA_WITH_IMM,
    }
);

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WcStatus::Unknown(n) => write!(f, "status {n}"),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

/// Completion events taken before they are acknowledged together.
pub const ACK_BATCH: u32 = 16;

struct CqInner {
    ctx: Context,
    ptr: NonNull<ffi::ibv_cq>,
    channel: Option<NonNull<ffi::ibv_comp_channel>>,
    /// Events taken from the channel and not yet acknowledged.
    unacked: AtomicU32,
}

impl CqInner {
    /// Acknowledges `n` events taken from the channel.
    fn ack(&self, n: u32) {
        if n == 0 {
            return;
        }
        // SAFETY: `n` events were taken for this CQ (counted in `unacked`) and not yet
        // acknowledged; the caller took them out of the count, so each is acknowledged once.
        unsafe { (self.ctx.lib().verbs.ibv_ack_cq_events)(self.ptr.as_ptr(), n) };
    }
}

// SAFETY: verbs (poll, notify, events) are thread-safe; pointers only go to them.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // `ibv_destroy_cq` waits until every event taken is acknowledged.
        self.ack(self.unacked.swap(0, Ordering::SeqCst));
        let v = &self.ctx.lib().verbs;
        // SAFETY: created by ibv_create_cq, destroyed once; QPs using it hold this inner value,
        // so none is left; every channel event was acknowledged just above.
        unsafe { (v.ibv_destroy_cq)(self.ptr.as_ptr()) };
        if let Some(c) = self.channel {
            // SAFETY: the only CQ on this channel is gone; destroyed once.
            unsafe { (v.ibv_destroy_comp_channel)(c.as_ptr()) };
        }
    }
}

/// A completion queue, optionally with its own completion channel. Cheap to clone.
#[derive(Clone)]
pub struct Cq {
    inner: Arc<CqInner>,
}

/// One work completion (`struct ibv_wc`).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default)]
pub struct WorkCompletion {
    raw: ffi::ibv_wc,
}

impl WorkCompletion {
    /// The work request id given when posting.
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    /// Status.
    pub fn status(&self) -> WcStatus {
        WcStatus::from(self.raw.status)
    }

    /// Whether the work request succeeded.
    pub fn is_success(&self) -> bool {
        self.raw.status == ffi::IBV_WC_SUCCESS
    }

    /// What completed (only meaningful on success, except for the receive bit).
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode::from(self.raw.opcode)
    }

    /// A receive completion.
    pub fn is_recv(&self) -> bool {
        self.raw.opcode & ffi::IBV_WC_RECV != 0
    }

    /// Bytes received (receives) or transferred (RDMA read, atomics).
    pub fn byte_len(&self) -> u32 {
        self.raw.byte_len
    }

    /// The immediate data (host order), if the completion carries some.
    pub fn imm_data(&self) -> Option<u32> {
        (self.raw.wc_flags & ffi::IBV_WC_WITH_IMM != 0).then(|| u32::from_be(self.raw.imm_data))
    }

    /// The local queue pair number.
    pub fn qp_num(&self) -> u32 {
        self.raw.qp_num
    }

    /// The vendor's error code.
    pub fn vendor_err(&self) -> u32 {
        self.raw.vendor_err
    }
}

impl Context {
    /// `ibv_create_cq` with at least `cqe` entries; with `channel`, also a completion channel
    /// of its own whose fd ([`Cq::fd`]) is non-blocking and becomes readable after
    /// [`Cq::req_notify`] once a completion arrives.
    ///
    /// # Errors
    /// Creating the channel or the queue failed, or `cqe` is not positive.
    pub fn create_cq(&self, cqe: u32, channel: bool, comp_vector: i32) -> Result<Cq, VerbsError> {
        let cqe = c_int::try_from(cqe)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| VerbsError::invalid("ibv_create_cq", "cqe must be 1..=i32::MAX"))?;
        let lib = self.lib();
        let mut chan: Option<NonNull<ffi::ibv_comp_channel>> = None;
        if channel {
            // SAFETY: an open context.
            let c = unsafe { (lib.verbs.ibv_create_comp_channel)(self.as_ptr()) };
            let c = NonNull::new(c).ok_or_else(|| VerbsError::errno("ibv_create_comp_channel"))?;
            // SAFETY: a channel just created; its fd field is initialised.
            let fd = unsafe { c.as_ref().fd };
            if let Err(e) = set_nonblocking(fd) {
                // SAFETY: the channel has no CQ yet; destroyed once.
                unsafe { (lib.verbs.ibv_destroy_comp_channel)(c.as_ptr()) };
                return Err(VerbsError::new("fcntl(O_NONBLOCK)", e));
            }
            chan = Some(c);
        }
        let chan_ptr = chan.map_or(ptr::null_mut(), NonNull::as_ptr);
        // SAFETY: an open context; `chan_ptr` is NULL or a channel of this context.
        let cq = unsafe {
            (lib.verbs.ibv_create_cq)(self.as_ptr(), cqe, ptr::null_mut(), chan_ptr, comp_vector)
        };
        let Some(ptr) = NonNull::new(cq) else {
            let err = VerbsError::errno("ibv_create_cq");
            if let Some(c) = chan {
                // SAFETY: the channel has no CQ; destroyed once.
                unsafe { (lib.verbs.ibv_destroy_comp_channel)(c.as_ptr()) };
            }
            return Err(err);
        };
        Ok(Cq {
            inner: Arc::new(CqInner {
                ctx: self.clone(),
                ptr,
                channel: chan,
                unacked: AtomicU32::new(0),
            }),
        })
    }
}

impl Cq {
    fn lib(&self) -> &'static IbLib {
        self.inner.ctx.lib()
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_cq {
        self.inner.ptr.as_ptr()
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The number of entries the provider actually allocated.
    pub fn capacity(&self) -> i32 {
        // SAFETY: alive while `self` lives; `cqe` is set at creation.
        unsafe { self.inner.ptr.as_ref().cqe }
    }

    /// The completion channel's fd (non-blocking), if the queue has a channel: register it
    /// with epoll for readability, then call [`Cq::get_event`].
    pub fn fd(&self) -> Option<RawFd> {
        // SAFETY: the channel lives as long as the queue.
        self.inner.channel.map(|c| unsafe { c.as_ref().fd })
    }

    /// `ibv_poll_cq` through `context->ops.poll_cq`: fills the front of `wcs`, returns how many.
    ///
    /// # Errors
    /// The provider reported an error (the queue is broken).
    pub fn poll(&self, wcs: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        let n = c_int::try_from(wcs.len()).unwrap_or(c_int::MAX);
        let f = self
            .inner
            .ctx
            .raw()
            .ops
            .poll_cq
            .ok_or_else(|| VerbsError::invalid("poll_cq", "provider has no poll_cq"))?;
        // SAFETY: the CQ belongs to this context; `wcs` is `n` writable ibv_wc (transparent
        // wrapper).
        let rc = unsafe { f(self.as_ptr(), n, wcs.as_mut_ptr().cast::<ffi::ibv_wc>()) };
        if rc < 0 {
            return Err(VerbsError::rc("poll_cq", rc));
        }
        Ok(rc as usize)
    }

    /// `ibv_req_notify_cq` through `context->ops.req_notify_cq`: the next completion (the next
    /// solicited or error one if `solicited_only`) makes the channel readable once.
    ///
    /// # Errors
    /// The provider refused.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), VerbsError> {
        let f =
            self.inner.ctx.raw().ops.req_notify_cq.ok_or_else(|| {
                VerbsError::invalid("req_notify_cq", "provider has no req_notify_cq")
            })?;
        // SAFETY: the CQ belongs to this context.
        let rc = unsafe { f(self.as_ptr(), c_int::from(solicited_only)) };
        check("req_notify_cq", rc)
    }

    /// Takes one event from the completion channel (`ibv_get_cq_event`); events are
    /// acknowledged [`ACK_BATCH`] at a time (and the rest when the queue is dropped). Returns
    /// `false` when there is none (the fd is non-blocking). An event means the arming of
    /// [`Cq::req_notify`] was used up: poll, and arm again before sleeping on the channel.
    ///
    /// # Errors
    /// The queue has no channel, or reading the channel failed.
    pub fn get_event(&self) -> Result<bool, VerbsError> {
        let Some(chan) = self.inner.channel else {
            return Err(VerbsError::invalid(
                "ibv_get_cq_event",
                "the CQ has no channel",
            ));
        };
        let mut cq: *mut ffi::ibv_cq = ptr::null_mut();
        let mut cq_ctx: *mut c_void = ptr::null_mut();
        // SAFETY: a valid channel and two out pointers.
        let rc =
            unsafe { (self.lib().verbs.ibv_get_cq_event)(chan.as_ptr(), &mut cq, &mut cq_ctx) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(false);
            }
            return Err(VerbsError::new("ibv_get_cq_event", e));
        }
        // The channel serves this queue only, so the event is ours.
        debug_assert_eq!(cq, self.as_ptr());
        let n = self.inner.unacked.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= ACK_BATCH {
            // Only the events this call takes out of the count are acknowledged here.
            let taken = self.inner.unacked.swap(0, Ordering::SeqCst);
            self.inner.ack(taken);
        }
        Ok(true)
    }
}
