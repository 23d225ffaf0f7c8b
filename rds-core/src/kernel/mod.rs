//! The kernel's RDS: sockets of the running kernel's `AF_RDS` family (modules `rds`,
//! `rds_tcp`, `rds_rdma`) behind a safe API, for hosts where the kernel holds port 16385 and
//! the tools must act as the original rds-tools do there. [`KernelSocket`] is what
//! [`crate::Socket`]'s kernel backend calls; [`info`] reads the kernel's `RDS_INFO_*` tables
//! and counters. The calls specific to `AF_RDS` are in `ffi`; the generic ones (bind,
//! connect, options, names, poll) are the crate's syscall layer (`crate::sys`).
//!
//! Whether the kernel has RDS is read from `/proc/net/protocols` ([`loaded`]): asking with
//! `socket(AF_RDS)` would make the kernel load the module, and a tool must not load kernel
//! modules as a side effect of `--stack auto`.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod ffi;
pub mod tables;

pub(crate) use ffi::{RdmaOpArgs, RdsIovec, SendRdma};

use crate::abi::{
    RDS_CANCEL_SENT_TO, RDS_CMSG_CONG_UPDATE, RDS_CMSG_RDMA_DEST, RDS_CMSG_RDMA_STATUS,
    RDS_CONG_MONITOR, RDS_RECVERR, SOL_RDS, SO_RDS_TRANSPORT,
};
use crate::info::TransportKind;
use crate::sys;

/// Whether the running kernel has RDS loaded: `/proc/net/protocols` lists `RDS`.
pub fn loaded() -> bool {
    std::fs::read_to_string("/proc/net/protocols")
        .map(|t| {
            t.lines()
                .any(|l| l.split_whitespace().next() == Some("RDS"))
        })
        .unwrap_or(false)
}

/// The kernel's RDS transport modules that are loaded (`rds_tcp`, `rds_rdma`), from
/// `/sys/module`.
pub fn transport_modules() -> Vec<&'static str> {
    ["rds_tcp", "rds_rdma"]
        .into_iter()
        .filter(|m| std::path::Path::new("/sys/module").join(m).exists())
        .collect()
}

/// Why `--stack kernel` cannot be served here, as one line naming what to do; `None` when the
/// kernel's RDS is there.
pub fn unavailable_reason() -> Option<String> {
    if loaded() {
        return None;
    }
    let why = match ffi::rds_socket() {
        Ok(_) => return None,
        Err(e) => e,
    };
    Some(format!(
        "the kernel's RDS is not available (socket(AF_RDS): {why}): load it with \
         `modprobe rds_tcp` (or `modprobe rds_rdma` for InfiniBand/RoCE), or use --stack user"
    ))
}

/// A socket of the kernel's RDS, bound or not.
#[derive(Debug)]
pub struct KernelSocket {
    fd: OwnedFd,
}

/// A receive from a kernel socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRecv {
    /// The return value (bytes copied, or the full length with `MSG_TRUNC` asked).
    pub len: usize,
    /// The sender (none for a notification).
    pub from: Option<SocketAddr>,
    /// The message did not fit (`MSG_TRUNC` in `msg_flags`).
    pub truncated: bool,
    /// `RDS_CMSG_CONG_UPDATE` mask.
    pub cong_update: Option<u64>,
    /// `RDS_CMSG_RDMA_DEST` cookie.
    pub rdma_dest: Option<u64>,
    /// `RDS_CMSG_RDMA_STATUS` (user token, status).
    pub rdma_status: Option<(u64, i32)>,
    /// `SCM_TIMESTAMP`.
    pub timestamp: Option<SystemTime>,
}

/// `getsockname` (`peer` false) or `getpeername` (`peer` true); `ENOTCONN` for an answer that
/// is no IP address.
fn name(fd: RawFd, peer: bool) -> io::Result<SocketAddr> {
    let (ss, len) = sys::name_storage(fd, peer)?;
    sys::from_storage(&ss, len).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOTCONN))
}

/// Whether `fd` is readable and writable now (`poll` with no wait; a failed poll: neither).
fn ready(fd: RawFd) -> (bool, bool) {
    let r = sys::poll_for(&[(fd, libc::POLLIN | libc::POLLOUT)], Duration::ZERO)
        .ok()
        .and_then(|v| v.first().copied())
        .unwrap_or(0);
    (
        r & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0,
        r & libc::POLLOUT != 0,
    )
}

fn u64_of(b: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(..8)?.try_into().ok()?))
}

impl KernelSocket {
    /// `socket(AF_RDS, SOCK_SEQPACKET, 0)`.
    ///
    /// # Errors
    /// `EAFNOSUPPORT` when the kernel has no RDS.
    pub fn new() -> io::Result<KernelSocket> {
        Ok(KernelSocket {
            fd: ffi::rds_socket()?,
        })
    }

