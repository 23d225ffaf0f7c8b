//! Sockets on raw descriptors: addresses as the kernel reads them, TCP socket creation, bind
//! and connect, integer, address and timeout options, keepalive tuning, queue sizes
//! (`SIOCOUTQ`, `SIOCINQ`), reads into uninitialised buffer space and socket names.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::cvt;

/// A sockaddr of either family, laid out as the kernel reads it.
pub(crate) enum RawAddr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl RawAddr {
    pub(crate) fn from(addr: SocketAddr) -> Self {
        match addr {
            SocketAddr::V4(a) => RawAddr::V4(libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            }),
            SocketAddr::V6(a) => RawAddr::V6(libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            }),
        }
    }

    /// The pointer and length to pass to the kernel (valid while `self` lives).
    pub(crate) fn as_ptr(&self) -> (*const libc::sockaddr, libc::socklen_t) {
        match self {
            RawAddr::V4(a) => (
                (a as *const libc::sockaddr_in).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ),
            RawAddr::V6(a) => (
                (a as *const libc::sockaddr_in6).cast(),
                size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            ),
        }
    }
}

/// A non-blocking TCP socket of the family of `addr`.
pub fn tcp_socket(addr: &SocketAddr) -> io::Result<OwnedFd> {
    let domain = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: no pointers; a non-negative result is a fresh descriptor we own.
    let fd = cvt(unsafe {
        libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::IPPROTO_TCP,
        )
    })?;
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `bind(2)`.
pub fn bind(fd: RawFd, addr: SocketAddr) -> io::Result<()> {
    let raw = RawAddr::from(addr);
    let (p, len) = raw.as_ptr();
    // SAFETY: `p` points to a sockaddr of `len` bytes that lives across the call.
    cvt(unsafe { libc::bind(fd, p, len) })?;
    Ok(())
}

/// Non-blocking `connect(2)`: `Ok(true)` when in progress, `Ok(false)` when already connected.
pub fn connect(fd: RawFd, addr: SocketAddr) -> io::Result<bool> {
    match connect_raw(fd, addr) {
        Ok(()) => Ok(false),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(true),
        Err(e) => Err(e),
    }
}

/// One `connect(2)`, its error as the kernel gave it (an RDS socket only records the
/// destination).
pub(crate) fn connect_raw(fd: RawFd, addr: SocketAddr) -> io::Result<()> {
    let raw = RawAddr::from(addr);
    let (p, len) = raw.as_ptr();
    // SAFETY: `p` points to a sockaddr of `len` bytes that lives across the call.
    cvt(unsafe { libc::connect(fd, p, len) })?;
    Ok(())
}

/// `setsockopt` with an `int` value.
pub(crate) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a c_int on the stack with its exact size.
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
pub(crate) fn getsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: passes a pointer to a c_int on the stack and its size; the kernel writes at
    // most `len` bytes.
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
pub(crate) fn setsockopt_addr(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    a: SocketAddr,
) -> io::Result<()> {
    let raw = RawAddr::from(a);
    let (p, len) = raw.as_ptr();
    // SAFETY: `p` points to a sockaddr of `len` bytes that lives across the call.
    cvt(unsafe { libc::setsockopt(fd, level, opt, p.cast(), len) })?;
    Ok(())
}

/// `SO_RCVTIMEO` / `SO_SNDTIMEO` (`opt`; `None`: wait forever).
pub(crate) fn set_timeout(fd: RawFd, opt: libc::c_int, t: Option<Duration>) -> io::Result<()> {
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

/// RDS/TCP socket tuning (`rds_tcp_tune`, `rds_tcp_keepalive`): TCP_NODELAY, keepalive with
/// idle 5 s, interval 5 s, 5 probes, and SO_REUSEADDR.
pub fn tune_rds_tcp(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 5)?;
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5)?;
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 5)?;
    Ok(())
}

/// `SO_REUSEADDR`.
pub fn set_reuseaddr(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
}

/// `SO_SNDBUF` / `SO_RCVBUF` when nonzero (0 keeps autotuning).
pub fn set_bufs(fd: RawFd, snd: u32, rcv: u32) -> io::Result<()> {
    if snd > 0 {
        setsockopt_int(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            snd.min(i32::MAX as u32) as i32,
        )?;
    }
    if rcv > 0 {
        setsockopt_int(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            rcv.min(i32::MAX as u32) as i32,
        )?;
    }
    Ok(())
}

/// `SO_LINGER` 0: closing sends an RST.
pub fn set_linger0(fd: RawFd) -> io::Result<()> {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: passes a pointer to a linger struct on the stack with its exact size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// The pending error of a socket (`SO_ERROR`), e.g. the outcome of a non-blocking connect.
pub fn take_error(fd: RawFd) -> io::Result<Option<io::Error>> {
    let e = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ERROR)?;
    Ok((e != 0).then(|| io::Error::from_raw_os_error(e)))
}

