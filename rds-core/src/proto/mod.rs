//! The sans-IO RDS protocol engine.
//!
//! [`Stack`] is one node's whole protocol state: its local addresses and their congestion maps,
//! the socket table, and every connection with its paths (lanes). It never touches a socket, a
//! thread or a clock: the caller passes `now` in and drives it with explicit calls.
//!
//! Calls, in the style of a sans-IO engine:
//! - **application**: [`Stack::socket`], [`Stack::bind`], [`Stack::send`], [`Stack::recv`],
//!   [`Stack::close`], socket options;
//! - **transport inputs** (`handle_*`, `link_*`): a connection accepted or connected (the
//!   engine answers read, hold, drain or refuse: see [`stack`]'s connection lifecycle), a path
//!   failed or ended, bytes acknowledged, a frame or fragment received, an ACK sent;
//! - **outputs** (`poll_*`): [`Stack::poll_transmit`] for frames of a path,
//!   [`Stack::poll_event`] for work (connect, disconnect, transmit, wake a socket) and
//!   [`Stack::poll_timeout`] for the next timer, handled with [`Stack::handle_timeout`].
//!
//! [`driver`] is the one loop that connects these to a transport: the node, the simulator,
//! the fuzz checks and the engine tests drive the engine through it.
//!
//! Transports differ in their acknowledgement model ([`TransportKind`]): RDS/TCP releases a
//! message when TCP acknowledged its last byte ("transport-acked"); RDS/IB acknowledges with
//! `h_ack` and ACK-only frames ("RDS-acked") and fragments messages into 4096-byte pieces;
//! loopback delivers at once. Only TCP has several paths.
//!
//! Memory: everything a peer or an application makes the engine hold draws from one node
//! budget (the `mem_budget` tunable; the driver passes a number): messages in send,
//! retransmit and receive queues, pongs, IB reassembly and connections, accounted in O(1)
//! where a message is queued and where it leaves. Beyond it a send fails with ENOBUFS and an
//! arriving message is consumed and dropped (counted). Pongs are capped per connection
//! ([`stack::PONG_QUEUE_MAX`]), receive queues per socket ([`stack::RCVQ_CAP_FACTOR`]), and
//! a connection unused for [`stack::CONN_IDLE_LIFETIME`] is freed; one that carried
//! application messages leaves its sequence state behind ([`stack::SEQ_MEMO_MAX`] at most),
//! so that the peer's return neither restarts our sequence numbers nor redelivers a message.
//!
//! Where this engine departs from the kernel, the item's documentation says so and why.

pub mod budget;
mod conn;
pub mod driver;
mod frag;
pub mod rdma_op;
pub mod reply_lane;
mod rng;
mod sock;
pub mod stack;
mod stream;

pub use crate::info::{
    canonical, ConnId, ConnInfo, PathInfo, PathState, QueuedMsgInfo, SockId, SockInfo,
    TransportKind,
};
pub use crate::message::{InMsg, Received};
pub use frag::{fragments, FragAssembler, FragError, FragInfo};
pub use rng::{jhash_1word, Rng};
pub use stack::Stack;
pub use stream::{Frame, StreamError, StreamParser};

use std::net::IpAddr;

/// Work for the driver, from [`Stack::poll_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Open a transport connection for the path. Report the outcome with
    /// [`Stack::handle_connected`] or [`Stack::handle_connect_failed`] with this `epoch`.
    Connect {
        /// Connection.
        conn: ConnId,
        /// Path index.
        path: usize,
        /// Attempt number to quote back.
        epoch: u32,
    },
    /// Close the path's transport connection: the engine already reset the path. Frames still
    /// arriving on it must be discarded (their epoch is stale).
    Disconnect {
        /// Connection.
        conn: ConnId,
        /// Path index.
        path: usize,
        /// The epoch being closed.
        epoch: u32,
        /// Why.
        reason: DropReason,
    },
    /// The path has frames for [`Stack::poll_transmit`]; drain it until it returns `None`.
    Transmit {
        /// Connection.
        conn: ConnId,
        /// Path index.
        path: usize,
    },
    /// A socket became readable or writable or got a notification: wake its waiters.
    Wake(SockId),
    /// A congestion map changed: senders blocked on congestion may retry.
    CongChanged,
    /// A message with an RDMA operation on region `rkey` reached socket `sock`: release the
    /// region if it is use-once (`rds_rdma_unuse`).
    RdmaUnuse {
        /// The receiving socket.
        sock: SockId,
        /// The region's remote key (from the `RDMA` extension header).
        rkey: u32,
    },
    /// A held accepted connection ([`Incoming::Hold`]) now carries `(conn, path, epoch)`:
    /// start reading it (what its peer sent meanwhile first).
    Adopt {
        /// The transport's name for the connection.
        link: LinkId,
        /// Connection.
        conn: ConnId,
        /// Path index.
        path: usize,
        /// The path's epoch, to quote with its frames.
        epoch: u32,
    },
    /// A held accepted connection is given up: reset it unread.
    Refuse {
        /// The transport's name for the connection.
        link: LinkId,
        /// Why.
        why: HeldEnd,
    },
}

