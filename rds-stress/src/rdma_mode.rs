//! RDMA mode (`-D`): the per-task buffer area, the `rdma_pattern` fill and check, the
//! notification token, and the choice of the RDS node that can do RDMA (an embedded node
//! running the IB transport on the bound address).
//!
//! As the original:
//! - each task has one page-aligned area of `2 × tasks × depth × (size × vector)` bytes plus a
//!   page, filled with 0x2f and offset by `--rdma-alignment`; per (remote task, slot) it holds
//!   the region offered to the peer in a request, then the local buffer of the ack's RDMA
//!   operation;
//! - the requests after the tenth message of a flow offer a region: a cookie from
//!   `RDS_GET_MR` in `RDMA_DEST` (`--rdma-use-get-mr 1`) or an `RDMA_MAP` registration;
//! - the responder's ack carries the RDMA read or write (`RDMA_ARGS`, notify, fence on reads
//!   with `--rdma-use-fence 1`) with the token `seq << 32 | (flow × depth + slot) << 2`.
//!
//! With `-v` the region is filled with the request's pattern as u64 words (read) or zeroed
//! (write). Unlike the original, which fills and compares only the first `-D` bytes and only
//! traces a mismatch, every byte of the `size × vector` range is filled and checked, the
//! responder checks what it read, and a mismatch ends the run (exit 1).

use std::io;
use std::net::{IpAddr, SocketAddr};

use rds_core::message::RdmaStatus;
use rds_core::rdma::RdmaBuffer;
use rds_core::{CtlMode, Node, NodeConfig, Socket, Transports};

use crate::control::{errno_suffix, WireOptions};
use crate::opts::Fatal;

/// The original's message when the RDS stack has no RDMA (`RDS_FREE_MR` fails with
/// `ENOPROTOOPT`); ours adds a second line saying why.
pub const NO_RDMA: &str = "RDMA not supported by this kernel\n";

/// Type bits of a user token for an RDMA operation (the original's `OP_REQ`/`OP_ACK` types
/// are for async sends, which this stack lacks).
pub const TOKEN_RDMA: u64 = 0;

/// The notification token of the RDMA operation an ack carries.
pub fn user_token(seq: u32, flow: u32, depth: u32, slot: u32, kind: u64) -> u64 {
    let index = u64::from(flow) * u64::from(depth) + u64::from(slot);
    (u64::from(seq) << 32) | (((index << 2) | (kind & 3)) & 0xffff_ffff)
}

/// `(seq, flow, slot, type)` of a token; `None` when `depth` is 0.
pub fn parse_token(token: u64, depth: u32) -> Option<(u32, u32, u32, u32)> {
    if depth == 0 {
        return None;
    }
    let seq = (token >> 32) as u32;
    let low = token as u32;
    let index = low >> 2;
    Some((seq, index / depth, index % depth, low & 3))
}

/// The original's words for a failed notification (`-V` trace).
pub fn status_text(s: RdmaStatus) -> &'static str {
    match s {
        RdmaStatus::Success => "success",
        RdmaStatus::RemoteError => "remote error",
        RdmaStatus::Dropped => "operation was dropped",
        RdmaStatus::Canceled => "operation was cancelled",
        RdmaStatus::OtherError => "other error",
    }
}

/// The end-of-run line for RDMA notifications with a failure status (`None` when there were
/// none). The original only traces them (`-V`); the run goes on either way, and the slot is
/// reused.
pub fn failure_line(by_code: &[u64; 5]) -> Option<String> {
    let total: u64 = by_code[1..].iter().sum();
    if total == 0 {
        return None;
    }
    let parts: Vec<String> = [
        RdmaStatus::RemoteError,
        RdmaStatus::Canceled,
        RdmaStatus::Dropped,
        RdmaStatus::OtherError,
    ]
    .iter()
    .filter(|s| by_code[s.code() as usize] != 0)
    .map(|s| format!("{} {}", by_code[s.code() as usize], status_text(*s)))
    .collect();
    Some(format!(
        "rds-stress: {total} RDMA operations failed ({})\n",
        parts.join(", ")
    ))
}

/// One task's RDMA buffers.
#[derive(Debug)]
pub struct Area {
    /// The whole area.
    pub buf: RdmaBuffer,
    /// `--rdma-alignment`.
    align: usize,
    /// `size × vector`.
    pub len: usize,
    depth: usize,
}

