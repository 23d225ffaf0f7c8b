//! Statistics counters with the Linux kernel's exported names (`net/rds/stats.c`
//! `rds_stat_names`, `tcp_stats.c`, `ib_stats.c`), in the kernel's order, so that users and
//! scripts recognise them. A few counters this stack adds come after the kernel's core list and
//! are marked as ours.

use core::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($(#[$m:meta])* $vis:vis enum $name:ident, $names:ident { $($(#[doc = $doc:literal])* $var:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(usize)]
        $vis enum $name { $($(#[doc = $doc])* $var,)* }

        /// Every counter name of this group, in order.
        $vis const $names: &[&str] = &[$($s,)*];

        impl $name {
            /// Every counter of this group, in order.
            pub const ALL: &'static [$name] = &[$($name::$var,)*];
            /// Each counter's documentation, its lines joined (as [`Self::description`] gives
            /// it, less the trimming).
            const DOCS: &'static [&'static str] = &[$(concat!($($doc),*),)*];
            /// The kernel's exported name.
            pub fn name(self) -> &'static str {
                $names[self as usize]
            }
            /// What the counter counts: its documentation, one line (for `# HELP` lines of
            /// metrics exports).
            pub fn description(self) -> &'static str {
                Self::DOCS[self as usize].trim()
            }
        }
    };
}

/// What the counter `name` counts (its [`Counter::description`], [`TcpCounter::description`]
/// or [`IbCounter::description`]), `None` for a name this stack does not have (a kernel
/// counter it does not count).
pub fn describe(name: &str) -> Option<&'static str> {
    fn find<T: Copy>(names: &[&str], all: &[T], name: &str) -> Option<T> {
        names.iter().position(|n| *n == name).map(|i| all[i])
    }
    find(CORE_NAMES, Counter::ALL, name)
        .map(Counter::description)
        .or_else(|| find(TCP_NAMES, TcpCounter::ALL, name).map(TcpCounter::description))
        .or_else(|| find(IB_NAMES, IbCounter::ALL, name).map(IbCounter::description))
}

