//! The RDS socket calls on Rust values, with the kernel's argument checks and errno values
//! (`af_rds.c`, `bind.c`, `send.c`, `recv.c`): the interposers in `ffi` copy the C arguments
//! in, call one of these and copy the results out.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use bytes::Bytes;
use rds_core::info::TransportKind;
use rds_core::RecvFlags;

use rds_core::abi::*;

use crate::abi::*;
use crate::info_opts::{OptErr, OptOut};
use crate::sock::{self, errno, Entry};

/// A result carrying the kernel's errno on failure.
pub type Res<T> = Result<T, i32>;

const SIN_LEN: usize = 16;
const SIN6_LEN: usize = 28;

/// `sizeof(struct rds_atomic_args)`.
const RDS_ATOMIC_ARGS_LEN: usize = 72;
/// The kernel's bound on `rds_rdma_args.nr_local` (`UIO_MAXIOV`).
const UIO_MAXIOV: u64 = 1024;

/// A native-endian u64 from 8 bytes.
fn ne64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_ne_bytes(a)
}

fn ne16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// A `sockaddr_in` or `sockaddr_in6` as the kernel's RDS reads one: at least 16 bytes of
/// `AF_INET`, or 28 of `AF_INET6`; anything else is `EINVAL`.
pub fn parse_addr(b: &[u8]) -> Res<SocketAddr> {
    if b.len() < 2 {
        return Err(libc::EINVAL);
    }
    let family = i32::from(u16::from_ne_bytes([b[0], b[1]]));
    match family {
        libc::AF_INET if b.len() >= SIN_LEN => {
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Ok(SocketAddr::new(IpAddr::V4(ip), ne16(b, 2)))
        }
        libc::AF_INET6 if b.len() >= SIN6_LEN => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[8..24]);
            let scope = u32::from_ne_bytes([b[24], b[25], b[26], b[27]]);
            let ip = Ipv6Addr::from(o);
            Ok(SocketAddr::V6(SocketAddrV6::new(ip, ne16(b, 2), 0, scope)))
        }
        _ => Err(libc::EINVAL),
    }
}

