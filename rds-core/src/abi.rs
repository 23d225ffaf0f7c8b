//! The numbers of the kernel's RDS user interface, `include/uapi/linux/rds.h` (current
//! upstream; UEK-only values are marked), written once: the kernel backend ([`crate::kernel`]),
//! the preload library, the tools and the tests all read them from here. The RDS ports are part
//! of the wire protocol and live in [`crate::wire`]; they are re-exported here so that a tool
//! needs no `wire` import to name one.
//!
//! Only numbers: the structures (`struct rds_iovec`, `rds_rdma_args`, the `rds_info_*`
//! records) are laid out where they are read and written (`kernel/ffi.rs`, [`crate::kernel::tables`],
//! the preload library).

use libc::{c_int, c_ulong};

pub use crate::wire::{RDS_IB_PORT_V4, RDS_IB_PORT_V6, RDS_TCP_PORT};

/// `AF_RDS` / `PF_RDS`: the address family of RDS sockets (`SOCK_SEQPACKET`).
pub const AF_RDS: c_int = 21;
/// `SOL_RDS`: the socket-option and control-message level of RDS.
pub const SOL_RDS: c_int = 276;

/// `RDS_CANCEL_SENT_TO` (setsockopt, a `sockaddr_in` or `sockaddr_in6`).
pub const RDS_CANCEL_SENT_TO: c_int = 1;
/// `RDS_GET_MR` (setsockopt, `struct rds_get_mr_args`).
pub const RDS_GET_MR: c_int = 2;
/// `RDS_FREE_MR` (setsockopt, `struct rds_free_mr_args`).
pub const RDS_FREE_MR: c_int = 3;
/// `RDS_RECVERR` (int, read as a bool).
pub const RDS_RECVERR: c_int = 5;
/// `RDS_CONG_MONITOR` (int, read as a bool).
pub const RDS_CONG_MONITOR: c_int = 6;
/// `RDS_GET_MR_FOR_DEST` (setsockopt, `struct rds_get_mr_for_dest_args`).
pub const RDS_GET_MR_FOR_DEST: c_int = 7;
/// `SO_RDS_TRANSPORT` (int: `RDS_TRANS_*`), upstream numbering (UEK: 9).
pub const SO_RDS_TRANSPORT: c_int = 8;

/// `RDS_TRANS_IB`: RDS over InfiniBand / RoCE verbs.
pub const RDS_TRANS_IB: c_int = 0;
/// `RDS_TRANS_TCP`: RDS over TCP.
pub const RDS_TRANS_TCP: c_int = 2;
/// `RDS_TRANS_NONE` (`~0`): no transport yet.
pub const RDS_TRANS_NONE: c_int = !0;

/// `RDS_CMSG_RDMA_ARGS` (sendmsg, `struct rds_rdma_args`).
pub const RDS_CMSG_RDMA_ARGS: c_int = 1;
/// `RDS_CMSG_RDMA_DEST` (sendmsg and recvmsg, a u64 cookie).
pub const RDS_CMSG_RDMA_DEST: c_int = 2;
/// `RDS_CMSG_RDMA_MAP` (sendmsg, `struct rds_get_mr_args`).
pub const RDS_CMSG_RDMA_MAP: c_int = 3;
/// `RDS_CMSG_RDMA_STATUS` (recvmsg, `struct rds_rdma_notify`).
pub const RDS_CMSG_RDMA_STATUS: c_int = 4;
/// `RDS_CMSG_CONG_UPDATE` (recvmsg, a u64 mask).
pub const RDS_CMSG_CONG_UPDATE: c_int = 5;
/// `RDS_CMSG_ATOMIC_FADD`, the first atomic operation.
pub const RDS_CMSG_ATOMIC_FADD: c_int = 6;
/// `RDS_CMSG_MASKED_ATOMIC_CSWP`, the last atomic operation.
pub const RDS_CMSG_MASKED_ATOMIC_CSWP: c_int = 9;
/// `RDS_CMSG_ZCOPY_COOKIE` (sendmsg, a u32; upstream only: UEK's `RDS_CMSG_INQ` has the
/// same number).
pub const RDS_CMSG_ZCOPY_COOKIE: c_int = 12;

