//! What a socket's receive hands out, as plain data: a message and its sender, or a
//! notification (congestion update, RDMA completion). The engine queues these; the socket API
//! and the control protocol pass them on.

use std::net::SocketAddr;

use bytes::Bytes;

use crate::abi;
use crate::time::Instant;

/// A message waiting in a socket's receive queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InMsg {
    /// Sender: peer address and its RDS port.
    pub from: SocketAddr,
    /// The payload.
    pub payload: Bytes,
    /// Its sequence number on its path.
    pub seq: u64,
    /// When it was queued to the socket (engine time).
    pub rx_time: Instant,
    /// An `RDMA_DEST` cookie (`rkey | offset << 32`) the message carried.
    pub rdma_dest: Option<u64>,
    /// Bytes of memory the payload keeps alive while queued (charged to the node budget).
    pub(crate) held: usize,
}

/// What the engine's receive call returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// A message. `payload` holds at most the requested length.
    Data {
        /// The message (its payload possibly cut).
        msg: InMsg,
        /// The message's full length.
        full_len: usize,
        /// The payload was cut to fit (`MSG_TRUNC` in `msg_flags`).
        truncated: bool,
    },
    /// A congestion-monitor notification (`RDS_CMSG_CONG_UPDATE`): bit `k` set means some
    /// monitored port `≡ k (mod 64)` became uncongested. Delivered as a 0-byte receive.
    CongUpdate(u64),
    /// An RDMA completion notification (`RDS_CMSG_RDMA_STATUS`), delivered as a 0-byte
    /// receive before anything else.
    RdmaStatus(RdmaNotify),
}

/// The outcome of an RDMA operation (`RDS_RDMA_SUCCESS` ... `RDS_RDMA_OTHER_ERROR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmaStatus {
    /// Done.
    Success = abi::RDS_RDMA_SUCCESS as isize,
    /// The peer refused it (bad key, address or access rights).
    RemoteError = abi::RDS_RDMA_REMOTE_ERROR as isize,
    /// `cancel_sent_to` removed the message.
    Canceled = abi::RDS_RDMA_CANCELED as isize,
    /// The connection dropped; RDMA operations are never retransmitted.
    Dropped = abi::RDS_RDMA_DROPPED as isize,
    /// Any other failure.
    OtherError = abi::RDS_RDMA_OTHER_ERROR as isize,
}

impl RdmaStatus {
    /// The kernel's number.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// From the kernel's number.
    pub fn from_code(c: i32) -> Option<RdmaStatus> {
        Some(match c {
            abi::RDS_RDMA_SUCCESS => RdmaStatus::Success,
            abi::RDS_RDMA_REMOTE_ERROR => RdmaStatus::RemoteError,
            abi::RDS_RDMA_CANCELED => RdmaStatus::Canceled,
            abi::RDS_RDMA_DROPPED => RdmaStatus::Dropped,
            abi::RDS_RDMA_OTHER_ERROR => RdmaStatus::OtherError,
            _ => return None,
        })
    }
}

/// A completion notification (`struct rds_rdma_notify` in `RDS_CMSG_RDMA_STATUS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaNotify {
    /// The operation's `user_token` of the RDMA operation (`RdmaArgs::user_token`).
    pub user_token: u64,
    /// What happened.
    pub status: RdmaStatus,
}