impl Area {
    /// Allocates the area for `w` and fills it with 0x2f.
    ///
    /// # Errors
    /// The sizes are out of range, or the memory cannot be allocated (the original's
    /// "alloc_rdma_buffers: mmap failed").
    pub fn new(w: &WireOptions) -> Result<Area, Fatal> {
        let len = u64::from(w.rdma_size) * u64::from(w.rdma_vector.max(1));
        let total = 2 * u64::from(w.nr_tasks) * u64::from(w.req_depth) * len + 4096;
        if total > isize::MAX as u64 {
            return Err(Fatal::new("alloc_rdma_buffers: mmap failed: too large\n"));
        }
        let buf = RdmaBuffer::new(total as usize).map_err(|e| {
            Fatal::new(format!(
                "alloc_rdma_buffers: mmap failed{}",
                errno_suffix(&e)
            ))
        })?;
        const CHUNK: usize = 1 << 16;
        let fill = vec![0x2fu8; CHUNK.min(total as usize)];
        let mut off = 0usize;
        while off < total as usize {
            let n = fill.len().min(total as usize - off);
            let _ = buf.write_at(off, &fill[..n]);
            off += n;
        }
        Ok(Area {
            buf,
            align: w.rdma_alignment as usize,
            len: len as usize,
            depth: w.req_depth as usize,
        })
    }

    fn base(&self, flow: usize, slot: usize) -> usize {
        self.align + 2 * (flow * self.depth + slot) * self.len
    }

    /// Offset of the region a request of `(flow, slot)` offers to the peer.
    pub fn region(&self, flow: usize, slot: usize) -> usize {
        self.base(flow, slot)
    }

    /// Offset of the local buffer of the RDMA operation an ack of `(flow, slot)` carries.
    pub fn local(&self, flow: usize, slot: usize) -> usize {
        self.base(flow, slot) + self.len
    }

    /// Fills `len` bytes at `off` with the u64 word `pattern` (native byte order, as the
    /// original stores it in memory).
    pub fn fill(&self, off: usize, pattern: u64) -> io::Result<()> {
        let w = pattern.to_ne_bytes();
        let v: Vec<u8> = w.iter().copied().cycle().take(self.len).collect();
        self.buf.write_at(off, &v)
    }

    /// Compares `len` bytes at `off` with the u64 word `pattern`: `None` when they match,
    /// else `(first bad word's byte offset, bad words, words)`.
    pub fn compare(&self, off: usize, pattern: u64) -> io::Result<Option<(usize, usize, usize)>> {
        let v = self.buf.to_vec(off, self.len)?;
        let want = pattern.to_ne_bytes();
        let mut first = None;
        let mut bad = 0;
        let words = v.len() / 8;
        for (i, c) in v.chunks_exact(8).enumerate() {
            if c != want {
                first.get_or_insert(i * 8);
                bad += 1;
            }
        }
        Ok(first.map(|f| (f, bad, words)))
    }
}

/// Why `ip` is not an address RDS/IB can use here (`None` when an RDMA device's GID table
/// holds it), as the kernel's `rds_ib_laddr_check` decides.
pub fn not_on_rdma_device(ip: IpAddr) -> Option<String> {
    let want = match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    };
    match rds_core::ib::availability() {
        Err(e) => Some(e.to_string()),
        Ok(devs) => {
            let found = devs
                .iter()
                .filter(|d| d.usable_for_rds())
                .any(|d| d.ports.iter().any(|p| p.gids.iter().any(|g| g.0 == want)));
            if found {
                None
            } else {
                Some(format!("no active RDMA device has {ip} in its GID table"))
            }
        }
    }
}

/// Starts an embedded node on `ip` with the IB transport only (the kernel's `rds_tcp` or a
/// daemon may own port 16385 on that address).
///
/// # Errors
/// The node cannot start or its IB transport does not run.
pub fn start_ib_node(ip: IpAddr, name: &str) -> Result<Node, Fatal> {
    let mut cfg = NodeConfig::new([ip]);
    cfg.name = name.into();
    cfg.ctl = CtlMode::Auto;
    cfg.transports = Transports {
        tcp: false,
        ib: true,
    };
    let node = Node::start(cfg).map_err(|e| {
        Fatal::new(format!(
            "cannot start an RDS node with the IB transport on {ip}: {e} (is the RDMA CM port \
             taken, for example by the kernel's rds_rdma module or an rds-ctrl daemon?)\n"
        ))
    })?;
    crate::nodes::keep(&node);
    if let Some(why) = node.ib_unavailable() {
        node.shutdown();
        return Err(Fatal::new(format!(
            "cannot start the IB transport on {ip}: {why}\n"
        )));
    }
    Ok(node)
}

