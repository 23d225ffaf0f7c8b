//! The exported socket calls: each passes a descriptor that is not an RDS one to the C
//! library's definition, and serves an RDS one through `ops`.

use std::sync::{Arc, Once};

use bytes::Bytes;
use libc::{c_int, c_ulong, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};

use super::next::*;
use super::sys;
use crate::logger;
use crate::ops::{self, Cmsg, Payload, FORWARD};
use crate::sock::{self, Entry, Lookup};
use rds_core::abi::AF_RDS;

/// The entry of an RDS descriptor, or the return value for the others: `None` to pass the
/// call through; `Some(Err(()))` after setting EBADFD for an inherited one.
fn entry(fd: c_int) -> Option<Result<Arc<Entry>, ()>> {
    match sock::lookup(fd) {
        Lookup::NotOurs => None,
        Lookup::Inherited => {
            set_errno(libc::EBADFD);
            Some(Err(()))
        }
        Lookup::Ours(e) => Some(Ok(e)),
    }
}

/// Sets errno from `r` and returns the C value.
fn done<T: TryFrom<isize> + From<i8>>(call: impl FnOnce() -> String, r: Result<isize, i32>) -> T {
    logger::call(call, &r);
    match r {
        Ok(n) => T::try_from(n).unwrap_or_else(|_| T::from(-1)),
        Err(e) => {
            set_errno(e);
            T::from(-1)
        }
    }
}

/// The largest message, and so the most of a receive buffer ever written.
const MAX_MSG: usize = rds_core::socket::MAX_MSG_SIZE;

/// The kernel's `MAX_RW_COUNT`: one call moves at most this many bytes, whatever length it
/// was given.
const MAX_RW_COUNT: usize = (i32::MAX as usize) & !4095;

/// The end of the user address space, the kernel's `TASK_SIZE_MAX`: on x86-64 with 4-level
/// page tables 2^47 less a page (with 5-level tables a program has memory above it only when
/// it asks `mmap` for it with a hint; such a range is `EFAULT` here), on arm64 2^48.
#[cfg(target_arch = "x86_64")]
const USER_END: usize = (1 << 47) - 4096;
#[cfg(target_arch = "aarch64")]
const USER_END: usize = 1 << 48;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const USER_END: usize = isize::MAX as usize;

/// Whether `[p, p + len)` (`len` clipped to [`MAX_RW_COUNT`], as the kernel does) is a range
/// a program may pass (the kernel's `access_ok`): `EFAULT` for a null pointer with a length,
/// or a range that wraps or ends past [`USER_END`] (the kernel's answer, where touching it
/// would crash the program). Checked before any slice of the program's memory is made.
fn user_range(p: *const c_void, len: usize) -> Result<(), i32> {
    let len = len.min(MAX_RW_COUNT);
    if len == 0 {
        return Ok(());
    }
    match (p as usize).checked_add(len) {
        Some(end) if !p.is_null() && end <= USER_END => Ok(()),
        _ => Err(libc::EFAULT),
    }
}

/// `len` bytes at `p` (empty for a null pointer or zero length; `len` checked by the
/// caller with [`user_range`]).
///
/// # Safety
/// `p` must point to `len` readable bytes when not null.
unsafe fn bytes<'a>(p: *const c_void, len: usize) -> &'a [u8] {
    if p.is_null() || len == 0 || len > MAX_RW_COUNT || user_range(p, len).is_err() {
        return &[];
    }
    // SAFETY: the caller's promise; the range is one a slice may cover.
    unsafe { std::slice::from_raw_parts(p.cast(), len) }
}

/// `len` writable bytes at `p` (empty for a null pointer or zero length; `len` checked by
/// the caller with [`user_range`]).
///
/// # Safety
/// `p` must point to `len` writable bytes when not null.
unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize) -> &'a mut [u8] {
    if p.is_null() || len == 0 || len > MAX_RW_COUNT || user_range(p, len).is_err() {
        return &mut [];
    }
    // SAFETY: the caller's promise; the range is one a slice may cover.
    unsafe { std::slice::from_raw_parts_mut(p.cast(), len) }
}

