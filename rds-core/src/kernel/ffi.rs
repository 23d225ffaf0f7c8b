//! The libc calls of the kernel backend: `socket(AF_RDS)`, its socket options, `sendmsg` and
//! `recvmsg` with their control messages, `poll`. One of the FFI layers where `unsafe` is
//! allowed; every block says why it is sound. Everything above this file is safe code.
#![allow(unsafe_code)]

use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::sys::{cvt, from_storage, RawAddr};

/// `AF_RDS` / `PF_RDS`.
pub const AF_RDS: libc::c_int = 21;
/// `SOL_RDS`.
pub const SOL_RDS: libc::c_int = 276;

/// `socket(AF_RDS, SOCK_SEQPACKET, 0)`, close-on-exec.
pub fn rds_socket() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; a non-negative result is a fresh descriptor we own.
    let fd = cvt(unsafe { libc::socket(AF_RDS, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `bind(2)`.
pub fn bind(fd: RawFd, a: SocketAddr) -> io::Result<()> {
    let raw = RawAddr::from(a);
    let (p, len) = raw.as_ptr();
    // SAFETY: `p` points to a sockaddr of `len` bytes that lives across the call.
    cvt(unsafe { libc::bind(fd, p, len) })?;
    Ok(())
}

/// `connect(2)` (RDS only records the destination).
pub fn connect(fd: RawFd, a: SocketAddr) -> io::Result<()> {
    let raw = RawAddr::from(a);
    let (p, len) = raw.as_ptr();
    // SAFETY: `p` points to a sockaddr of `len` bytes that lives across the call.
    cvt(unsafe { libc::connect(fd, p, len) })?;
    Ok(())
}

/// `getsockname` (`peer` false) or `getpeername` (`peer` true).
pub fn name(fd: RawFd, peer: bool) -> io::Result<SocketAddr> {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = (&mut ss as *mut libc::sockaddr_storage).cast();
    // SAFETY: `p` points to a sockaddr_storage of `len` bytes; the kernel writes at most that.
    cvt(unsafe {
        if peer {
            libc::getpeername(fd, p, &mut len)
        } else {
            libc::getsockname(fd, p, &mut len)
        }
    })?;
    from_storage(&ss, len).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOTCONN))
}

/// `setsockopt` with an `int` value.
pub fn set_int(fd: RawFd, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: `v` is a valid int for the duration of the call and the length says so.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// `getsockopt` of an `int` value.
pub fn get_int(fd: RawFd, level: libc::c_int, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for writing; the kernel writes at most `len` bytes.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            level,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(v)
}

/// `setsockopt` with a sockaddr value (`RDS_CANCEL_SENT_TO`).
pub fn set_addr(fd: RawFd, level: libc::c_int, opt: libc::c_int, a: SocketAddr) -> io::Result<()> {
    let raw = RawAddr::from(a);
    let (p, len) = raw.as_ptr();
    // SAFETY: `p` points to a sockaddr of `len` bytes that lives across the call.
    cvt(unsafe { libc::setsockopt(fd, level, opt, p.cast(), len) })?;
    Ok(())
}

/// `SO_RCVTIMEO` / `SO_SNDTIMEO` (`None`: wait forever).
pub fn set_timeout(fd: RawFd, opt: libc::c_int, t: Option<Duration>) -> io::Result<()> {
    let t = t.unwrap_or(Duration::ZERO);
    let tv = libc::timeval {
        tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` is a valid timeval for the duration of the call and the length says so.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    })?;
    Ok(())
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

/// `sendmsg` of one message to `dest` (or the connected destination) with `flags`.
pub fn send(
    fd: RawFd,
    data: &[u8],
    dest: Option<SocketAddr>,
    flags: libc::c_int,
) -> io::Result<usize> {
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
    // SAFETY: every pointer in `mh` (name, one iovec over `data`) is valid for the call; the
    // kernel only reads the payload. (RDS refuses any flag but MSG_DONTWAIT with EOPNOTSUPP,
    // MSG_NOSIGNAL included; it raises no SIGPIPE.)
    let r = unsafe { libc::sendmsg(fd, &mh, flags) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
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

/// `recvmsg` into `buf` with `flags`, with room for the RDS control messages.
pub fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<Recvd> {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut ctl = [0u64; 64];
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
    mh.msg_controllen = size_of::<[u64; 64]>() as _;
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

/// Whether `fd` is readable and writable now (`poll` with no wait).
pub fn ready(fd: RawFd) -> (bool, bool) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    if r <= 0 {
        return (false, false);
    }
    (
        p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0,
        p.revents & libc::POLLOUT != 0,
    )
}
