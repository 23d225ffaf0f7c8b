//! The node control protocol: every node (embedded in a tool or the host daemon) serves a Unix
//! stream socket through which `rds-info`, `rds-ctrl`, `rds-trace` and client sockets reach it.
//!
//! ## Where
//! `/run/rds/<node>.sock` when the node runs as root, else `$XDG_RUNTIME_DIR/rds/<node>.sock`
//! (or `/tmp/rds-<uid>/`); `RDS_RUNTIME_DIR` overrides both. The daemon's node is called
//! `daemon`; embedded nodes `embedded-<pid>[-<n>]`. [`discover`] lists the nodes a user can
//! reach, the system daemon's directory first. A runtime directory is used only when it
//! belongs to the user (or to root, for `/run/rds` and `RDS_RUNTIME_DIR`) and nobody else may
//! write to it ([`check_runtime_dir`]); a user's is created 0700. A node holds `<node>.lock`
//! (`flock`) next to its socket for its lifetime, so a restarting node removes a dead node's
//! socket file and never a live one's.
//!
//! ## Framing (protocol version [`PROTO_VERSION`])
//! Every message in either direction is one frame:
//!
//! | bytes | content |
//! |---|---|
//! | 4 | BE u32: length `J` of the JSON part (at most [`MAX_JSON`]) |
//! | 4 | BE u32: length `D` of the data part (at most [`MAX_DATA`]) |
//! | J | a [`Request`] or a [`Reply`] as JSON |
//! | D | raw bytes: a message payload, a batch of binary trace records |
//!
//! A client sends a request and reads one reply, except after [`Request::TraceStart`]: the
//! server answers [`Reply::TraceStarted`] and streams [`Reply::TraceFrames`] (each a batch of
//! up to about 1 MiB of binary trace records, see [`crate::node::tap::REC_HDR_LEN`]) until the
//! client closes or sends [`Request::TraceStop`], then ends with [`Reply::TraceEnd`]. When the
//! request carries a [`TraceOutput`] and the frame carries a file descriptor
//! ([`write_frame_with_fd`]), the node writes the pcap file itself instead of streaming, ends
//! the session at the output's count, and reports what it wrote in [`Reply::TraceEnd`]. A
//! request with `"v"` other than [`PROTO_VERSION`] in [`Request::Hello`] is refused. Malformed or oversized frames get a [`Reply::Error`]; an
//! oversized frame also ends the connection (its bytes cannot be skipped safely).
//!
//! ## Privilege and ownership
//! The server reads the peer's credentials (`SO_PEERCRED`). Reading state is open to every
//! local user; changing tunables, restarting or killing connections, resetting counters,
//! tracing and shutting down need root or the node's owner (its uid). A client socket belongs
//! to the control connection that opened it, like a file descriptor: its token means nothing
//! on another connection (`EBADF`, as for a token never issued) and it closes when that
//! connection ends. A readiness watcher of the same uid reaches it through a 128-bit
//! capability ([`Request::SockCap`], [`Request::SockAttach`]). In [`Request::Info`], root and
//! the owner see every socket and queue entry; another uid sees only those of sockets its own
//! uid opened through this node. Binding a port below 1024 needs uid 0 or
//! `CAP_NET_BIND_SERVICE`.
//!
//! ## Who serves what
//! This module is the protocol, its client ([`client`]) and the one way tools choose a node
//! ([`select`]). Every node serves it: the server
//! and its limits are `crate::node::admin`. Client sockets ([`Request::SockOpen`] and the
//! other `Sock*` requests) are served only by a node that was given the daemon's
//! client-socket service (`crate::socket::host`); any other node refuses
//! [`Request::SockOpen`] with `EOPNOTSUPP` and knows no socket token (`EBADF`).

pub mod client;
pub mod owner;
pub mod select;

pub use owner::describe_addr_conflict;

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

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
/// Largest JSON part of a frame.
pub const MAX_JSON: usize = 1 << 20;
/// Largest data part of a frame (a 1 MiB message and some room).
pub const MAX_DATA: usize = (1 << 20) + 4096;
/// The daemon's node name.
pub const DAEMON_NAME: &str = "daemon";

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
        /// descriptor (`SCM_RIGHTS`, see [`write_frame_with_fd`]). `None`: the node streams
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

/// A frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection between frames.
    #[error("connection closed")]
    Closed,
    /// A length field is over the limit.
    #[error("frame too large ({json} + {data} bytes)")]
    TooLarge {
        /// JSON length claimed.
        json: usize,
        /// Data length claimed.
        data: usize,
    },
    /// I/O error.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Writes one frame.
