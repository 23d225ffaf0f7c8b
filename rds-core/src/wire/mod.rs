//! The RDS wire format, exactly as the Linux kernel (`net/rds/rds.h`, `message.c`, `cong.c`)
//! puts it on the wire.
//!
//! Contract (the same for every type in this module):
//! - Views such as [`HeaderPacket`] wrap any `AsRef<[u8]>` without copying. Build them from
//!   untrusted bytes with `new_checked`; after that no accessor panics.
//! - Plain structs such as [`HeaderRepr`] are small `Copy` values. `parse` reads a checked view
//!   and `emit` writes exactly [`HEADER_LEN`] bytes.
//! - Malformed input gives a typed [`Error`]; nothing here panics on input bytes.
//! - No I/O, no clock, no allocation on the header path.
//!
//! ```
//! use rds_core::wire::{ExtHeader, HeaderPacket, HeaderRepr, HEADER_LEN};
//! let mut repr = HeaderRepr::data(7, 4000, 5000, 3);
//! repr.push_ext(ExtHeader::Npaths(8)).unwrap();
//! let mut buf = [0u8; HEADER_LEN];
//! repr.emit(&mut buf);
//! let parsed = HeaderRepr::parse(&HeaderPacket::new_checked(&buf[..]).unwrap());
//! assert_eq!(parsed, repr);
//! assert_eq!(parsed.exts().next(), Some(ExtHeader::Npaths(8)));
//! ```

mod checksum;
mod cong_map;
mod exthdr;
mod header;
pub mod ib_private;

pub use checksum::checksum;
pub(crate) use checksum::{fold, sum16};
pub use cong_map::{monitor_mask, CongMap, CONG_MAP_BYTES, CONG_MAP_PORTS};
pub use exthdr::{
    ext_len, types as ext_types, ExtHeader, ExtIter, ExtSpace, EXT_SPACE, EXT_TYPE_MAX,
    RDMA_BYTES_READ, RDMA_BYTES_WRITE,
};
pub(crate) use header::peek_len;
pub use header::{
    flags, HeaderPacket, HeaderRepr, FRAG_SIZE, HEADER_LEN, MAX_MSG_SIZE, PROBE_PORT,
};

/// The TCP port every RDS/TCP listener uses (`RDS_TCP_PORT`), for IPv4 and IPv6.
pub const RDS_TCP_PORT: u16 = 16385;
/// The RDMA CM port of RDS over IB for IPv4 (`RDS_PORT`).
pub const RDS_IB_PORT_V4: u16 = 18634;
/// The RDMA CM port of RDS over IB for IPv6 (`RDS_CM_PORT`).
pub const RDS_IB_PORT_V6: u16 = 16385;
/// The highest number of paths (lanes) per connection (`RDS_MPATH_WORKERS`).
pub const MPATH_WORKERS: usize = 8;

/// Why bytes could not be read as RDS wire data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Fewer bytes than the structure needs.
    #[error("truncated: {got} bytes, need {need}")]
    Truncated {
        /// Bytes available.
        got: usize,
        /// Bytes required.
        need: usize,
    },
    /// The header checksum is neither 0 nor valid.
    #[error("bad header checksum {0:#06x}")]
    BadChecksum(u16),
    /// `h_len` is larger than the receiver accepts.
    #[error("message length {len} exceeds the limit of {max} bytes")]
    TooLong {
        /// The `h_len` of the header.
        len: u32,
        /// The limit in force.
        max: u32,
    },
    /// A congestion-map message whose length is not 8192.
    #[error("congestion map of {0} bytes (must be 8192)")]
    BadCongMapLen(u32),
    /// No room left in the 16-byte extension area.
    #[error("no room for the extension header in the 16-byte area")]
    ExtSpaceFull,
}
