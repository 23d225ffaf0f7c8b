//! The kernel backend of [`super::Socket`]: a socket bound to the running kernel's `AF_RDS`
//! ([`KernelSocket`], the safe wrapper of `crate::kernel`), for the calls whose meaning this
//! API states differently from the kernel: bind with the options set before it, a timeout
//! (`ETIMEDOUT` here, `EAGAIN` from the kernel), what a receive produced, and the RDMA
//! control messages. The other calls go to [`KernelSocket`] as they are.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, SystemTime};

use super::preset::{Preset, Timing};
use crate::errno::err;
use crate::kernel::{KernelRecv, KernelSocket, RdmaOpArgs, RdsIovec, SendRdma};
use crate::message::{InMsg, RdmaNotify, RdmaStatus, Received};
use crate::rdma::{MrFlags, RdmaBuffer, SendCtl, Sent};
use crate::sys;

/// Opens a kernel socket, hands it the options set so far and binds it; returns it with its
/// bound address.
pub(super) fn bind(
    addr: SocketAddr,
    p: &Preset,
    t: Timing,
) -> io::Result<(KernelSocket, SocketAddr)> {
    let k = KernelSocket::new()?;
    if let Some(t) = p.transport {
        k.set_transport(t)?;
    }
    if let Some(v) = p.sndbuf {
        k.set_sndbuf(v)?;
    }
    if let Some(v) = p.rcvbuf {
        k.set_rcvbuf(v)?;
    }
    if p.cong_monitor {
        k.set_cong_monitor(true)?;
    }
    if p.recverr {
        k.set_recverr(true)?;
    }
    if t.timestamps {
        k.set_timestamps(true)?;
    }
    k.set_read_timeout(t.read_timeout)?;
    k.set_write_timeout(t.write_timeout)?;
    k.bind(addr)?;
    if let Some(c) = p.connected {
        k.connect(c)?;
    }
    let bound = k.local_addr()?;
    Ok((k, bound))
}

/// A blocking call that outlived its timeout: the kernel says `EAGAIN`, this API `ETIMEDOUT`.
fn timed_out(e: io::Error, nonblock: bool, tmo: Option<Duration>) -> io::Error {
    if !nonblock && tmo.is_some() && e.raw_os_error() == Some(libc::EAGAIN) {
        err(libc::ETIMEDOUT)
    } else {
        e
    }
}

/// `send_bytes` on the kernel backend.
pub(super) fn send(
    k: &KernelSocket,
    msg: &[u8],
    dest: Option<SocketAddr>,
    nonblock: bool,
    tmo: Option<Duration>,
) -> io::Result<usize> {
    k.send(msg, dest, nonblock)
        .map_err(|e| timed_out(e, nonblock, tmo))
}

/// One receive on the kernel backend: what came and its receive time (data only, when
/// asked for with `SO_TIMESTAMP`).
pub(super) fn recv(
    k: &KernelSocket,
    max_len: usize,
    peek: bool,
    nonblock: bool,
    tmo: Option<Duration>,
) -> io::Result<(Received, Option<SystemTime>)> {
    let mut buf = vec![0u8; max_len];
    // Ask for the full length so that a cut message reports it.
    let r: KernelRecv = k
        .recv(&mut buf, peek, true, nonblock)
        .map_err(|e| timed_out(e, nonblock, tmo))?;
    if let Some(mask) = r.cong_update {
        return Ok((Received::CongUpdate(mask), None));
    }
    if let Some((user_token, code)) = r.rdma_status {
        let status = RdmaStatus::from_code(code).unwrap_or(RdmaStatus::OtherError);
        let n = RdmaNotify { user_token, status };
        return Ok((Received::RdmaStatus(n), None));
    }
    let from = r.from.ok_or_else(|| err(libc::EIO))?;
    let full_len = r.len;
    buf.truncate(full_len.min(max_len));
    let msg = InMsg {
        from,
        payload: bytes::Bytes::from(buf),
        seq: 0,
        rx_time: crate::time::Instant::ZERO,
        rdma_dest: r.rdma_dest,
        held: 0,
    };
    let truncated = r.truncated || full_len > max_len;
    Ok((
        Received::Data {
            msg,
            full_len,
            truncated,
        },
        r.timestamp,
    ))
}

/// The usable send and receive buffers: the kernel reports the doubled values, this API
/// the halves.
pub(super) fn bufs(k: &KernelSocket) -> (usize, usize) {
    let (snd, rcv) = k.bufs();
    (snd / 2, rcv / 2)
}