///
/// # Errors
/// I/O errors; `InvalidInput` for parts over the limits.
pub fn write_frame(w: &mut impl Write, json: &[u8], data: &[u8]) -> io::Result<()> {
    if json.len() > MAX_JSON || data.len() > MAX_DATA {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "frame too large",
        ));
    }
    let mut hdr = [0u8; 8];
    hdr[..4].copy_from_slice(&(json.len() as u32).to_be_bytes());
    hdr[4..].copy_from_slice(&(data.len() as u32).to_be_bytes());
    let bufs = [
        io::IoSlice::new(&hdr),
        io::IoSlice::new(json),
        io::IoSlice::new(data),
    ];
    let total = 8 + json.len() + data.len();
    let n = w.write_vectored(&bufs)?;
    if n < total {
        // Rare: finish the rest plainly.
        let mut all = Vec::with_capacity(total);
        all.extend_from_slice(&hdr);
        all.extend_from_slice(json);
        all.extend_from_slice(data);
        w.write_all(&all[n..])?;
    }
    w.flush()
}

/// [`write_frame`] on a Unix stream socket with `fd` passed along (`SCM_RIGHTS`).
///
/// # Errors
/// The frame is too large, or the socket failed.
pub fn write_frame_with_fd(
    sock: &std::os::unix::net::UnixStream,
    json: &[u8],
    data: &[u8],
    fd: std::os::fd::BorrowedFd<'_>,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut all = Vec::new();
    write_frame(&mut all, json, data)?;
    crate::sys::send_with_fd(sock.as_raw_fd(), &all, fd.as_raw_fd())
}

/// A Unix stream socket read through `recvmsg`, keeping the file descriptors passed with the
/// bytes (a plain `read` would close them).
#[derive(Debug)]
pub struct FdReader<'a> {
    sock: &'a std::os::unix::net::UnixStream,
    /// Descriptors received so far, oldest first.
    pub fds: Vec<std::os::fd::OwnedFd>,
}

impl<'a> FdReader<'a> {
    /// Reads from `sock`.
    pub fn new(sock: &'a std::os::unix::net::UnixStream) -> Self {
        FdReader {
            sock,
            fds: Vec::new(),
        }
    }
}

impl Read for FdReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        crate::sys::recv_with_fds(self.sock.as_raw_fd(), buf, &mut self.fds)
    }
}

/// Reads one frame: `(json, data)`.
///
/// # Errors
/// [`FrameError::Closed`] at a clean end of stream, [`FrameError::TooLarge`], I/O errors.
pub fn read_frame(r: &mut impl Read) -> Result<(Vec<u8>, Vec<u8>), FrameError> {
    let mut hdr = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        match r.read(&mut hdr[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let json = u32::from_be_bytes(hdr[..4].try_into().expect("4 bytes")) as usize;
    let data = u32::from_be_bytes(hdr[4..].try_into().expect("4 bytes")) as usize;
    if json > MAX_JSON || data > MAX_DATA {
        return Err(FrameError::TooLarge { json, data });
    }
    let mut j = vec![0u8; json];
    r.read_exact(&mut j)?;
    let mut d = vec![0u8; data];
    r.read_exact(&mut d)?;
    Ok((j, d))
}

/// The system daemon's runtime directory.
pub const SYSTEM_DIR: &str = "/run/rds";

/// The runtime directory of this process's nodes. `RDS_RUNTIME_DIR` overrides it (and is
/// then the only place searched), which keeps test daemons apart. The path is not checked
/// here: [`ensure_runtime_dir`] creates and checks it, [`check_runtime_dir`] checks it.
pub fn runtime_dir() -> PathBuf {
    if let Some(d) = env_dir() {
        return d;
    }
    let uid = nix::unistd::geteuid().as_raw();
    if uid == 0 {
        return PathBuf::from(SYSTEM_DIR);
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("rds"),
        _ => PathBuf::from(format!("/tmp/rds-{uid}")),
    }
}

fn env_dir() -> Option<PathBuf> {
    crate::env::runtime_dir()
}

/// Whether root may own `dir` for this process: the system directory and `RDS_RUNTIME_DIR`
/// (a directory root set up for its daemon); a user's own directory must be the user's.
fn root_may_own(dir: &Path) -> bool {
    dir == Path::new(SYSTEM_DIR) || env_dir().is_some_and(|d| d == dir)
}

/// Checks that `dir` is safe to serve or reach nodes in: a real directory (not a symbolic
/// link), owned by this process's effective uid (or by root, for [`SYSTEM_DIR`] and
/// `RDS_RUNTIME_DIR`), and writable by nobody else (no group or other write bit). Another
/// user who made the directory could otherwise put a fake node's socket in it.
///
/// # Errors
/// `PermissionDenied` naming the path, what is wrong and the fix; `NotFound` when it does not
/// exist.
pub fn check_runtime_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(dir)?;
    let me = nix::unistd::geteuid().as_raw();
    let refuse = |why: String| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing the RDS runtime directory {}: {why}",
                dir.display()
            ),
        )
    };
    if md.file_type().is_symlink() || !md.is_dir() {
        return Err(refuse(format!(
            "it is not a directory (or is a symbolic link); remove it, or set RDS_RUNTIME_DIR \
             to a directory of uid {me}"
        )));
    }
    if md.uid() != me && !(md.uid() == 0 && root_may_own(dir)) {
        return Err(refuse(format!(
            "it belongs to uid {}, not to uid {me}; another user may have made it to receive \
             your sockets: remove it (as root), or set RDS_RUNTIME_DIR to a directory of yours",
            md.uid()
        )));
    }
    if md.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "it is writable by group or others (mode {:o}); run 'chmod go-w {}' or remove it",
            md.mode() & 0o7777,
            dir.display()
        )));
    }
    Ok(())
}