counters! {
    /// Core RDS counters (`rds_stat_names`), then this stack's own.
    pub enum Counter, CORE_NAMES {
        /// A path was reset (went down and its state was recycled).
        ConnReset = "conn_reset",
        /// A received header failed its checksum (IB); the connection was dropped.
        RecvDropBadChecksum = "recv_drop_bad_checksum",
        /// A retransmitted message older than `next_rx_seq` was dropped as a duplicate.
        RecvDropOldSeq = "recv_drop_old_seq",
        /// A message for a port with no bound socket was dropped.
        RecvDropNoSock = "recv_drop_no_sock",
        /// A message raced with its socket's close and was dropped.
        RecvDropDeadSock = "recv_drop_dead_sock",
        /// Delivery raced with a connection change.
        RecvDeliverRaced = "recv_deliver_raced",
        /// A message was delivered to a socket's receive queue.
        RecvDelivered = "recv_delivered",
        /// A message was queued on a socket.
        RecvQueued = "recv_queued",
        /// Receive work was retried at once.
        RecvImmediateRetry = "recv_immediate_retry",
        /// Receive work was retried later.
        RecvDelayedRetry = "recv_delayed_retry",
        /// A received message asked for an acknowledgement.
        RecvAckRequired = "recv_ack_required",
        /// RDMA bytes received.
        RecvRdmaBytes = "recv_rdma_bytes",
        /// A ping was received and answered.
        RecvPing = "recv_ping",
        /// A transmit pass found the send queue empty.
        SendQueueEmpty = "send_queue_empty",
        /// A transmit pass stopped because the transport was full.
        SendQueueFull = "send_queue_full",
        /// Transmit lock contention.
        SendLockContention = "send_lock_contention",
        /// Transmit raced with queueing.
        SendLockQueueRaced = "send_lock_queue_raced",
        /// Transmit was retried at once.
        SendImmediateRetry = "send_immediate_retry",
        /// Transmit was retried later.
        SendDelayedRetry = "send_delayed_retry",
        /// An acknowledged message left the retransmit queue.
        SendDropAcked = "send_drop_acked",
        /// A message was sent with ACK_REQUIRED.
        SendAckRequired = "send_ack_required",
        /// A message was queued for sending.
        SendQueued = "send_queued",
        /// An RDMA operation was sent.
        SendRdma = "send_rdma",
        /// RDMA bytes sent.
        SendRdmaBytes = "send_rdma_bytes",
        /// A pong or probe ping was queued (the kernel counts both here).
        SendPong = "send_pong",
        /// Page remainder allocator hit.
        PageRemainderHit = "page_remainder_hit",
        /// Page remainder allocator miss.
        PageRemainderMiss = "page_remainder_miss",
        /// Bytes copied to the application.
        CopyToUser = "copy_to_user",
        /// Bytes copied from the application.
        CopyFromUser = "copy_from_user",
        /// A congestion map update was queued to a peer.
        CongUpdateQueued = "cong_update_queued",
        /// A congestion map update arrived from a peer.
        CongUpdateReceived = "cong_update_received",
        /// A non-blocking send hit a congested port (ENOBUFS).
        CongSendError = "cong_send_error",
        /// A blocking send waited for a congested port.
        CongSendBlocked = "cong_send_blocked",
        /// Payload bytes added to socket receive queues.
        RecvBytesAddedToSock = "recv_bytes_added_to_sock",
        /// Payload bytes removed from socket receive queues.
        RecvBytesFreedFromSock = "recv_bytes_freed_fromsock",
        /// A message was stuck in the send path.
        SendStuckRm = "send_stuck_rm",
        /// A lane above 0 waited for lane 0 to flush older messages after fan-out.
        MprdsCatchupTx0Retries = "mprds_catchup_tx0_retries",
        /// (This stack) A peer sent a malformed frame; its connection was dropped.
        ConnDropBadFrame = "conn_drop_bad_frame",
        /// (This stack) A peer sent a message longer than 1 MiB; its connection was dropped.
        ConnDropOversize = "conn_drop_oversize",
        /// (This stack) A peer sent a congestion map that is not 8192 bytes long.
        ConnDropBadCongMap = "conn_drop_bad_cong_map",
        /// (This stack) Messages dropped because the peer restarted (generation change).
        SendDropPeerRestart = "send_drop_peer_restart",
        /// (This stack) A send failed with ENOBUFS: the node's memory budget was used up.
        MemSendError = "mem_send_error",
        /// (This stack) A received message (or the pong a ping asked for) was dropped: the
        /// node's memory budget was used up.
        RecvDropNoMem = "recv_drop_no_mem",
        /// (This stack) A received message was dropped: its socket's receive queue was at
        /// its hard cap (the peer ignored the congestion map).
        RecvDropRcvqFull = "recv_drop_rcvq_full",
        /// (This stack) A ping went unanswered: its connection already held the most pongs.
        SendPongDropFull = "send_pong_drop_full",
        /// (This stack) A queued pong was dropped: its connection went down for good.
        SendPongDropDown = "send_pong_drop_down",
        /// (This stack) A peer's connection was refused: its state did not fit the budget.
        ConnRefusedNoMem = "conn_refused_no_mem",
        /// (This stack) An idle connection's state was freed.
        ConnFreed = "conn_freed",
        /// (This stack) A socket's first message to a peer it had heard from was sent on the
        /// lane the peer's messages arrive on instead of its own; its later ones follow.
        ReplyLaneBound = "reply_lane_bound",
        /// (This stack) A connection we opened ended before the peer answered on it, with
        /// messages its TCP had acknowledged: they were resent on the next connection.
        ConnResetUnadopted = "conn_reset_unadopted",
    }
}

