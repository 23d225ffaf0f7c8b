//! The RDS RDMA API: memory regions peers may read and write, RDMA operations attached to
//! messages, and their completion notifications — the kernel's `RDS_GET_MR`, `RDS_FREE_MR`,
//! `RDS_CMSG_RDMA_ARGS`, `RDS_CMSG_RDMA_DEST`, `RDS_CMSG_RDMA_MAP` and
//! `RDS_CMSG_RDMA_STATUS`, as methods of [`crate::Socket`] ([`crate::Socket::get_mr`],
//! [`crate::Socket::free_mr`], [`crate::Socket::send_ctl`]).
//!
//! How it works, as in the kernel:
//! - A **cookie** names a registered region: `r_key | (offset << 32)`, where offset is the
//!   page offset of the region's first byte. Regions are zero-based: the remote address of
//!   byte `k` of a region is `offset + k`, so an initiator that targets byte `k` passes
//!   `remote_addr = k` and the cookie ([`RdmaArgs`]).
//! - The initiator's node performs the RDMA read or write on the connection's queue pair
//!   *before* the message's first SEND, so when the target receives the message the data is
//!   in place. The message carries the `RDMA` extension header (the region's `r_key`); a
//!   use-once region is released when that message arrives.
//! - The outcome reaches the initiator as a notification ([`RdmaNotify`]) when it asked for
//!   one ([`RdmaArgs::notify`]), or on failure with `RDS_RECVERR` set
//!   ([`crate::Socket::set_recverr`]). Notifications come before data in `recv`.
//! - Messages with RDMA operations are never retransmitted: after a connection drop they are
//!   dropped and reported [`RdmaStatus::Dropped`]; `cancel_sent_to` reports
//!   [`RdmaStatus::Canceled`].
//! - The engine carries an operation as plain data ([`RdmaOp`]: ids, keys, lengths); the IB
//!   transport registers the local buffers when the message is queued and keeps those
//!   registrations itself, keyed by [`RdmaOpId`].
//! - Only the IB transport does RDMA. On TCP or loopback (and through the daemon, whose
//!   memory is another process's) these calls fail with `EOPNOTSUPP`, like the kernel's
//!   `rds_tcp`.
//! - On a socket of the kernel's RDS ([`crate::socket::StackChoice::Kernel`]) these calls are the
//!   kernel's: `RDS_GET_MR` / `RDS_FREE_MR` and the `RDS_CMSG_RDMA_*` control messages on the
//!   buffer's memory, with the kernel's errors (`rds_rdma` serves them; RDS/TCP refuses).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use crate::ib::mem::DmaMem;
use crate::info::SockId;
pub use crate::message::{RdmaNotify, RdmaStatus};
pub use crate::proto::rdma_op::{RdmaOp, RdmaOpId, RdmaRef};

/// Page-aligned, zeroed memory that RDMA operations may read and write (what an application
/// would `mmap` for the kernel's API). Cheap to clone: clones share the memory.
///
/// The adapter may write the bytes at any time while a peer holds a key, so they are reached
/// only through copies ([`RdmaBuffer::read_at`], [`RdmaBuffer::write_at`]).
#[derive(Debug, Clone)]
pub struct RdmaBuffer {
    mem: Arc<DmaMem>,
}

fn out_of_range(e: crate::ib::OutOfRange) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
}