/// A message to send from `len` bytes at `p`: `EFAULT` ([`user_range`], the kernel's import
/// of the buffer, before any socket check); past the largest message nothing is copied
/// ([`Payload::TooLong`]: `EMSGSIZE` after the socket's flag and destination checks).
///
/// # Safety
/// `p` must point to `len` readable bytes when the range is valid.
unsafe fn send_bytes(p: *const c_void, len: usize) -> Result<Payload, i32> {
    user_range(p, len)?;
    if len > MAX_MSG {
        return Ok(Payload::TooLong);
    }
    // SAFETY: the caller's promise.
    Ok(Payload::Bytes(Bytes::copy_from_slice(unsafe {
        bytes(p, len)
    })))
}

/// A receive buffer of `len` bytes at `p`: `EFAULT` ([`user_range`]); only its first
/// [`MAX_MSG`] bytes (no message is longer).
///
/// # Safety
/// `p` must point to `len` writable bytes when the range is valid.
unsafe fn recv_bytes<'a>(p: *mut c_void, len: usize) -> Result<&'a mut [u8], i32> {
    user_range(p, len)?;
    // SAFETY: the caller's promise, for a prefix of the buffer.
    Ok(unsafe { bytes_mut(p, len.min(MAX_MSG)) })
}

/// Stores an address the kernel's way: at most `*len` bytes, `*len` set to its full size.
///
/// # Safety
/// `addr` and `len` must be valid when not null, `addr` for `*len` bytes.
unsafe fn put_addr(addr: *mut sockaddr, len: *mut socklen_t, data: &[u8]) {
    if addr.is_null() || len.is_null() {
        return;
    }
    // SAFETY: the caller's promise: `len` is valid and `addr` holds `*len` bytes.
    unsafe {
        let cap = *len as usize;
        let n = cap.min(data.len());
        std::ptr::copy_nonoverlapping(data.as_ptr(), addr.cast::<u8>(), n);
        *len = data.len() as socklen_t;
    }
}

/// The most iovecs one call takes (the kernel's `UIO_MAXIOV`).
const UIO_MAXIOV: usize = 1024;

