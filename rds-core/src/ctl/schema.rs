//! The messages of the control protocol: every [`Request`] a client sends and every [`Reply`]
//! a node answers, as JSON through serde (field names and tags are the protocol: changing one
//! is a new [`PROTO_VERSION`]), and the payload types they carry ([`InfoSnapshot`],
//! [`TraceOutput`], [`SockOpt`]). How a message travels is `frame.rs`; nothing here does I/O.

use std::io;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::info::{ConnInfo, IbQpInfo, QueuedMsgInfo, SockInfo, TcpSockInfo, TransportKind};
use crate::trace::{CaptureLink, CaptureTally};

/// Version of this protocol.
///
/// 4: a client socket belongs to the control connection that opened it; a second connection
/// of the same uid reaches it only through [`Request::SockCap`] and [`Request::SockAttach`];
/// the info snapshot's lists may be cut (their `omitted` counts). 3: [`Request::TraceStart`]
/// may pass the capture file's descriptor, and the node then writes
/// the pcap file itself ([`TraceOutput`]). 2: captured frames travel as binary trace records
/// batched in [`Reply::TraceFrames`] (1 sent one JSON `trace_frame` reply per frame).
pub const PROTO_VERSION: u32 = 4;

/// How the node writes a capture file whose descriptor came with [`Request::TraceStart`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceOutput {
    /// Which transport's frames the file holds; `None`: [`CaptureLink::default_for`] the
    /// node's transports.
    pub link: Option<CaptureLink>,
    /// End the trace after this many frames are written.
    pub count: Option<u64>,
}