/// The `sockaddr_in` (IPv4 and IPv4-mapped addresses) or `sockaddr_in6` of `a`.
pub fn encode_addr(a: SocketAddr) -> Vec<u8> {
    let v4 = match a.ip() {
        IpAddr::V4(v) => Some(v),
        IpAddr::V6(v) => v.to_ipv4_mapped(),
    };
    match v4 {
        Some(v) => {
            let mut b = vec![0u8; SIN_LEN];
            b[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            b[4..8].copy_from_slice(&v.octets());
            b
        }
        None => {
            let mut b = vec![0u8; SIN6_LEN];
            b[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            if let (IpAddr::V6(v), SocketAddr::V6(s)) = (a.ip(), a) {
                b[8..24].copy_from_slice(&v.octets());
                b[24..28].copy_from_slice(&s.scope_id().to_ne_bytes());
            }
            b
        }
    }
}

/// `socket(AF_RDS, type, protocol)`: a new descriptor.
///
/// # Errors
/// `ESOCKTNOSUPPORT` for a type other than `SOCK_SEQPACKET` or a protocol other than 0;
/// `EAFNOSUPPORT` in a forked child of a process that had used RDS; `EMFILE`.
pub fn socket(ty: i32, protocol: i32) -> Res<i32> {
    let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    if ty & !flags != libc::SOCK_SEQPACKET || protocol != 0 {
        return Err(libc::ESOCKTNOSUPPORT);
    }
    crate::logger::init();
    if !sock::usable() {
        log::warn!("RDS is not available in a forked child of a process that used it");
        return Err(libc::EAFNOSUPPORT);
    }
    let (e, fd) = Entry::create(ty & libc::SOCK_CLOEXEC != 0)?;
    if usize::try_from(fd).map_or(true, |f| f >= sock::MAX_FD) {
        crate::ffi::sys::close(fd);
        return Err(libc::EMFILE);
    }
    if ty & libc::SOCK_NONBLOCK != 0 {
        set_nonblocking(&e, true);
        crate::ffi::sys::set_nonblock_flag(fd, true);
    }
    sock::insert(fd, e);
    Ok(fd)
}

/// `bind`.
///
/// # Errors
/// `EINVAL` for a short or foreign address; the socket's bind errors.
pub fn bind(e: &Arc<Entry>, addr: &[u8]) -> Res<()> {
    let a = parse_addr(addr)?;
    e.sock.bind(a).map_err(errno)?;
    e.attach()
}

/// `connect`: the default destination.
///
/// # Errors
/// `EINVAL` for a short address, `EAFNOSUPPORT` for another family, the socket's errors.
pub fn connect(e: &Entry, addr: &[u8]) -> Res<()> {
    let a = match parse_addr(addr) {
        Err(_) if addr.len() >= 2 => {
            let fam = i32::from(u16::from_ne_bytes([addr[0], addr[1]]));
            if fam == libc::AF_INET || fam == libc::AF_INET6 {
                return Err(libc::EINVAL);
            }
            return Err(libc::EAFNOSUPPORT);
        }
        r => r?,
    };
    e.sock.connect(a).map_err(errno)
}

/// `getsockname`: the bound address, or `0.0.0.0:0` when unbound.
pub fn sockname(e: &Entry) -> Vec<u8> {
    let a = e
        .sock
        .local_addr()
        .unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
    encode_addr(a)
}

/// `getpeername`.
///
/// # Errors
/// `ENOTCONN` without a default destination.
pub fn peername(e: &Entry) -> Res<Vec<u8>> {
    e.sock.peer_addr().map(encode_addr).map_err(errno)
}

/// One control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmsg {
    /// `cmsg_level`.
    pub level: i32,
    /// `cmsg_type`.
    pub ty: i32,
    /// The data.
    pub data: Vec<u8>,
}

const MSG_ZEROCOPY: i32 = 0x400_0000;
const MSG_CMSG_COMPAT: i32 = i32::MIN;

/// A message's payload as the program handed it in.
#[derive(Debug, Clone)]
pub enum Payload {
    /// The bytes, copied from the program (at most [`rds_core::socket::MAX_MSG_SIZE`]).
    Bytes(Bytes),
    /// Longer than any message: nothing was copied. The kernel answers `EMSGSIZE` for it, but
    /// only after its flag, destination and connection checks (`rds_sendmsg`), so the
    /// answer waits for those here too.
    TooLong,
}

/// `sendmsg` (and `send`, `sendto`, `write`): `data` to `dest` (or the default destination),
/// checked in the kernel's order: flags, destination, connection, size.
///
/// # Errors
/// `EOPNOTSUPP` for flags other than `MSG_DONTWAIT` (and the kernel's two others) and for
/// RDMA or atomic control messages (the kernel's answer on RDS/TCP); `EINVAL` for a bad
/// destination or an unknown `SOL_RDS` control message; `ENOTCONN` unbound or without a
/// destination; `EMSGSIZE` for a [`Payload::TooLong`]; the socket's send errors (`EAGAIN`,
/// `ENOBUFS`, `EMSGSIZE`, ...).
pub fn send(
    e: &Entry,
    data: Payload,
    dest: Option<&[u8]>,
    flags: i32,
    cmsgs: &[Cmsg],
) -> Res<usize> {
    let r = send_inner(e, data, dest, flags, cmsgs);
    e.sync_after(false, true);
    r
}

fn send_inner(
    e: &Entry,
    data: Payload,
    dest: Option<&[u8]>,
    flags: i32,
    cmsgs: &[Cmsg],
) -> Res<usize> {
    if flags & !(libc::MSG_DONTWAIT | MSG_CMSG_COMPAT | MSG_ZEROCOPY) != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let dest = match dest {
        Some(d) => {
            let a = parse_addr(d)?;
            let ip = rds_core::info::canonical(a.ip());
            if ip.is_unspecified() || ip.is_multicast() || ip == Ipv4Addr::BROADCAST {
                return Err(libc::EINVAL);
            }
            Some(a)
        }
        None => None,
    };
    if e.sock.local_addr().is_err() {
        return Err(libc::ENOTCONN);
    }
    let data = match data {
        Payload::Bytes(b) if b.len() <= rds_core::socket::MAX_MSG_SIZE => b,
        // Whatever the backend (the daemon's channel would fail otherwise). Without a
        // destination the kernel's connection check comes first; asked only on this path.
        _ if dest.is_none() && e.sock.peer_addr().is_err() => return Err(libc::ENOTCONN),
        _ => return Err(libc::EMSGSIZE),
    };
    let mut rdma = false;
    let mut atomic = false;
    let mut cookie = false;
    for c in cmsgs.iter().filter(|c| c.level == SOL_RDS) {
        match c.ty {
            RDS_CMSG_RDMA_ARGS => {
                // The kernel checks the arguments before it finds the transport has no RDMA.
                let nr_local = c.data.get(32..40).map(ne64);
                match nr_local {
                    None | Some(0) => return Err(libc::EINVAL),
                    Some(n) if n > UIO_MAXIOV => return Err(libc::EMSGSIZE),
                    Some(_) => rdma = true,
                }
            }
            RDS_CMSG_RDMA_DEST | RDS_CMSG_RDMA_MAP => rdma = true,
            RDS_CMSG_ATOMIC_FADD..=RDS_CMSG_MASKED_ATOMIC_CSWP => {
                if c.data.len() < RDS_ATOMIC_ARGS_LEN {
                    return Err(libc::EINVAL);
                }
                rdma = true;
                atomic = true;
            }
            RDS_CMSG_ZCOPY_COOKIE => cookie = true,
            _ => return Err(libc::EINVAL),
        }
    }
    if flags & MSG_ZEROCOPY != 0 {
        // RDS/TCP zerocopy needs a cookie; the stack copies, so it is refused either way.
        return Err(if cookie {
            libc::EOPNOTSUPP
        } else {
            libc::EINVAL
        });
    }
    let mut ctl = None;
    if rdma {
        // RDS/TCP has no RDMA, and neither do atomics here: the kernel's EOPNOTSUPP.
        if atomic || e.sock.transport() != Some(TransportKind::Ib) {
            return Err(libc::EOPNOTSUPP);
        }
        let mut r = crate::rdma_cmsg::SendRdma::default();
        for c in cmsgs.iter().filter(|c| c.level == SOL_RDS) {
            if c.ty != RDS_CMSG_ZCOPY_COOKIE {
                r.add(c.ty, &c.data)?;
            }
        }
        // Non-blocking per call like every send here; waiting is this loop's.
        e.sock.set_nonblocking(true);
        ctl = Some(r);
    }
    let nonblock = flags & libc::MSG_DONTWAIT != 0 || e.nonblock.load(Ordering::Relaxed);
    let end = deadline(e, false);
    // The destination was found not congested right after a send failed with ENOBUFS.
    let mut not_congested = false;
    loop {
        let r = match &ctl {
            None => e.sock.send_bytes(data.clone(), dest, true).map_err(errno),
            Some(c) => send_rdma(e, &data, dest, c),
        };
        if r.is_ok() {
            e.sent.store(true, Ordering::Relaxed);
        }
        match r {
            Err(libc::EAGAIN) if !nonblock => wait_sock(e, false, end)?,
            // A congested destination: wait, as the kernel's `rds_cong_wait`, until its
            // congestion map changes (no timer); not congested twice in a row around a
            // failed send, the ENOBUFS was the node's memory and is the answer.
            Err(libc::ENOBUFS) if !nonblock => match e.sock.wait_uncongested(dest, end) {
                Ok(true) => not_congested = false,
                Ok(false) if !std::mem::replace(&mut not_congested, true) => {}
                Ok(false) => return Err(libc::ENOBUFS),
                // A daemon socket without a shared ring: no bell to wait on, a short sleep.
                Err(err) if err.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    nap(end)?;
                }
                Err(err) => return Err(errno(err)),
            },
            r => return r,
        }
    }
}

