//! The node's trace tap, the front end the I/O path calls: every RDS frame the node sends or
//! receives, with a wall-clock timestamp, direction, addresses, lane and transport endpoints,
//! the payload cut at a snap length, becomes one binary trace record
//! ([`crate::trace::REC_HDR_LEN`]) in the session's chunk queue (`queue.rs`).
//!
//! When no trace runs, the data path pays one relaxed atomic load per frame
//! ([`Tap::enabled`]). When one runs, each frame costs one lock, one timestamp, the fixed part
//! and the 48 header bytes copied into a preallocated chunk of at most [`CHUNK_SIZE`] record
//! bytes, and the payload (cut at the snap length first) either copied too (short ones, and
//! transports that reuse their buffers) or, when the transport holds it in a [`Bytes`] and it
//! is long, kept by reference: the data path does not copy it. The consumer takes whole
//! chunks, on its own thread, outside the lock: to send them as control frames
//! ([`crate::ctl::Reply::TraceFrames`]) the control server takes them flattened into records
//! back to back ([`Tap::take_batches`], which copies the payloads kept by reference); to write
//! a capture file it reads the records in place ([`Tap::take_chunks`], [`TapChunk::records`]),
//! so a payload is copied once, into the file's buffer.
//! The queue is bounded in frames and bytes (payloads kept by reference count in full); when
//! the consumer falls behind, frames are dropped and counted, never blocking the data path,
//! and until the consumer takes records again the data path counts them with one atomic
//! operation, without the lock. A transmit pass gathers its frames in [`TxFrames`], which takes
//! a reference to a payload only when the snap length keeps enough of it.
//! One trace session at a time per node.
//!
//! RDS/TCP frames come from the TCP transport ([`Tap::record_tcp`]); RDS/IB fragments from
//! the IB transport ([`Tap::record_ib`]: every posted SEND, ACK-only frames included, and
//! every received fragment).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use nix::time::{clock_gettime, ClockId};

use crate::trace::{record_head, Direction, TapFrame, Transport, MAX_SNAPLEN};
use crate::wire::HEADER_LEN;

mod queue;

use queue::{Origin, Pushed, Session, SHARE_MIN};
pub use queue::{TapFilter, CHUNK_SIZE, MAX_QUEUED_BYTES};

/// The record format's names as the node's transports and control server use them (`Dir` is
/// [`crate::trace::Direction`]).
pub use crate::trace::{
    decode_records, Direction as Dir, TapBatch, TapChunk, MAX_RECORD, REC_HDR_LEN,
};

/// The queue pairs (and port LIDs) of an RDS/IB connection, as [`Tap::record_ib`] takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IbQps {
    /// The local queue pair number (24 bits).
    pub local_qpn: u32,
    /// The peer's queue pair number (24 bits).
    pub peer_qpn: u32,
    /// The local port's LID (0 when unknown, e.g. RoCE).
    pub local_lid: u16,
    /// The peer port's LID (0 when unknown).
    pub peer_lid: u16,
}

