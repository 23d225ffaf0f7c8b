//! Protection domains and memory regions: [`Pd`], the buffers the transport owns ([`Mr`]),
//! registrations of memory shared with the application ([`MemMr`]), and the scatter/gather
//! elements work requests name ([`Sge`]).
//!
//! Contract:
//! - A [`Pd`] keeps its [`Context`] alive, an [`Mr`] or [`MemMr`] its [`Pd`].
//! - An [`Mr`] owns its memory (page-aligned, page-rounded, zeroed). Dropping it deregisters the
//!   region *before* freeing the memory; once `ibv_dereg_mr` has returned the adapter can no
//!   longer touch it (work requests still naming it complete with an error). If deregistration
//!   fails the memory is leaked rather than freed. The adapter may write registered memory at
//!   any time (receives, RDMA writes and reads), so the bytes are only reachable through copies
//!   ([`Mr::read_at`], [`Mr::write_at`]), never through Rust references.
//! - A [`Sge`] can only be made from an [`Mr`] or [`MemMr`] and a range inside it, and borrows
//!   it.
#![allow(unsafe_code)]

use std::alloc::Layout;
use std::ffi::c_void;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::device::Context;
use super::error::VerbsError;
use super::ffi;
use super::mem::{DmaMem, OutOfRange};

struct PdInner {
    ctx: Context,
    ptr: NonNull<ffi::ibv_pd>,
}

// SAFETY: verbs are thread-safe; the pointer is only passed to them.
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_pd, freed once; MRs and QPs hold this inner value, so
        // none is left.
        unsafe { (self.ctx.lib().verbs.ibv_dealloc_pd)(self.ptr.as_ptr()) };
    }
}

/// A protection domain. Cheap to clone.
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdInner>,
}

/// Memory region access rights (`IBV_ACCESS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access(pub i32);

impl Access {
    /// The adapter may write (needed for receives and RDMA reads into the region).
    pub const LOCAL_WRITE: Access = Access(ffi::IBV_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA-write into the region.
    pub const REMOTE_WRITE: Access = Access(ffi::IBV_ACCESS_REMOTE_WRITE);
    /// Peers may RDMA-read the region.
    pub const REMOTE_READ: Access = Access(ffi::IBV_ACCESS_REMOTE_READ);
    /// Peers may run atomics on the region.
    pub const REMOTE_ATOMIC: Access = Access(ffi::IBV_ACCESS_REMOTE_ATOMIC);
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl Pd {
    /// The context this domain belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_pd {
        self.inner.ptr.as_ptr()
    }

    /// Allocates `len` zeroed bytes (page-aligned, rounded up to whole pages) and registers
    /// them with `access`.
    ///
    /// # Errors
    /// `len` is 0, the allocation failed, or `ibv_reg_mr` failed (often the locked-memory
    /// limit, `ulimit -l`).
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<Mr, VerbsError> {
        const PAGE: usize = 4096;
        if len == 0 {
            return Err(VerbsError::invalid("ibv_reg_mr", "empty region"));
        }
        let alloc_len = len
            .checked_add(PAGE - 1)
            .map(|n| n & !(PAGE - 1))
            .ok_or_else(|| VerbsError::invalid("ibv_reg_mr", "region too large"))?;
        let layout = Layout::from_size_align(alloc_len, PAGE)
            .map_err(|_| VerbsError::invalid("ibv_reg_mr", "region too large"))?;
        // SAFETY: the layout has a non-zero size.
        let buf = unsafe { std::alloc::alloc_zeroed(layout) };
        let buf = NonNull::new(buf)
            .ok_or_else(|| VerbsError::new("alloc", io::Error::from(io::ErrorKind::OutOfMemory)))?;
        // SAFETY: a valid PD; `buf` is `len` (<= alloc_len) writable bytes that outlive the MR
        // (freed only after a successful ibv_dereg_mr in Mr::drop).
        let mr = unsafe {
            (self.inner.ctx.lib().verbs.ibv_reg_mr)(
                self.as_ptr(),
                buf.as_ptr().cast::<c_void>(),
                len,
                access.0,
            )
        };
        let Some(ptr) = NonNull::new(mr) else {
            let err = VerbsError::errno("ibv_reg_mr");
            // SAFETY: allocated above with `layout`, never registered.
            unsafe { std::alloc::dealloc(buf.as_ptr(), layout) };
            return Err(err);
        };
        Ok(Mr {
            pd: self.clone(),
            ptr,
            buf,
            len,
            layout,
        })
    }
}

impl Context {
    /// `ibv_alloc_pd`.
    ///
    /// # Errors
    /// The allocation failed.
    pub fn alloc_pd(&self) -> Result<Pd, VerbsError> {
        // SAFETY: an open context.
        let pd = unsafe { (self.lib().verbs.ibv_alloc_pd)(self.as_ptr()) };
        let ptr = NonNull::new(pd).ok_or_else(|| VerbsError::errno("ibv_alloc_pd"))?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: self.clone(),
                ptr,
            }),
        })
    }
}