/// `RDS_INFO_FIRST`: the lowest `RDS_INFO_*` option.
pub const RDS_INFO_FIRST: c_int = 10000;
/// `RDS_INFO_COUNTERS` (`struct rds_info_counter`).
pub const RDS_INFO_COUNTERS: c_int = 10000;
/// `RDS_INFO_CONNECTIONS` (`struct rds_info_connection`).
pub const RDS_INFO_CONNECTIONS: c_int = 10001;
/// `RDS_INFO_SEND_MESSAGES` (`struct rds_info_message`).
pub const RDS_INFO_SEND_MESSAGES: c_int = 10003;
/// `RDS_INFO_RETRANS_MESSAGES` (`struct rds_info_message`).
pub const RDS_INFO_RETRANS_MESSAGES: c_int = 10004;
/// `RDS_INFO_RECV_MESSAGES` (`struct rds_info_message`).
pub const RDS_INFO_RECV_MESSAGES: c_int = 10005;
/// `RDS_INFO_SOCKETS` (`struct rds_info_socket`).
pub const RDS_INFO_SOCKETS: c_int = 10006;
/// `RDS_INFO_TCP_SOCKETS` (`struct rds_info_tcp_socket`).
pub const RDS_INFO_TCP_SOCKETS: c_int = 10007;
/// `RDS_INFO_IB_CONNECTIONS` (`struct rds_info_rdma_connection`).
pub const RDS_INFO_IB_CONNECTIONS: c_int = 10008;
/// `RDS6_INFO_CONNECTIONS` (`struct rds6_info_connection`).
pub const RDS6_INFO_CONNECTIONS: c_int = 10011;
/// `RDS6_INFO_SEND_MESSAGES` (`struct rds6_info_message`).
pub const RDS6_INFO_SEND_MESSAGES: c_int = 10012;
/// `RDS6_INFO_RETRANS_MESSAGES` (`struct rds6_info_message`).
pub const RDS6_INFO_RETRANS_MESSAGES: c_int = 10013;
/// `RDS6_INFO_RECV_MESSAGES` (`struct rds6_info_message`).
pub const RDS6_INFO_RECV_MESSAGES: c_int = 10014;
/// `RDS6_INFO_SOCKETS` (`struct rds6_info_socket`).
pub const RDS6_INFO_SOCKETS: c_int = 10015;
/// `RDS6_INFO_TCP_SOCKETS` (`struct rds6_info_tcp_socket`).
pub const RDS6_INFO_TCP_SOCKETS: c_int = 10016;
/// `RDS6_INFO_IB_CONNECTIONS` (`struct rds6_info_rdma_connection`).
pub const RDS6_INFO_IB_CONNECTIONS: c_int = 10017;
/// `RDS_INFO_LAST`: the highest `RDS_INFO_*` option of current upstream (10010 before the
/// IPv6 tables; UEK goes on to 10021).
pub const RDS_INFO_LAST: c_int = 10017;

/// `RDS_INFO_CONNECTION_FLAG_SENDING`.
pub const RDS_INFO_CONNECTION_FLAG_SENDING: u8 = 0x01;
/// `RDS_INFO_CONNECTION_FLAG_CONNECTING`.
pub const RDS_INFO_CONNECTION_FLAG_CONNECTING: u8 = 0x02;
/// `RDS_INFO_CONNECTION_FLAG_CONNECTED`.
pub const RDS_INFO_CONNECTION_FLAG_CONNECTED: u8 = 0x04;
/// `RDS_INFO_CONNECTION_FLAG_ERROR` (UEK only).
pub const RDS_INFO_CONNECTION_FLAG_ERROR: u8 = 0x08;

/// `RDS_RDMA_SUCCESS`: the `status` of a completed RDMA operation (`struct rds_rdma_notify`).
pub const RDS_RDMA_SUCCESS: i32 = 0;
/// `RDS_RDMA_REMOTE_ERROR`.
pub const RDS_RDMA_REMOTE_ERROR: i32 = 1;
/// `RDS_RDMA_CANCELED`.
pub const RDS_RDMA_CANCELED: i32 = 2;
/// `RDS_RDMA_DROPPED`.
pub const RDS_RDMA_DROPPED: i32 = 3;
/// `RDS_RDMA_OTHER_ERROR`.
pub const RDS_RDMA_OTHER_ERROR: i32 = 4;

/// `RDS_RDMA_READWRITE`: `flags` bit of the RDMA structures; an RDMA write (else a read).
pub const RDS_RDMA_READWRITE: u64 = 0x0001;
/// `RDS_RDMA_FENCE`: wait for earlier operations first.
pub const RDS_RDMA_FENCE: u64 = 0x0002;
/// `RDS_RDMA_INVALIDATE`: invalidate the key when the region is released.
pub const RDS_RDMA_INVALIDATE: u64 = 0x0004;
/// `RDS_RDMA_USE_ONCE`: release the region after its first use.
pub const RDS_RDMA_USE_ONCE: u64 = 0x0008;
/// `RDS_RDMA_NOTIFY_ME`: report the operation's completion.
pub const RDS_RDMA_NOTIFY_ME: u64 = 0x0020;
/// `RDS_RDMA_SILENT`: no message to the peer's socket, only the operation.
pub const RDS_RDMA_SILENT: u64 = 0x0040;

/// `SIOCRDSSETTOS` (`SIOCPROTOPRIVATE`): set the socket's type of service, a u8.
pub const SIOCRDSSETTOS: c_ulong = 0x89E0;
/// `SIOCRDSGETTOS` (`SIOCPROTOPRIVATE + 1`): read it.
pub const SIOCRDSGETTOS: c_ulong = 0x89E1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_family_and_level_match_the_c_library() {
        // An independent copy of the same header facts (glibc's bits/socket.h via libc).
        assert_eq!(AF_RDS, libc::AF_RDS);
        assert_eq!(SOL_RDS, libc::SOL_RDS);
    }
}