/// A readiness descriptor: the socket itself is readable for POLLIN; POLLOUT has no
/// readable stand-in (`EOPNOTSUPP`).
pub(super) fn ready_fd(k: &KernelSocket, rx: bool) -> io::Result<RawFd> {
    if rx {
        Ok(k.raw_fd())
    } else {
        Err(err(libc::EOPNOTSUPP))
    }
}

/// `Socket::wait_or` on the kernel backend: `poll(2)` on the socket for POLLIN and POLLOUT
/// and on `other` (-1: none); an error or hang-up counts as ready. A signal ends the wait:
/// with an error of kind `Interrupted` if `eintr`, else as a timeout.
pub(super) fn wait(
    k: &KernelSocket,
    (rx, tx): (bool, bool),
    other: RawFd,
    timeout: Duration,
    eintr: bool,
) -> io::Result<(bool, bool)> {
    let events = if rx { libc::POLLIN } else { 0 } | if tx { libc::POLLOUT } else { 0 };
    let asks = [(k.raw_fd(), events), (other, libc::POLLIN)];
    let r = if eintr {
        sys::poll_until_signal(&asks, timeout)?[0]
    } else {
        sys::poll_for(&asks, timeout)?[0]
    };
    let bad = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
    Ok((
        rx && r & (libc::POLLIN | bad) != 0,
        tx && r & (libc::POLLOUT | bad) != 0,
    ))
}

/// The `struct rds_iovec` of `len` bytes of `buf` at `off` (`EINVAL` for an empty range or one
/// outside the buffer: the kernel must only ever see memory the buffer owns).
fn iovec(buf: &RdmaBuffer, off: usize, len: usize) -> io::Result<RdsIovec> {
    if len == 0 || !buf.contains(off, len) {
        return Err(err(libc::EINVAL));
    }
    Ok(RdsIovec {
        addr: buf.mem().addr() + off as u64,
        bytes: len as u64,
    })
}

/// `get_mr` on the kernel backend: `RDS_GET_MR` on the buffer's memory.
pub(super) fn get_mr(
    k: &KernelSocket,
    buf: &RdmaBuffer,
    off: usize,
    len: usize,
    flags: MrFlags,
) -> io::Result<u64> {
    k.get_mr(iovec(buf, off, len)?, flags.bits())
}

/// `free_mr` on the kernel backend: `RDS_FREE_MR`.
pub(super) fn free_mr(k: &KernelSocket, cookie: u64, invalidate: bool) -> io::Result<()> {
    let flags = MrFlags {
        use_once: false,
        invalidate,
    };
    k.free_mr(cookie, flags.bits())
}

/// `send_ctl` on the kernel backend: one `sendmsg` with the `RDS_CMSG_RDMA_*` control
/// messages; the kernel performs the operation and reports it as the kernel does.
pub(super) fn send_ctl(
    k: &KernelSocket,
    payload: &[u8],
    dest: Option<SocketAddr>,
    (nonblock, tmo): (bool, Option<Duration>),
    ctl: &SendCtl,
) -> io::Result<Sent> {
    let mut r = SendRdma {
        dest: ctl.rdma_dest,
        ..SendRdma::default()
    };
    if let Some(a) = &ctl.rdma {
        let local = a
            .local
            .iter()
            .map(|v| iovec(&v.buf, v.off, v.len))
            .collect::<io::Result<Vec<_>>>()?;
        let flags = a.flag_bits();
        r.args = Some(RdmaOpArgs {
            cookie: a.cookie,
            remote: RdsIovec {
                addr: a.remote_addr,
                bytes: local.iter().map(|v| v.bytes).sum(),
            },
            local,
            flags,
            user_token: a.user_token,
        });
    }
    if let Some(m) = &ctl.rdma_map {
        r.map = Some((iovec(&m.buf, m.off, m.len)?, m.flags.bits()));
    }
    let (len, map_cookie) = k
        .send_rdma(payload, dest, nonblock, &r)
        .map_err(|e| timed_out(e, nonblock, tmo))?;
    Ok(Sent { len, map_cookie })
}

/// [`super::Socket::wait_uncongested`] on the kernel backend: the socket's `POLLWRBAND`, where
/// the kernel reports a congestion map update to a socket that met congestion.
pub(super) fn wait_uncongested(
    k: &KernelSocket,
    deadline: Option<std::time::Instant>,
) -> io::Result<bool> {
    let left = deadline.map_or(Duration::MAX, |d| {
        d.saturating_duration_since(std::time::Instant::now())
    });
    let r = sys::poll_for(&[(k.raw_fd(), libc::POLLWRBAND)], left)?;
    if r[0] != 0 {
        return Ok(true);
    }
    if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
        return Err(err(libc::ETIMEDOUT));
    }
    Err(err(libc::EINTR))
}
