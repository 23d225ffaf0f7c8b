//! Socket state inside the engine (`struct rds_sock`): binding, buffers and their accounting,
//! the receive queue, congestion monitoring.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;

use crate::time::Instant;

use super::TransportKind;

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
}

/// What [`super::Stack::recv`] returns.
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
    RdmaStatus(crate::rdma::RdmaNotify),
}

#[derive(Debug)]
pub(crate) struct Sock {
    pub bound: Option<SocketAddr>,
    /// Preset with `SO_RDS_TRANSPORT` or chosen at bind.
    pub transport: Option<TransportKind>,
    pub connected: Option<SocketAddr>,
    /// Usable send buffer in bytes (the `SO_SNDBUF` value; the kernel's `sk_sndbuf / 2`).
    pub sndbuf: usize,
    /// Usable receive buffer in bytes.
    pub rcvbuf: usize,
    /// Bytes of this socket's messages queued and not yet acknowledged.
    pub snd_bytes: usize,
    pub rcv_q: VecDeque<InMsg>,
    pub rcv_bytes: usize,
    pub congested: bool,
    pub cong_monitor: bool,
    pub cong_mask: u64,
    pub cong_notify: u64,
    pub recverr: bool,
    /// RDMA notifications waiting for `recv` (`rs_notify_queue`).
    pub notify_q: VecDeque<crate::rdma::RdmaNotify>,
    /// `jhash_1word(port, initval)`, fixed at bind.
    pub lane_hash: u32,
}

impl Sock {
    pub(crate) fn new(sndbuf: usize, rcvbuf: usize) -> Self {
        Sock {
            bound: None,
            transport: None,
            connected: None,
            sndbuf,
            rcvbuf,
            snd_bytes: 0,
            rcv_q: VecDeque::new(),
            rcv_bytes: 0,
            congested: false,
            cong_monitor: false,
            cong_mask: 0,
            cong_notify: 0,
            recverr: false,
            notify_q: VecDeque::new(),
            lane_hash: 0,
        }
    }

    pub(crate) fn readable(&self) -> bool {
        !self.rcv_q.is_empty()
            || !self.notify_q.is_empty()
            || (self.cong_monitor && self.cong_notify != 0)
    }

    pub(crate) fn writable(&self) -> bool {
        self.snd_bytes < self.sndbuf
    }
}

/// A snapshot of a socket (`rds_info_socket`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SockInfo {
    /// Socket id (the kernel shows an inode number).
    pub id: super::SockId,
    /// Bound address.
    pub bound: Option<SocketAddr>,
    /// Default destination from connect.
    pub connected: Option<SocketAddr>,
    /// Send buffer (bytes).
    pub sndbuf: usize,
    /// Receive buffer (bytes).
    pub rcvbuf: usize,
    /// Bytes queued and unacknowledged.
    pub snd_bytes: usize,
    /// Bytes waiting to be read.
    pub rcv_bytes: usize,
    /// The socket's port is marked congested.
    pub congested: bool,
    /// Transport.
    pub transport: Option<TransportKind>,
}

/// A message in a queue (`rds_info_message`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueuedMsgInfo {
    /// Sequence number (0 if not yet transmitted).
    pub seq: u64,
    /// Payload length.
    pub len: u32,
    /// Local address.
    pub laddr: IpAddr,
    /// Peer address.
    pub faddr: IpAddr,
    /// Local RDS port.
    pub lport: u16,
    /// Peer RDS port.
    pub fport: u16,
    /// Path index.
    pub path: usize,
}