/// The iovecs of a call, as slices: `too_many` for more than [`UIO_MAXIOV`] (the kernel's
/// `EMSGSIZE` for a `msghdr`, `EINVAL` for `readv`/`writev`), `EFAULT` for a null array,
/// `EINVAL` for a length with the sign bit set, `EFAULT` for a buffer [`user_range`] refuses
/// (the kernel's iovec import, in its order).
///
/// # Safety
/// `iov` must point to `n` iovecs, each describing valid memory, when `n` > 0.
unsafe fn iovecs<'a>(iov: *const iovec, n: usize, too_many: i32) -> Result<&'a [iovec], i32> {
    if n == 0 {
        return Ok(&[]);
    }
    if n > UIO_MAXIOV {
        return Err(too_many);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's promise.
    let v = unsafe { std::slice::from_raw_parts(iov, n) };
    for x in v {
        // A length with the sign bit set is EINVAL, as in the kernel's iovec import.
        if isize::try_from(x.iov_len).is_err() {
            return Err(libc::EINVAL);
        }
        user_range(x.iov_base, x.iov_len)?;
    }
    Ok(v)
}

/// The payload of a gather list as one message ([`iovecs`] errors; past the largest message
/// nothing is copied: [`Payload::TooLong`], as [`send_bytes`]).
///
/// # Safety
/// As [`iovecs`].
unsafe fn gather(iov: *const iovec, n: usize, too_many: i32) -> Result<Payload, i32> {
    // SAFETY: the caller's promise.
    let v = unsafe { iovecs(iov, n, too_many)? };
    let total = v.iter().fold(0usize, |t, x| t.saturating_add(x.iov_len));
    if total > MAX_MSG {
        return Ok(Payload::TooLong);
    }
    if v.len() == 1 {
        // SAFETY: the iovec describes the program's readable buffer.
        return Ok(Payload::Bytes(Bytes::copy_from_slice(unsafe {
            bytes(v[0].iov_base, v[0].iov_len)
        })));
    }
    let mut out = Vec::with_capacity(total);
    for x in v {
        // SAFETY: as above.
        out.extend_from_slice(unsafe { bytes(x.iov_base, x.iov_len) });
    }
    Ok(Payload::Bytes(Bytes::from(out)))
}

/// Receives into a scatter list (`too_many`: as [`iovecs`]).
///
/// # Safety
/// As [`iovecs`], the buffers writable.
unsafe fn scatter_recv(
    e: &Entry,
    iov: *const iovec,
    n: usize,
    flags: c_int,
    too_many: i32,
) -> Result<ops::Recvd, i32> {
    // SAFETY: the caller's promise.
    let v = unsafe { iovecs(iov, n, too_many)? };
    if v.len() == 1 {
        // SAFETY: the iovec describes the program's writable buffer (its first bytes).
        let buf = unsafe { bytes_mut(v[0].iov_base, v[0].iov_len.min(MAX_MSG)) };
        return ops::recv(e, buf, flags);
    }
    // No message is longer than MAX_MSG: a larger list is never filled past it.
    let room = v
        .iter()
        .fold(0usize, |t, x| t.saturating_add(x.iov_len))
        .min(MAX_MSG);
    let mut tmp = vec![0u8; room];
    let r = ops::recv(e, &mut tmp, flags)?;
    let mut left = &tmp[..r.ret.min(tmp.len())];
    for x in v {
        if left.is_empty() {
            break;
        }
        let k = left.len().min(x.iov_len);
        // SAFETY: as above; `k` bytes are within the iovec.
        unsafe { bytes_mut(x.iov_base, k).copy_from_slice(&left[..k]) };
        left = &left[k..];
    }
    Ok(r)
}

fn addr_of(a: Option<std::net::SocketAddr>) -> Vec<u8> {
    a.map(ops::encode_addr).unwrap_or_default()
}

/// `socket(2)`: `AF_RDS` sockets are ours.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    if domain != AF_RDS {
        return forward!(next_socket(domain, ty, protocol));
    }
    register_atfork();
    done(
        || format!("socket(AF_RDS, {ty:#x}, {protocol})"),
        ops::socket(ty, protocol).map(|fd| fd as isize),
    )
}

/// `bind(2)`.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let e = match entry(fd) {
        None => return forward!(next_bind(fd, addr, len)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    // SAFETY: the program's address of `len` bytes.
    let a = unsafe { bytes(addr.cast(), len as usize) };
    let r = ops::bind(&e, a).map(|()| 0);
    done(|| format!("bind({fd}, {:?})", ops::parse_addr(a)), r)
}

/// `connect(2)`: the default destination.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let e = match entry(fd) {
        None => return forward!(next_connect(fd, addr, len)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    // SAFETY: the program's address of `len` bytes.
    let a = unsafe { bytes(addr.cast(), len as usize) };
    done(
        || format!("connect({fd}, {:?})", ops::parse_addr(a)),
        ops::connect(&e, a).map(|()| 0),
    )
}

/// `getsockname(2)`.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    let e = match entry(fd) {
        None => return forward!(next_getsockname(fd, addr, len)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    if addr.is_null() || len.is_null() {
        return done(|| format!("getsockname({fd})"), Err(libc::EFAULT));
    }
    // SAFETY: checked non-null; the program's buffer of `*len` bytes.
    unsafe { put_addr(addr, len, &ops::sockname(&e)) };
    done(|| format!("getsockname({fd})"), Ok(0))
}

/// `getpeername(2)`.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    let e = match entry(fd) {
        None => return forward!(next_getpeername(fd, addr, len)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    let r = ops::peername(&e).map(|a| {
        // SAFETY: the program's buffer of `*len` bytes (null ones are skipped).
        unsafe { put_addr(addr, len, &a) };
        0
    });
    done(|| format!("getpeername({fd})"), r)
}