counters! {
    /// RDS/TCP transport counters (`tcp_stats.c`).
    pub enum TcpCounter, TCP_NAMES {
        /// Receive-ready callbacks.
        TcpDataReadyCalls = "tcp_data_ready_calls",
        /// Write-space callbacks (acknowledgement checks).
        TcpWriteSpaceCalls = "tcp_write_space_calls",
        /// A write found the TCP send buffer full.
        TcpSndbufFull = "tcp_sndbuf_full",
        /// Duelling connects were resolved.
        TcpConnectRaced = "tcp_connect_raced",
        /// An accepted connection replaced a stale one.
        TcpListenClosedStale = "tcp_listen_closed_stale",
        /// (This stack) `accept` failed for want of descriptors (EMFILE, ENFILE); the pending
        /// connection stays in the backlog.
        TcpAcceptEmfile = "tcp_accept_emfile",
        /// (This stack) A listener left the event set for a pause after `accept` failed.
        TcpListenPaused = "tcp_listen_paused",
        /// (This stack) An accepted connection was reset: its remote address had the most
        /// connections allowed.
        TcpAcceptAddrLimit = "tcp_accept_addr_limit",
        /// (This stack) An accepted connection was reset: the node had the most connections
        /// allowed.
        TcpAcceptNodeLimit = "tcp_accept_node_limit",
        /// (This stack) A connection waiting for a lane was reset to make room for a newer one
        /// of its address.
        TcpWaitAddrEvicted = "tcp_wait_addr_evicted",
        /// (This stack) A connection waiting for a lane was reset to keep the node's waiting
        /// connections within their cap.
        TcpWaitNodeEvicted = "tcp_wait_node_evicted",
        /// (This stack) A connection waited for a lane too long and was reset.
        TcpWaitExpired = "tcp_wait_expired",
        /// (This stack) An outgoing connection was refused: nothing listens on the peer's
        /// RDS port.
        TcpConnectRefused = "tcp_connect_refused",
        /// (This stack) A connection being read to its end (superseded by a newer one for its
        /// lane, or dropped by the node) neither sent its last data nor closed within 5 s, and
        /// was closed.
        TcpDrainExpired = "tcp_drain_expired",
        /// (This stack) A connection's message in progress got no byte for
        /// `net.rds.partial_timeout_ms`, and the connection was closed.
        TcpPartialTimeouts = "tcp_partial_timeouts",
        /// (This stack) A thread waiting for its send buffer's room learnt TCP's
        /// acknowledgements itself (rather than the I/O thread's poll), and some came.
        TcpAcksByWaiter = "tcp_acks_by_waiter",
    }
}

counters! {
    /// RDS/IB transport counters (`ib_stats.c`).
    pub enum IbCounter, IB_NAMES {
        /// Connect races.
        IbConnectRaced = "ib_connect_raced",
        /// Stale connections replaced by a new request.
        IbListenClosedStale = "ib_listen_closed_stale",
        /// CM event handler calls.
        IbEvtHandlerCall = "ib_evt_handler_call",
        /// Completion tasklet runs.
        IbTaskletCall = "ib_tasklet_call",
        /// Send completion events.
        IbTxCqEvent = "ib_tx_cq_event",
        /// Send ring full.
        IbTxRingFull = "ib_tx_ring_full",
        /// Send throttled.
        IbTxThrottle = "ib_tx_throttle",
        /// Send scatter-gather mapping failures.
        IbTxSgMappingFailure = "ib_tx_sg_mapping_failure",
        /// Send stalled.
        IbTxStalled = "ib_tx_stalled",
        /// Send credit updates.
        IbTxCreditUpdates = "ib_tx_credit_updates",
        /// Receive completion events.
        IbRxCqEvent = "ib_rx_cq_event",
        /// Receive ring empty.
        IbRxRingEmpty = "ib_rx_ring_empty",
        /// Receive refills from the completion handler.
        IbRxRefillFromCq = "ib_rx_refill_from_cq",
        /// Receive refills from the worker.
        IbRxRefillFromThread = "ib_rx_refill_from_thread",
        /// Receive allocation limit hit.
        IbRxAllocLimit = "ib_rx_alloc_limit",
        /// Fragments received.
        IbRxTotalFrags = "ib_rx_total_frags",
        /// Messages received.
        IbRxTotalIncs = "ib_rx_total_incs",
        /// Receive credit updates.
        IbRxCreditUpdates = "ib_rx_credit_updates",
        /// ACK-only frames sent.
        IbAckSent = "ib_ack_sent",
        /// ACK send failures.
        IbAckSendFailure = "ib_ack_send_failure",
        /// ACKs delayed because one was in flight.
        IbAckSendDelayed = "ib_ack_send_delayed",
        /// ACKs piggybacked on data.
        IbAckSendPiggybacked = "ib_ack_send_piggybacked",
        /// ACKs received.
        IbAckReceived = "ib_ack_received",
        /// 8K MR allocations.
        IbRdmaMr8kAlloc = "ib_rdma_mr_8k_alloc",
        /// 8K MR frees.
        IbRdmaMr8kFree = "ib_rdma_mr_8k_free",
        /// 8K MRs in use.
        IbRdmaMr8kUsed = "ib_rdma_mr_8k_used",
        /// 8K MR pool flushes.
        IbRdmaMr8kPoolFlush = "ib_rdma_mr_8k_pool_flush",
        /// 8K MR pool waits.
        IbRdmaMr8kPoolWait = "ib_rdma_mr_8k_pool_wait",
        /// 8K MR pool depleted.
        IbRdmaMr8kPoolDepleted = "ib_rdma_mr_8k_pool_depleted",
        /// 1M MR allocations.
        IbRdmaMr1mAlloc = "ib_rdma_mr_1m_alloc",
        /// 1M MR frees.
        IbRdmaMr1mFree = "ib_rdma_mr_1m_free",
        /// 1M MRs in use.
        IbRdmaMr1mUsed = "ib_rdma_mr_1m_used",
        /// 1M MR pool flushes.
        IbRdmaMr1mPoolFlush = "ib_rdma_mr_1m_pool_flush",
        /// 1M MR pool waits.
        IbRdmaMr1mPoolWait = "ib_rdma_mr_1m_pool_wait",
        /// 1M MR pool depleted.
        IbRdmaMr1mPoolDepleted = "ib_rdma_mr_1m_pool_depleted",
        /// 8K MRs reused.
        IbRdmaMr8kReused = "ib_rdma_mr_8k_reused",
        /// 1M MRs reused.
        IbRdmaMr1mReused = "ib_rdma_mr_1m_reused",
        /// Atomic compare-and-swap ops.
        IbAtomicCswp = "ib_atomic_cswp",
        /// Atomic fetch-and-add ops.
        IbAtomicFadd = "ib_atomic_fadd",
        /// (This stack) Completion queues armed again (`ibv_req_notify_cq`) after their
        /// event: once a batch, by a thread going to sleep whose poll found the queue empty.
        IbCqArm = "ib_cq_arm",
        /// (This stack) Polls of a completion queue before a thread slept that found
        /// completions: taken without a completion event, a re-arm or a wake-up.
        IbCqPolled = "ib_cq_polled",
    }
}