/// A request from a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Identify the node; checks the protocol version.
    Hello {
        /// The client's protocol version.
        v: u32,
    },
    /// An info snapshot (see [`InfoSnapshot`]).
    Info,
    /// Counters with the kernel's names.
    Stats,
    /// Zero the counters (privileged).
    StatsReset,
    /// Every tunable's value.
    TunablesGet,
    /// Set a tunable (privileged).
    TunableSet {
        /// Full or short name.
        name: String,
        /// New value.
        value: u64,
    },
    /// Reset one tunable (or all when `name` is `None`) to its default (privileged).
    TunableDefault {
        /// Full or short name, or all.
        name: Option<String>,
    },
    /// Restart a connection (privileged).
    ConnRestart {
        /// Local address.
        laddr: IpAddr,
        /// Peer address.
        faddr: IpAddr,
    },
    /// Kill a connection and drop its queued messages (privileged).
    ConnKill {
        /// Local address.
        laddr: IpAddr,
        /// Peer address.
        faddr: IpAddr,
    },
    /// Start streaming captured frames (privileged; one trace per node).
    TraceStart {
        /// Bytes kept per frame (header included).
        snaplen: u32,
        /// Only frames with this peer address.
        peer: Option<IpAddr>,
        /// Only frames with this RDS port (source or destination).
        port: Option<u16>,
        /// The node writes the capture file itself: the request's frame carries the file's
        /// descriptor (`SCM_RIGHTS`, see [`write_frame_with_fd`](super::frame::write_frame_with_fd)). `None`: the node streams
        /// [`Reply::TraceFrames`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<TraceOutput>,
    },
    /// Stop the trace started on this connection.
    TraceStop,
    /// Stop the node (privileged).
    Shutdown,
    /// The node's RAS event ring ([`crate::ras`]); replies [`Reply::RasEvents`].
    RasExtract,
    /// Create a client socket; replies [`Reply::Sock`].
    SockOpen,
    /// Bind a client socket.
    SockBind {
        /// Socket token.
        sock: u64,
        /// Address.
        addr: SocketAddr,
        /// Preset transport (`SO_RDS_TRANSPORT`).
        transport: Option<TransportKind>,
    },
    /// Set a client socket's default destination.
    SockConnect {
        /// Socket token.
        sock: u64,
        /// Destination.
        addr: SocketAddr,
    },
    /// Set an option of a client socket.
    SockSet {
        /// Socket token.
        sock: u64,
        /// Option and value.
        opt: SockOpt,
    },
    /// Read the bound address, buffers and transport of a client socket.
    SockState {
        /// Socket token.
        sock: u64,
    },
    /// Send the frame's data part as one message.
    SockSend {
        /// Socket token.
        sock: u64,
        /// Destination (`None` = connected one).
        dest: Option<SocketAddr>,
        /// Do not block.
        dontwait: bool,
        /// Give up after this long (milliseconds) when blocking.
        timeout_ms: Option<u64>,
    },
    /// Receive one message (its payload comes as the reply's data part).
    SockRecv {
        /// Socket token.
        sock: u64,
        /// Most payload bytes wanted.
        max: usize,
        /// `MSG_PEEK`.
        peek: bool,
        /// Do not block.
        dontwait: bool,
        /// Give up after this long (milliseconds) when blocking.
        timeout_ms: Option<u64>,
    },
    /// Drop this socket's queued messages to `dest`.
    SockCancel {
        /// Socket token.
        sock: u64,
        /// Destination.
        dest: SocketAddr,
    },
    /// Wait until the socket is readable (or writable, if asked) or the timeout passes.
    SockWait {
        /// Socket token.
        sock: u64,
        /// Return when readable.
        rx: bool,
        /// Return when writable.
        tx: bool,
        /// Longest wait.
        timeout_ms: u64,
    },
    /// Close a client socket.
    SockClose {
        /// Socket token.
        sock: u64,
    },
    /// A capability for one of this connection's sockets ([`Reply::SockCap`]): another
    /// control connection of the same uid presents it with [`Request::SockAttach`].
    SockCap {
        /// Socket token.
        sock: u64,
    },
    /// Reach a socket of another control connection of the same uid (a readiness watcher)
    /// through its capability; replies [`Reply::Sock`] with a token valid on this connection.
    /// The socket still closes when the connection that opened it goes away.
    SockAttach {
        /// The capability from [`Reply::SockCap`] (32 hex digits).
        cap: String,
    },
    /// Move a socket of this connection's sends and receives to shared memory
    /// (`crate::socket::ring`); replies [`Reply::SockRing`] with, passed along (`SCM_RIGHTS`,
    /// in this order): the sealed segment, the daemon's doorbell, the client's result
    /// doorbell, the receive- and the send-readiness descriptors. One ring per socket; it
    /// ends with the connection.
    SockRing {
        /// Socket token.
        sock: u64,
    },
    /// The control server's own counters ([`Reply::Stats`]): connections refused at a cap,
    /// closed for a stalled request, closed for a fault in their shared-memory ring.
    CtlStats,
}

impl Request {
    /// The client-socket token the request names, if it names one.
    pub fn sock_token(&self) -> Option<u64> {
        match *self {
            Request::SockBind { sock, .. }
            | Request::SockConnect { sock, .. }
            | Request::SockSet { sock, .. }
            | Request::SockState { sock }
            | Request::SockSend { sock, .. }
            | Request::SockRecv { sock, .. }
            | Request::SockCancel { sock, .. }
            | Request::SockWait { sock, .. }
            | Request::SockClose { sock }
            | Request::SockCap { sock }
            | Request::SockRing { sock } => Some(sock),
            _ => None,
        }
    }
}

/// An option of a client socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "name", content = "value", rename_all = "snake_case")]
pub enum SockOpt {
    /// `SO_SNDBUF` (usable bytes).
    Sndbuf(usize),
    /// `SO_RCVBUF` (usable bytes).
    Rcvbuf(usize),
    /// `RDS_CONG_MONITOR`.
    CongMonitor(bool),
    /// `RDS_RECVERR`.
    Recverr(bool),
    /// `SO_TIMESTAMP`.
    Timestamps(bool),
}

