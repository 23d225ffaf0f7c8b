//! `rds-core`: a userspace RDS (Reliable Datagram Sockets) stack that speaks the Linux kernel's
//! RDS wire protocol.
//!
//! Layers, top to bottom on send (see `ARCHITECTURE.md` in the repository):
//! - [`wire`]: the 48-byte `struct rds_header`, its checksum, extension headers and the
//!   congestion-map payload. Zero-copy views and plain parse/emit structs. No I/O.
//! - [`proto`]: the sans-IO engine: sockets, connections and their paths, sequencing,
//!   acknowledgements, retransmission, ping/pong, the multipath handshake, congestion maps.
//!   Time is passed in; randomness is seeded.
//! - [`stats`], [`tunables`], [`time`]: kernel-named counters, `net.rds.*` tunables, engine time.
//! - [`info`], [`message`]: plain data the engine produces and the API hands out: ids,
//!   connection/socket/queue snapshots for info output, received messages and notifications.
//! - [`node`]: a running node: the engine behind a lock, an epoll I/O thread running the
//!   RDS/TCP transport (listener on `addr:16385`, lanes, reconnects), timers and the trace tap.
//! - [`socket`]: RDS sockets with the kernel's semantics and errno values ([`Socket`]).
//! - [`ctl`]: the control protocol every node serves on a Unix socket (info, counters,
//!   tunables, connection restart/kill, trace streaming, client sockets for the daemon) and
//!   its client; the server is [`node::admin`], the daemon's client sockets [`socket::host`].
//! - [`abi`]: the numbers of `linux/rds.h` (socket options, control messages, `RDS_INFO_*`,
//!   flags), once for the kernel backend, the preload library, the tools and the tests.
//! - [`kernel`]: the running kernel's `AF_RDS` sockets and `RDS_INFO_*` tables, the backend
//!   of sockets on a host whose kernel has RDS.
//! - [`env`](mod@env): the environment variables (`RDS_NO_DAEMON`, `RDS_RUNTIME_DIR`, ...),
//!   each named once with its meaning.
//! - [`trace`]: wire capture records and the pcap writer used by `rds-trace`.
//! - [`ras`]: the node's bounded event ring (connections up and down, resets, drops, errors).
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod abi;
pub mod buf;
pub mod ctl;
pub mod env;
pub mod errno;
pub mod ib;
pub mod info;
pub mod kernel;
pub mod message;
pub mod node;
pub mod process;
pub mod proto;
pub mod ras;
pub mod rdma;
#[cfg(feature = "sim")]
pub mod sim;
pub mod socket;
pub mod stats;
pub mod threads;
pub mod time;
pub mod trace;
pub mod tunables;
pub mod wire;

mod sys;

pub use node::{CtlMode, Node, NodeConfig, Transports, WeakNode};
pub use socket::{RecvFlags, RecvMsg, Socket};
pub use sys::{poll_readable, set_thread_idle, Polled, ThreadTid};