/// Core counters held by the engine (plain integers: the engine is single-threaded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    values: [u64; CORE_NAMES.len()],
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            values: [0; CORE_NAMES.len()],
        }
    }
}

impl Stats {
    /// Adds one.
    pub fn inc(&mut self, c: Counter) {
        self.add(c, 1);
    }

    /// Adds `n`.
    pub fn add(&mut self, c: Counter, n: u64) {
        let v = &mut self.values[c as usize];
        *v = v.wrapping_add(n);
    }

    /// Current value.
    pub fn get(&self, c: Counter) -> u64 {
        self.values[c as usize]
    }

    /// `(name, value)` pairs in the kernel's order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Counter::ALL.iter().map(|&c| (c.name(), self.get(c)))
    }

    /// Zeroes every counter.
    pub fn reset(&mut self) {
        self.values = [0; CORE_NAMES.len()];
    }
}

/// Transport counters shared between threads (relaxed atomics).
#[derive(Debug)]
pub struct AtomicCounters<const N: usize> {
    values: [AtomicU64; N],
    names: &'static [&'static str],
}

impl<const N: usize> AtomicCounters<N> {
    fn with_names(names: &'static [&'static str]) -> Self {
        assert_eq!(names.len(), N, "counter names and storage disagree");
        AtomicCounters {
            values: core::array::from_fn(|_| AtomicU64::new(0)),
            names,
        }
    }

    /// Adds `n` to counter `idx`.
    pub fn add_idx(&self, idx: usize, n: u64) {
        self.values[idx].fetch_add(n, Ordering::Relaxed);
    }

    /// `(name, value)` pairs in order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        self.names
            .iter()
            .zip(&self.values)
            .map(|(n, v)| (*n, v.load(Ordering::Relaxed)))
            .collect()
    }

    /// Zeroes every counter.
    pub fn reset(&self) {
        for v in &self.values {
            v.store(0, Ordering::Relaxed);
        }
    }
}

/// The RDS/TCP counters.
pub type TcpStats = AtomicCounters<{ TCP_NAMES.len() }>;
/// The RDS/IB counters.
pub type IbStats = AtomicCounters<{ IB_NAMES.len() }>;

impl TcpStats {
    /// Zeroed TCP counters.
    pub fn new() -> Self {
        Self::with_names(TCP_NAMES)
    }
    /// Adds one.
    pub fn inc(&self, c: TcpCounter) {
        self.add_idx(c as usize, 1);
    }
}

impl Default for TcpStats {
    fn default() -> Self {
        Self::new()
    }
}

