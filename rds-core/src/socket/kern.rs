//! The socket's kernel backend and the choice of stack: which RDS serves a socket made with
//! [`Socket::new`] ([`Stack`], set once per process by a tool's `--stack`), and the calls of a
//! socket bound to the running kernel's `AF_RDS` ([`crate::kernel::KernelSocket`]).
//!
//! `auto` (the default): the host daemon when it runs and owns the address, else the kernel's
//! RDS when the kernel has it loaded, else the process's embedded node. `kernel`: the kernel
//! only. `user`: the daemon or the embedded node, never the kernel.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use super::{timeout, Backend, RecvFlags, Socket};
use crate::errno::err;
use crate::kernel::{KernelRecv, KernelSocket, RdmaOpArgs, RdsIovec, SendRdma};
use crate::message::{InMsg, RdmaNotify, RdmaStatus, Received};
use crate::rdma::{MrFlags, RdmaBuffer, SendCtl, Sent};

/// Which RDS stack serves the sockets a process makes with [`Socket::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stack {
    /// The daemon if it owns the address, else the kernel's RDS if loaded, else an embedded
    /// node.
    #[default]
    Auto,
    /// This project's stack only: the daemon or an embedded node.
    User,
    /// The running kernel's RDS (`AF_RDS`) only.
    Kernel,
}

impl Stack {
    /// The option value: `auto`, `user` or `kernel`.
    pub fn name(self) -> &'static str {
        match self {
            Stack::Auto => "auto",
            Stack::User => "user",
            Stack::Kernel => "kernel",
        }
    }
}

impl std::str::FromStr for Stack {
    type Err = String;

    fn from_str(s: &str) -> Result<Stack, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Stack::Auto),
            "user" | "userspace" => Ok(Stack::User),
            "kernel" => Ok(Stack::Kernel),
            _ => Err(format!(
                "invalid stack '{s}': use kernel (the kernel's RDS), user (this project's \
                 daemon or an embedded node) or auto"
            )),
        }
    }
}

static STACK: AtomicU8 = AtomicU8::new(0);

/// Chooses the stack for the sockets this process makes from now on.
pub fn set_stack(s: Stack) {
    STACK.store(s as u8, Ordering::Relaxed);
}

/// The stack chosen with [`set_stack`] ([`Stack::Auto`] unless set).
pub fn stack() -> Stack {
    match STACK.load(Ordering::Relaxed) {
        1 => Stack::User,
        2 => Stack::Kernel,
        _ => Stack::Auto,
    }
}

/// Whether the kernel has RDS, read once per process.
fn kernel_loaded() -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(crate::kernel::loaded)
}

/// Whether sockets made with [`Socket::new`] go to the kernel's RDS (unless, for `auto`, the
/// daemon owns their address): `kernel`, or `auto` on a host whose kernel has RDS loaded. A
/// tool then starts no embedded node of its own.
pub fn kernel_preferred() -> bool {
    match stack() {
        Stack::Kernel => true,
        Stack::Auto => kernel_loaded(),
        Stack::User => false,
    }
}

/// Binds `s` ahead of the daemon and embedded paths when the chosen stack says so:
/// `Some(bound)` when the kernel (or, for `auto`, the daemon owning the address) took it,
/// `None` to go on with the daemon and embedded node.
pub(super) fn bind_first(s: &Socket, addr: SocketAddr) -> io::Result<Option<SocketAddr>> {
    match stack() {
        Stack::User => Ok(None),
        Stack::Kernel => bind_kernel(s, addr).map(Some),
        Stack::Auto => {
            if !crate::env::no_daemon() {
                if let Some(r) = s.bind_daemon(addr)? {
                    return Ok(Some(r));
                }
            }
            if kernel_loaded() {
                return bind_kernel(s, addr).map(Some);
            }
            Ok(None)
        }
    }
}

/// Opens a kernel socket, hands it the options set so far, binds it and makes it `s`'s
/// backend.
fn bind_kernel(s: &Socket, addr: SocketAddr) -> io::Result<SocketAddr> {
    let k = KernelSocket::new()?;
    let p = s.pending().clone();
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
    if s.timestamps.load(Ordering::Relaxed) {
        k.set_timestamps(true)?;
    }
    k.set_read_timeout(timeout(s.rcvtimeo_ns.load(Ordering::Relaxed)))?;
    k.set_write_timeout(timeout(s.sndtimeo_ns.load(Ordering::Relaxed)))?;
    k.bind(addr)?;
    if let Some(c) = p.connected {
        k.connect(c)?;
    }
    let bound = k.local_addr()?;
    let _ = s.backend.set(Backend::Kernel(k));
    Ok(bound)
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

/// One receive on the kernel backend, as the embedded backend reports it.
pub(super) fn recv_item(
    k: &KernelSocket,
    max_len: usize,
    flags: RecvFlags,
    nonblock: bool,
    tmo: Option<Duration>,
) -> io::Result<(Received, usize, bool, Option<std::time::SystemTime>)> {
    let mut buf = vec![0u8; max_len];
    // Ask for the full length so that a cut message reports it.
    let r: KernelRecv = k
        .recv(&mut buf, flags.peek, true, nonblock)
        .map_err(|e| timed_out(e, nonblock, tmo))?;
    if let Some(mask) = r.cong_update {
        return Ok((Received::CongUpdate(mask), 0, false, None));
    }
    if let Some((user_token, code)) = r.rdma_status {
        let status = RdmaStatus::from_code(code).unwrap_or(RdmaStatus::OtherError);
        let n = RdmaNotify { user_token, status };
        return Ok((Received::RdmaStatus(n), 0, false, None));
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
        full_len,
        truncated,
        r.timestamp,
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