/// The original's `check_rdma_support`: binds a socket (of `node`, else a default one) to
/// `ip:port` and issues `RDS_FREE_MR` with cookie 0. `ENOPROTOOPT` / `EOPNOTSUPP` mean no
/// RDMA: [`NO_RDMA`] plus why.
///
/// # Errors
/// RDMA is not available on that socket, or the bind fails.
pub fn check_support(node: Option<&Node>, ip: IpAddr, port: u16) -> Result<(), Fatal> {
    let s = match node {
        Some(n) => Socket::with_node(n),
        None => Socket::new()
            .map_err(|e| Fatal::new(format!("socket(21, 5, 0) failed{}", errno_suffix(&e))))?,
    };
    s.bind(SocketAddr::new(ip, port))
        .map_err(|e| Fatal::new(format!("bind() failed{}", errno_suffix(&e))))?;
    match s.free_mr(0, false) {
        Ok(()) => Ok(()),
        // The kernel's RDS/TCP answers EINVAL (it has no regions to flush).
        Err(e)
            if matches!(e.raw_os_error(), Some(libc::ENOPROTOOPT | libc::EOPNOTSUPP))
                || (s.via_kernel() && e.raw_os_error() == Some(libc::EINVAL)) =>
        {
            let why = if s.via_kernel() {
                let hint = if rds_core::kernel::transport_modules().contains(&"rds_rdma") {
                    "is the address on an RDMA device?"
                } else {
                    "modprobe rds_rdma, or use --stack user"
                };
                format!("the kernel's RDS serves {ip} over RDS/TCP ({hint})")
            } else if s.via_daemon() {
                format!("{ip} is served by the rds-ctrl daemon, which cannot do RDMA for another process")
            } else {
                match not_on_rdma_device(ip) {
                    Some(w) => format!("{ip} is not on an RDMA device: {w}"),
                    None => format!("the socket on {ip} runs over RDS/TCP (--transport tcp)"),
                }
            };
            Err(Fatal::new(format!(
                "{NO_RDMA}rds-stress: -D needs the RDS/IB transport; {why}\n"
            )))
        }
        Err(e) => Err(Fatal::new(format!(
            "check_rdma_support: RDS_FREE_MR failed with unexpected error{}",
            errno_suffix(&e)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_as_the_original() {
        let t = user_token(17, 2, 4, 3, TOKEN_RDMA);
        assert_eq!(t, (17u64 << 32) | (11 << 2));
        assert_eq!(parse_token(t, 4), Some((17, 2, 3, 0)));
        assert_eq!(parse_token(t, 0), None);
        assert_eq!(
            parse_token(u64::MAX, 1),
            Some((u32::MAX, u32::MAX >> 2, 0, 3))
        );
    }

    #[test]
    fn failures_reported() {
        assert_eq!(failure_line(&[9, 0, 0, 0, 0]), None);
        assert_eq!(
            failure_line(&[9, 2, 0, 3, 0]).unwrap(),
            "rds-stress: 5 RDMA operations failed (2 remote error, 3 operation was dropped)\n"
        );
    }

    #[test]
    fn area_layout_fill_and_compare() {
        let mut w = WireOptions::defaults();
        w.rdma_size = 64;
        w.rdma_vector = 2;
        w.nr_tasks = 2;
        w.req_depth = 3;
        w.rdma_alignment = 8;
        let a = Area::new(&w).unwrap();
        assert_eq!(a.buf.len(), 2 * 2 * 3 * 128 + 4096);
        assert_eq!(a.len, 128);
        assert_eq!(a.region(0, 0), 8);
        assert_eq!(a.local(0, 0), 8 + 128);
        assert_eq!(a.region(1, 2), 8 + 2 * 5 * 128);
        assert_eq!(a.buf.to_vec(0, 4).unwrap(), [0x2f; 4]);
        let off = a.region(1, 1);
        assert_eq!(a.compare(off, 7).unwrap(), Some((0, 16, 16)));
        a.fill(off, 0x1234_5678_9abc_def0).unwrap();
        assert_eq!(a.compare(off, 0x1234_5678_9abc_def0).unwrap(), None);
        a.buf.write_at(off + 17, &[0]).unwrap();
        assert_eq!(
            a.compare(off, 0x1234_5678_9abc_def0).unwrap(),
            Some((16, 1, 16))
        );
        // Its neighbours are untouched.
        assert_eq!(a.buf.to_vec(off - 1, 1).unwrap(), [0x2f]);
        assert_eq!(a.buf.to_vec(off + 128, 1).unwrap(), [0x2f]);
    }
}
