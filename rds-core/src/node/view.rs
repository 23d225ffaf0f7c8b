//! What a running node shows: its names and addresses, transports, counters, tunables, and
//! the snapshots `rds-info` prints. Every function here only reads (the engine lock, a
//! transport lock or an atomic, one at a time); what changes a node stays in `mod.rs`.

use std::net::IpAddr;
use std::sync::atomic::Ordering;

use super::{lock, IbQpInfo, Node, TcpSockInfo};
use crate::proto::{ConnInfo, QueuedMsgInfo, SockInfo};
use crate::stats::Counter;
use crate::time::Instant;
use crate::tunables::Tunables;

use super::ib::Ib;
use super::tap::Tap;

impl Node {
    /// The control socket's path, if the node serves one.
    pub fn ctl_path(&self) -> Option<std::path::PathBuf> {
        lock(&self.inner.ctl)
            .as_ref()
            .map(|s| s.path().to_path_buf())
    }

    /// The node's name (its control socket's name when it serves one).
    pub fn name(&self) -> String {
        lock(&self.inner.ctl)
            .as_ref()
            .and_then(|s| {
                s.path()
                    .file_stem()
                    .map(|x| x.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| self.inner.name.clone())
    }

    /// The addresses the node owns.
    pub fn addrs(&self) -> Vec<IpAddr> {
        lock(&self.inner.addrs).clone()
    }

    /// Whether the node owns `ip`.
    pub fn owns(&self, ip: IpAddr) -> bool {
        let ip = crate::proto::canonical(ip);
        lock(&self.inner.addrs)
            .iter()
            .any(|&a| crate::proto::canonical(a) == ip)
    }

    /// Why the IB transport does not run although the configuration asked for it (no
    /// rdma-core, no RDMA device, ...), `None` if it runs or was not asked for.
    pub fn ib_unavailable(&self) -> Option<String> {
        self.inner.ib_unavailable.clone()
    }

    /// Whether the TCP transport runs (it was configured).
    pub fn tcp_running(&self) -> bool {
        self.inner.transports.tcp
    }

    /// Whether the IB transport runs.
    pub fn ib_running(&self) -> bool {
        lock(&self.inner.ib).is_some()
    }

    /// Queue pair numbers of the IB connections that have a queue pair (RDS_INFO_IB_CONNECTIONS).
    pub fn ib_qps(&self) -> Vec<IbQpInfo> {
        lock(&self.inner.ib).as_ref().map_or(Vec::new(), Ib::qps)
    }

    /// Live IB connections of the transport (any state).
    pub fn ib_connection_count(&self) -> usize {
        lock(&self.inner.ib).as_ref().map_or(0, Ib::len)
    }

    /// RDMA regions registered for peers (`RDS_GET_MR`) and not yet released.
    pub fn rdma_region_count(&self) -> usize {
        lock(&self.inner.ib).as_ref().map_or(0, |t| t.mr_count())
    }

    /// Whether the node runs.
    pub fn is_running(&self) -> bool {
        self.inner.running.load(Ordering::Relaxed)
    }

    /// Counters: the core list, then the TCP transport's, with the kernel's names.
    pub fn stats(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<_> = lock(&self.inner.core).stack.stats().iter().collect();
        v.extend(self.inner.tcp_stats.snapshot());
        if self.ib_running() {
            v.extend(self.inner.ib_stats.snapshot());
        }
        v
    }

    /// One counter's value.
    pub fn counter(&self, c: Counter) -> u64 {
        lock(&self.inner.core).stack.stats().get(c)
    }

    /// Bytes of the node budget in use (queued messages both ways, reassembly, connections).
    pub fn mem_used(&self) -> usize {
        lock(&self.inner.core).stack.mem_used()
    }

    /// The tunables in force.
    pub fn tunables(&self) -> Tunables {
        lock(&self.inner.core).stack.tunables().clone()
    }

    /// Every connection (RDS_INFO_CONNECTIONS and per-path detail).
    pub fn connections(&self) -> Vec<ConnInfo> {
        lock(&self.inner.core).stack.conn_infos()
    }

    /// Every socket (RDS_INFO_SOCKETS).
    pub fn sockets(&self) -> Vec<SockInfo> {
        lock(&self.inner.core).stack.sock_infos()
    }

    /// Messages in send queues (RDS_INFO_SEND_MESSAGES).
    pub fn send_queue(&self) -> Vec<QueuedMsgInfo> {
        lock(&self.inner.core).stack.queued_msgs(false)
    }

    /// Messages in retransmit queues (RDS_INFO_RETRANS_MESSAGES).
    pub fn retrans_queue(&self) -> Vec<QueuedMsgInfo> {
        lock(&self.inner.core).stack.queued_msgs(true)
    }

    /// Messages in socket receive queues (RDS_INFO_RECV_MESSAGES).
    pub fn recv_queue(&self) -> Vec<QueuedMsgInfo> {
        lock(&self.inner.core).stack.recv_queued_msgs()
    }

    /// TCP sockets of the transport (RDS_INFO_TCP_SOCKETS).
    pub fn tcp_sockets(&self) -> Vec<TcpSockInfo> {
        lock(&self.inner.tcp).infos()
    }

    /// The trace tap.
    pub fn tap(&self) -> &Tap {
        &self.inner.tap
    }

    /// Engine time now.
    pub fn now(&self) -> Instant {
        self.inner.now()
    }

    /// Wall-clock nanoseconds since the Unix epoch of an engine instant.
    pub fn wall_ns(&self, t: Instant) -> u64 {
        self.inner.origin_wall_ns + t.as_nanos()
    }

    /// RDS/TCP frames the node has read since it started: `(all, read by an application
    /// thread waiting in [`crate::Socket::wait`])`. The rest were read by the I/O thread.
    pub fn frames_read(&self) -> (u64, u64) {
        (
            self.inner.frames_in.load(Ordering::Relaxed),
            self.inner.frames_led.load(Ordering::Relaxed),
        )
    }

    /// Live TCP connections of the transport.
    pub fn tcp_connection_count(&self) -> usize {
        lock(&self.inner.tcp).len()
    }

    /// Accepted TCP connections waiting for a lane, and the node's TCP connection cap.
    pub fn tcp_waiting_and_cap(&self) -> (usize, usize) {
        let t = lock(&self.inner.tcp);
        (t.waiting(), t.conn_cap())
    }
}
