//! The syscall layer: the Linux calls the node and the kernel backend need that `std` does not
//! offer (epoll, eventfd, bind and connect of raw descriptors, integer, address and timeout
//! socket options, socket names, TCP keepalive tuning, `SIOCOUTQ`, reads into uninitialised
//! buffer space, descriptor passing, sealed shared memory, thread scheduling). Every generic
//! call has its one wrapper here; `kernel/ffi.rs` keeps only what is specific to `AF_RDS`. One
//! of the few places where `unsafe` is allowed; every block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Gives the C library's free memory back to the system (`malloc_trim(0)`: the top of every
/// heap, and whole free pages inside them). The node calls it when what peers made it hold
/// shrank by a lot ([`crate::node`], at most once a second).
pub fn trim_heap() {
    // SAFETY: malloc_trim only walks the allocator's own free lists under its locks; it takes
    // no pointer from us.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A libc return value: negative is `errno`.
pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A non-blocking, close-on-exec eventfd used to wake a thread or signal readiness.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; a non-negative result is a fresh descriptor we own.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd (makes it readable).
pub fn eventfd_signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64 on the stack; errors (EAGAIN at the counter's
    // maximum) leave the fd readable, which is all we want.
    let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Resets an eventfd to zero (not readable).
pub fn eventfd_clear(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a valid u64 on the stack; EAGAIN means already zero.
    let _ = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// An epoll instance.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

/// Interest bits.
pub const EPOLLIN: u32 = libc::EPOLLIN as u32;
/// Interest bits.
pub const EPOLLOUT: u32 = libc::EPOLLOUT as u32;
/// Interest bits: edge-triggered.
pub const EPOLLET: u32 = libc::EPOLLET as u32;
/// Reported bits.
pub const EPOLLERR: u32 = libc::EPOLLERR as u32;
/// Reported bits.
pub const EPOLLHUP: u32 = libc::EPOLLHUP as u32;
/// Reported bits.
pub const EPOLLRDHUP: u32 = libc::EPOLLRDHUP as u32;

impl Epoll {
    /// A new epoll instance.
    pub fn new() -> io::Result<Self> {
        // SAFETY: no pointers; a non-negative result is a fresh descriptor we own.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) })?;
        Ok(())
    }

    /// The epoll descriptor itself (readable while an event is pending, for `poll(2)`).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Registers `fd` with `token`.
    pub fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, events)
    }

    /// Changes the interest of `fd`.
    pub fn modify(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, events)
    }

    /// Unregisters `fd`.
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout` (None = forever) and returns `(token, events)` pairs in `out`.
    pub fn wait(&self, out: &mut Vec<(u64, u32)>, timeout: Option<Duration>) -> io::Result<()> {
        const MAX: usize = 256;
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; MAX];
        let ms = match timeout {
            None => -1,
            // Round up so that a deadline is not missed by less than a millisecond.
            Some(d) => d.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
        };
        // SAFETY: `evs` has room for MAX events and lives across the call.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                evs.as_mut_ptr(),
                MAX as libc::c_int,
                ms,
            )
        };
        out.clear();
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        out.extend(evs[..n as usize].iter().map(|e| (e.u64, e.events)));
        Ok(())
    }
}

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

/// Waits until one of `fds` is readable (or has an error or hangup) or `timeout` passes;
/// returns, for each descriptor, whether it is ready. An interrupted wait returns all false.
///
/// # Errors
/// `poll(2)` errors other than EINTR.
pub fn poll_readable(fds: &[RawFd], timeout: Duration) -> io::Result<Vec<bool>> {
    let asks: Vec<(RawFd, i16)> = fds.iter().map(|&fd| (fd, libc::POLLIN)).collect();
    Ok(poll_for(&asks, timeout)?.iter().map(|&r| r != 0).collect())
}

/// Waits until one of `asks` (a descriptor and the `poll(2)` events wanted of it; negative
/// descriptors are skipped) has an event or `timeout` passes; returns, per descriptor, the
/// events it has (`revents`: errors and hang-ups included). EINTR counts as a timeout.
///
/// # Errors
/// `poll(2)` errors other than EINTR.
pub fn poll_for(asks: &[(RawFd, i16)], timeout: Duration) -> io::Result<Vec<i16>> {
    let mut pfds: Vec<libc::pollfd> = asks
        .iter()
        .map(|&(fd, events)| libc::pollfd {
            fd,
            events,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfds` is a valid array of `len` pollfd structs for the duration of the call;
    // poll only reports POLLNVAL for a descriptor that is not open.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(vec![0; asks.len()])
        } else {
            Err(e)
        };
    }
    Ok(pfds.iter().map(|p| p.revents).collect())
}