/// A registration of (part of) a shared [`DmaMem`] buffer, which it keeps alive.
///
/// The adapter addresses byte `k` of the registered range as `iova + k`: either the virtual
/// address (for local scatter/gather use) or a zero-based address (the kernel RDS convention
/// for regions peers target: the page offset of the range's first byte).
pub struct MemMr {
    pd: Pd,
    ptr: NonNull<ffi::ibv_mr>,
    mem: Arc<DmaMem>,
    off: usize,
    len: usize,
    iova: u64,
}

// SAFETY: verbs are thread-safe; the memory is only touched through `DmaMem`'s copies.
unsafe impl Send for MemMr {}
// SAFETY: as above.
unsafe impl Sync for MemMr {}

impl Pd {
    /// Registers `[off, off+len)` of `mem` with `access`. With `zero_based` the adapter
    /// addresses the range from its page offset (`(address of byte off) & 4095`); otherwise
    /// from its virtual address.
    ///
    /// # Errors
    /// The range is empty or outside `mem`, or `ibv_reg_mr_iova` failed.
    pub fn reg_mem(
        &self,
        mem: &Arc<DmaMem>,
        off: usize,
        len: usize,
        access: Access,
        zero_based: bool,
    ) -> Result<MemMr, VerbsError> {
        if len == 0 || mem.check(off, len).is_err() {
            return Err(VerbsError::invalid("ibv_reg_mr_iova", "bad range"));
        }
        let start = mem.addr() + off as u64;
        let iova = if zero_based { start & 4095 } else { start };
        // SAFETY: a valid PD; the range is inside `mem`'s allocation, which the returned MemMr
        // keeps alive (and leaks if deregistration fails).
        let mr = unsafe {
            (self.inner.ctx.lib().verbs.ibv_reg_mr_iova)(
                self.as_ptr(),
                mem.as_ptr().add(off).cast::<c_void>(),
                len,
                iova,
                access.0,
            )
        };
        let ptr = NonNull::new(mr).ok_or_else(|| VerbsError::errno("ibv_reg_mr_iova"))?;
        Ok(MemMr {
            pd: self.clone(),
            ptr,
            mem: mem.clone(),
            off,
            len,
            iova,
        })
    }
}

impl MemMr {
    fn raw(&self) -> &ffi::ibv_mr {
        // SAFETY: registered while `self` lives.
        unsafe { self.ptr.as_ref() }
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.raw().lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.raw().rkey
    }

    /// The adapter address of the range's first byte.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The registered range of the buffer: (offset, length).
    pub fn range(&self) -> (usize, usize) {
        (self.off, self.len)
    }

    /// The buffer.
    pub fn mem(&self) -> &Arc<DmaMem> {
        &self.mem
    }

    /// The protection domain.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// A scatter/gather element for `len` bytes at buffer offset `off` (inside the range).
    ///
    /// # Errors
    /// The bytes are not inside the registered range, or `len` exceeds `u32::MAX`.
    pub fn sge(&self, off: usize, len: usize) -> Result<Sge<'_>, OutOfRange> {
        let bad = OutOfRange {
            offset: off,
            len,
            size: self.len,
        };
        let end = off.checked_add(len).ok_or(bad)?;
        if off < self.off || end > self.off + self.len {
            return Err(bad);
        }
        let length = u32::try_from(len).map_err(|_| bad)?;
        Ok(Sge {
            raw: ffi::ibv_sge {
                addr: self.iova + (off - self.off) as u64,
                length,
                lkey: self.lkey(),
            },
            _mr: PhantomData,
        })
    }
}

