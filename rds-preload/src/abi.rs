//! The `sys/socket.h` constants this library speaks that the `libc` crate does not name
//! (the 64-bit-time variants of the timestamp and timeout options). The `linux/rds.h` numbers
//! are `rds_core::abi`, shared with the kernel backend and the tests (the header
//! `include/rds_preload.h` carries the same numbers for C).

use libc::c_int;

/// `SO_TIMESTAMP_OLD` (delivered as a `struct timeval`).
pub const SO_TIMESTAMP_OLD: c_int = 29;
/// `SO_TIMESTAMP_NEW` (delivered as a `struct __kernel_sock_timeval`).
pub const SO_TIMESTAMP_NEW: c_int = 63;
/// `SO_RCVTIMEO_NEW`.
pub const SO_RCVTIMEO_NEW: c_int = 66;
/// `SO_SNDTIMEO_NEW`.
pub const SO_SNDTIMEO_NEW: c_int = 67;