/// Waits until `fd` is readable, the stream socket `conn` is hung up (its peer closed or
/// failed), or `timeout` passes; returns `(readable, hung_up)`. Input pending on `conn` does
/// not end the wait.
///
/// # Errors
/// `poll(2)` errors other than EINTR.
pub fn wait_readable_or_hangup(
    fd: RawFd,
    conn: RawFd,
    timeout: Duration,
) -> io::Result<(bool, bool)> {
    let mut pfds = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: conn,
            events: libc::POLLRDHUP,
            revents: 0,
        },
    ];
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfds` is a valid array of two pollfd structs for the duration of the call.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), 2, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok((false, false))
        } else {
            Err(e)
        };
    }
    let hup = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;
    Ok((pfds[0].revents != 0, pfds[1].revents & hup != 0))
}

/// Waits until `fd` is readable or `timeout` passes; returns whether it is readable.
///
/// # Errors
/// `poll(2)` errors other than EINTR.
pub fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    Ok(wait_any_readable(&[fd], timeout)?.is_some())
}

/// Waits until one of `fds` is readable or `timeout` passes; returns the index of the first
/// readable one.
///
/// # Errors
/// `poll(2)` errors other than EINTR.
pub fn wait_any_readable(fds: &[RawFd], timeout: Duration) -> io::Result<Option<usize>> {
    Ok(poll_readable(fds, timeout)?.iter().position(|&r| r))
}

/// Writes all of `data` to the Unix stream socket `sock` with `fd` attached to its first byte
/// (`SCM_RIGHTS`): the peer receives a duplicate of `fd` with the bytes.
pub fn send_with_fd(sock: RawFd, data: &[u8], fd: RawFd) -> io::Result<()> {
    send_with_fds(sock, data, &[fd])
}

/// Writes all of `data` to the Unix stream socket `sock` without blocking longer than the
/// socket's send timeout, with `fds` attached to its first byte (`SCM_RIGHTS`).
pub fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let cmsg = [ControlMessage::ScmRights(fds)];
    let mut sent = loop {
        match sendmsg::<()>(
            sock,
            &[io::IoSlice::new(data)],
            if fds.is_empty() { &[] } else { &cmsg },
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(n) => break n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    };
    while sent < data.len() {
        match nix::sys::socket::send(sock, &data[sent..], MsgFlags::MSG_NOSIGNAL) {
            Ok(n) => sent += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

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

/// Reads from the Unix stream socket `sock` into `buf` like `read(2)`, keeping the file
/// descriptors passed with the bytes (`SCM_RIGHTS`, received close-on-exec) in `fds`.
pub fn recv_with_fds(sock: RawFd, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut space = nix::cmsg_space!([RawFd; 8]);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(io::Error::from)?;
    let n = msg.bytes;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmRights(raw) = c {
                for fd in raw {
                    // SAFETY: the kernel just installed `fd` in this process for us (SCM_RIGHTS);
                    // nothing else owns it, so the OwnedFd is its only owner and closes it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
    }
    Ok(n)
}

/// Lowers the calling thread's scheduling priority to `nice` (Linux priorities are per
/// thread). Best effort: the result is ignored by callers that only prefer to yield.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: gettid has no arguments and no memory effects.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    // SAFETY: setpriority takes plain integers and has no memory effects.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    cvt(r).map(|_| ())
}

/// The scheduling policy [`set_thread_idle`] and [`set_thread_idle_of`] set.
fn idle_policy(idle: bool) -> libc::c_int {
    if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    }
}

/// Moves the calling thread to the `SCHED_IDLE` policy (`idle`), where it runs only when no
/// thread of a normal policy wants its CPU, or back to `SCHED_OTHER` at its nice value. Threads
/// it starts afterwards inherit the policy. Leaving `SCHED_IDLE` needs `CAP_SYS_NICE` or an
/// `RLIMIT_NICE` that allows the thread's nice value (`EPERM` otherwise).
pub fn set_thread_idle(idle: bool) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler only reads the sched_param, which lives across the call;
    // pid 0 is the calling thread.
    let r = unsafe { libc::sched_setscheduler(0, idle_policy(idle), &param) };
    cvt(r).map(|_| ())
}

/// [`set_thread_idle`] for another thread of this process, the one `t` joins.
pub fn set_thread_idle_of<T>(t: &std::thread::JoinHandle<T>, idle: bool) -> io::Result<()> {
    use std::os::unix::thread::JoinHandleExt;
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: the JoinHandle is borrowed, so the thread is not joined or detached yet and its
    // pthread_t stays valid across the call (even if the thread has finished running);
    // pthread_setschedparam only reads the sched_param, which lives across the call.
    let r = unsafe { libc::pthread_setschedparam(t.as_pthread_t(), idle_policy(idle), &param) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// Whether the thread `t` joins runs under `SCHED_IDLE`.
pub fn thread_is_idle<T>(t: &std::thread::JoinHandle<T>) -> io::Result<bool> {
    use std::os::unix::thread::JoinHandleExt;
    let mut policy: libc::c_int = 0;
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in set_thread_idle_of, the pthread_t is valid while the handle is borrowed;
    // pthread_getschedparam writes the two locals, which outlive the call.
    let r = unsafe { libc::pthread_getschedparam(t.as_pthread_t(), &mut policy, &mut param) };
    if r == 0 {
        Ok(policy == libc::SCHED_IDLE)
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn eventfd_and_epoll() {
        let ep = Epoll::new().unwrap();
        let ev = eventfd().unwrap();
        ep.add(ev.as_raw_fd(), 7, EPOLLIN).unwrap();
        let mut out = vec![];
        ep.wait(&mut out, Some(Duration::ZERO)).unwrap();
        assert!(out.is_empty());
        eventfd_signal(ev.as_raw_fd());
        ep.wait(&mut out, Some(Duration::from_millis(100))).unwrap();
        assert_eq!(out, [(7, EPOLLIN)]);
        eventfd_clear(ev.as_raw_fd());
        ep.wait(&mut out, Some(Duration::ZERO)).unwrap();
        assert!(out.is_empty());
    }

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