impl RdmaBuffer {
    /// Allocates `len` zeroed bytes.
    ///
    /// # Errors
    /// `len` is 0 (`InvalidInput`) or the memory cannot be allocated.
    pub fn new(len: usize) -> io::Result<RdmaBuffer> {
        Ok(RdmaBuffer {
            mem: Arc::new(DmaMem::new(len)?),
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Never true (empty buffers are refused).
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// Copies bytes out of the buffer.
    ///
    /// # Errors
    /// The range is outside the buffer (`InvalidInput`).
    pub fn read_at(&self, off: usize, out: &mut [u8]) -> io::Result<()> {
        self.mem.read_at(off, out).map_err(out_of_range)
    }

    /// Copies bytes into the buffer.
    ///
    /// # Errors
    /// The range is outside the buffer (`InvalidInput`).
    pub fn write_at(&self, off: usize, data: &[u8]) -> io::Result<()> {
        self.mem.write_at(off, data).map_err(out_of_range)
    }

    /// A copy of `len` bytes at `off`.
    ///
    /// # Errors
    /// The range is outside the buffer (`InvalidInput`).
    pub fn to_vec(&self, off: usize, len: usize) -> io::Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.read_at(off, &mut v)?;
        Ok(v)
    }

    /// The page offset of byte `off` (the offset half of a cookie for a region starting there).
    pub fn page_offset(&self, off: usize) -> u32 {
        ((self.mem.addr() + off as u64) & 4095) as u32
    }

    /// Whether `[off, off+len)` is inside the buffer.
    pub fn contains(&self, off: usize, len: usize) -> bool {
        self.mem.check(off, len).is_ok()
    }

    /// A buffer over memory made elsewhere ([`DmaMem::foreign`]: a program's own memory).
    pub fn from_mem(mem: DmaMem) -> RdmaBuffer {
        RdmaBuffer { mem: Arc::new(mem) }
    }

    pub(crate) fn mem(&self) -> &Arc<DmaMem> {
        &self.mem
    }

    /// Whether two handles share the same memory.
    pub fn same(&self, other: &RdmaBuffer) -> bool {
        Arc::ptr_eq(&self.mem, &other.mem)
    }
}

/// A cookie from its remote key and page offset.
pub fn make_cookie(rkey: u32, offset: u32) -> u64 {
    u64::from(rkey) | (u64::from(offset) << 32)
}

/// The remote key of a cookie (`rds_rdma_cookie_key`).
pub fn cookie_rkey(cookie: u64) -> u32 {
    cookie as u32
}

/// The page offset of a cookie (`rds_rdma_cookie_offset`).
pub fn cookie_offset(cookie: u64) -> u32 {
    (cookie >> 32) as u32
}

/// The `RDS_RDMA_*` bits of `linux/rds.h` ([`crate::abi`]): `flags` of `struct
/// rds_get_mr_args`, `rds_free_mr_args` and `rds_rdma_args`.
pub mod flag {
    pub use crate::abi::{
        RDS_RDMA_FENCE as FENCE, RDS_RDMA_INVALIDATE as INVALIDATE,
        RDS_RDMA_NOTIFY_ME as NOTIFY_ME, RDS_RDMA_READWRITE as READWRITE,
        RDS_RDMA_SILENT as SILENT, RDS_RDMA_USE_ONCE as USE_ONCE,
    };
}

/// Flags of a registration (`RDS_RDMA_USE_ONCE`, `RDS_RDMA_INVALIDATE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MrFlags {
    /// Release the region when the first message with an RDMA operation on it arrives.
    pub use_once: bool,
    /// Invalidate the key when the region is released (our regions always are).
    pub invalidate: bool,
}

impl MrFlags {
    /// From the kernel's `flags` word (other bits are ignored, as the kernel does).
    pub fn from_bits(bits: u64) -> MrFlags {
        MrFlags {
            use_once: bits & flag::USE_ONCE != 0,
            invalidate: bits & flag::INVALIDATE != 0,
        }
    }

    /// The kernel's `flags` word.
    pub fn bits(self) -> u64 {
        let mut v = 0;
        if self.use_once {
            v |= flag::USE_ONCE;
        }
        if self.invalidate {
            v |= flag::INVALIDATE;
        }
        v
    }
}

/// A local buffer range of an RDMA operation (one `struct rds_iovec` of `local_vec_addr`).
#[derive(Debug, Clone)]
pub struct LocalVec {
    /// The buffer.
    pub buf: RdmaBuffer,
    /// Start in the buffer.
    pub off: usize,
    /// Length.
    pub len: usize,
}

/// An RDMA read or write to attach to a message (`RDS_CMSG_RDMA_ARGS`).
#[derive(Debug, Clone, Default)]
pub struct RdmaArgs {
    /// The peer's cookie for the target region.
    pub cookie: u64,
    /// `remote_vec.addr`: where in the peer's region, zero-based (the cookie's offset is
    /// added).
    pub remote_addr: u64,
    /// Local memory, gathered for a write and scattered into for a read; the operation's
    /// length (`remote_vec.bytes`) is the total.
    pub local: Vec<LocalVec>,
    /// `RDS_RDMA_READWRITE`: write to the peer (else read from it).
    pub write: bool,
    /// `RDS_RDMA_FENCE`: the message's SEND waits for the operation (wanted after a read).
    pub fence: bool,
    /// `RDS_RDMA_NOTIFY_ME`: report the outcome.
    pub notify: bool,
    /// `RDS_RDMA_SILENT`: accepted; the message header is still sent (see the module docs).
    pub silent: bool,
    /// Returned in the notification.
    pub user_token: u64,
}

impl RdmaArgs {
    /// The operation's bits of the kernel's `flags` word (`READWRITE`, `FENCE`, `NOTIFY_ME`,
    /// `SILENT`).
    pub fn flag_bits(&self) -> u64 {
        [
            (self.write, flag::READWRITE),
            (self.fence, flag::FENCE),
            (self.notify, flag::NOTIFY_ME),
            (self.silent, flag::SILENT),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |acc, (_, f)| acc | f)
    }
}

/// Register a region and send its cookie with the message (`RDS_CMSG_RDMA_MAP`).
#[derive(Debug, Clone)]
pub struct RdmaMap {
    /// The buffer.
    pub buf: RdmaBuffer,
    /// Start of the region in the buffer.
    pub off: usize,
    /// Its length.
    pub len: usize,
    /// Registration flags.
    pub flags: MrFlags,
}

/// Control data of a send (the `SOL_RDS` cmsgs of `sendmsg`).
#[derive(Debug, Clone, Default)]
pub struct SendCtl {
    /// An RDMA operation (`RDS_CMSG_RDMA_ARGS`).
    pub rdma: Option<RdmaArgs>,
    /// A cookie of one of this socket's regions to hand to the peer (`RDS_CMSG_RDMA_DEST`).
    pub rdma_dest: Option<u64>,
    /// Register a region and hand its cookie to the peer (`RDS_CMSG_RDMA_MAP`).
    pub rdma_map: Option<RdmaMap>,
}

/// What a send with control data did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Payload bytes queued.
    pub len: usize,
    /// The cookie of the region registered for [`SendCtl::rdma_map`].
    pub map_cookie: Option<u64>,
}

