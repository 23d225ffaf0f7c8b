//! The libc calls that are specific to `AF_RDS`: `socket(AF_RDS)`, the `RDS_INFO_*` and
//! memory-region socket options with their structures, and `sendmsg`/`recvmsg` with the RDS
//! control messages. Generic calls (bind, connect, integer, address and timeout options,
//! socket names, poll) are the crate's syscall layer, `crate::sys`, which the backend calls
//! directly. One of the FFI layers where `unsafe` is allowed; every block says why it is sound.
//! Everything above this file is safe code.
#![allow(unsafe_code)]

use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use crate::abi::{
    AF_RDS, RDS_CMSG_RDMA_ARGS, RDS_CMSG_RDMA_DEST, RDS_CMSG_RDMA_MAP, RDS_FREE_MR, RDS_GET_MR,
    SOL_RDS,
};
use crate::sys::{cvt, from_storage, RawAddr};

/// `socket(AF_RDS, SOCK_SEQPACKET, 0)`, close-on-exec.
pub fn rds_socket() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; a non-negative result is a fresh descriptor we own.
    let fd = cvt(unsafe { libc::socket(AF_RDS, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One `RDS_INFO_*` getsockopt: the records' bytes and the size of one record. Grows the
/// buffer while the kernel answers `ENOSPC` with the size it needs (bounded: 64 MiB, 8 tries).
pub fn info(fd: RawFd, opt: libc::c_int) -> io::Result<(Vec<u8>, usize)> {
    const MAX: usize = 64 << 20;
    let mut buf: Vec<u8> = vec![0; 4096];
    for _ in 0..8 {
        let mut len = buf.len() as libc::socklen_t;
        // SAFETY: `buf` has `len` writable bytes; the kernel writes at most `len` and updates
        // `len` to what it wrote (or needs).
        let r = unsafe { libc::getsockopt(fd, SOL_RDS, opt, buf.as_mut_ptr().cast(), &mut len) };
        if r >= 0 {
            buf.truncate((len as usize).min(buf.len()));
            return Ok((buf, r as usize));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOSPC) {
            return Err(e);
        }
        let want = (len as usize).max(buf.len() * 2);
        if want > MAX {
            return Err(e);
        }
        // Room for records that appear between the two calls.
        buf.resize(want + want / 4, 0);
    }
    Err(io::Error::from_raw_os_error(libc::ENOSPC))
}

/// `struct rds_iovec`: user memory the kernel pins and maps.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RdsIovec {
    /// Start address in this process.
    pub addr: u64,
    /// Length in bytes.
    pub bytes: u64,
}

/// `struct rds_get_mr_args`.
#[repr(C)]
struct GetMrArgs {
    vec: RdsIovec,
    cookie_addr: u64,
    flags: u64,
}

/// `struct rds_free_mr_args`.
#[repr(C)]
struct FreeMrArgs {
    cookie: u64,
    flags: u64,
}

/// `struct rds_rdma_args`.
#[repr(C)]
struct RdmaArgsC {
    cookie: u64,
    remote_vec: RdsIovec,
    local_vec_addr: u64,
    nr_local: u64,
    flags: u64,
    user_token: u64,
}

/// An RDMA operation for `RDS_CMSG_RDMA_ARGS`, with the local memory as addresses in this
/// process (the caller owns that memory; the kernel pins it for the operation).
#[derive(Debug, Clone, Default)]
pub struct RdmaOpArgs {
    /// The peer's region (`rds_rdma_cookie_t`).
    pub cookie: u64,
    /// `remote_vec`: offset in the region and total length.
    pub remote: RdsIovec,
    /// The local buffers.
    pub local: Vec<RdsIovec>,
    /// `RDS_RDMA_*` flags.
    pub flags: u64,
    /// Token echoed in the completion notification.
    pub user_token: u64,
}

/// The RDMA control data of one `sendmsg`.
#[derive(Debug, Clone, Default)]
pub struct SendRdma {
    /// `RDS_CMSG_RDMA_ARGS`.
    pub args: Option<RdmaOpArgs>,
    /// `RDS_CMSG_RDMA_DEST`: a cookie handed to the peer.
    pub dest: Option<u64>,
    /// `RDS_CMSG_RDMA_MAP`: register this memory with these flags and hand its cookie over.
    pub map: Option<(RdsIovec, u64)>,
}

/// `setsockopt(RDS_GET_MR)`: registers `vec` (memory of this process) and returns its cookie.
pub fn get_mr(fd: RawFd, vec: RdsIovec, flags: u64) -> io::Result<u64> {
    let mut cookie: u64 = 0;
    let args = GetMrArgs {
        vec,
        cookie_addr: std::ptr::addr_of_mut!(cookie) as u64,
        flags,
    };
    // SAFETY: `args` is a valid rds_get_mr_args for the call; the kernel writes 8 bytes to
    // `cookie_addr`, which points to the live local `cookie`. The memory `vec` names is pinned
    // by the kernel (get_user_pages), which validates the range itself (EFAULT).
    cvt(unsafe {
        libc::setsockopt(
            fd,
            SOL_RDS,
            RDS_GET_MR,
            (&args as *const GetMrArgs).cast(),
            size_of::<GetMrArgs>() as libc::socklen_t,
        )
    })?;
    // SAFETY: the kernel may have written `cookie` through the pointer it was given; read it
    // back through memory rather than from a cached value.
    Ok(unsafe { std::ptr::read_volatile(&cookie) })
}

/// `setsockopt(RDS_FREE_MR)`: releases a region (cookie 0: flush unused regions).
pub fn free_mr(fd: RawFd, cookie: u64, flags: u64) -> io::Result<()> {
    let args = FreeMrArgs { cookie, flags };
    // SAFETY: `args` is a valid rds_free_mr_args that lives across the call.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            SOL_RDS,
            RDS_FREE_MR,
            (&args as *const FreeMrArgs).cast(),
            size_of::<FreeMrArgs>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Room for one control message of `len` data bytes, in u64 words (aligned as cmsghdr).
fn cmsg_words(len: usize) -> usize {
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(len as u32) } as usize;
    space.div_ceil(8)
}

/// `sendmsg` of one message to `dest` (or the connected destination) with `flags` and, when
/// given, RDMA control data. Returns the bytes sent and, for `RDS_CMSG_RDMA_MAP`, the cookie
/// the kernel wrote.
pub fn send(
    fd: RawFd,
    data: &[u8],
    dest: Option<SocketAddr>,
    flags: libc::c_int,
    rdma: Option<&SendRdma>,
) -> io::Result<(usize, Option<u64>)> {
    let raw = dest.map(RawAddr::from);
    let (name, namelen) = raw.as_ref().map_or((std::ptr::null(), 0), RawAddr::as_ptr);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain old data; all-zero (no control data) is valid.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_name = name as *mut libc::c_void;
    mh.msg_namelen = namelen;
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    // The control messages' payloads; they (and `map_cookie`, which the kernel writes) live
    // until the call returns.
    let mut map_cookie: u64 = 0;
    let mut cmsgs: Vec<(libc::c_int, Vec<u8>)> = Vec::new();
    if let Some(r) = rdma {
        if let Some(a) = &r.args {
            let c = RdmaArgsC {
                cookie: a.cookie,
                remote_vec: a.remote,
                local_vec_addr: a.local.as_ptr() as u64,
                nr_local: a.local.len() as u64,
                flags: a.flags,
                user_token: a.user_token,
            };
            cmsgs.push((RDS_CMSG_RDMA_ARGS, pod_bytes(&c)));
        }
        if let Some(c) = r.dest {
            cmsgs.push((RDS_CMSG_RDMA_DEST, c.to_ne_bytes().to_vec()));
        }
        if let Some((vec, fl)) = r.map {
            let m = GetMrArgs {
                vec,
                cookie_addr: std::ptr::addr_of_mut!(map_cookie) as u64,
                flags: fl,
            };
            cmsgs.push((RDS_CMSG_RDMA_MAP, pod_bytes(&m)));
        }
    }
    let mut ctl = vec![0u64; cmsgs.iter().map(|(_, d)| cmsg_words(d.len())).sum()];
    if !cmsgs.is_empty() {
        mh.msg_control = ctl.as_mut_ptr().cast();
        mh.msg_controllen = (ctl.len() * 8) as _;
        // SAFETY: the control buffer has CMSG_SPACE room for every message in order, so
        // CMSG_FIRSTHDR/CMSG_NXTHDR return headers inside it with room for each payload.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&mh);
            for (ty, d) in &cmsgs {
                (*c).cmsg_level = SOL_RDS;
                (*c).cmsg_type = *ty;
                (*c).cmsg_len = libc::CMSG_LEN(d.len() as u32) as _;
                std::ptr::copy_nonoverlapping(d.as_ptr(), libc::CMSG_DATA(c), d.len());
                c = libc::CMSG_NXTHDR(&mh, c);
            }
        }
    }
    // SAFETY: every pointer in `mh` (name, one iovec over `data`, the control buffer) is valid
    // for the call, as are the pointers inside the RDMA control data (`local`'s iovec array,
    // `map_cookie`); the kernel only reads the payload. (RDS refuses any flag but
    // MSG_DONTWAIT with EOPNOTSUPP, MSG_NOSIGNAL included; it raises no SIGPIPE.)
    let r = unsafe { libc::sendmsg(fd, &mh, flags) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let mapped = rdma.is_some_and(|r| r.map.is_some());
    // SAFETY: as in `get_mr`, the kernel wrote the cookie through the pointer it was given.
    let cookie = mapped.then(|| unsafe { std::ptr::read_volatile(&map_cookie) });
    Ok((r as usize, cookie))
}

/// The bytes of a `repr(C)` struct of `u64` fields (no padding).
fn pod_bytes<T>(v: &T) -> Vec<u8> {
    // SAFETY: only used on the repr(C) structs above, made of u64 fields with no padding, so
    // every byte is initialised; the slice lives only for the copy.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

/// What `recvmsg` returned.
#[derive(Debug, Default)]
pub struct Recvd {
    /// The return value: bytes copied, or the full length with `MSG_TRUNC`.
    pub len: usize,
    /// The sender, when the kernel named one.
    pub from: Option<SocketAddr>,
    /// `msg_flags`.
    pub flags: libc::c_int,
    /// Control messages: (level, type, data).
    pub cmsgs: Vec<(libc::c_int, libc::c_int, Vec<u8>)>,
}

/// Control buffer of a receive: room for a message's `RDS_CMSG_RDMA_DEST` (CMSG_SPACE(8) =
/// 24) and `SCM_TIMESTAMP` (CMSG_SPACE(16) = 32), and below two `RDS_CMSG_RDMA_STATUS`
/// notifications (32 each): the kernel puts as many queued notifications into one `recvmsg`
/// as the buffer holds (`rds_notify_queue_get`), and one receive reports one item.
const RECV_CTL_LEN: usize = 56;

/// `recvmsg` into `buf` with `flags`, with room for the RDS control messages.
pub fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<Recvd> {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut ctl = [0u64; RECV_CTL_LEN / 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_name = (&mut ss as *mut libc::sockaddr_storage).cast();
    mh.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.as_mut_ptr().cast();
    mh.msg_controllen = RECV_CTL_LEN as _;
    // SAFETY: every pointer in `mh` is valid for writing its stated length during the call.
    let r = unsafe { libc::recvmsg(fd, &mut mh, flags) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Recvd {
        len: r as usize,
        from: from_storage(&ss, mh.msg_namelen),
        flags: mh.msg_flags,
        cmsgs: Vec::new(),
    };
    // SAFETY: the CMSG_* macros walk the control buffer the kernel filled, within
    // `msg_controllen`; each data slice lies inside that buffer.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&mh);
        while !c.is_null() {
            let hdr = &*c;
            let data = libc::CMSG_DATA(c);
            let n = (hdr.cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            let bytes = std::slice::from_raw_parts(data, n).to_vec();
            out.cmsgs.push((hdr.cmsg_level, hdr.cmsg_type, bytes));
            c = libc::CMSG_NXTHDR(&mh, c);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdma_structs_have_the_kernels_layout() {
        // linux/rds.h: rds_iovec 16, rds_get_mr_args 32, rds_free_mr_args 16,
        // rds_rdma_args 56 bytes, all u64 fields in order.
        assert_eq!(size_of::<RdsIovec>(), 16);
        assert_eq!(size_of::<GetMrArgs>(), 32);
        assert_eq!(size_of::<FreeMrArgs>(), 16);
        assert_eq!(size_of::<RdmaArgsC>(), 56);
        let a = RdmaArgsC {
            cookie: 1,
            remote_vec: RdsIovec { addr: 2, bytes: 3 },
            local_vec_addr: 4,
            nr_local: 5,
            flags: 6,
            user_token: 7,
        };
        let b = pod_bytes(&a);
        let words: Vec<u64> = b
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, [1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn a_receive_holds_one_notification_and_a_messages_cmsgs() {
        // SAFETY: CMSG_SPACE only computes sizes.
        let (dest, ts, notify) = unsafe {
            (
                libc::CMSG_SPACE(8) as usize,
                libc::CMSG_SPACE(16) as usize,
                libc::CMSG_SPACE(16) as usize,
            )
        };
        assert!(dest + ts <= RECV_CTL_LEN);
        assert_eq!(
            RECV_CTL_LEN / notify,
            1,
            "rds_notify_queue_get takes len / space"
        );
    }
}
