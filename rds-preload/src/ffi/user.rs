//! The program's memory as the kernel's RDMA API reaches it: arrays and cookies behind the
//! pointers of `struct rds_rdma_args` / `struct rds_get_mr_args`, copied with
//! `process_vm_readv` / `process_vm_writev` on this process so that a bad pointer is `EFAULT`
//! (as the kernel's `copy_from_user` / `put_user`) instead of a fault in the library, and
//! buffers handed to the stack in place (the kernel pins them; the adapter reads and writes
//! them).

use rds_core::rdma::RdmaBuffer;

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Copies `len` bytes at the program's address `addr`.
///
/// # Errors
/// `EFAULT` when any of it is not readable.
pub fn read(addr: u64, len: usize) -> Result<Vec<u8>, i32> {
    let mut out = vec![0u8; len];
    if len == 0 {
        return Ok(out);
    }
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` covers `out`, which lives across the call; the kernel reads the remote
    // range of this process itself and reports unmapped memory as EFAULT instead of touching it
    // from Rust.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(match errno() {
            libc::EPERM | libc::ENOSYS => libc::EFAULT,
            e => e,
        });
    }
    if n as usize != len {
        return Err(libc::EFAULT);
    }
    Ok(out)
}

/// Writes `data` at the program's address `addr`.
///
/// # Errors
/// `EFAULT` when any of it is not writable.
pub fn write(addr: u64, data: &[u8]) -> Result<(), i32> {
    let local = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: `local` covers `data` (only read); the kernel writes the remote range of this
    // process, checking it is mapped and writable (EFAULT otherwise).
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(libc::EFAULT);
    }
    if n as usize != data.len() {
        return Err(libc::EFAULT);
    }
    Ok(())
}

/// The program's `len` bytes at `addr` as an RDMA buffer, in place.
///
/// # Errors
/// `EINVAL` for a null address or an empty or wrapping range.
pub fn buffer(addr: u64, len: u64) -> Result<RdmaBuffer, i32> {
    let len = usize::try_from(len).map_err(|_| libc::EINVAL)?;
    // SAFETY: the kernel's RDMA API makes the program keep memory it registers (RDS_GET_MR,
    // RDS_CMSG_RDMA_MAP) or names in an RDMA operation mapped while the region or operation
    // lives, and lets the adapter access it at any time meanwhile: the same contract
    // `DmaMem::foreign` asks for. The library holds no Rust references into it; unmapped
    // memory fails the registration (the verbs pin it) with EFAULT.
    let mem = unsafe { rds_core::rdma::DmaMem::foreign(addr, len) }.map_err(|_| libc::EINVAL)?;
    Ok(RdmaBuffer::from_mem(mem))
}