/// Wall-clock nanoseconds since the Unix epoch: `clock_gettime(CLOCK_REALTIME)` read directly
/// (a third of a record's cost went to `SystemTime`'s checked conversions).
fn now_ns() -> u64 {
    match clock_gettime(ClockId::CLOCK_REALTIME) {
        Ok(t) => (t.tv_sec() as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(t.tv_nsec() as u64),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    }
}

/// Bits of [`Tap::overflow`]: the session stopped (frames are no longer counted).
const OVERFLOW_STOPPED: u64 = 1 << 63;
/// The queue is full: the data path counts frames as dropped without taking the lock.
const OVERFLOW_FULL: u64 = 1 << 62;
/// The frames dropped that way.
const OVERFLOW_COUNT: u64 = OVERFLOW_FULL - 1;

/// The payload of a frame in [`TxFrames`].
#[derive(Debug)]
enum TxPayload {
    /// Kept by reference.
    Shared(Bytes),
    /// The kept bytes are `TxFrames::inline[start..end]`; `len` is the payload's length.
    Inline {
        start: usize,
        end: usize,
        len: usize,
    },
}

/// The frames of one transmit pass, gathered for one [`TxFrames::record`] after the transport
/// moved them to its output queue. A payload the session keeps long enough to hold by
/// reference is cloned (a `Bytes` reference); of any other, only the bytes the snap length
/// keeps are copied, so a short snap length costs no reference counting on the data path.
#[derive(Debug, Default)]
pub struct TxFrames {
    frames: Vec<([u8; HEADER_LEN], TxPayload)>,
    inline: Vec<u8>,
}

impl TxFrames {
    /// Adds a frame (call only when [`Tap::enabled`]).
    pub fn push(&mut self, tap: &Tap, hdr: &[u8; HEADER_LEN], payload: &Bytes) {
        let keep = payload.len().min(tap.snap_payload.load(Ordering::Relaxed));
        let p = if keep >= SHARE_MIN {
            TxPayload::Shared(payload.clone())
        } else {
            let start = self.inline.len();
            self.inline.extend_from_slice(&payload[..keep]);
            TxPayload::Inline {
                start,
                end: self.inline.len(),
                len: payload.len(),
            }
        };
        self.frames.push((*hdr, p));
    }

    /// Whether no frame was added since the last [`TxFrames::record`].
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Records the frames as [`Tap::record_tcp`] does (sent by this node) and forgets them.
    pub fn record(
        &mut self,
        tap: &Tap,
        laddr: IpAddr,
        faddr: IpAddr,
        lane: usize,
        local: SocketAddr,
        peer: SocketAddr,
    ) {
        let o = Origin::new(
            Direction::Tx,
            laddr,
            faddr,
            lane,
            Transport::Tcp { local, peer },
        );
        let inline = &self.inline;
        tap.push_all(
            &o,
            self.frames.iter().map(|(h, p)| match p {
                TxPayload::Shared(b) => (&h[..], &b[..], b.len(), Some(b)),
                TxPayload::Inline { start, end, len } => {
                    (&h[..], &inline[*start..*end], *len, None)
                }
            }),
        );
        self.frames.clear();
        self.inline.clear();
    }
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
    /// Payload bytes the session keeps of a frame at most (snap length − 48): the data path
    /// decides with it whether a payload is worth a reference ([`TxFrames::push`]).
    snap_payload: AtomicUsize,
    /// While the queue is full (and the session has no filter), the data path counts the
    /// frames it drops here instead of taking the lock: [`OVERFLOW_FULL`] set (under the
    /// lock) when a frame was dropped, cleared when the consumer takes records;
    /// [`OVERFLOW_STOPPED`] set by [`Tap::stop`], which folds the count
    /// ([`OVERFLOW_COUNT`]) into the session's.
    overflow: AtomicU64,
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

    /// Starts the session: queue of `cap` frames (and [`MAX_QUEUED_BYTES`]), frames cut so
    /// that header + payload ≤ `snaplen` (at least the 48 header bytes are kept, at most
    /// [`MAX_SNAPLEN`]).
    ///
    /// # Errors
    /// [`TapError::Busy`] if a session runs.
    pub fn start(&self, snaplen: usize, cap: usize, filter: TapFilter) -> Result<(), TapError> {
        let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        if s.as_ref().is_some_and(|s| !s.stopped) {
            return Err(TapError::Busy);
        }
        let snaplen = snaplen.clamp(HEADER_LEN, MAX_SNAPLEN);
        *s = Some(Session::new(snaplen, cap, filter));
        self.snap_payload
            .store(snaplen - HEADER_LEN, Ordering::Relaxed);
        self.overflow.store(0, Ordering::Relaxed);
        self.enabled.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Stops the session; queued frames can still be taken. Returns its counters.
    pub fn stop(&self) -> TapStats {
        self.enabled.store(false, Ordering::Relaxed);
        let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        // Frames counted without the lock until now; none are after this.
        let fast = self.overflow.fetch_or(OVERFLOW_STOPPED, Ordering::Relaxed) & OVERFLOW_COUNT;
        let st = s.as_mut().map_or(TapStats::default(), |s| {
            if !s.stopped {
                s.dropped += fast;
            }
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
            dropped: s.dropped
                + if s.stopped {
                    0
                } else {
                    self.overflow.load(Ordering::Relaxed) & OVERFLOW_COUNT
                },
        })
    }

    fn take_inner(&self, max: Option<usize>, timeout: Duration) -> Option<Vec<TapChunk>> {
        let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let deadline = Instant::now() + timeout;
        loop {
            let sess = s.as_mut()?;
            if sess.stopped && !sess.has_ready() {
                let v = sess.take(max);
                if v.is_empty() {
                    *s = None;
                    return None;
                }
                return Some(v);
            }
            let now = Instant::now();
            if sess.has_ready() || now >= deadline {
                let v = sess.take(max);
                // There is room again: frames go through the lock until the next drop.
                self.overflow.fetch_and(!OVERFLOW_FULL, Ordering::Relaxed);
                return Some(v);
            }
            sess.waiting = true;
            s = self
                .ready
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            if let Some(sess) = s.as_mut() {
                sess.waiting = false;
            }
        }
    }

    /// Takes the queued trace records in whole chunks: waits up to `timeout` for a full chunk
    /// ([`CHUNK_SIZE`]), then takes what there is (possibly nothing: an empty vector). Returns
    /// `None` once the session stopped and everything was taken. Give each batch's buffer
    /// back with [`Tap::recycle`] to spare the data path an allocation.
    pub fn take_batches(&self, timeout: Duration) -> Option<Vec<TapBatch>> {
        let chunks = self.take_inner(None, timeout)?;
        Some(chunks.into_iter().map(|c| self.flatten(c)).collect())
    }

    /// [`Tap::take_batches`] without flattening: the records as the data path wrote them, for
    /// a consumer that reads them in place (no copy of the payloads kept by reference). Give
    /// each chunk back with [`Tap::recycle_chunk`].
    pub fn take_chunks(&self, timeout: Duration) -> Option<Vec<TapChunk>> {
        self.take_inner(None, timeout)
    }

    /// Returns a taken chunk's buffer to the session for reuse (and lets go of the payloads
    /// it kept).
    pub fn recycle_chunk(&self, c: TapChunk) {
        self.recycle(c.into_buffer());
    }

    /// Flattens a chunk outside the lock (the copies of shared payloads are the consumer's
    /// work, not the data path's), into a recycled buffer.
    fn flatten(&self, c: TapChunk) -> TapBatch {
        if !c.has_shared() {
            return c.into_batch();
        }
        let need = c.size();
        let buf = {
            let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
            s.as_mut()
                .and_then(|s| s.take_free(need))
                .unwrap_or_else(|| Vec::with_capacity(need.max(CHUNK_SIZE)))
        };
        let (batch, inline) = c.flatten(buf);
        self.recycle(inline);
        batch
    }

    /// Returns a taken batch's buffer to the session for reuse.
    pub fn recycle(&self, mut buf: Vec<u8>) {
        // Only chunk-sized buffers: a batch must stay within one control frame.
        if buf.capacity() < CHUNK_SIZE || buf.capacity() > CHUNK_SIZE.max(MAX_RECORD) {
            return;
        }
        buf.clear();
        let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sess) = s.as_mut() {
            sess.give_free(buf);
        }
    }

    /// Takes up to `max` queued frames (decoded), waiting up to `timeout` for a full chunk.
    /// Returns an empty vector at the timeout when nothing was captured, and `None` once the
    /// session stopped and everything was taken.
    pub fn take(&self, max: usize, timeout: Duration) -> Option<Vec<TapFrame>> {
        let batches = self.take_inner(Some(max), timeout)?;
        Some(
            batches
                .into_iter()
                .flat_map(|c| decode_records(Bytes::from(c.into_batch().data)))
                .filter_map(Result::ok)
                .collect(),
        )
    }

    /// Records one frame (call only when [`Tap::enabled`]): `hdr` is the frame's 48-byte
    /// header, `payload` the bytes that follow it on the transport.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        dir: Direction,
        laddr: IpAddr,
        faddr: IpAddr,
        lane: usize,
        transport: Transport,
        hdr: &[u8],
        payload: &[u8],
    ) {
        let o = Origin::new(dir, laddr, faddr, lane, transport);
        self.push_all(&o, [(hdr, payload, payload.len(), None)]);
    }

    /// Records RDS/TCP frames `(header, payload)` of one connection and direction, such as
    /// those of one read or one transmit pass: one lock and one timestamp for all (call only
    /// when [`Tap::enabled`]). A long payload is kept by reference (no copy on the data path).
    #[allow(clippy::too_many_arguments)]
    pub fn record_tcp<'a>(
        &self,
        dir: Direction,
        laddr: IpAddr,
        faddr: IpAddr,
        lane: usize,
        local: SocketAddr,
        peer: SocketAddr,
        frames: impl IntoIterator<Item = (impl AsRef<[u8]>, &'a Bytes)>,
    ) {
        let o = Origin::new(dir, laddr, faddr, lane, Transport::Tcp { local, peer });
        self.push_all(
            &o,
            frames
                .into_iter()
                .map(|(h, p)| (h, &p[..], p.len(), Some(p))),
        );
    }

    /// Queues frames `(header, payload as far as kept, payload length, the payload's Bytes if
    /// shareable)` of one origin under one lock, with one timestamp; or, while the queue is
    /// full, counts them as dropped without the lock.
    fn push_all<'a>(
        &self,
        o: &Origin,
        frames: impl IntoIterator<Item = (impl AsRef<[u8]>, &'a [u8], usize, Option<&'a Bytes>)>,
    ) {
        if self.overflow.load(Ordering::Relaxed) & OVERFLOW_FULL != 0 {
            let n = frames.into_iter().count() as u64;
            let _ = self
                .overflow
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                    (v & OVERFLOW_STOPPED == 0).then_some(v + n)
                });
            return;
        }
        let mut guard = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let Some(s) = guard.as_mut().filter(|s| !s.stopped) else {
            return;
        };
        let head = record_head(
            now_ns(),
            o.dir,
            o.laddr,
            o.faddr,
            o.lane,
            &o.transport,
            0,
            0,
        );
        let (mut wake, mut dropped) = (false, false);
        for (hdr, payload, len, shared) in frames {
            match s.push(&head, o, hdr.as_ref(), payload, len, shared) {
                Pushed::Queued { wake: w } => wake |= w,
                Pushed::Filtered => {}
                Pushed::Dropped => dropped = true,
            }
        }
        // Only a session without a filter: the lock-free count cannot tell which frames the
        // filter would have wanted.
        if dropped && s.filter == TapFilter::default() {
            self.overflow.fetch_or(OVERFLOW_FULL, Ordering::Relaxed);
        }
        drop(guard);
        if wake {
            self.ready.notify_one();
        }
    }

    /// Records one RDS/IB fragment: call it (only when [`Tap::enabled`]) for every SEND the IB
    /// transport posts, ACK-only frames included (`dir` [`Direction::Tx`], `solicited` as posted),
    /// and for every received fragment (`dir` [`Direction::Rx`], `solicited` from the completion if
    /// known, else `false`). `hdr` is the 48-byte RDS header, `payload` the fragment's bytes
    /// that follow it in the SEND (at most 4096; empty for ACK-only frames); `laddr`/`faddr`
    /// the connection's local and peer RDS (IP) addresses, `lane` its path index (0 on IB).
    #[allow(clippy::too_many_arguments)]
    pub fn record_ib(
        &self,
        dir: Direction,
        laddr: IpAddr,
        faddr: IpAddr,
        lane: usize,
        qps: IbQps,
        solicited: bool,
        hdr: &[u8],
        payload: &[u8],
    ) {
        if !self.enabled() {
            return;
        }
        self.record(
            dir,
            laddr,
            faddr,
            lane,
            Transport::Ib {
                local_qpn: qps.local_qpn,
                peer_qpn: qps.peer_qpn,
                local_lid: qps.local_lid,
                peer_lid: qps.peer_lid,
                solicited,
            },
            hdr,
            payload,
        );
    }
}

#[cfg(test)]
mod tests;
