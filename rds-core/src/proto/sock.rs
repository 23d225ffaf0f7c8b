//! Socket state inside the engine (`struct rds_sock`): binding, buffers and their accounting,
//! the receive queue, congestion monitoring.

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::message::InMsg;

use super::reply_lane::ReplyLanes;
use super::TransportKind;

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
    pub notify_q: VecDeque<crate::message::RdmaNotify>,
    /// `jhash_1word(port, initval)`, fixed at bind.
    pub lane_hash: u32,
    /// The user whose share of the node budget its messages draw on ([`super::budget`]).
    pub owner: u32,
    /// Multipath: the lanes its peers' messages arrive on, and the lanes bound to them.
    pub reply_lanes: ReplyLanes,
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
            owner: super::budget::NODE,
            reply_lanes: ReplyLanes::default(),
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
