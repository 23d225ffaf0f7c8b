//! The node control protocol: every node (embedded in a tool or the host daemon) serves a Unix
//! stream socket through which `rds-info`, `rds-ctrl`, `rds-trace` and client sockets reach it.
//!
//! ## Where
//! A node serves `<runtime directory>/<node>.sock`: `/run/rds` for root, else the user's own
//! directory; which one, and the ownership and mode checks that keep another user from
//! planting a socket there, are `rundir.rs` ([`runtime_dir`], [`check_runtime_dir`]). The
//! daemon's node is called `daemon`; embedded nodes `embedded-<pid>[-<n>]`. [`discover`] lists
//! the nodes a user can reach, the system daemon's directory first. A node holds `<node>.lock`
//! (`flock`) next to its socket for its lifetime, so a restarting node removes a dead node's
//! socket file and never a live one's.
//!
//! ## Conversation (protocol version [`PROTO_VERSION`])
//! Every message in either direction is one frame: two big-endian lengths, then a [`Request`]
//! or a [`Reply`] as JSON and a data part (the layout and limits: `frame.rs`).
//! A client sends a request and reads one reply, except after [`Request::TraceStart`]: the
//! server answers [`Reply::TraceStarted`] and streams [`Reply::TraceFrames`] (each a batch of
//! up to about 1 MiB of binary trace records, see [`crate::node::tap::REC_HDR_LEN`]) until the
//! client closes or sends [`Request::TraceStop`], then ends with [`Reply::TraceEnd`]. When the
//! request carries a [`TraceOutput`] and the frame carries a file descriptor
//! ([`write_frame_with_fd`]), the node writes the pcap file itself instead of streaming, ends
//! the session at the output's count, and reports what it wrote in [`Reply::TraceEnd`]. A
//! request with `"v"` other than [`PROTO_VERSION`] in [`Request::Hello`] is refused.
//! Malformed or oversized frames get a [`Reply::Error`]; an oversized frame also ends the
//! connection (its bytes cannot be skipped safely).
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
//!
//! ## Files
//! - `schema.rs`: the messages ([`Request`], [`Reply`] and what they carry) and
//!   [`PROTO_VERSION`];
//! - `frame.rs`: framing, the one frame reader of the client and the server;
//! - `rundir.rs`: the runtime directory and its security checks;
//! - `discover.rs`: the nodes a user can reach, the daemon's endpoint;
//! - [`client`], [`select`], [`owner`]: the client, choosing a node, who holds an address.
//!
//! Every item is used as `rds_core::ctl::X`; the files import one another directly (never
//! through this file), from `schema` and `frame` at the bottom to `select` at the top.

pub mod client;
mod discover;
pub(crate) mod frame;
pub mod owner;
mod rundir;
mod schema;
pub mod select;

pub use discover::{discover, find_daemon, NodeEndpoint, DAEMON_NAME};
pub use frame::{
    read_frame, write_frame, write_frame_with_fd, FdReader, FrameError, MAX_DATA, MAX_JSON,
};
pub use owner::describe_addr_conflict;
pub use rundir::{
    check_runtime_dir, ensure_runtime_dir, lock_path, runtime_dir, search_dirs, SYSTEM_DIR,
};
pub(crate) use schema::Failed;
pub use schema::{InfoOmitted, InfoSnapshot, Reply, Request, SockOpt, TraceOutput, PROTO_VERSION};