/// The next [`RdmaOpId`] (ids are unique within the process).
static NEXT_OP_ID: AtomicU64 = AtomicU64::new(1);

impl RdmaOp {
    /// An operation from the application's arguments, with a fresh id. The local buffers are
    /// registered by the transport under that id ([`crate::Socket::send_ctl`] does both).
    pub fn new(sock: SockId, a: &RdmaArgs) -> RdmaOp {
        let id = RdmaOpId(NEXT_OP_ID.fetch_add(1, Ordering::Relaxed));
        let remote_addr = a
            .remote_addr
            .wrapping_add(u64::from(cookie_offset(a.cookie)));
        let local = a.local.iter().map(|v| v.len).collect();
        let mut op = RdmaOp::plain(id, sock, cookie_rkey(a.cookie), remote_addr, local);
        op.write = a.write;
        op.fence = a.fence;
        op.notify = a.notify;
        op.user_token = a.user_token;
        op
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_as_the_kernel() {
        let c = make_cookie(0x1234_5678, 0x9ab);
        assert_eq!(c, 0x0000_09ab_1234_5678);
        assert_eq!(cookie_rkey(c), 0x1234_5678);
        assert_eq!(cookie_offset(c), 0x9ab);
    }

    /// The `flags` words as `linux/rds.h` spells them.
    #[test]
    fn flag_words() {
        for bits in 0..16u64 {
            let f = MrFlags::from_bits(bits);
            assert_eq!(f.bits(), bits & 0xc, "{bits:#x}");
        }
        let mut a = RdmaArgs {
            write: true,
            silent: true,
            ..RdmaArgs::default()
        };
        assert_eq!(a.flag_bits(), 0x41);
        a.fence = true;
        a.notify = true;
        assert_eq!(a.flag_bits(), 0x63);
    }

    #[test]
    fn op_from_args() {
        let b = RdmaBuffer::new(100).unwrap();
        let a = RdmaArgs {
            cookie: make_cookie(7, 16),
            remote_addr: 4,
            local: vec![
                LocalVec {
                    buf: b.clone(),
                    off: 0,
                    len: 10,
                },
                LocalVec {
                    buf: b,
                    off: 50,
                    len: 30,
                },
            ],
            write: true,
            notify: true,
            user_token: 9,
            ..RdmaArgs::default()
        };
        let op = RdmaOp::new(SockId(3), &a);
        assert_eq!((op.rkey, op.remote_addr, op.bytes), (7, 20, 40));
        assert_eq!(op.local, [10, 30]);
        assert!(op.write && op.notify && !op.fence);
        assert_eq!(op.user_token, 9);
        assert_ne!(RdmaOp::new(SockId(3), &a).id, op.id);
        assert!(op.take_notify());
        assert!(!op.take_notify());
        assert_eq!(RdmaStatus::from_code(3), Some(RdmaStatus::Dropped));
        assert_eq!(RdmaStatus::from_code(5), None);
        assert_eq!(RdmaStatus::Canceled.code(), 2);
    }
}