/// The transport's name for one accepted connection it offered the engine
/// ([`Stack::link_accepted`]); unique among the connections it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u64);

/// The engine's answer to an accepted transport connection ([`Stack::link_accepted`]), in
/// the shape of quinn-proto's `Incoming` (accept, retry later, refuse).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming {
    /// Read it now: it carries `(conn, path, epoch)`.
    Read {
        /// Connection.
        conn: ConnId,
        /// Path index.
        path: usize,
        /// The path's epoch, to quote with its frames.
        epoch: u32,
    },
    /// Keep it open and unread: the engine holds it (its own timer, [`Stack::poll_timeout`])
    /// and later answers [`Event::Adopt`] or [`Event::Refuse`] for it.
    Hold,
    /// Reset it unread.
    Refuse(AcceptError),
}

/// The engine's answer to an outgoing transport connection that completed
/// ([`Stack::link_connected`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Established {
    /// It carries the path now, with this (new) epoch: read and write it.
    Read {
        /// The path's epoch, to quote with its frames from now on.
        epoch: u32,
    },
    /// The path moved on while it connected, and its peer may have written to it: half-close
    /// it, read it to its end (its frames quote the attempt's epoch) and report
    /// [`Stack::handle_disconnected`] for that epoch.
    Drain,
    /// Nothing can have been written to it that we need (a connection that only asked the peer
    /// to connect back, or one the engine dropped on purpose): close it.
    Close,
}

/// Why a held accepted connection is given up ([`Event::Refuse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldEnd {
    /// Its address held [`stack::HELD_PER_ADDR`] connections already; the oldest goes.
    AddrEvicted,
    /// The node held [`stack::HELD_MAX`]; the oldest of the address holding most goes.
    NodeEvicted,
    /// It waited [`stack::STASH_MAX`] for a lane.
    Expired,
    /// Offered again, the engine refused it.
    Refused(AcceptError),
}

/// Why the engine dropped a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The peer sent bytes that are not RDS (bad length, bad congestion map, bad fragment).
    Protocol,
    /// A header checksum failed (IB).
    BadChecksum,
    /// An operator asked for a restart (`rds-ctrl conn restart`).
    Restart,
    /// An operator killed the connection (`rds-ctrl conn kill`).
    Kill,
    /// A tunable that needs new transport sockets changed.
    Tunable,
    /// The node is shutting down.
    Shutdown,
    /// A newer transport connection replaced this one.
    Replaced,
    /// A message in reassembly would pass the node budget or the peer's share of reassembly.
    Memory,
    /// A newer TCP connection for this lane arrived while this one was up: this one is read
    /// to its end (the peer's TCP may have acknowledged data still unread in it) before the
    /// newcomer, held unread meanwhile, takes the lane.
    Superseded,
}

impl DropReason {
    /// Whether the peer is healthy, so that what it already sent (and our TCP acknowledged)
    /// must still be read: the transport half-closes (`SHUT_WR`), keeps reading until the
    /// peer's end of stream, and then reports [`Stack::handle_disconnected`] for the old
    /// epoch. The path reconnects only after that, so old data is processed before new.
    pub fn drains(self) -> bool {
        !matches!(
            self,
            DropReason::Protocol
                | DropReason::BadChecksum
                | DropReason::Replaced
                | DropReason::Memory
        )
    }
}

/// What kind of frame a [`Transmit`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// A sequenced message (data, ping, pong, probe).
    Data,
    /// The 8192-byte congestion map.
    CongMap,
    /// An IB ACK-only frame.
    AckOnly,
}