/// `SO_PEERPIDFD` (asm-generic, Linux 6.5): a pidfd for the process that connected.
const SO_PEERPIDFD: libc::c_int = 77;

/// A pidfd of the process at the other end of the Unix stream socket `fd`, the one that
/// connected (`SO_PEERPIDFD`; `ENOPROTOOPT` before Linux 6.5). It stays that process's even
/// after its pid is reused; it polls readable once the process has exited.
///
/// # Errors
/// `getsockopt(2)` errors.
pub fn peer_pidfd(fd: RawFd) -> io::Result<OwnedFd> {
    let pidfd = getsockopt_int(fd, libc::SOL_SOCKET, SO_PEERPIDFD)?;
    if pidfd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: SO_PEERPIDFD installs a fresh descriptor in this process and returns it; nobody
    // else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(pidfd) })
}

/// `SIOCOUTQ`: bytes written to a TCP socket and not yet acknowledged by the peer.
pub fn outq(fd: RawFd) -> io::Result<usize> {
    let mut v: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (== TIOCOUTQ) writes one c_int through the pointer, which is valid.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut v as *mut libc::c_int) })?;
    Ok(v.max(0) as usize)
}

/// Reads up to `max` bytes into the spare capacity of `buf` (growing it as needed) without
/// zeroing it first. Returns the bytes read (0 = end of stream).
pub fn read_spare(fd: RawFd, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    buf.reserve(max);
    let spare: &mut [MaybeUninit<u8>] = buf.spare_capacity_mut();
    let n = spare.len().min(max);
    // SAFETY: `spare` is writable memory of at least `n` bytes owned by `buf`; read(2) writes at
    // most `n` bytes into it.
    let r = unsafe { libc::read(fd, spare.as_mut_ptr().cast(), n) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let r = r as usize;
    // SAFETY: the kernel initialised exactly `r` bytes at the start of the spare capacity.
    unsafe { buf.set_len(buf.len() + r) };
    Ok(r)
}

/// `SIOCINQ`: bytes a TCP socket has received and not yet given to a read.
pub fn inq(fd: RawFd) -> io::Result<usize> {
    let mut v: libc::c_int = 0;
    // SAFETY: SIOCINQ (== FIONREAD) writes one c_int through the pointer, which is valid.
    cvt(unsafe { libc::ioctl(fd, libc::FIONREAD, &mut v as *mut libc::c_int) })?;
    Ok(v.max(0) as usize)
}

/// Local address of a socket.
pub fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    sockname(fd, false)
}

/// Peer address of a socket.
pub fn peer_addr(fd: RawFd) -> io::Result<SocketAddr> {
    sockname(fd, true)
}

fn sockname(fd: RawFd, peer: bool) -> io::Result<SocketAddr> {
    let (ss, len) = name_storage(fd, peer)?;
    from_storage(&ss, len)
        .ok_or_else(|| io::Error::other(format!("unexpected address family {}", ss.ss_family)))
}

/// `getsockname` (`peer` false) or `getpeername` (`peer` true) of any family: the storage the
/// kernel filled and the length it wrote ([`from_storage`] reads an IP address out of it).
pub(crate) fn name_storage(
    fd: RawFd,
    peer: bool,
) -> io::Result<(libc::sockaddr_storage, libc::socklen_t)> {
    let mut ss: libc::sockaddr_storage = {
        // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
        unsafe { std::mem::zeroed() }
    };
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
    Ok((ss, len))
}

/// Reads the address out of a `sockaddr_storage` the kernel filled with `len` bytes; `None`
/// for another family or a short length.
pub(crate) fn from_storage(
    ss: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family and length say the storage holds a sockaddr_in; storage is
            // aligned for every sockaddr type.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                std::net::Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                std::net::Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn bound_nonblocking_connect_and_outq() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let target = l.local_addr().unwrap();
        let fd = tcp_socket(&target).unwrap();
        bind(fd.as_raw_fd(), "127.0.0.1:0".parse().unwrap()).unwrap();
        tune_rds_tcp(fd.as_raw_fd()).unwrap();
        let _ = connect(fd.as_raw_fd(), target).unwrap();
        let (peer, _) = l.accept().unwrap();
        let ok = poll_writable(fd.as_raw_fd());
        assert!(ok);
        assert!(take_error(fd.as_raw_fd()).unwrap().is_none());
        assert_eq!(peer_addr(fd.as_raw_fd()).unwrap(), target);
        let mut s = std::net::TcpStream::from(fd);
        s.write_all(b"hello").unwrap();
        // Loopback acks promptly; the queue drains.
        for _ in 0..100 {
            if outq(s.as_raw_fd()).unwrap() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(outq(s.as_raw_fd()).unwrap(), 0);
        let mut buf = Vec::new();
        peer.set_nonblocking(false).unwrap();
        let n = read_spare(peer.as_raw_fd(), &mut buf, 64).unwrap();
        assert_eq!(&buf[..n], b"hello");
    }

    fn poll_writable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, 2000) };
        r == 1
    }
}
