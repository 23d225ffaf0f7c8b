//! The owned raw handles of the connection manager: an event channel and an id, each destroyed
//! once on drop. [`super::cm`] wraps them in its safe API; a queue pair made on an id
//! ([`super::qp::Qp`]) holds the id's handle so the id outlives it.
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi;
use super::ffi::IbLib;

/// An event channel (`struct rdma_event_channel`), destroyed on drop.
pub(crate) struct ChannelInner {
    pub(crate) lib: &'static IbLib,
    pub(crate) ptr: NonNull<ffi::rdma_event_channel>,
}

// SAFETY: librdmacm calls are thread-safe; the pointer only goes to them.
unsafe impl Send for ChannelInner {}
// SAFETY: as above.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: created by rdma_create_event_channel, destroyed once; every id on it holds
        // this inner value, so none is left.
        unsafe { (self.lib.cm.rdma_destroy_event_channel)(self.ptr.as_ptr()) };
    }
}

/// An id (`struct rdma_cm_id`), destroyed on drop; it keeps its channel alive.
pub(crate) struct CmIdInner {
    pub(crate) lib: &'static IbLib,
    pub(crate) ptr: NonNull<ffi::rdma_cm_id>,
    pub(crate) _chan: Arc<ChannelInner>,
}

// SAFETY: librdmacm calls are thread-safe; see `super::cm`'s module doc about driving an id from one
// thread.
unsafe impl Send for CmIdInner {}
// SAFETY: as above.
unsafe impl Sync for CmIdInner {}

impl Drop for CmIdInner {
    fn drop(&mut self) {
        // SAFETY: the id is destroyed once, after its QP (a Qp holds this inner value), and
        // every event of ours has been acknowledged.
        unsafe { (self.lib.cm.rdma_destroy_id)(self.ptr.as_ptr()) };
    }
}
