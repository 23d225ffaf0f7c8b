//! The node's trace tap: every RDS frame the node sends or receives, with a wall-clock
//! timestamp, direction, addresses, lane and transport endpoints, the payload cut at a snap
//! length.
//!
//! When no trace runs, the data path pays one relaxed atomic load per frame
//! ([`Tap::enabled`]). When one runs, frames go into a bounded queue; when the consumer falls
//! behind, frames are dropped and counted, never blocking the data path. One trace session
//! at a time per node.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::HEADER_LEN;

/// Direction as seen by the tapped node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Sent by this node.
    Tx,
    /// Received by this node.
    Rx,
}

/// The transport endpoints of a tapped frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapTransport {
    /// RDS/TCP: the TCP connection's local and peer socket addresses.
    Tcp {
        /// Local TCP endpoint.
        local: SocketAddr,
        /// Peer TCP endpoint.
        peer: SocketAddr,
    },
    /// RDS over IB: queue pair numbers; each frame is one fragment.
    Ib {
        /// Local QP number.
        local_qpn: u32,
        /// Peer QP number.
        peer_qpn: u32,
        /// The solicited-event bit of the SEND.
        solicited: bool,
    },
    /// Same-node delivery.
    Loopback,
}

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapFrame {
    /// Nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Direction.
    pub dir: Dir,
    /// Local RDS address.
    pub laddr: IpAddr,
    /// Peer RDS address.
    pub faddr: IpAddr,
    /// Path (lane) index.
    pub lane: u8,
    /// Transport endpoints.
    pub transport: TapTransport,
    /// Length on the wire: 48 + payload bytes of this frame.
    pub orig_len: u32,
    /// Header and payload, cut at the snap length.
    pub data: Bytes,
}

/// Which frames a session wants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TapFilter {
    /// Only frames to or from this peer address.
    pub peer: Option<IpAddr>,
    /// Only frames whose RDS source or destination port is this.
    pub port: Option<u16>,
}

/// Most captured bytes a session queues; frames beyond are dropped (and counted) like frames
/// beyond the queue's frame limit, so a slow consumer of large frames cannot make the node
/// hold gigabytes (65536 frames of 1 MiB each).
pub const MAX_QUEUED_BYTES: usize = 64 << 20;

#[derive(Debug)]
struct Session {
    queue: VecDeque<TapFrame>,
    /// Captured bytes in `queue`.
    bytes: usize,
    cap: usize,
    snaplen: usize,
    filter: TapFilter,
    dropped: u64,
    captured: u64,
    stopped: bool,
}

/// Why a trace cannot start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TapError {
    /// Another trace session is running on this node.
    #[error("a trace session is already running on this node")]
    Busy,
}

/// The tap of one node.
#[derive(Debug, Default)]
pub struct Tap {
    enabled: AtomicBool,
    session: Mutex<Option<Session>>,
    ready: Condvar,
}

/// Counters of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TapStats {
    /// Frames queued for the consumer.
    pub captured: u64,
    /// Frames dropped because the queue was full.
    pub dropped: u64,
}