/// Creates this process's runtime directory if needed (mode 0700 for a user, 0755 for root,
/// whose daemon's socket users must reach) and checks it ([`check_runtime_dir`]).
///
/// # Errors
/// The directory cannot be created, or fails the check.
pub fn ensure_runtime_dir() -> io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let dir = runtime_dir();
    let mode = if nix::unistd::geteuid().is_root() {
        0o755
    } else {
        0o700
    };
    if std::fs::symlink_metadata(&dir).is_err() {
        match std::fs::DirBuilder::new()
            .recursive(false)
            .mode(mode)
            .create(&dir)
        {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))?;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A missing parent (RDS_RUNTIME_DIR deep in a fresh tree): make the parents
                // as usual, then the directory itself with its mode.
                if let Some(parent) = dir.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                match std::fs::DirBuilder::new().mode(mode).create(&dir) {
                    Ok(()) => {
                        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))?
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("creating the RDS runtime directory {}: {e}", dir.display()),
                ))
            }
        }
    }
    check_runtime_dir(&dir)?;
    Ok(dir)
}

/// Directories where a user looks for nodes: the system daemon's first, then its own. Only
/// `RDS_RUNTIME_DIR` when set. A directory that fails [`check_runtime_dir`] is left out.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if env_dir().is_none() {
        v.push(PathBuf::from(SYSTEM_DIR));
    }
    let own = runtime_dir();
    if !v.contains(&own) {
        v.push(own);
    }
    v.retain(|d| check_runtime_dir(d).is_ok());
    v
}

/// The lock file held by the node serving the control socket `sock` for its lifetime
/// (`<name>.lock` next to it).
pub fn lock_path(sock: &Path) -> PathBuf {
    sock.with_extension("lock")
}

/// Whether the socket file `sock` is a dead node's: nobody holds its lock file. A lock file
/// this user cannot open counts as held.
fn is_stale(sock: &Path) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    match std::fs::File::open(lock_path(sock)) {
        Ok(f) => Flock::lock(f, FlockArg::LockSharedNonblock).is_ok(),
        // No lock file: a leftover; stale when nothing listens.
        Err(e) if e.kind() == io::ErrorKind::NotFound => matches!(
            std::os::unix::net::UnixStream::connect(sock),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused
        ),
        Err(_) => false,
    }
}

/// A node that serves a control socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEndpoint {
    /// Node name (the socket file's stem).
    pub name: String,
    /// Socket path.
    pub path: PathBuf,
}

/// Lists the control sockets a user can see (stale files of dead nodes are skipped, and
/// removed when they are ours and no node holds their lock).
pub fn discover() -> Vec<NodeEndpoint> {
    let mut v = Vec::new();
    let own = runtime_dir();
    for dir in search_dirs() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut found: Vec<_> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "sock"))
            .collect();
        found.sort();
        for path in found {
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if v.iter().any(|e: &NodeEndpoint| e.name == name) {
                continue;
            }
            if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                v.push(NodeEndpoint { name, path });
            } else if dir == own && is_stale(&path) {
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_file(lock_path(&path));
            }
        }
    }
    v
}

/// The daemon's endpoint, if one runs (the system daemon's `/run/rds/daemon.sock` first).
pub fn find_daemon() -> Option<NodeEndpoint> {
    for dir in search_dirs() {
        let path = dir.join(format!("{DAEMON_NAME}.sock"));
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            return Some(NodeEndpoint {
                name: DAEMON_NAME.into(),
                path,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_limits() {
        let mut buf = Vec::new();
        let req = serde_json::to_vec(&Request::SockSend {
            sock: 3,
            dest: Some("10.0.0.2:4000".parse().unwrap()),
            dontwait: true,
            timeout_ms: None,
        })
        .unwrap();
        write_frame(&mut buf, &req, b"payload").unwrap();
        assert_eq!(&buf[..4], &(req.len() as u32).to_be_bytes());
        assert_eq!(&buf[4..8], &7u32.to_be_bytes());
        let (j, d) = read_frame(&mut &buf[..]).unwrap();
        assert_eq!(d, b"payload");
        let back: Request = serde_json::from_slice(&j).unwrap();
        assert!(matches!(
            back,
            Request::SockSend {
                sock: 3,
                dontwait: true,
                ..
            }
        ));
        // An oversized length is refused before any allocation.
        let mut bad = Vec::new();
        bad.extend_from_slice(&u32::MAX.to_be_bytes());
        bad.extend_from_slice(&0u32.to_be_bytes());
        assert!(matches!(
            read_frame(&mut &bad[..]),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(matches!(read_frame(&mut &[][..]), Err(FrameError::Closed)));
        assert!(matches!(read_frame(&mut &buf[..5]), Err(FrameError::Io(_))));
    }

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
}