/// Everything `rds-info` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct InfoSnapshot {
    /// Connections with their paths.
    pub connections: Vec<ConnInfo>,
    /// Sockets.
    pub sockets: Vec<SockInfo>,
    /// Send queues.
    pub send: Vec<QueuedMsgInfo>,
    /// Retransmit queues.
    pub retrans: Vec<QueuedMsgInfo>,
    /// Receive queues.
    pub recv: Vec<QueuedMsgInfo>,
    /// TCP transport sockets.
    pub tcp: Vec<TcpSockInfo>,
    /// Counters, kernel names and order.
    pub counters: Vec<(String, u64)>,
    /// Transports this node runs ("tcp", "ib").
    pub transports: Vec<String>,
    /// Why the IB transport does not run although the node was asked to run it.
    #[serde(default)]
    pub ib_unavailable: Option<String>,
    /// Queue pair numbers of the IB connections that have a queue pair.
    #[serde(default)]
    pub ib_qps: Vec<IbQpInfo>,
    /// Entries left out of the lists above so that the snapshot fits one frame.
    #[serde(default)]
    pub omitted: InfoOmitted,
}

/// How many entries of each list an [`InfoSnapshot`] left out (the lists hold the first ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct InfoOmitted {
    /// Connections.
    pub connections: u64,
    /// Sockets.
    pub sockets: u64,
    /// Send queue entries.
    pub send: u64,
    /// Retransmit queue entries.
    pub retrans: u64,
    /// Receive queue entries.
    pub recv: u64,
    /// TCP transport sockets.
    pub tcp: u64,
    /// Payload bytes of the send queue entries left out.
    pub send_bytes: u64,
    /// Payload bytes of the retransmit queue entries left out.
    pub retrans_bytes: u64,
    /// Payload bytes of the receive queue entries left out.
    pub recv_bytes: u64,
}

impl InfoOmitted {
    /// Whether any list was cut.
    pub fn any(&self) -> bool {
        *self != InfoOmitted::default()
    }
}

/// A reply from the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    /// The request failed.
    Error {
        /// An errno value (`EPERM`, `EINVAL`, ...).
        errno: i32,
        /// What went wrong.
        message: String,
    },
    /// Done.
    Ok,
    /// Who the node is.
    Hello {
        /// Protocol version.
        v: u32,
        /// Node name.
        node: String,
        /// rds-tools version.
        version: String,
        /// RDS protocol version spoken ("3.1").
        rds_protocol: String,
        /// Process id of the node.
        pid: u32,
        /// Owner uid.
        owner_uid: u32,
        /// Addresses.
        addrs: Vec<IpAddr>,
    },
    /// An info snapshot.
    Info(Box<InfoSnapshot>),
    /// Counters.
    Stats {
        /// `(name, value)`.
        counters: Vec<(String, u64)>,
    },
    /// Tunables.
    Tunables {
        /// `(name, value)`.
        values: Vec<(String, u64)>,
    },
    /// The RAS event ring, oldest event first.
    RasEvents {
        /// The level in force (`net.rds.ras_level`).
        level: u8,
        /// Events pushed out of the full ring so far.
        overwritten: u64,
        /// The events.
        events: Vec<crate::ras::RasEvent>,
    },
    /// Messages dropped by a kill or cancel.
    Dropped {
        /// How many.
        messages: usize,
    },
    /// Captured frames: the data part holds `frames` binary trace records back to back
    /// (layout in [`crate::node::tap::REC_HDR_LEN`], decoded by
    /// [`crate::node::tap::decode_records`]).
    TraceFrames {
        /// Records in the data part.
        frames: u32,
    },
    /// The trace started (the reply to [`Request::TraceStart`]); [`Reply::TraceFrames`] follow,
    /// unless the node writes the file.
    TraceStarted {
        /// Transports the node runs ("tcp", "ib"), as in [`InfoSnapshot::transports`].
        transports: Vec<String>,
        /// The link type of the file the node writes ([`TraceOutput`] only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        link: Option<CaptureLink>,
    },
    /// The trace ended.
    TraceEnd {
        /// Frames captured.
        captured: u64,
        /// Frames dropped because the consumer was too slow.
        dropped: u64,
        /// What the node wrote to the file ([`TraceOutput`] only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        written: Option<CaptureTally>,
    },
    /// A capability for a socket ([`Request::SockCap`]).
    SockCap {
        /// 128 random bits as 32 hex digits.
        cap: String,
    },
    /// A socket's shared-memory ring ([`Request::SockRing`]); its descriptors come with
    /// the frame.
    SockRing {
        /// Bytes of the segment.
        seg_len: usize,
    },
    /// A client socket was created.
    Sock {
        /// Token to use in later requests.
        sock: u64,
    },
    /// A client socket's state.
    SockState {
        /// Bound address.
        bound: Option<SocketAddr>,
        /// Default destination.
        connected: Option<SocketAddr>,
        /// Usable send buffer.
        sndbuf: usize,
        /// Usable receive buffer.
        rcvbuf: usize,
        /// Transport.
        transport: Option<TransportKind>,
        /// Readable now.
        readable: bool,
        /// Writable now.
        writable: bool,
    },
    /// A send succeeded.
    Sent {
        /// Payload length.
        len: usize,
        /// Readable after the call.
        readable: bool,
        /// Writable after the call.
        writable: bool,
    },
    /// A message (its payload is the data part) or a congestion notification.
    Recv {
        /// Full message length.
        full_len: usize,
        /// Sender.
        from: Option<SocketAddr>,
        /// Payload was cut.
        truncated: bool,
        /// Congestion notification mask.
        cong_update: Option<u64>,
        /// RDMA destination cookie.
        rdma_dest: Option<u64>,
        /// Receive timestamp, ns since the Unix epoch.
        ts_ns: Option<u64>,
        /// Readable after the call.
        readable: bool,
        /// Writable after the call.
        writable: bool,
    },
    /// Readiness.
    Ready {
        /// Readable.
        readable: bool,
        /// Writable.
        writable: bool,
    },
}

