//! Tunables with the kernel's sysctl names (`net.rds.*`, `net/rds/sysctl.c`, `tcp.c`,
//! `ib_sysctl.c`) and defaults, plus the socket buffer limits this stack applies in place of
//! `net.core.{r,w}mem_{default,max}`.

use core::time::Duration;

/// Every tunable of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunables {
    /// `net.rds.max_unacked_packets`: ACK_REQUIRED at least every this many messages.
    pub max_unacked_packets: u32,
    /// `net.rds.max_unacked_bytes`: ACK_REQUIRED at least every this many bytes.
    pub max_unacked_bytes: u64,
    /// `net.rds.ping_enable`: answer pings to port 0.
    pub ping_enable: bool,
    /// `net.rds.reconnect_min_delay_ms`.
    pub reconnect_min_delay: Duration,
    /// `net.rds.reconnect_max_delay_ms`.
    pub reconnect_max_delay: Duration,
    /// `net.rds.tcp.rds_tcp_sndbuf`: TCP send buffer of RDS/TCP sockets, 0 = autotune.
    pub tcp_sndbuf: u32,
    /// `net.rds.tcp.rds_tcp_rcvbuf`: TCP receive buffer of RDS/TCP sockets, 0 = autotune.
    pub tcp_rcvbuf: u32,
    /// Default RDS socket send buffer in bytes (the kernel uses `net.core.wmem_default / 2`).
    pub sndbuf_default: u32,
    /// Default RDS socket receive buffer in bytes (the kernel uses `net.core.rmem_default / 2`).
    pub rcvbuf_default: u32,
    /// Largest `SO_SNDBUF` accepted (bytes; the kernel caps at `net.core.wmem_max`).
    pub sndbuf_max: u32,
    /// Largest `SO_RCVBUF` accepted (bytes; the kernel caps at `net.core.rmem_max`).
    pub rcvbuf_max: u32,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            max_unacked_packets: 8,
            max_unacked_bytes: 16 << 20,
            ping_enable: true,
            reconnect_min_delay: Duration::from_millis(1),
            reconnect_max_delay: Duration::from_millis(1000),
            tcp_sndbuf: 0,
            tcp_rcvbuf: 0,
            sndbuf_default: 212_992 / 2,
            rcvbuf_default: 212_992 / 2,
            sndbuf_max: 64 << 20,
            rcvbuf_max: 64 << 20,
        }
    }
}
