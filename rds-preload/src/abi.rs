//! The constants of `linux/rds.h` and of the socket calls this library speaks, with their
//! kernel values (the header `include/rds_preload.h` carries the same numbers for C).

use libc::c_int;

/// `AF_RDS` / `PF_RDS`.
pub const AF_RDS: c_int = 21;
/// `SOL_RDS`.
pub const SOL_RDS: c_int = 276;

/// `RDS_CANCEL_SENT_TO` (setsockopt, a `sockaddr_in`).
pub const RDS_CANCEL_SENT_TO: c_int = 1;
/// `RDS_GET_MR` (setsockopt, `struct rds_get_mr_args`).
pub const RDS_GET_MR: c_int = 2;
/// `RDS_FREE_MR` (setsockopt, `struct rds_free_mr_args`).
pub const RDS_FREE_MR: c_int = 3;
/// `RDS_RECVERR` (int).
pub const RDS_RECVERR: c_int = 5;
/// `RDS_CONG_MONITOR` (int).
pub const RDS_CONG_MONITOR: c_int = 6;
/// `RDS_GET_MR_FOR_DEST` (setsockopt).
pub const RDS_GET_MR_FOR_DEST: c_int = 7;
/// `SO_RDS_TRANSPORT` (int: `RDS_TRANS_*`).
pub const SO_RDS_TRANSPORT: c_int = 8;
/// `RDS_TRANS_NONE`: no transport yet.
pub const RDS_TRANS_NONE: c_int = !0;

/// `RDS_CMSG_RDMA_ARGS`.
pub const RDS_CMSG_RDMA_ARGS: c_int = 1;
/// `RDS_CMSG_RDMA_DEST` (u64 cookie).
pub const RDS_CMSG_RDMA_DEST: c_int = 2;
/// `RDS_CMSG_RDMA_MAP`.
pub const RDS_CMSG_RDMA_MAP: c_int = 3;
/// `RDS_CMSG_RDMA_STATUS` (`struct rds_rdma_notify`).
pub const RDS_CMSG_RDMA_STATUS: c_int = 4;
/// `RDS_CMSG_CONG_UPDATE` (u64 mask).
pub const RDS_CMSG_CONG_UPDATE: c_int = 5;
/// `RDS_CMSG_ATOMIC_FADD`.
pub const RDS_CMSG_ATOMIC_FADD: c_int = 6;
/// `RDS_CMSG_MASKED_ATOMIC_CSWP`, the last atomic cmsg.
pub const RDS_CMSG_MASKED_ATOMIC_CSWP: c_int = 9;

/// `RDS_INFO_FIRST` / `RDS_INFO_COUNTERS`.
pub const RDS_INFO_FIRST: c_int = 10000;
/// `RDS_INFO_LAST` (current upstream: `RDS6_INFO_IB_CONNECTIONS`).
pub const RDS_INFO_LAST: c_int = 10017;

/// `SIOCRDSSETTOS` (`SIOCPROTOPRIVATE`), a u8.
pub const SIOCRDSSETTOS: libc::c_ulong = 0x89E0;
/// `SIOCRDSGETTOS`, a u8.
pub const SIOCRDSGETTOS: libc::c_ulong = 0x89E1;

/// `SO_TIMESTAMP_OLD` (delivered as a `struct timeval`).
pub const SO_TIMESTAMP_OLD: c_int = 29;
/// `SO_TIMESTAMP_NEW` (delivered as a `struct __kernel_sock_timeval`).
pub const SO_TIMESTAMP_NEW: c_int = 63;
/// `SO_RCVTIMEO_NEW`.
pub const SO_RCVTIMEO_NEW: c_int = 66;
/// `SO_SNDTIMEO_NEW`.
pub const SO_SNDTIMEO_NEW: c_int = 67;
