//! Sealed shared memory: a memfd whose size can never change and its shared mapping.
#![allow(unsafe_code)]

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::cvt;

/// A sealed memfd of `len` zero bytes: its size can never change again (`F_SEAL_SHRINK`,
/// `F_SEAL_GROW`, `F_SEAL_SEAL`), so a process it is shared with cannot truncate it under
/// another's mapping.
pub fn memfd_sealed(name: &str, len: usize) -> io::Result<OwnedFd> {
    let cname = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: `cname` is a valid NUL-terminated string for the call; a non-negative result is
    // a fresh descriptor.
    let fd = cvt(unsafe {
        libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    })?;
    // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let size = libc::off_t::try_from(len).map_err(io::Error::other)?;
    // SAFETY: plain integer arguments on a descriptor we own.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), size) })?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: plain integer arguments on a descriptor we own.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) })?;
    Ok(fd)
}

/// A shared mapping of a whole sealed memfd ([`memfd_sealed`]), read and written only
/// through copies and atomics: the other process may change any byte at any time, so
/// nothing here hands out a reference into it.
#[derive(Debug)]
pub struct Shm {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory, accessed only through atomics and byte copies;
// moving or sharing the handle between threads is as safe as sharing an `&[AtomicU8]`.
unsafe impl Send for Shm {}
// SAFETY: as for Send: every access is an atomic or a copy that tolerates concurrent writes.
unsafe impl Sync for Shm {}

impl Shm {
    /// Maps `fd` (read and write, shared), which must be `len` bytes and sealed against
    /// shrinking (else `EINVAL`): a mapping of a file someone could truncate would fault.
    pub fn map(fd: RawFd, len: usize) -> io::Result<Shm> {
        // SAFETY: plain integer arguments; F_GET_SEALS only reads the file's seals.
        let seals = cvt(unsafe { libc::fcntl(fd, libc::F_GET_SEALS) })?;
        if seals & libc::F_SEAL_SHRINK == 0 || len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut st = MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat writes one stat struct into the valid buffer.
        cvt(unsafe { libc::fstat(fd, st.as_mut_ptr()) })?;
        // SAFETY: fstat succeeded, so the struct is initialised.
        let size = unsafe { st.assume_init() }.st_size;
        if usize::try_from(size).ok() != Some(len) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a fresh shared mapping of `len` bytes of `fd` (its size checked and sealed
        // against shrinking, so every mapped page stays backed); no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Shm { ptr, len })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped (never: [`Shm::map`] refuses zero bytes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The 8-byte word at `off` (a multiple of 8 within the mapping), as an atomic.
    pub fn word(&self, off: usize) -> Option<&std::sync::atomic::AtomicU64> {
        if off % 8 != 0 || off.checked_add(8)? > self.len {
            return None;
        }
        // SAFETY: in bounds and 8-aligned (the mapping is page aligned); the memory lives as
        // long as `self` and is only ever accessed atomically or by byte copies, so viewing
        // it as an AtomicU64 is sound whatever the other process writes.
        Some(unsafe {
            &*self
                .ptr
                .as_ptr()
                .add(off)
                .cast::<std::sync::atomic::AtomicU64>()
        })
    }

    /// Copies `out.len()` bytes from `off` out of the mapping; false when out of bounds.
    pub fn read(&self, off: usize, out: &mut [u8]) -> bool {
        if off.checked_add(out.len()).is_none_or(|e| e > self.len) {
            return false;
        }
        // SAFETY: the source range is in bounds of the live mapping and cannot overlap `out`
        // (ordinary process memory). The other process may write the range meanwhile: the
        // copy then holds some mix of old and new bytes, which every caller checks as
        // untrusted input.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), out.as_mut_ptr(), out.len())
        };
        true
    }

    /// Copies `data` into the mapping at `off`; false when out of bounds.
    pub fn write(&self, off: usize, data: &[u8]) -> bool {
        if off.checked_add(data.len()).is_none_or(|e| e > self.len) {
            return false;
        }
        // SAFETY: the destination range is in bounds of the live writable mapping and cannot
        // overlap `data`; concurrent writes by the other process only garble bytes it owns.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len())
        };
        true
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no reference into it outlives
        // `self` (`word` borrows from `self`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
