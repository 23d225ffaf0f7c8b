//! The stack's state as plain data: the identifiers, tables and snapshots that the engine
//! produces, the control protocol carries (serde) and the tools print (`rds-info`, `rds-ctrl`).
//! Nothing here holds behaviour beyond naming and numbering; the engine ([`crate::proto`]) and
//! the transports fill these types, the control protocol ([`crate::ctl`]) moves them.

use core::fmt;
use std::net::{IpAddr, SocketAddr};

/// A connection: one (local address, peer address, transport) triple. Ids are handed out in
/// increasing order and never reused: once a connection is freed its id names nothing, and
/// calls with it do nothing.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ConnId(pub(crate) u32);

impl ConnId {
    /// The number (never reused by a stack).
    pub fn index(self) -> u32 {
        self.0
    }
}

/// A socket of the stack.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct SockId(pub(crate) u32);

impl SockId {
    /// The number (never reused by a stack).
    pub fn index(self) -> u32 {
        self.0
    }
}

/// `RDS_TRANS_IB` and `RDS_TRANS_TCP` as the unsigned `t_type`.
const TRANS_IB: u32 = crate::abi::RDS_TRANS_IB as u32;
const TRANS_TCP: u32 = crate::abi::RDS_TRANS_TCP as u32;

/// An RDS transport.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// RDS over InfiniBand / RoCE verbs (`RDS_TRANS_IB` = 0).
    Ib,
    /// RDS over TCP (`RDS_TRANS_TCP` = 2).
    Tcp,
    /// Same-node delivery (the kernel's `RDS_TRANS_LOOP`, type 3).
    Loopback,
}

impl TransportKind {
    /// The `SO_RDS_TRANSPORT` / `t_type` number.
    pub fn trans_type(self) -> u32 {
        match self {
            TransportKind::Ib => TRANS_IB,
            TransportKind::Tcp => TRANS_TCP,
            TransportKind::Loopback => 3,
        }
    }

    /// The kernel's transport name (`t_name`), as RDS_INFO_CONNECTIONS shows it.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Ib => "infiniband",
            TransportKind::Tcp => "tcp",
            TransportKind::Loopback => "loopback",
        }
    }

    /// From an `SO_RDS_TRANSPORT` value.
    pub fn from_trans_type(t: u32) -> Option<Self> {
        match t {
            TRANS_IB => Some(TransportKind::Ib),
            TRANS_TCP => Some(TransportKind::Tcp),
            _ => None,
        }
    }

    /// Whether the transport runs several paths (`t_mp_capable`).
    pub fn multipath(self) -> bool {
        self == TransportKind::Tcp
    }

    /// Paths a connection of this kind has.
    pub fn max_paths(self) -> usize {
        if self.multipath() {
            crate::wire::MPATH_WORKERS
        } else {
            1
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Normalises an address: IPv4-mapped IPv6 becomes IPv4, as the kernel stores v4 in mapped form.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Path states, numbered as the kernel's `RDS_CONN_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum PathState {
    /// No transport connection.
    Down = 0,
    /// A transport connection is being set up.
    Connecting = 1,
    /// Being shut down.
    Disconnecting = 2,
    /// Up: frames flow.
    Up = 3,
    /// A duelling connection is being swapped in.
    Resetting = 4,
    /// Dropped, shutdown pending.
    Error = 5,
}

impl PathState {
    /// Name as the kernel spells it.
    pub fn name(self) -> &'static str {
        match self {
            PathState::Down => "DOWN",
            PathState::Connecting => "CONNECTING",
            PathState::Disconnecting => "DISCONNECTING",
            PathState::Up => "UP",
            PathState::Resetting => "RESETTING",
            PathState::Error => "ERROR",
        }
    }
}

/// A snapshot of one path, for info output.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PathInfo {
    /// Path index.
    pub index: usize,
    /// State.
    pub state: PathState,
    /// Next sequence number to send.
    pub next_tx_seq: u64,
    /// Next sequence number expected.
    pub next_rx_seq: u64,
    /// Messages queued and not yet sent.
    pub send_queued: usize,
    /// Messages sent and not yet acknowledged.
    pub retrans_queued: usize,
    /// Frames are waiting to be sent (the kernel's SENDING flag).
    pub sending: bool,
    /// Times the path came up.
    pub ups: u64,
    /// The previous transport connection is still being drained.
    pub draining: bool,
    /// A reconnect is scheduled.
    pub reconnect_pending: bool,
}

/// A snapshot of one connection, for info output.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConnInfo {
    /// Connection id.
    pub id: ConnId,
    /// Local address.
    pub laddr: IpAddr,
    /// Peer address.
    pub faddr: IpAddr,
    /// Transport.
    pub kind: TransportKind,
    /// Agreed number of paths (0 before the handshake).
    pub npaths: usize,
    /// The peer's generation number (0 = unknown).
    pub peer_gen: u32,
    /// Every path.
    pub paths: Vec<PathInfo>,
}

/// A snapshot of a socket (`rds_info_socket`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SockInfo {
    /// Socket id (the kernel shows an inode number).
    pub id: SockId,
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

/// One TCP socket for `rds-info -T` (`rds_info_tcp_socket`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TcpSockInfo {
    /// Local address and port.
    pub local: SocketAddr,
    /// Peer address and port.
    pub peer: SocketAddr,
    /// Header bytes still expected for the message being received.
    pub hdr_rem: u64,
    /// Payload bytes still expected for the message being received.
    pub data_rem: u64,
    /// Bytes handed to TCP so far, mod 2^32 (`last_sent_nxt`).
    pub last_sent_nxt: u32,
    /// Bytes the engine expects to be acknowledged, mod 2^32 (`last_expected_una`).
    pub last_expected_una: u32,
    /// Bytes seen acknowledged, mod 2^32 (`last_seen_una`).
    pub last_seen_una: u32,
    /// Path index.
    pub path: usize,
    /// Connection state name.
    pub state: String,
}

/// The queue pairs of one IB connection, for `rds-info -I -a` (`SrcQPNo`, `DstQPNo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IbQpInfo {
    /// The engine's connection.
    pub conn: ConnId,
    /// This side's queue pair number.
    pub local_qpn: u32,
    /// The peer's queue pair number (from the connection exchange; 0 until known).
    pub peer_qpn: u32,
}