/// One frame (TCP: a whole message; IB: one fragment) to put on the wire, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The 48 header bytes as they go on the wire.
    pub hdr: [u8; crate::wire::HEADER_LEN],
    /// The payload bytes following the header in this frame.
    pub payload: bytes::Bytes,
    /// What it is.
    pub kind: FrameKind,
    /// IB: set the solicited-event bit (last fragment of a message, ACK-only frames).
    pub solicited: bool,
    /// IB, first fragment only: an RDMA operation to post before this SEND.
    pub rdma: Option<rdma_op::RdmaRef>,
}

impl Transmit {
    /// Bytes on the wire.
    pub fn wire_len(&self) -> usize {
        self.hdr.len() + self.payload.len()
    }
}

/// Control data of a send beyond the payload (see [`rdma`]).
#[derive(Debug, Clone, Default)]
pub struct SendExtras {
    /// An RDMA operation (IB only).
    pub rdma: Option<std::sync::Arc<rdma_op::RdmaOp>>,
    /// A cookie for the `RDMA_DEST` extension header (IB only).
    pub rdma_dest: Option<u64>,
    /// Queue the message even if the destination port is congested (a daemon client's send
    /// that already returned: congestion is advisory, the sender's buffer still bounds it).
    pub past_congestion: bool,
}

/// Why a bind failed (errno in parentheses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// Wildcard, broadcast or multicast address, link-local without scope, port 1, or the
    /// socket is already bound (EINVAL).
    #[error("invalid address or port for bind")]
    Invalid,
    /// The node owns no such address (EADDRNOTAVAIL).
    #[error("address not available on this node")]
    AddrNotAvail,
    /// The port is taken, or no free port is left (EADDRINUSE).
    #[error("address in use")]
    AddrInUse,
    /// The preset transport cannot serve the address (ENOPROTOOPT).
    #[error("transport not available for this address")]
    NoProtoOpt,
}

/// Why a send failed (errno in parentheses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Not bound, or no destination and none connected (ENOTCONN).
    #[error("socket not bound or no destination")]
    NotConn,
    /// Destination is a wildcard, broadcast or multicast address (EINVAL).
    #[error("invalid destination")]
    InvalidDest,
    /// Source and destination families differ, or the op is not supported (EOPNOTSUPP).
    #[error("operation not supported")]
    NotSupported,
    /// Bad control data: an RDMA operation with no local memory, or combined with an
    /// RDMA destination (EINVAL).
    #[error("invalid control data")]
    InvalidCtl,
    /// Over 1 MiB or over the send buffer (EMSGSIZE).
    #[error("message too long")]
    MsgSize,
    /// The destination port is congested and the send is non-blocking (ENOBUFS).
    #[error("destination port congested")]
    Congested,
    /// The destination port is congested: a blocking sender must wait and retry.
    #[error("destination port congested (wait)")]
    CongestedWait,
    /// The node's memory budget is used up (ENOBUFS, also for a blocking sender).
    #[error("node memory budget exhausted")]
    NoBufs,
    /// The send buffer is full (EAGAIN); a blocking sender waits for [`Event::Wake`].
    #[error("send buffer full")]
    WouldBlock,
    /// No such socket (EBADF).
    #[error("no such socket")]
    BadSocket,
}

/// Why a receive gave nothing (errno in parentheses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// Nothing queued (EAGAIN).
    #[error("nothing to receive")]
    WouldBlock,
    /// No such socket (EBADF).
    #[error("no such socket")]
    BadSocket,
}

/// Why an accepted transport connection is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AcceptError {
    /// The peer's address is this node's own (EOPNOTSUPP: local traffic uses loopback).
    #[error("local address connections use loopback")]
    Local,
    /// This node's address is not local.
    #[error("not a local address")]
    NotLocal,
    /// We have the smaller address, so we own the connection: reset the accepted socket; the
    /// engine connects back if needed (the kernel's rule).
    #[error("peer has the larger address; connecting back instead")]
    ConnectBack,
    /// No lane can be assigned yet: keep the connection unread and ask again shortly (up to
    /// [`stack::STASH_MAX`]); its data is already acknowledged by our TCP.
    #[error("no lane for the connection yet")]
    Wait,
    /// IB: our own connection attempt is in progress; reject and let backoff settle it.
    #[error("connection attempt in progress")]
    Raced,
    /// A new peer's state would not fit in the node's memory budget (ENOBUFS).
    #[error("node memory budget exhausted")]
    NoMem,
}

/// The kernel's `rds_addr_cmp`: addresses compared as 128-bit big-endian numbers, IPv4 in
/// mapped form.
pub fn addr_cmp(a: IpAddr, b: IpAddr) -> core::cmp::Ordering {
    let key = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    };
    key(a).cmp(&key(b))
}