/// One `sendmsg` with RDMA control data; an `RDS_CMSG_RDMA_MAP` cookie goes to the program.
fn send_rdma(
    e: &Entry,
    data: &[u8],
    dest: Option<SocketAddr>,
    r: &crate::rdma_cmsg::SendRdma,
) -> Res<usize> {
    let sent = e.sock.send_ctl(data, dest, &r.ctl).map_err(errno)?;
    if let Some(c) = sent.map_cookie {
        crate::rdma_cmsg::put_cookie(r.map_cookie_addr, c)?;
    }
    Ok(sent.len)
}

/// What a receive produced.
#[derive(Debug, Default)]
pub struct Recvd {
    /// The call's return value.
    pub ret: usize,
    /// The sender (data messages).
    pub from: Option<SocketAddr>,
    /// `msg_flags` (`MSG_TRUNC`).
    pub msg_flags: i32,
    /// Control messages to deliver, in order.
    pub cmsgs: Vec<Cmsg>,
}

/// `recvmsg` (and `recv`, `recvfrom`, `read`) into `buf`.
///
/// # Errors
/// `EAGAIN` non-blocking with nothing queued, `ETIMEDOUT` past `SO_RCVTIMEO`, `ENOTCONN`
/// unbound and blocking.
pub fn recv(e: &Entry, buf: &mut [u8], flags: i32) -> Res<Recvd> {
    if flags & libc::MSG_OOB != 0 {
        return Ok(Recvd::default());
    }
    if flags & libc::MSG_ERRQUEUE != 0 {
        return Err(libc::EAGAIN);
    }
    let f = RecvFlags {
        peek: flags & libc::MSG_PEEK != 0,
        trunc: flags & libc::MSG_TRUNC != 0,
        dontwait: true,
    };
    let nonblock = flags & libc::MSG_DONTWAIT != 0 || e.nonblock.load(Ordering::Relaxed);
    let end = deadline(e, true);
    let once = |buf: &mut [u8]| {
        let r = e.sock.recv_msg(buf, f).map_err(|err| match errno(err) {
            // The kernel's unbound socket has an empty queue.
            libc::ENOTCONN => libc::EAGAIN,
            n => n,
        });
        e.sync_after(true, false);
        r
    };
    let m = match once(buf) {
        Err(libc::EAGAIN) if !nonblock => e.wait_rx(|| loop {
            wait_sock(e, true, end)?;
            match once(buf) {
                Err(libc::EAGAIN) => {}
                r => break r,
            }
        })?,
        r => r?,
    };
    let mut out = Recvd {
        ret: m.len,
        from: m.from,
        msg_flags: if m.truncated { libc::MSG_TRUNC } else { 0 },
        cmsgs: Vec::new(),
    };
    if let Some(mask) = m.cong_update {
        out.cmsgs.push(Cmsg {
            level: SOL_RDS,
            ty: RDS_CMSG_CONG_UPDATE,
            data: mask.to_ne_bytes().to_vec(),
        });
    }
    if let Some(n) = m.rdma_status {
        let mut d = vec![0u8; 16];
        d[..8].copy_from_slice(&n.user_token.to_ne_bytes());
        d[8..12].copy_from_slice(&n.status.code().to_ne_bytes());
        out.cmsgs.push(Cmsg {
            level: SOL_RDS,
            ty: RDS_CMSG_RDMA_STATUS,
            data: d,
        });
    }
    if let Some(c) = m.rdma_dest {
        out.cmsgs.push(Cmsg {
            level: SOL_RDS,
            ty: RDS_CMSG_RDMA_DEST,
            data: c.to_ne_bytes().to_vec(),
        });
    }
    let ts_kind = *e.timestamps.lock().unwrap_or_else(|p| p.into_inner());
    if let (Some(t), Some(new)) = (m.timestamp, ts_kind) {
        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let mut b = vec![0u8; 16];
        b[..8].copy_from_slice(&(d.as_secs() as i64).to_ne_bytes());
        b[8..].copy_from_slice(&i64::from(d.subsec_micros()).to_ne_bytes());
        out.cmsgs.push(Cmsg {
            level: libc::SOL_SOCKET,
            ty: if new {
                SO_TIMESTAMP_NEW
            } else {
                SO_TIMESTAMP_OLD
            },
            data: b,
        });
    }
    Ok(out)
}