fn send_common(
    fd: c_int,
    e: &Entry,
    data: Result<Payload, i32>,
    dest: Option<&[u8]>,
    flags: c_int,
    cmsgs: &[Cmsg],
    call: &str,
) -> ssize_t {
    let r = data.and_then(|d| ops::send(e, d, dest, flags, cmsgs).map(|n| n as isize));
    done(|| format!("{call}({fd}, flags {flags:#x})"), r)
}

/// `sendto(2)`.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
) -> ssize_t {
    let e = match entry(fd) {
        None => return forward!(next_sendto(fd, buf, len, flags, addr, alen)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    // SAFETY: the program's buffers of the lengths it gave.
    let (data, dest) = unsafe { (send_bytes(buf, len), bytes(addr.cast(), alen as usize)) };
    let dest = (!addr.is_null()).then_some(dest);
    send_common(fd, &e, data, dest, flags, &[], "sendto")
}

/// `send(2)`.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    let e = match entry(fd) {
        None => return forward!(next_send(fd, buf, len, flags)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    // SAFETY: the program's buffer of `len` bytes.
    let data = unsafe { send_bytes(buf, len) };
    send_common(fd, &e, data, None, flags, &[], "send")
}

/// `write(2)`: a send without flags on an RDS descriptor.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t {
    let e = match entry(fd) {
        None => return forward!(next_write(fd, buf, len)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    // SAFETY: the program's buffer of `len` bytes.
    let data = unsafe { send_bytes(buf, len) };
    send_common(fd, &e, data, None, 0, &[], "write")
}

/// `writev(2)`: one message from the gather list.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    let e = match entry(fd) {
        None => return forward!(next_writev(fd, iov, n)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    let n = usize::try_from(n).map_err(|_| libc::EINVAL);
    // SAFETY: the program's `n` iovecs.
    let data = n.and_then(|n| unsafe { gather(iov, n, libc::EINVAL) });
    send_common(fd, &e, data, None, 0, &[], "writev")
}

/// `sendmsg(2)`, with `RDS_CMSG_*` control messages.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    let e = match entry(fd) {
        None => return forward!(next_sendmsg(fd, msg, flags)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    if msg.is_null() {
        return done(|| format!("sendmsg({fd})"), Err(libc::EFAULT));
    }
    // SAFETY: checked non-null; the program's msghdr.
    let m = unsafe { &*msg };
    // The iovecs first: the kernel imports them with the msghdr, before it reads the control
    // messages (which `rds_sendmsg` checks after its flags, destination and size).
    // SAFETY: the program's iovecs.
    let data = match unsafe { gather(m.msg_iov, m.msg_iovlen, libc::EMSGSIZE) } {
        Ok(d) => d,
        Err(err) => return done(|| format!("sendmsg({fd})"), Err(err)),
    };
    // SAFETY: the program's control buffer and address of the lengths it gave.
    let (ctl, dest) = unsafe {
        (
            bytes(m.msg_control, m.msg_controllen),
            bytes(m.msg_name, m.msg_namelen as usize),
        )
    };
    let cmsgs = match ops::parse_cmsgs(ctl) {
        Ok(c) => c,
        Err(err) => return done(|| format!("sendmsg({fd})"), Err(err)),
    };
    let dest = (!m.msg_name.is_null() && m.msg_namelen > 0).then_some(dest);
    send_common(fd, &e, Ok(data), dest, flags, &cmsgs, "sendmsg")
}

fn recv_done(fd: c_int, call: &str, r: Result<ops::Recvd, i32>) -> ssize_t {
    done(|| format!("{call}({fd})"), r.map(|x| x.ret as isize))
}

/// `recvfrom(2)`.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    let e = match entry(fd) {
        None => return forward!(next_recvfrom(fd, buf, len, flags, addr, alen)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    // SAFETY: the program's buffer of `len` bytes.
    let r = unsafe { recv_bytes(buf, len) }.and_then(|b| ops::recv(&e, b, flags));
    if let Ok(x) = &r {
        // SAFETY: the program's address buffer of `*alen` bytes (null ones are skipped).
        unsafe { put_addr(addr, alen, &addr_of(x.from)) };
    }
    recv_done(fd, "recvfrom", r)
}

/// `recv(2)`.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    let e = match entry(fd) {
        None => return forward!(next_recv(fd, buf, len, flags)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    // SAFETY: the program's buffer of `len` bytes.
    let r = unsafe { recv_bytes(buf, len) }.and_then(|b| ops::recv(&e, b, flags));
    recv_done(fd, "recv", r)
}

/// `read(2)`: a receive without flags on an RDS descriptor.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t {
    let e = match entry(fd) {
        None => return forward!(next_read(fd, buf, len)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    // SAFETY: the program's buffer of `len` bytes.
    let r = unsafe { recv_bytes(buf, len) }.and_then(|b| ops::recv(&e, b, 0));
    recv_done(fd, "read", r)
}

/// `readv(2)`: one message into the scatter list.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    let e = match entry(fd) {
        None => return forward!(next_readv(fd, iov, n)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    let n = usize::try_from(n).map_err(|_| libc::EINVAL);
    // SAFETY: the program's `n` iovecs.
    let r = n.and_then(|n| unsafe { scatter_recv(&e, iov, n, 0, libc::EINVAL) });
    recv_done(fd, "readv", r)
}

/// `recvmsg(2)`: the sender, `MSG_TRUNC`, and the control messages
/// (`RDS_CMSG_CONG_UPDATE`, `RDS_CMSG_RDMA_STATUS`, `RDS_CMSG_RDMA_DEST`, `SO_TIMESTAMP`).
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    let e = match entry(fd) {
        None => return forward!(next_recvmsg(fd, msg, flags)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    if msg.is_null() {
        return recv_done(fd, "recvmsg", Err(libc::EFAULT));
    }
    // SAFETY: checked non-null; the program's msghdr.
    let m = unsafe { &mut *msg };
    // SAFETY: the program's iovecs.
    let r = unsafe { scatter_recv(&e, m.msg_iov, m.msg_iovlen, flags, libc::EMSGSIZE) };
    if let Ok(x) = &r {
        let name = addr_of(x.from);
        if !m.msg_name.is_null() {
            let n = (m.msg_namelen as usize).min(name.len());
            // SAFETY: the program's name buffer of `msg_namelen` bytes; `n` fits it.
            unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), m.msg_name.cast::<u8>(), n) };
        }
        m.msg_namelen = name.len() as socklen_t;
        let cap = if m.msg_control.is_null() {
            0
        } else {
            m.msg_controllen
        };
        let (ctl, cut) = ops::encode_cmsgs(&x.cmsgs, cap);
        if !ctl.is_empty() {
            // SAFETY: the program's control buffer of `msg_controllen` bytes; `ctl` fits it.
            unsafe {
                std::ptr::copy_nonoverlapping(ctl.as_ptr(), m.msg_control.cast::<u8>(), ctl.len())
            };
        }
        m.msg_controllen = ctl.len();
        m.msg_flags = x.msg_flags | if cut { libc::MSG_CTRUNC } else { 0 };
    }
    recv_done(fd, "recvmsg", r)
}

/// `setsockopt(2)` at `SOL_RDS` and `SOL_SOCKET`.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    let e = match entry(fd) {
        None => return forward!(next_setsockopt(fd, level, name, val, len)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    if val.is_null() && len > 0 {
        return done(
            || format!("setsockopt({fd}, {level}, {name})"),
            Err(libc::EFAULT),
        );
    }
    // SAFETY: the program's option value of `len` bytes.
    let v = unsafe { bytes(val, len as usize) };
    match ops::setsockopt(&e, level, name, v) {
        Err(FORWARD) => forward!(next_setsockopt(fd, level, name, val, len)),
        r => done(
            || format!("setsockopt({fd}, {level}, {name})"),
            r.map(|()| 0),
        ),
    }
}

/// `getsockopt(2)`, with the `RDS_INFO_*` tables.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    let e = match entry(fd) {
        None => return forward!(next_getsockopt(fd, level, name, val, len)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    let call = || format!("getsockopt({fd}, {level}, {name})");
    if len.is_null() {
        return done(call, Err(libc::EFAULT));
    }
    // SAFETY: checked non-null.
    let cap = unsafe { *len } as usize;
    if cap > 0 && val.is_null() {
        return done(call, Err(libc::EFAULT));
    }
    match ops::getsockopt(&e, level, name, cap) {
        Ok(o) => {
            let n = o.data.len().min(cap);
            // SAFETY: the program's buffers: `val` of `cap` bytes, `n` ≤ cap; `len` valid.
            unsafe {
                if n > 0 {
                    std::ptr::copy_nonoverlapping(o.data.as_ptr(), val.cast::<u8>(), n);
                }
                *len = o.len as socklen_t;
            }
            done(call, Ok(o.ret as isize))
        }
        Err(err) if err.errno == FORWARD => forward!(next_getsockopt(fd, level, name, val, len)),
        Err(err) => {
            if let Some(l) = err.len {
                // SAFETY: checked non-null.
                unsafe { *len = l as socklen_t };
            }
            done(call, Err(err.errno))
        }
    }
}

fn fcntl_ours(fd: c_int, e: Arc<Entry>, cmd: c_int, arg: usize, next: Option<FnFcntl>) -> c_int {
    let Some(f) = next else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: the program's arguments go to the C library's fcntl on the pair's end.
    let r = unsafe { f(fd, cmd, arg) };
    if r >= 0 {
        match cmd {
            libc::F_SETFL => ops::set_nonblocking(&e, arg as c_int & libc::O_NONBLOCK != 0),
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => sock::insert(r, e),
            _ => {}
        }
    }
    logger::call(|| format!("fcntl({fd}, {cmd}, {arg:#x})"), &Ok(r as isize));
    r
}

/// `fcntl(2)` (`O_NONBLOCK`, `FD_CLOEXEC`, `F_DUPFD`); the third argument is read as a word,
/// as the variadic calling convention passes it.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    match entry(fd) {
        None => forward!(next_fcntl(fd, cmd, arg)),
        Some(Err(())) => -1,
        Some(Ok(e)) => fcntl_ours(fd, e, cmd, arg, next_fcntl()),
    }
}

