//! The chunk queue of a trace session: the data path appends each frame's trace record to the
//! current chunk under the tap's lock ([`Session::push`]); a chunk is sealed when the next
//! record does not fit [`CHUNK_SIZE`], and the consumer takes sealed chunks
//! ([`Session::take`]). The queue is bounded in frames and in bytes ([`MAX_QUEUED_BYTES`]);
//! a frame beyond either bound is dropped and counted.

use std::collections::VecDeque;
use std::net::IpAddr;

use bytes::Bytes;

use crate::trace::{Direction, TapChunk, Transport, REC_HDR_LEN};

/// Most captured bytes (trace records) a session queues; frames beyond are dropped (and
/// counted) like frames beyond the queue's frame limit, so a slow consumer of large frames
/// cannot make the node hold gigabytes.
pub const MAX_QUEUED_BYTES: usize = 64 << 20;

/// Size of the chunks trace records are written into; a chunk is handed to the consumer when
/// the next record does not fit (a record larger than a chunk gets a chunk of its own). Every
/// batch the tap hands out is at most `max(CHUNK_SIZE, MAX_RECORD)` bytes.
pub const CHUNK_SIZE: usize = 1 << 20;

/// Recycled chunk buffers a session keeps.
const FREE_CHUNKS: usize = 8;

/// Payloads shorter than this are copied into the chunk; longer ones are kept by reference
/// (the transport's own buffer, shared) and copied by the consumer.
pub(super) const SHARE_MIN: usize = 256;

/// Which frames a session wants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TapFilter {
    /// Only frames to or from this peer address.
    pub peer: Option<IpAddr>,
    /// Only frames whose RDS source or destination port is this.
    pub port: Option<u16>,
}

/// What the records of one connection and direction share.
#[derive(Debug, Clone, Copy)]
pub(super) struct Origin {
    pub dir: Direction,
    pub laddr: IpAddr,
    pub faddr: IpAddr,
    pub lane: u8,
    pub transport: Transport,
}

impl Origin {
    /// The origin of frames on path `lane` (saturated at 255).
    pub fn new(
        dir: Direction,
        laddr: IpAddr,
        faddr: IpAddr,
        lane: usize,
        transport: Transport,
    ) -> Self {
        Origin {
            dir,
            laddr,
            faddr,
            lane: lane.min(255) as u8,
            transport,
        }
    }
}

/// What [`Session::push`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pushed {
    /// Queued; `wake`: a chunk was sealed while the consumer waits for one.
    Queued { wake: bool },
    /// Not wanted by the session's filter.
    Filtered,
    /// Dropped (and counted): the queue is full.
    Dropped,
}

/// One trace session's queue and counters.
#[derive(Debug)]
pub(super) struct Session {
    /// Sealed chunks, oldest first.
    ready: VecDeque<TapChunk>,
    /// The chunk being written.
    cur: TapChunk,
    /// Recycled buffers.
    free: Vec<Vec<u8>>,
    /// Record bytes queued (`ready` and `cur`, flattened).
    bytes: usize,
    /// Frames queued.
    frames: usize,
    cap: usize,
    snaplen: usize,
    pub filter: TapFilter,
    pub dropped: u64,
    pub captured: u64,
    pub stopped: bool,
    /// The consumer waits on the condition variable (a notify is a system call even when
    /// nobody waits, so the data path notifies only then).
    pub waiting: bool,
}

impl Session {
    /// A running session: at most `cap` frames (at least 1) and [`MAX_QUEUED_BYTES`] queued,
    /// frames cut at `snaplen` bytes.
    pub fn new(snaplen: usize, cap: usize, filter: TapFilter) -> Self {
        Session {
            ready: VecDeque::new(),
            cur: TapChunk::with_buffer(Vec::with_capacity(CHUNK_SIZE)),
            free: Vec::new(),
            bytes: 0,
            frames: 0,
            cap: cap.max(1),
            snaplen,
            filter,
            dropped: 0,
            captured: 0,
            stopped: false,
            waiting: false,
        }
    }

    /// Whether a sealed chunk waits for the consumer.
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// A recycled buffer of at least `need` bytes, if the session keeps one.
    pub fn take_free(&mut self, need: usize) -> Option<Vec<u8>> {
        let i = self.free.iter().position(|v| v.capacity() >= need)?;
        Some(self.free.swap_remove(i))
    }