/// What a `setsockopt` or `getsockopt` at `SOL_SOCKET` that RDS does not handle does: the
/// generic socket code answers, so it goes to the real descriptor.
pub const FORWARD: i32 = -1;

fn int_arg(v: &[u8]) -> Res<i32> {
    if v.len() < 4 {
        return Err(libc::EINVAL);
    }
    Ok(i32::from_ne_bytes([v[0], v[1], v[2], v[3]]))
}

fn timeval(v: &[u8]) -> Res<Option<Duration>> {
    if v.len() < 16 {
        return Err(libc::EINVAL);
    }
    let s = i64::from_ne_bytes(v[..8].try_into().map_err(|_| libc::EINVAL)?);
    let us = i64::from_ne_bytes(v[8..16].try_into().map_err(|_| libc::EINVAL)?);
    if !(0..1_000_000).contains(&us) {
        return Err(libc::EDOM);
    }
    if s < 0 || (s == 0 && us == 0) {
        return Ok(None);
    }
    Ok(Some(
        Duration::from_secs(s as u64) + Duration::from_micros(us as u64),
    ))
}

fn timeval_bytes(d: Option<Duration>) -> Vec<u8> {
    let d = d.unwrap_or_default();
    let mut b = vec![0u8; 16];
    b[..8].copy_from_slice(&(d.as_secs() as i64).to_ne_bytes());
    b[8..].copy_from_slice(&i64::from(d.subsec_micros()).to_ne_bytes());
    b
}