/// `fcntl64`, the name `fcntl` has in programs built with 64-bit file offsets.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    match entry(fd) {
        None => forward!(next_fcntl64(fd, cmd, arg)),
        Some(Err(())) => -1,
        Some(Ok(e)) => fcntl_ours(fd, e, cmd, arg, next_fcntl64()),
    }
}

/// `ioctl(2)`: `FIONREAD`, `FIONBIO`, `SIOCRDSSETTOS`, `SIOCRDSGETTOS`.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    let e = match entry(fd) {
        None => return forward!(next_ioctl(fd, req, arg)),
        Some(Err(())) => return -1,
        Some(Ok(e)) => e,
    };
    let call = || format!("ioctl({fd}, {req:#x})");
    let socket_class = (req >> 8) & 0xff == 0x89;
    if socket_class && req != rds_core::abi::SIOCRDSSETTOS && req != rds_core::abi::SIOCRDSGETTOS {
        // The socket ioctls the kernel serves for every socket (interfaces, SIOCGSTAMP, ...):
        // the descriptor is a socket too, and the kernel answers them the same way for it.
        return forward!(next_ioctl(fd, req, arg));
    }
    if arg.is_null() {
        return done(call, Err(libc::EFAULT));
    }
    let r = match req {
        libc::FIONREAD => {
            // SAFETY: FIONREAD's argument is an int the program owns.
            unsafe { *arg.cast::<c_int>() = ops::fionread(&e) };
            Ok(0)
        }
        libc::FIONBIO => {
            // SAFETY: FIONBIO's argument is an int the program owns.
            let on = unsafe { *arg.cast::<c_int>() } != 0;
            ops::set_nonblocking(&e, on);
            sys::set_nonblock_flag(fd, on);
            Ok(0)
        }
        // SAFETY: the TOS ioctls take a u8 the program owns.
        rds_core::abi::SIOCRDSSETTOS => ops::set_tos(&e, unsafe { *arg.cast::<u8>() }).map(|()| 0),
        rds_core::abi::SIOCRDSGETTOS => {
            // SAFETY: as above.
            unsafe { *arg.cast::<u8>() = ops::get_tos(&e) };
            Ok(0)
        }
        _ => Err(libc::ENOTTY),
    };
    done(call, r)
}

