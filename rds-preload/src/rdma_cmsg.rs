//! The kernel's RDMA API for a C program on RDS/IB: the `RDS_CMSG_RDMA_ARGS`, `_DEST` and
//! `_MAP` control messages of `sendmsg` and the `RDS_GET_MR` / `RDS_GET_MR_FOR_DEST`
//! socket options, read from the kernel's structures (`linux/rds.h`) and served by the
//! socket's RDMA calls on the program's own memory, registered in place as the kernel pins
//! it. Cookies go back to the program's `cookie_addr` as the kernel's `put_user` does.

use rds_core::rdma::{flag, LocalVec, MrFlags, RdmaArgs, RdmaMap, SendCtl};

use crate::ffi::user;
use crate::sock::{errno, Entry};

type Res<T> = Result<T, i32>;

/// `sizeof(struct rds_rdma_args)`.
const RDMA_ARGS_LEN: usize = 56;
/// `sizeof(struct rds_get_mr_args)`.
pub const GET_MR_ARGS_LEN: usize = 32;
/// `sizeof(struct rds_get_mr_for_dest_args)`: a sockaddr_storage, then the get_mr fields.
pub const GET_MR_FOR_DEST_ARGS_LEN: usize = 160;
/// `sizeof(struct rds_iovec)`.
const IOVEC_LEN: usize = 16;

/// The `n`th u64 of a structure (the caller checked the length).
fn word(b: &[u8], n: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[n * 8..n * 8 + 8]);
    u64::from_ne_bytes(a)
}

/// `RDS_CMSG_RDMA_ARGS` (`struct rds_rdma_args`: cookie, remote_vec, local_vec_addr,
/// nr_local, flags, user_token) with its local vectors read from the program.
///
/// # Errors
/// `EINVAL` for a short structure, a zero-length vector or local vectors longer than the
/// remote one; `EFAULT` for an unreadable vector array.
pub fn args(data: &[u8]) -> Res<RdmaArgs> {
    if data.len() < RDMA_ARGS_LEN {
        return Err(libc::EINVAL);
    }
    let (cookie, remote_addr, remote_len) = (word(data, 0), word(data, 1), word(data, 2));
    let (vec_addr, nr, flags, user_token) =
        (word(data, 3), word(data, 4), word(data, 5), word(data, 6));
    let len = usize::try_from(nr)
        .ok()
        .and_then(|n| n.checked_mul(IOVEC_LEN))
        .ok_or(libc::EINVAL)?;
    let vecs = user::read(vec_addr, len)?;
    let mut local = Vec::new();
    let mut total: u64 = 0;
    for v in vecs.chunks(IOVEC_LEN) {
        let (addr, bytes) = (word(v, 0), word(v, 1));
        if bytes == 0 {
            return Err(libc::EINVAL);
        }
        total = total.checked_add(bytes).ok_or(libc::EINVAL)?;
        local.push(LocalVec {
            buf: user::buffer(addr, bytes)?,
            off: 0,
            len: usize::try_from(bytes).map_err(|_| libc::EINVAL)?,
        });
    }
    if total > remote_len {
        return Err(libc::EINVAL);
    }
    Ok(RdmaArgs {
        cookie,
        remote_addr,
        local,
        write: flags & flag::READWRITE != 0,
        fence: flags & flag::FENCE != 0,
        notify: flags & flag::NOTIFY_ME != 0,
        silent: flags & flag::SILENT != 0,
        user_token,
    })
}

/// `struct rds_get_mr_args` (vec, cookie_addr, flags) at the start of `data`: the region and
/// where its cookie goes (0: nowhere). The cookie's place is checked writable first, so a bad
/// pointer fails before anything is registered or sent.
///
/// # Errors
/// `EINVAL` for a short structure or an empty range; `EFAULT` for an unwritable
/// `cookie_addr`.
pub fn map(data: &[u8]) -> Res<(RdmaMap, u64)> {
    if data.len() < GET_MR_ARGS_LEN {
        return Err(libc::EINVAL);
    }
    let (addr, bytes, cookie_addr, flags) =
        (word(data, 0), word(data, 1), word(data, 2), word(data, 3));
    if bytes == 0 {
        return Err(libc::EINVAL);
    }
    if cookie_addr != 0 {
        user::write(cookie_addr, &0u64.to_ne_bytes())?;
    }
    let m = RdmaMap {
        buf: user::buffer(addr, bytes)?,
        off: 0,
        len: usize::try_from(bytes).map_err(|_| libc::EINVAL)?,
        flags: MrFlags::from_bits(flags),
    };
    Ok((m, cookie_addr))
}

/// Puts a cookie where the program asked for it.
///
/// # Errors
/// `EFAULT` for an unwritable address.
pub fn put_cookie(cookie_addr: u64, cookie: u64) -> Res<()> {
    if cookie_addr == 0 {
        return Ok(());
    }
    user::write(cookie_addr, &cookie.to_ne_bytes())
}

/// `RDS_GET_MR` / `RDS_GET_MR_FOR_DEST` on RDS/IB: registers the program's memory and writes
/// the cookie to `cookie_addr`. `v` is the whole option value (`for_dest`: the destination's
/// sockaddr_storage first, which a one-device stack does not need).
///
/// # Errors
/// As [`map`]; the registration's errors (`EFAULT` for unmapped memory, ...).
pub fn get_mr(e: &Entry, v: &[u8], for_dest: bool) -> Res<()> {
    let args = if for_dest { &v[128..] } else { v };
    let (m, cookie_addr) = map(args)?;
    let cookie = e
        .sock
        .get_mr(&m.buf, m.off, m.len, m.flags)
        .map_err(errno)?;
    if let Err(err) = put_cookie(cookie_addr, cookie) {
        let _ = e.sock.free_mr(cookie, false);
        return Err(err);
    }
    Ok(())
}

/// The RDMA control messages of one `sendmsg`, parsed: at most one operation and one cookie
/// (to hand over, or to register and hand over), as the kernel allows.
#[derive(Default)]
pub struct SendRdma {
    /// What the socket's `send_ctl` takes.
    pub ctl: SendCtl,
    /// Where an `RDS_CMSG_RDMA_MAP` cookie goes.
    pub map_cookie_addr: u64,
}

impl SendRdma {
    /// Adds one `SOL_RDS` RDMA control message.
    ///
    /// # Errors
    /// `EINVAL` for a second operation or a second cookie, or bad arguments (see [`args`],
    /// [`map`]).
    pub fn add(&mut self, ty: i32, data: &[u8]) -> Res<()> {
        use rds_core::abi::{RDS_CMSG_RDMA_ARGS, RDS_CMSG_RDMA_DEST, RDS_CMSG_RDMA_MAP};
        let has_cookie = self.ctl.rdma_dest.is_some() || self.ctl.rdma_map.is_some();
        match ty {
            RDS_CMSG_RDMA_ARGS if self.ctl.rdma.is_none() => self.ctl.rdma = Some(args(data)?),
            RDS_CMSG_RDMA_DEST if !has_cookie && data.len() >= 8 => {
                self.ctl.rdma_dest = Some(word(data, 0));
            }
            RDS_CMSG_RDMA_MAP if !has_cookie => {
                let (m, at) = map(data)?;
                self.ctl.rdma_map = Some(m);
                self.map_cookie_addr = at;
            }
            _ => return Err(libc::EINVAL),
        }
        Ok(())
    }
}
