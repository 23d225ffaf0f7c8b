//! Memory the adapter may access directly: page-aligned, zeroed, never moved, freed only when
//! no registration names it any more.
//!
//! This is what RDMA targets and sources are made of ([`crate::rdma::RdmaBuffer`] wraps it).
//! The adapter may read or write the bytes at any time while a peer holds a key for them, so
//! Rust code never gets a reference into the memory: every access is a copy, and the
//! application's own copies are serialised by a lock.
#![allow(unsafe_code)]

use std::alloc::Layout;
use std::io;
use std::ptr::{self, NonNull};
use std::sync::Mutex;

const PAGE: usize = 4096;

/// A byte range outside a memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("range {offset}+{len} is outside the {size}-byte memory region")]
pub struct OutOfRange {
    /// Start of the requested range.
    pub offset: usize,
    /// Its length.
    pub len: usize,
    /// The region's size.
    pub size: usize,
}

/// Page-aligned memory for RDMA (or, from [`DmaMem::foreign`], an application's memory).
pub struct DmaMem {
    ptr: NonNull<u8>,
    len: usize,
    /// How it was allocated; `None` for memory this value does not own.
    layout: Option<Layout>,
    /// Serialises copies made by the application (the adapter does not take it).
    copy: Mutex<()>,
}

// SAFETY: the memory is only accessed through copies made under `copy` (and by the adapter,
// which Rust does not see); the pointer itself is never shared as a reference.
unsafe impl Send for DmaMem {}
// SAFETY: as above.
unsafe impl Sync for DmaMem {}

impl DmaMem {
    /// Allocates `len` zeroed bytes, page-aligned and rounded up to whole pages.
    ///
    /// # Errors
    /// `len` is 0 or too large (`InvalidInput`), or the allocation failed (`OutOfMemory`).
    pub fn new(len: usize) -> io::Result<DmaMem> {
        let bad = || io::Error::new(io::ErrorKind::InvalidInput, "RDMA buffer size");
        if len == 0 {
            return Err(bad());
        }
        let alloc_len = len
            .checked_add(PAGE - 1)
            .map(|n| n & !(PAGE - 1))
            .ok_or_else(bad)?;
        let layout = Layout::from_size_align(alloc_len, PAGE).map_err(|_| bad())?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Ok(DmaMem {
            ptr,
            len,
            layout: Some(layout),
            copy: Mutex::new(()),
        })
    }

    /// `len` bytes of memory the caller owns at `addr`, not page-aligned in general and never
    /// freed here: what the kernel's RDMA API takes from an application (`RDS_GET_MR`'s
    /// `rds_iovec`, the local vectors of `RDS_CMSG_RDMA_ARGS`). For the preload library,
    /// which hands a C program's buffers to the stack
    /// (`RdmaBuffer::from_mem` wraps it).
    ///
    /// # Errors
    /// `InvalidInput` for a null address, an empty range or one that wraps.
    ///
    /// # Safety
    /// `[addr, addr+len)` must be memory of this process that stays mapped while this value,
    /// or any region or RDMA operation made from it, lives (the contract the kernel's API puts
    /// on the program). The adapter reads and writes it at any time meanwhile, and
    /// [`DmaMem::read_at`] / [`DmaMem::write_at`] copy from and to it, so the caller must not
    /// hold Rust references into it.
    pub unsafe fn foreign(addr: u64, len: usize) -> io::Result<DmaMem> {
        let bad = || io::Error::new(io::ErrorKind::InvalidInput, "RDMA buffer range");
        if len == 0 || addr.checked_add(len as u64).is_none() {
            return Err(bad());
        }
        let ptr = NonNull::new(addr as usize as *mut u8).ok_or_else(bad)?;
        Ok(DmaMem {
            ptr,
            len,
            layout: None,
            copy: Mutex::new(()),
        })
    }

    /// Usable length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (empty buffers are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start address (page-aligned for memory from [`DmaMem::new`]).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Checks that `[off, off+len)` lies inside the buffer.
    ///
    /// # Errors
    /// The range is outside.
    pub fn check(&self, off: usize, len: usize) -> Result<(), OutOfRange> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OutOfRange {
                offset: off,
                len,
                size: self.len,
            }),
        }
    }

    /// Copies `out.len()` bytes at `off` out of the buffer.
    ///
    /// # Errors
    /// The range is outside the buffer.
    pub fn read_at(&self, off: usize, out: &mut [u8]) -> Result<(), OutOfRange> {
        self.check(off, out.len())?;
        let _g = self.copy.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the range is inside the allocation, `out` is a distinct Rust buffer, and
        // application copies are serialised by the lock; the adapter's accesses are the
        // caller's protocol to order (read after the completion or message that follows them).
        unsafe {
            ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// Copies `data` into the buffer at `off`.
    ///
    /// # Errors
    /// The range is outside the buffer.
    pub fn write_at(&self, off: usize, data: &[u8]) -> Result<(), OutOfRange> {
        self.check(off, data.len())?;
        let _g = self.copy.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: as in `read_at`, copying the other way.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len()) };
        Ok(())
    }
}

impl Drop for DmaMem {
    fn drop(&mut self) {
        // Foreign memory has no layout and is not ours to free.
        if let Some(layout) = self.layout {
            // SAFETY: allocated in `new` with `layout`. Registrations hold an `Arc` to this
            // value and leak it if deregistration fails, so no adapter mapping outlives it.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl std::fmt::Debug for DmaMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaMem")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_bounded() {
        let m = DmaMem::new(5000).unwrap();
        assert_eq!(m.addr() % 4096, 0);
        assert_eq!(m.len(), 5000);
        let mut b = [1u8; 16];
        m.read_at(4990, &mut b[..10]).unwrap();
        assert_eq!(&b[..10], &[0; 10]);
        m.write_at(4996, b"abcd").unwrap();
        m.read_at(4996, &mut b[..4]).unwrap();
        assert_eq!(&b[..4], b"abcd");
        assert!(m.write_at(4997, b"abcd").is_err());
        assert!(m.read_at(usize::MAX, &mut b).is_err());
        assert!(DmaMem::new(0).is_err());
        assert!(DmaMem::new(usize::MAX).is_err());
    }
}