/// `close(2)`: the last descriptor of an RDS socket closes it.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if !sock::is_ours(fd) {
        return forward!(next_close(fd));
    }
    let e = sock::remove(fd);
    let r = forward!(next_close(fd));
    logger::call(|| format!("close({fd})"), &Ok(r as isize));
    drop(e);
    r
}

fn dup_done(old: Arc<Entry>, new: c_int, call: impl FnOnce() -> String) -> c_int {
    if new >= 0 {
        sock::insert(new, old);
    }
    logger::call(call, &Ok(new as isize));
    new
}

/// `dup(2)`: another descriptor of the same RDS socket.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    match entry(fd) {
        None => forward!(next_dup(fd)),
        Some(Err(())) => -1,
        Some(Ok(e)) => {
            let r = forward!(next_dup(fd));
            dup_done(e, r, || format!("dup({fd})"))
        }
    }
}

/// `dup2(2)`: `new` becomes `old` (closing what `new` was, an RDS socket's last descriptor
/// included).
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let e = match entry(old) {
        Some(Err(())) => return -1,
        e => e.and_then(Result::ok),
    };
    if old == new || (e.is_none() && !sock::is_ours(new)) {
        return forward!(next_dup2(old, new));
    }
    let r = forward!(next_dup2(old, new));
    if r < 0 {
        return r;
    }
    let gone = sock::remove(new);
    drop(gone);
    match e {
        Some(e) => dup_done(e, r, || format!("dup2({old}, {new})")),
        None => r,
    }
}