impl Tap {
    /// Whether a trace runs (one relaxed load; the data path checks this first).
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Starts the session: queue of `cap` frames, payload cut so that header + payload ≤
    /// `snaplen` (at least the 48 header bytes are kept).
    ///
    /// # Errors
    /// [`TapError::Busy`] if a session runs.
    pub fn start(&self, snaplen: usize, cap: usize, filter: TapFilter) -> Result<(), TapError> {
        let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        if s.as_ref().is_some_and(|s| !s.stopped) {
            return Err(TapError::Busy);
        }
        *s = Some(Session {
            queue: VecDeque::with_capacity(cap.min(1 << 16)),
            bytes: 0,
            cap: cap.max(1),
            snaplen: snaplen.max(HEADER_LEN),
            filter,
            dropped: 0,
            captured: 0,
            stopped: false,
        });
        self.enabled.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Stops the session; queued frames can still be taken. Returns its counters.
    pub fn stop(&self) -> TapStats {
        self.enabled.store(false, Ordering::Relaxed);
        let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let st = s.as_mut().map_or(TapStats::default(), |s| {
            s.stopped = true;
            TapStats {
                captured: s.captured,
                dropped: s.dropped,
            }
        });
        self.ready.notify_all();
        st
    }

    /// Counters of the current (or last) session.
    pub fn stats(&self) -> TapStats {
        let s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        s.as_ref().map_or(TapStats::default(), |s| TapStats {
            captured: s.captured,
            dropped: s.dropped,
        })
    }

    /// Takes queued frames, waiting up to `timeout` for the first. Returns an empty vector at
    /// the timeout, and `None` once the session stopped and everything was taken.
    pub fn take(&self, max: usize, timeout: Duration) -> Option<Vec<TapFrame>> {
        let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let sess = s.as_mut()?;
            if !sess.queue.is_empty() {
                let n = sess.queue.len().min(max.max(1));
                let v: Vec<TapFrame> = sess.queue.drain(..n).collect();
                sess.bytes -= v.iter().map(|f| f.data.len()).sum::<usize>();
                return Some(v);
            }
            if sess.stopped {
                *s = None;
                return None;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Some(Vec::new());
            }
            s = self
                .ready
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Records one frame (call only when [`Tap::enabled`]).
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        dir: Dir,
        laddr: IpAddr,
        faddr: IpAddr,
        lane: usize,
        transport: TapTransport,
        hdr: &[u8],
        payload: &[u8],
    ) {
        let mut guard = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let Some(s) = guard.as_mut().filter(|s| !s.stopped) else {
            return;
        };
        if let Some(p) = s.filter.peer {
            if p != faddr {
                return;
            }
        }
        if let Some(port) = s.filter.port {
            let (sp, dp) = if hdr.len() >= 24 {
                (
                    u16::from_be_bytes([hdr[20], hdr[21]]),
                    u16::from_be_bytes([hdr[22], hdr[23]]),
                )
            } else {
                (0, 0)
            };
            if sp != port && dp != port {
                return;
            }
        }
        let keep = payload.len().min(s.snaplen.saturating_sub(hdr.len()));
        if s.queue.len() >= s.cap || s.bytes + hdr.len() + keep > MAX_QUEUED_BYTES {
            s.dropped += 1;
            return;
        }
        s.bytes += hdr.len() + keep;
        let mut data = BytesMut::with_capacity(hdr.len() + keep);
        data.put_slice(hdr);
        data.put_slice(&payload[..keep]);
        let ts_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        // The consumer waits only on an empty queue: wake it only then (a condition
        // variable's notify is a system call even when nobody waits).
        let wake = s.queue.is_empty();
        s.queue.push_back(TapFrame {
            ts_ns,
            dir,
            laddr,
            faddr,
            lane: lane as u8,
            transport,
            orig_len: (hdr.len() + payload.len()) as u32,
            data: data.freeze(),
        });
        s.captured += 1;
        drop(guard);
        if wake {
            self.ready.notify_one();
        }
    }

    /// [`Tap::record`] for an RDS/TCP frame.
    #[allow(clippy::too_many_arguments)]
    pub fn record_tcp(
        &self,
        dir: Dir,
        laddr: IpAddr,
        faddr: IpAddr,
        lane: usize,
        local: SocketAddr,
        peer: SocketAddr,
        hdr: &[u8],
        payload: &[u8],
    ) {
        self.record(
            dir,
            laddr,
            faddr,
            lane,
            TapTransport::Tcp { local, peer },
            hdr,
            payload,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn bounded_queue_counts_drops_and_snaps() {
        let tap = Tap::default();
        assert!(!tap.enabled());
        tap.start(48 + 4, 2, TapFilter::default()).unwrap();
        assert_eq!(tap.start(100, 2, TapFilter::default()), Err(TapError::Busy));
        let hdr = [0u8; 48];
        for _ in 0..3 {
            tap.record_tcp(
                Dir::Tx,
                "10.0.0.1".parse().unwrap(),
                "10.0.0.2".parse().unwrap(),
                3,
                addr("10.0.0.1:40003"),
                addr("10.0.0.2:16385"),
                &hdr,
                &[1, 2, 3, 4, 5, 6],
            );
        }
        let st = tap.stop();
        assert_eq!((st.captured, st.dropped), (2, 1));
        let frames = tap.take(10, Duration::ZERO).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].orig_len, 54);
        assert_eq!(&frames[0].data[48..], &[1, 2, 3, 4]);
        assert_eq!(frames[0].lane, 3);
        assert!(tap.take(10, Duration::ZERO).is_none());
        // A new session may start after the old one ended.
        tap.start(100, 2, TapFilter::default()).unwrap();
    }

    #[test]
    fn queued_bytes_are_bounded() {
        let tap = Tap::default();
        tap.start(usize::MAX, 1 << 16, TapFilter::default())
            .unwrap();
        let hdr = [0u8; 48];
        let payload = vec![7u8; 1 << 20];
        let per = 48 + (1 << 20);
        let fit = MAX_QUEUED_BYTES / per;
        let rec = |tap: &Tap| {
            tap.record_tcp(
                Dir::Tx,
                "10.0.0.1".parse().unwrap(),
                "10.0.0.2".parse().unwrap(),
                0,
                addr("10.0.0.1:40000"),
                addr("10.0.0.2:16385"),
                &hdr,
                &payload,
            )
        };
        for _ in 0..fit + 3 {
            rec(&tap);
        }
        assert_eq!(
            tap.stats(),
            TapStats {
                captured: fit as u64,
                dropped: 3
            }
        );
        // Taking frames makes room again.
        assert_eq!(tap.take(2, Duration::ZERO).unwrap().len(), 2);
        rec(&tap);
        rec(&tap);
        rec(&tap);
        assert_eq!(
            tap.stats(),
            TapStats {
                captured: fit as u64 + 2,
                dropped: 4
            }
        );
        tap.stop();
    }

    #[test]
    fn filters() {
        let tap = Tap::default();
        tap.start(
            1000,
            10,
            TapFilter {
                peer: Some("10.0.0.2".parse().unwrap()),
                port: Some(4000),
            },
        )
        .unwrap();
        let mut hdr = [0u8; 48];
        hdr[20..22].copy_from_slice(&4000u16.to_be_bytes());
        let l: IpAddr = "10.0.0.1".parse().unwrap();
        for peer in ["10.0.0.2", "10.0.0.3"] {
            tap.record(
                Dir::Rx,
                l,
                peer.parse().unwrap(),
                0,
                TapTransport::Loopback,
                &hdr,
                &[],
            );
        }
        hdr[20..22].copy_from_slice(&4001u16.to_be_bytes());
        tap.record(
            Dir::Rx,
            l,
            "10.0.0.2".parse().unwrap(),
            0,
            TapTransport::Loopback,
            &hdr,
            &[],
        );
        assert_eq!(tap.stats().captured, 1);
    }
}