    /// Keeps an empty buffer for reuse (up to [`FREE_CHUNKS`]).
    pub fn give_free(&mut self, buf: Vec<u8>) {
        if self.free.len() < FREE_CHUNKS {
            self.free.push(buf);
        }
    }

    /// Moves the current chunk to `ready` and starts a new one whose buffer holds at least
    /// `need` bytes.
    fn seal(&mut self, need: usize) {
        let next = match self.free.pop() {
            Some(v) if v.capacity() >= need => v,
            _ => Vec::with_capacity(need.max(CHUNK_SIZE)),
        };
        let full = std::mem::replace(&mut self.cur, TapChunk::with_buffer(next));
        if full.frames() > 0 {
            self.ready.push_back(full);
        }
    }

    /// Queues one frame (or drops and counts it): `payload` is the frame's payload as far as the
    /// caller has it (all of it, or at least what the snap length keeps), `len` its length on
    /// the wire, `shared` the payload's `Bytes` when it may be kept by reference.
    ///
    /// `head` is the fixed part of the frame's record with the lengths (its first 8 bytes)
    /// still to fill: it is the same for every frame of one call of the tap's `push_all`.
    pub fn push(
        &mut self,
        head: &[u8; REC_HDR_LEN],
        o: &Origin,
        hdr: &[u8],
        payload: &[u8],
        len: usize,
        shared: Option<&Bytes>,
    ) -> Pushed {
        if self.filter.peer.is_some_and(|p| p != o.faddr) {
            return Pushed::Filtered;
        }
        if let Some(port) = self.filter.port {
            let (sp, dp) = if hdr.len() >= 24 {
                (
                    u16::from_be_bytes([hdr[20], hdr[21]]),
                    u16::from_be_bytes([hdr[22], hdr[23]]),
                )
            } else {
                (0, 0)
            };
            if sp != port && dp != port {
                return Pushed::Filtered;
            }
        }
        let hdr = &hdr[..hdr.len().min(self.snaplen)];
        let keep = payload.len().min(self.snaplen - hdr.len());
        let rec = REC_HDR_LEN + hdr.len() + keep;
        if self.frames >= self.cap || self.bytes + rec > MAX_QUEUED_BYTES {
            self.dropped += 1;
            return Pushed::Dropped;
        }
        let share = shared.filter(|_| keep >= SHARE_MIN);
        let inline = if share.is_some() {
            REC_HDR_LEN + hdr.len()
        } else {
            rec
        };
        let mut wake = false;
        if self.cur.frames() > 0 && self.cur.size() + rec > CHUNK_SIZE {
            self.seal(inline);
            wake = self.waiting;
        }
        let orig_len = u32::try_from(hdr.len() + len).unwrap_or(u32::MAX);
        self.cur.push(head, orig_len, hdr, &payload[..keep], share);
        self.bytes += rec;
        self.frames += 1;
        self.captured += 1;
        Pushed::Queued { wake }
    }

    /// Takes the oldest `max` frames at most, flattened (whole chunks, not flattened yet, when
    /// `max` is `None`).
    pub fn take(&mut self, max: Option<usize>) -> Vec<TapChunk> {
        if self.ready.is_empty() && self.cur.frames() > 0 {
            self.seal(0);
        }
        let mut out: Vec<TapChunk> = match max {
            None => self.ready.drain(..).collect(),
            Some(max) => {
                let mut v = Vec::new();
                let mut left = max.max(1);
                while left > 0 {
                    let Some(c) = self.ready.pop_front() else {
                        break;
                    };
                    let (mut b, _) = c.flatten(Vec::new());
                    if b.frames as usize <= left {
                        left -= b.frames as usize;
                        v.push(TapChunk::from_batch(b));
                    } else {
                        v.push(TapChunk::from_batch(b.split_front(left)));
                        self.ready.push_front(TapChunk::from_batch(b));
                        left = 0;
                    }
                }
                v
            }
        };
        out.retain(|c| c.frames() > 0);
        for c in &out {
            self.bytes -= c.size();
            self.frames -= c.frames() as usize;
        }
        out
    }
}