/// `dup3(2)`: as `dup2`, with `O_CLOEXEC`.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let e = match entry(old) {
        Some(Err(())) => return -1,
        e => e.and_then(Result::ok),
    };
    if e.is_none() && !sock::is_ours(new) {
        return forward!(next_dup3(old, new, flags));
    }
    let r = forward!(next_dup3(old, new, flags));
    if r < 0 {
        return r;
    }
    drop(sock::remove(new));
    match e {
        Some(e) => dup_done(e, r, || format!("dup3({old}, {new}, {flags:#x})")),
        None => r,
    }
}

/// The fortified `read` (`_FORTIFY_SOURCE`).
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
) -> ssize_t {
    if len > buflen {
        // SAFETY: the fortified check's failure ends the program, as the C library's does.
        unsafe { libc::abort() };
    }
    // SAFETY: the C function's contract.
    unsafe { read(fd, buf, len) }
}

/// The fortified `recv`.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    if len > buflen {
        // SAFETY: as in `__read_chk`.
        unsafe { libc::abort() };
    }
    // SAFETY: the C function's contract.
    unsafe { recv(fd, buf, len, flags) }
}

/// The fortified `recvfrom`.
///
/// # Safety
/// The C function's contract.
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    if len > buflen {
        // SAFETY: as in `__read_chk`.
        unsafe { libc::abort() };
    }
    // SAFETY: the C function's contract.
    unsafe { recvfrom(fd, buf, len, flags, addr, alen) }
}

extern "C" fn child_after_fork() {
    sock::after_fork_child();
}

/// Registers the fork handler once (from the first `socket(AF_RDS)`).
fn register_atfork() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only stores atomics (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(child_after_fork)) };
    });
}