impl IbStats {
    /// Zeroed IB counters.
    pub fn new() -> Self {
        Self::with_names(IB_NAMES)
    }
    /// Adds one.
    pub fn inc(&self, c: IbCounter) {
        self.add_idx(c as usize, 1);
    }
    /// Adds `n`.
    pub fn add(&self, c: IbCounter, n: u64) {
        self.add_idx(c as usize, n);
    }
}

impl Default for IbStats {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_core_names_in_order() {
        // net/rds/stats.c rds_stat_names (mainline, plus mprds_catchup_tx0_retries from the
        // 2026 series); ours follow.
        let kernel = "conn_reset recv_drop_bad_checksum recv_drop_old_seq recv_drop_no_sock \
            recv_drop_dead_sock recv_deliver_raced recv_delivered recv_queued \
            recv_immediate_retry recv_delayed_retry recv_ack_required recv_rdma_bytes recv_ping \
            send_queue_empty send_queue_full send_lock_contention send_lock_queue_raced \
            send_immediate_retry send_delayed_retry send_drop_acked send_ack_required \
            send_queued send_rdma send_rdma_bytes send_pong page_remainder_hit \
            page_remainder_miss copy_to_user copy_from_user cong_update_queued \
            cong_update_received cong_send_error cong_send_blocked recv_bytes_added_to_sock \
            recv_bytes_freed_fromsock send_stuck_rm mprds_catchup_tx0_retries";
        let kernel: Vec<_> = kernel.split_whitespace().collect();
        assert_eq!(kernel.len(), 37);
        assert_eq!(&CORE_NAMES[..37], &kernel[..]);
        assert!(
            CORE_NAMES.iter().all(|n| n.len() < 32),
            "fits rds_info_counter.name"
        );
    }

    #[test]
    fn transport_names() {
        assert_eq!(
            TCP_NAMES,
            [
                "tcp_data_ready_calls",
                "tcp_write_space_calls",
                "tcp_sndbuf_full",
                "tcp_connect_raced",
                "tcp_listen_closed_stale",
                "tcp_accept_emfile",
                "tcp_listen_paused",
                "tcp_accept_addr_limit",
                "tcp_accept_node_limit",
                "tcp_wait_addr_evicted",
                "tcp_wait_node_evicted",
                "tcp_wait_expired",
                "tcp_connect_refused",
                "tcp_drain_expired",
                "tcp_partial_timeouts",
                "tcp_acks_by_waiter"
            ]
        );
        assert_eq!(IB_NAMES.len(), 41);
        assert_eq!(IB_NAMES[0], "ib_connect_raced");
        assert_eq!(IB_NAMES[22], "ib_ack_received");
        assert_eq!(IB_NAMES[38], "ib_atomic_fadd");
        // This stack's own, after the kernel's.
        assert_eq!(IB_NAMES[39..], ["ib_cq_arm", "ib_cq_polled"]);
    }

    #[test]
    fn descriptions_are_the_docs_on_one_line() {
        assert_eq!(
            Counter::ConnReset.description(),
            "A path was reset (went down and its state was recycled)."
        );
        assert_eq!(
            describe("recv_drop_no_mem"),
            Some(
                "(This stack) A received message (or the pong a ping asked for) was dropped: \
                 the node's memory budget was used up."
            )
        );
        assert_eq!(
            describe("tcp_sndbuf_full"),
            Some("A write found the TCP send buffer full.")
        );
        assert_eq!(
            describe("ib_atomic_fadd"),
            Some("Atomic fetch-and-add ops.")
        );
        assert_eq!(describe("recv_hb_ping"), None);
        for n in CORE_NAMES.iter().chain(TCP_NAMES).chain(IB_NAMES) {
            let d = describe(n).unwrap();
            assert!(
                !d.is_empty() && !d.contains('\n') && !d.contains("  "),
                "{n}: {d:?}"
            );
        }
    }

    #[test]
    fn counting() {
        let mut s = Stats::default();
        s.inc(Counter::RecvPing);
        s.add(Counter::RecvPing, 2);
        assert_eq!(s.get(Counter::RecvPing), 3);
        assert_eq!(
            s.iter().find(|(n, _)| *n == "recv_ping"),
            Some(("recv_ping", 3))
        );
        s.reset();
        assert_eq!(s.get(Counter::RecvPing), 0);
        let t = TcpStats::new();
        t.inc(TcpCounter::TcpSndbufFull);
        assert_eq!(t.snapshot()[2], ("tcp_sndbuf_full", 1));
    }
}