impl Drop for MemMr {
    fn drop(&mut self) {
        // SAFETY: registered by ibv_reg_mr_iova, deregistered once.
        let rc = unsafe { (self.pd.inner.ctx.lib().verbs.ibv_dereg_mr)(self.ptr.as_ptr()) };
        if rc != 0 {
            // The adapter might still access the memory: never free it.
            std::mem::forget(self.mem.clone());
        }
    }
}

impl fmt::Debug for MemMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemMr")
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.len)
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

/// A registered memory region that owns its memory.
pub struct Mr {
    pd: Pd,
    ptr: NonNull<ffi::ibv_mr>,
    buf: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: verbs are thread-safe; the buffer is only accessed by copies through `read_at`
// (`&self`) and `write_at` (`&mut self`), so Rust-side accesses never race each other.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    fn raw(&self) -> &ffi::ibv_mr {
        // SAFETY: registered while `self` lives.
        unsafe { self.ptr.as_ref() }
    }

    fn range(&self, offset: usize, len: usize) -> Result<(), OutOfRange> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OutOfRange {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// The registered length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (empty regions are refused), for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Local key (for scatter/gather elements).
    pub fn lkey(&self) -> u32 {
        self.raw().lkey
    }

    /// Remote key (what a peer needs for RDMA on this region).
    pub fn rkey(&self) -> u32 {
        self.raw().rkey
    }

    /// The region's start address as the adapter sees it (what a peer needs for RDMA).
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// The protection domain.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// A scatter/gather element for `len` bytes at `offset`.
    ///
    /// # Errors
    /// The range is not inside the region or longer than `u32::MAX`.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge<'_>, OutOfRange> {
        self.range(offset, len)?;
        let length = u32::try_from(len).map_err(|_| OutOfRange {
            offset,
            len,
            size: self.len,
        })?;
        Ok(Sge {
            raw: ffi::ibv_sge {
                addr: self.addr() + offset as u64,
                length,
                lkey: self.lkey(),
            },
            _mr: PhantomData,
        })
    }

    /// Copies `out.len()` bytes at `offset` out of the region.
    ///
    /// # Errors
    /// The range is not inside the region.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), OutOfRange> {
        self.range(offset, out.len())?;
        // SAFETY: the range is inside the allocation; `out` is a distinct Rust buffer. The
        // adapter may be writing the region concurrently (that is the caller's protocol to
        // avoid: read after the completion); no Rust reference to the region exists.
        unsafe {
            ptr::copy_nonoverlapping(self.buf.as_ptr().add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// Copies `data` into the region at `offset`.
    ///
    /// # Errors
    /// The range is not inside the region.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), OutOfRange> {
        self.range(offset, data.len())?;
        // SAFETY: the range is inside the allocation, `&mut self` excludes other Rust
        // accesses, and `data` is a distinct buffer.
        unsafe {
            ptr::copy_nonoverlapping(data.as_ptr(), self.buf.as_ptr().add(offset), data.len())
        };
        Ok(())
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by ibv_reg_mr, deregistered once.
        let rc = unsafe { (self.pd.inner.ctx.lib().verbs.ibv_dereg_mr)(self.ptr.as_ptr()) };
        if rc == 0 {
            // SAFETY: the adapter can no longer access the memory; allocated with `layout`.
            unsafe { std::alloc::dealloc(self.buf.as_ptr(), self.layout) };
        }
        // else: leak the memory, the adapter might still write it.
    }
}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}

/// A scatter/gather element inside an [`Mr`] (`struct ibv_sge`), borrowing the region.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge<'a> {
    raw: ffi::ibv_sge,
    _mr: PhantomData<&'a Mr>,
}

impl Sge<'_> {
    /// Adapter address.
    pub fn addr(&self) -> u64 {
        self.raw.addr
    }

    /// Length in bytes.
    pub fn length(&self) -> u32 {
        self.raw.length
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.raw.lkey
    }
}