    /// The descriptor (readable while a receive would return something; writable while a
    /// send has room).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// `SO_RDS_TRANSPORT` (set, before bind).
    ///
    /// # Errors
    /// The kernel's: `EOPNOTSUPP` once a transport is attached, `ENOPROTOOPT` when the
    /// transport's module cannot be loaded.
    pub fn set_transport(&self, t: TransportKind) -> io::Result<()> {
        sys::setsockopt_int(
            self.raw_fd(),
            SOL_RDS,
            SO_RDS_TRANSPORT,
            t.trans_type() as libc::c_int,
        )
    }

    /// `SO_RDS_TRANSPORT` (get): `None` for `RDS_TRANS_NONE`.
    pub fn transport(&self) -> Option<TransportKind> {
        let v = sys::getsockopt_int(self.raw_fd(), SOL_RDS, SO_RDS_TRANSPORT).ok()?;
        u32::try_from(v)
            .ok()
            .and_then(TransportKind::from_trans_type)
    }

    /// `bind()`.
    ///
    /// # Errors
    /// The kernel's (`EADDRNOTAVAIL` when no transport serves the address, `EADDRINUSE`,
    /// `EINVAL`).
    pub fn bind(&self, a: SocketAddr) -> io::Result<()> {
        sys::bind(self.raw_fd(), a)
    }

    /// `connect()`.
    ///
    /// # Errors
    /// The kernel's.
    pub fn connect(&self, a: SocketAddr) -> io::Result<()> {
        sys::connect_raw(self.raw_fd(), a)
    }