impl Reply {
    /// A [`Reply::Error`].
    pub fn error(errno: i32, message: impl Into<String>) -> Reply {
        Reply::Error {
            errno,
            message: message.into(),
        }
    }
}

/// A request that failed: its errno and message, answered as a [`Reply::Error`].
#[derive(Debug)]
pub(crate) struct Failed(pub i32, pub String);

impl Failed {
    /// From an I/O error (its errno, else `EIO`).
    pub(crate) fn io(e: &io::Error) -> Failed {
        Failed(e.raw_os_error().unwrap_or(libc::EIO), e.to_string())
    }
}

impl From<Failed> for Reply {
    fn from(f: Failed) -> Reply {
        Reply::error(f.0, f.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_json_is_stable() {
        let j = serde_json::to_string(&Request::TunableSet {
            name: "net.rds.ping_enable".into(),
            value: 0,
        })
        .unwrap();
        assert_eq!(
            j,
            r#"{"op":"tunable_set","name":"net.rds.ping_enable","value":0}"#
        );
        let j = serde_json::to_string(&Request::SockSet {
            sock: 1,
            opt: SockOpt::Sndbuf(4096),
        })
        .unwrap();
        assert_eq!(
            j,
            r#"{"op":"sock_set","sock":1,"opt":{"name":"sndbuf","value":4096}}"#
        );
    }

    #[test]
    fn a_send_request_round_trips() {
        let req = Request::SockSend {
            sock: 3,
            dest: Some("10.0.0.2:4000".parse().unwrap()),
            dontwait: true,
            timeout_ms: None,
        };
        let j = serde_json::to_vec(&req).unwrap();
        assert_eq!(
            j,
            br#"{"op":"sock_send","sock":3,"dest":"10.0.0.2:4000","dontwait":true,"timeout_ms":null}"#
        );
        let back: Request = serde_json::from_slice(&j).unwrap();
        assert_eq!(back, req);
        assert_eq!(back.sock_token(), Some(3));
    }
}