/// `setsockopt`; `Err(FORWARD)` for a `SOL_SOCKET` option the generic code handles.
///
/// # Errors
/// The kernel's errno for each option (see `man/rds-preload.8`).
pub fn setsockopt(e: &Entry, level: i32, name: i32, v: &[u8]) -> Res<()> {
    if level == libc::SOL_SOCKET {
        return match name {
            libc::SO_SNDBUF | libc::SO_SNDBUFFORCE => {
                e.sock.set_send_buffer_size(int_arg(v)?.max(0) as usize);
                e.sync();
                Ok(())
            }
            libc::SO_RCVBUF | libc::SO_RCVBUFFORCE => {
                e.sock.set_recv_buffer_size(int_arg(v)?.max(0) as usize);
                Ok(())
            }
            SO_TIMESTAMP_OLD | SO_TIMESTAMP_NEW => {
                let on = int_arg(v)? != 0;
                e.sock.set_timestamps(on);
                *e.timestamps.lock().unwrap_or_else(|p| p.into_inner()) =
                    on.then_some(name == SO_TIMESTAMP_NEW);
                Ok(())
            }
            libc::SO_RCVTIMEO | libc::SO_SNDTIMEO | SO_RCVTIMEO_NEW | SO_SNDTIMEO_NEW => {
                let t = timeval(v)?;
                let rx = name == libc::SO_RCVTIMEO || name == SO_RCVTIMEO_NEW;
                if rx {
                    e.sock.set_read_timeout(t);
                } else {
                    e.sock.set_write_timeout(t);
                }
                e.timeouts.lock().unwrap_or_else(|p| p.into_inner())[usize::from(!rx)] = t;
                Ok(())
            }
            _ => Err(FORWARD),
        };
    }
    if level != SOL_RDS {
        return Err(libc::ENOPROTOOPT);
    }
    match name {
        RDS_CANCEL_SENT_TO => {
            if v.len() < SIN_LEN {
                return Err(libc::EINVAL);
            }
            e.sock.local_addr().map_err(|_| libc::ENOTCONN)?;
            let a = if v.len() < SIN6_LEN {
                let mut b = v[..SIN_LEN].to_vec();
                b[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
                parse_addr(&b)?
            } else {
                parse_addr(v)?
            };
            e.sock.cancel_sent_to(a).map_err(errno)?;
            e.sync();
            Ok(())
        }
        RDS_GET_MR | RDS_GET_MR_FOR_DEST => {
            let want = if name == RDS_GET_MR {
                crate::rdma_cmsg::GET_MR_ARGS_LEN
            } else {
                crate::rdma_cmsg::GET_MR_FOR_DEST_ARGS_LEN
            };
            if v.len() != want {
                return Err(libc::EINVAL);
            }
            e.sock.local_addr().map_err(|_| libc::ENOTCONN)?;
            if e.sock.transport() != Some(TransportKind::Ib) {
                // RDS/TCP registers no memory.
                return Err(libc::EOPNOTSUPP);
            }
            crate::rdma_cmsg::get_mr(e, v, name == RDS_GET_MR_FOR_DEST)
        }
        RDS_FREE_MR => {
            if v.len() != 16 {
                return Err(libc::EINVAL);
            }
            let cookie = u64::from_ne_bytes(v[..8].try_into().map_err(|_| libc::EINVAL)?);
            if e.sock.transport() == Some(TransportKind::Ib) && e.sock.local_addr().is_ok() {
                let invalidate = ne64(&v[8..16]) & rds_core::rdma::flag::INVALIDATE != 0;
                return e.sock.free_mr(cookie, invalidate).map_err(errno);
            }
            // RDS/TCP has no regions and no flush: the kernel's EINVAL.
            Err(libc::EINVAL)
        }
        RDS_RECVERR => {
            e.sock.set_recverr(int_arg(v)? != 0);
            Ok(())
        }
        RDS_CONG_MONITOR => {
            e.sock.set_cong_monitor(int_arg(v)? != 0);
            Ok(())
        }
        SO_RDS_TRANSPORT => {
            if e.sock.transport().is_some() {
                return Err(libc::EOPNOTSUPP);
            }
            if v.len() != 4 {
                return Err(libc::EINVAL);
            }
            let t = int_arg(v)?;
            if !(0..3).contains(&t) {
                return Err(libc::EINVAL);
            }
            let kind = TransportKind::from_trans_type(t as u32).ok_or(libc::ENOPROTOOPT)?;
            e.sock.set_transport(kind).map_err(errno)
        }
        SO_TIMESTAMP_OLD | SO_TIMESTAMP_NEW => {
            if v.len() != 4 {
                return Err(libc::EFAULT);
            }
            setsockopt(e, libc::SOL_SOCKET, name, v)
        }
        _ => Err(libc::ENOPROTOOPT),
    }
}

fn int_out(v: i32, optlen: usize) -> OptOut {
    let len = optlen.min(4);
    OptOut {
        ret: 0,
        data: v.to_ne_bytes()[..len].to_vec(),
        len,
    }
}

/// `getsockopt`, `optlen` being the caller's buffer length.
///
/// # Errors
/// `ENOPROTOOPT` for an option RDS lacks; `EINVAL` for a short buffer; `ENOSPC` with the
/// needed length for an `RDS_INFO_*` table larger than the buffer.
pub fn getsockopt(e: &Entry, level: i32, name: i32, optlen: usize) -> Result<OptOut, OptErr> {
    if level == libc::SOL_SOCKET {
        let b = |x: usize| i32::try_from(x).unwrap_or(i32::MAX);
        return Ok(match name {
            libc::SO_TYPE => int_out(libc::SOCK_SEQPACKET, optlen),
            libc::SO_DOMAIN => int_out(AF_RDS, optlen),
            libc::SO_PROTOCOL => int_out(0, optlen),
            libc::SO_ERROR | libc::SO_ACCEPTCONN => int_out(0, optlen),
            libc::SO_SNDBUF => int_out(b(e.sock.send_buffer_size()), optlen),
            libc::SO_RCVBUF => int_out(b(e.sock.recv_buffer_size()), optlen),
            SO_TIMESTAMP_OLD | SO_TIMESTAMP_NEW => {
                let t = *e.timestamps.lock().unwrap_or_else(|p| p.into_inner());
                int_out(i32::from(t == Some(name == SO_TIMESTAMP_NEW)), optlen)
            }
            libc::SO_RCVTIMEO | libc::SO_SNDTIMEO | SO_RCVTIMEO_NEW | SO_SNDTIMEO_NEW => {
                let rx = name == libc::SO_RCVTIMEO || name == SO_RCVTIMEO_NEW;
                let t = e.timeouts.lock().unwrap_or_else(|p| p.into_inner())[usize::from(!rx)];
                let data = timeval_bytes(t);
                let len = optlen.min(16);
                OptOut {
                    ret: 0,
                    data: data[..len].to_vec(),
                    len,
                }
            }
            _ => return Err(FORWARD.into()),
        });
    }
    if level != SOL_RDS {
        return Err(libc::ENOPROTOOPT.into());
    }
    match name {
        RDS_INFO_FIRST..=RDS_INFO_LAST => crate::info_opts::getsockopt(e, name, optlen),
        RDS_RECVERR => {
            if optlen < 4 {
                return Err(libc::EINVAL.into());
            }
            Ok(int_out(i32::from(e.sock.recverr()), 4))
        }
        SO_RDS_TRANSPORT => {
            if optlen < 4 {
                return Err(libc::EINVAL.into());
            }
            let t = e
                .sock
                .transport()
                .map_or(RDS_TRANS_NONE, |t| t.trans_type() as i32);
            Ok(int_out(t, 4))
        }
        _ => Err(libc::ENOPROTOOPT.into()),
    }
}

/// `ioctl(FIONREAD)`: the length of the next queued message, 0 when none.
pub fn fionread(e: &Entry) -> i32 {
    let f = RecvFlags {
        peek: true,
        trunc: true,
        dontwait: true,
    };
    match e.sock.recv_msg(&mut [], f) {
        Ok(m) => i32::try_from(m.full_len).unwrap_or(i32::MAX),
        Err(_) => 0,
    }
}

/// `ioctl(SIOCRDSSETTOS)`, the kernel's rules: the socket's transport maps the value (RDS/TCP
/// maps every TOS to 0, RDS/IB keeps it); it can be set while the socket has no TOS yet and
/// has not sent (the kernel: no connection cached).
///
/// # Errors
/// `ENOTTY` without a transport (unbound); `EINVAL` once a TOS is set or the socket has sent.
pub fn set_tos(e: &Entry, tos: u8) -> Res<()> {
    let mapped = match e.sock.transport() {
        Some(TransportKind::Tcp) if e.sock.local_addr().is_ok() => 0,
        Some(TransportKind::Ib) if e.sock.local_addr().is_ok() => tos,
        _ => return Err(libc::ENOTTY),
    };
    let mut t = e.tos.lock().unwrap_or_else(|p| p.into_inner());
    if t.is_some_and(|old| old != 0) || e.sent.load(Ordering::Relaxed) {
        return Err(libc::EINVAL);
    }
    *t = Some(mapped);
    Ok(())
}

/// `ioctl(SIOCRDSGETTOS)`.
pub fn get_tos(e: &Entry) -> u8 {
    e.tos.lock().unwrap_or_else(|p| p.into_inner()).unwrap_or(0)
}

/// `O_NONBLOCK` from `fcntl(F_SETFL)` or `ioctl(FIONBIO)`.
pub fn set_nonblocking(e: &Entry, on: bool) {
    e.nonblock.store(on, Ordering::Relaxed);
}

/// Blocks until the socket is readable (`rx`) or writable (else), `deadline` passes
/// (`ETIMEDOUT`), or a signal arrives (`EINTR`, as the kernel's RDS returns to a handler
/// installed without `SA_RESTART`). On an embedded node the waiting thread reads its
/// connections itself meanwhile (`Socket::wait_interruptible`): a reply wakes this thread
/// only, not the node's I/O thread first. An unbound socket (no readiness yet) sleeps a
/// little.
fn wait_sock(e: &Entry, rx: bool, deadline: Option<Instant>) -> Res<()> {
    if !e.is_bound() {
        return nap(deadline);
    }
    match e.sock.wait_interruptible(rx, !rx, time_left(deadline)?) {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::Interrupted => Err(libc::EINTR),
        Err(err) => Err(errno(err)),
    }
}

/// Sleeps up to 10 ms, or until `deadline` (`ETIMEDOUT` once past it) or a signal (`EINTR`)
/// comes first, where there is nothing to wait on: an unbound socket's blocking call, and a
/// congested destination of a daemon socket without a shared ring.
fn nap(deadline: Option<Instant>) -> Res<()> {
    let left = time_left(deadline)?;
    let ms = i32::try_from(left.as_millis() + 1).map_or(10, |ms| ms.min(10));
    crate::ffi::sys::sleep_ms(ms)
}

/// The time until `deadline` (without one: `Duration::MAX`).
///
/// # Errors
/// `ETIMEDOUT` once it passed.
fn time_left(deadline: Option<Instant>) -> Res<Duration> {
    match deadline {
        None => Ok(Duration::MAX),
        Some(d) => {
            let now = Instant::now();
            if now >= d {
                return Err(libc::ETIMEDOUT);
            }
            Ok(d - now)
        }
    }
}

/// The send or receive timeout's deadline from now.
fn deadline(e: &Entry, rx: bool) -> Option<Instant> {
    let t = e.timeouts.lock().unwrap_or_else(|p| p.into_inner())[usize::from(!rx)];
    t.map(|t| Instant::now() + t)
}

const CMSG_HDR: usize = 16;

fn cmsg_align(n: usize) -> usize {
    (n + 7) & !7
}

/// The control messages of a `sendmsg` control buffer (`struct cmsghdr` records).
///
/// # Errors
/// `EINVAL` for a record shorter than its header or longer than the buffer.
pub fn parse_cmsgs(b: &[u8]) -> Res<Vec<Cmsg>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + CMSG_HDR <= b.len() {
        let len = usize::from_ne_bytes(b[at..at + 8].try_into().map_err(|_| libc::EINVAL)?);
        if len < CMSG_HDR || len > b.len() - at {
            return Err(libc::EINVAL);
        }
        let level = i32::from_ne_bytes(b[at + 8..at + 12].try_into().map_err(|_| libc::EINVAL)?);
        let ty = i32::from_ne_bytes(b[at + 12..at + 16].try_into().map_err(|_| libc::EINVAL)?);
        out.push(Cmsg {
            level,
            ty,
            data: b[at + CMSG_HDR..at + len].to_vec(),
        });
        at += cmsg_align(len);
    }
    Ok(out)
}

/// `cmsgs` as a control buffer of at most `cap` bytes; `true` when some did not fit
/// (`MSG_CTRUNC`).
pub fn encode_cmsgs(cmsgs: &[Cmsg], cap: usize) -> (Vec<u8>, bool) {
    let mut b = Vec::new();
    for c in cmsgs {
        let len = CMSG_HDR + c.data.len();
        if b.len() + len > cap {
            return (b, true);
        }
        b.extend_from_slice(&len.to_ne_bytes());
        b.extend_from_slice(&c.level.to_ne_bytes());
        b.extend_from_slice(&c.ty.to_ne_bytes());
        b.extend_from_slice(&c.data);
        let padded = cmsg_align(b.len()).min(cap);
        b.resize(padded, 0);
    }
    (b, false)
}