    /// `getsockname`.
    ///
    /// # Errors
    /// `ENOTCONN` when unbound.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        let a = name(self.raw_fd(), false)?;
        if a.ip().is_unspecified() {
            return Err(io::Error::from_raw_os_error(libc::ENOTCONN));
        }
        Ok(a)
    }

    /// `getpeername`.
    ///
    /// # Errors
    /// `ENOTCONN` without a default destination.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        name(self.raw_fd(), true)
    }

    /// `sendmsg` of one message; `nonblock` adds `MSG_DONTWAIT`.
    ///
    /// # Errors
    /// The kernel's (`EAGAIN`, `ENOBUFS`, `EMSGSIZE`, `ENOTCONN`, ...).
    pub fn send(&self, data: &[u8], dest: Option<SocketAddr>, nonblock: bool) -> io::Result<usize> {
        let flags = if nonblock { libc::MSG_DONTWAIT } else { 0 };
        ffi::send(self.raw_fd(), data, dest, flags, None).map(|(n, _)| n)
    }

    /// `sendmsg` with RDMA control data (`RDS_CMSG_RDMA_ARGS`, `_DEST`, `_MAP`). Returns the
    /// bytes sent and the cookie of a region `RDS_CMSG_RDMA_MAP` registered. The addresses in
    /// `rdma` must name memory of this process that stays allocated (crate callers pass
    /// [`crate::rdma::RdmaBuffer`] memory).
    ///
    /// # Errors
    /// The kernel's (`EOPNOTSUPP` on RDS/TCP, `EINVAL`, `EFAULT`, `EAGAIN`, ...).
    pub(crate) fn send_rdma(
        &self,
        data: &[u8],
        dest: Option<SocketAddr>,
        nonblock: bool,
        rdma: &SendRdma,
    ) -> io::Result<(usize, Option<u64>)> {
        let flags = if nonblock { libc::MSG_DONTWAIT } else { 0 };
        ffi::send(self.raw_fd(), data, dest, flags, Some(rdma))
    }

    /// `RDS_GET_MR` on memory of this process (crate callers pass
    /// [`crate::rdma::RdmaBuffer`] memory); returns the cookie.
    ///
    /// # Errors
    /// The kernel's (`EOPNOTSUPP` or `EINVAL` on RDS/TCP, `ENOTCONN` unbound, `EFAULT`).
    pub(crate) fn get_mr(&self, vec: RdsIovec, flags: u64) -> io::Result<u64> {
        ffi::get_mr(self.raw_fd(), vec, flags)
    }

    /// `RDS_FREE_MR` (cookie 0: the kernel's flush of unused regions).
    ///
    /// # Errors
    /// The kernel's (`EINVAL` for an unknown cookie or a transport without regions).
    pub fn free_mr(&self, cookie: u64, flags: u64) -> io::Result<()> {
        ffi::free_mr(self.raw_fd(), cookie, flags)
    }

    /// `recvmsg` into `buf`.
    ///
    /// # Errors
    /// The kernel's (`EAGAIN` when nothing is queued and non-blocking or the read timeout
    /// passed).
    pub fn recv(
        &self,
        buf: &mut [u8],
        peek: bool,
        trunc: bool,
        nonblock: bool,
    ) -> io::Result<KernelRecv> {
        let mut flags = 0;
        if peek {
            flags |= libc::MSG_PEEK;
        }
        if trunc {
            flags |= libc::MSG_TRUNC;
        }
        if nonblock {
            flags |= libc::MSG_DONTWAIT;
        }
        let r = ffi::recv(self.raw_fd(), buf, flags)?;
        let mut out = KernelRecv {
            len: r.len,
            from: r.from,
            truncated: r.flags & libc::MSG_TRUNC != 0,
            cong_update: None,
            rdma_dest: None,
            rdma_status: None,
            timestamp: None,
        };
        for (level, ty, data) in &r.cmsgs {
            match (*level, *ty) {
                (SOL_RDS, RDS_CMSG_CONG_UPDATE) => out.cong_update = u64_of(data),
                (SOL_RDS, RDS_CMSG_RDMA_DEST) => out.rdma_dest = u64_of(data),
                (SOL_RDS, RDS_CMSG_RDMA_STATUS) => {
                    let status = data
                        .get(8..12)
                        .and_then(|b| b.try_into().ok())
                        .map_or(4, i32::from_ne_bytes);
                    out.rdma_status = u64_of(data).map(|t| (t, status));
                }
                (libc::SOL_SOCKET, libc::SCM_TIMESTAMP) => {
                    let sec = data
                        .get(..8)
                        .and_then(|b| b.try_into().ok())
                        .map(i64::from_ne_bytes);
                    let usec = data
                        .get(8..16)
                        .and_then(|b| b.try_into().ok())
                        .map(i64::from_ne_bytes);
                    if let (Some(s), Some(us)) = (sec, usec) {
                        let d = Duration::from_secs(s.max(0) as u64)
                            + Duration::from_micros(us.clamp(0, 999_999) as u64);
                        out.timestamp = Some(UNIX_EPOCH + d);
                    }
                }
                _ => {}
            }
        }
        if out.cong_update.is_some() || out.rdma_status.is_some() {
            out.from = None;
        }
        Ok(out)
    }

    /// `SO_SNDBUF` (the kernel keeps twice the value).
    ///
    /// # Errors
    /// The kernel's.
    pub fn set_sndbuf(&self, bytes: usize) -> io::Result<()> {
        let v = bytes.min(i32::MAX as usize) as libc::c_int;
        sys::setsockopt_int(self.raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, v)
    }

    /// `SO_RCVBUF` (the kernel keeps twice the value).
    ///
    /// # Errors
    /// The kernel's.
    pub fn set_rcvbuf(&self, bytes: usize) -> io::Result<()> {
        let v = bytes.min(i32::MAX as usize) as libc::c_int;
        sys::setsockopt_int(self.raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, v)
    }

    /// `getsockopt(SO_SNDBUF)`, `getsockopt(SO_RCVBUF)`.
    pub fn bufs(&self) -> (usize, usize) {
        let g = |o| {
            sys::getsockopt_int(self.raw_fd(), libc::SOL_SOCKET, o)
                .map_or(0, |v| usize::try_from(v).unwrap_or(0))
        };
        (g(libc::SO_SNDBUF), g(libc::SO_RCVBUF))
    }

    /// `RDS_CONG_MONITOR`.
    ///
    /// # Errors
    /// The kernel's.
    pub fn set_cong_monitor(&self, on: bool) -> io::Result<()> {
        sys::setsockopt_int(self.raw_fd(), SOL_RDS, RDS_CONG_MONITOR, on.into())
    }

    /// `RDS_RECVERR` (set).
    ///
    /// # Errors
    /// The kernel's.
    pub fn set_recverr(&self, on: bool) -> io::Result<()> {
        sys::setsockopt_int(self.raw_fd(), SOL_RDS, RDS_RECVERR, on.into())
    }

    /// `RDS_RECVERR` (get).
    pub fn recverr(&self) -> bool {
        sys::getsockopt_int(self.raw_fd(), SOL_RDS, RDS_RECVERR).is_ok_and(|v| v != 0)
    }

    /// `SO_TIMESTAMP`.
    ///
    /// # Errors
    /// The kernel's.
    pub fn set_timestamps(&self, on: bool) -> io::Result<()> {
        sys::setsockopt_int(
            self.raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMP,
            on.into(),
        )
    }

    /// `SO_RCVTIMEO` (`None`: wait forever).
    ///
    /// # Errors
    /// The kernel's.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        sys::set_timeout(self.raw_fd(), libc::SO_RCVTIMEO, t)
    }

    /// `SO_SNDTIMEO` (`None`: wait forever).
    ///
    /// # Errors
    /// The kernel's.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        sys::set_timeout(self.raw_fd(), libc::SO_SNDTIMEO, t)
    }

    /// `RDS_CANCEL_SENT_TO`.
    ///
    /// # Errors
    /// The kernel's (`ENOTCONN` when unbound).
    pub fn cancel_sent_to(&self, dest: SocketAddr) -> io::Result<()> {
        sys::setsockopt_addr(self.raw_fd(), SOL_RDS, RDS_CANCEL_SENT_TO, dest)
    }

    /// Readable, writable now.
    pub fn ready(&self) -> (bool, bool) {
        ready(self.raw_fd())
    }

    /// One `RDS_INFO_*` table as raw records and the record size the kernel reported.
    ///
    /// # Errors
    /// The kernel's (`ENOPROTOOPT`: no handler, e.g. the transport's module is not loaded).
    pub fn info_raw(&self, opt: i32) -> io::Result<(Vec<u8>, usize)> {
        ffi::info(self.raw_fd(), opt)
    }
}
