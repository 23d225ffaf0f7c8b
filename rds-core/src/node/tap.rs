//! The node's trace tap: every RDS frame the node sends or receives, with a wall-clock
//! timestamp, direction, addresses, lane and transport endpoints, the payload cut at a snap
//! length.
//!
//! When no trace runs, the data path pays one relaxed atomic load per frame
//! ([`Tap::enabled`]). When one runs, each frame becomes one binary *trace record*
//! ([`encode_record`]; layout in [`REC_HDR_LEN`]) in a preallocated chunk of at most
//! [`CHUNK_SIZE`] record bytes: one lock, one timestamp, the fixed part and the 48 header bytes
//! copied, and the payload (cut at the snap length first) either copied too (short ones, and
//! transports that reuse their buffers) or, when the transport holds it in a [`Bytes`] and it
//! is long, kept by reference: the data path does not copy it. The consumer takes whole chunks,
//! on its own thread, outside the lock: to send them as control frames
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

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::time::{clock_gettime, ClockId};

use bytes::Bytes;

use crate::wire::{HEADER_LEN, MAX_MSG_SIZE};

/// Direction as seen by the tapped node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Sent by this node.
    Tx,
    /// Received by this node.
    Rx,
}

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
    /// RDS over IB: queue pair numbers and LIDs; each frame is one fragment (one SEND).
    Ib {
        /// Local QP number.
        local_qpn: u32,
        /// Peer QP number.
        peer_qpn: u32,
        /// Local port LID (0 when unknown).
        local_lid: u16,
        /// Peer port LID (0 when unknown).
        peer_lid: u16,
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

/// Most captured bytes (trace records) a session queues; frames beyond are dropped (and
/// counted) like frames beyond the queue's frame limit, so a slow consumer of large frames
/// cannot make the node hold gigabytes.
pub const MAX_QUEUED_BYTES: usize = 64 << 20;

/// Size of the chunks trace records are written into; a chunk is handed to the consumer when
/// the next record does not fit (a record larger than a chunk gets a chunk of its own).
pub const CHUNK_SIZE: usize = 1 << 20;

/// Largest snap length: a whole frame of the largest message.
pub const MAX_SNAPLEN: usize = HEADER_LEN + MAX_MSG_SIZE;

/// Largest trace record: the fixed part and [`MAX_SNAPLEN`] frame bytes. Every batch
/// ([`TapBatch::data`]) is at most `max(CHUNK_SIZE, MAX_RECORD)` bytes.
pub const MAX_RECORD: usize = REC_HDR_LEN + MAX_SNAPLEN;

/// Recycled chunks a session keeps.
const FREE_CHUNKS: usize = 8;

/// Length of the fixed part of a binary trace record. A record is (integers little-endian;
/// both ends are the same build, so the layout is versioned by the control protocol's
/// version):
///
/// | offset | bytes | field |
/// |---:|---:|---|
/// | 0 | 4 | `cap`: frame bytes that follow the fixed part |
/// | 4 | 4 | `orig_len`: the frame's length on the wire (48 + its payload bytes) |
/// | 8 | 8 | timestamp, nanoseconds since the Unix epoch |
/// | 16 | 1 | direction: 0 sent, 1 received |
/// | 17 | 1 | lane |
/// | 18 | 1 | transport: 0 loopback, 1 TCP, 2 IB |
/// | 19 | 1 | flags: bit 0 local address IPv6, bit 1 peer address IPv6, bit 2 TCP local endpoint IPv6, bit 3 TCP peer endpoint IPv6, bit 4 IB solicited |
/// | 20 | 16 | local RDS address (IPv4: the first 4 bytes, the rest 0) |
/// | 36 | 16 | peer RDS address |
/// | 52 | 36 | TCP: local IP (16), local port (2), peer IP (16), peer port (2). IB: local QPN (4), peer QPN (4), local LID (2), peer LID (2), 24 zero bytes. Loopback: zeros |
/// | 88 | `cap` | the frame: its 48-byte header and payload, cut at the snap length |
pub const REC_HDR_LEN: usize = 88;

/// Length of [`TapFrameRef::flow_bytes`].
pub const FLOW_LEN: usize = REC_HDR_LEN - 16;

const F_LADDR6: u8 = 1;
const F_FADDR6: u8 = 2;
const F_TCP_LOCAL6: u8 = 4;
const F_TCP_PEER6: u8 = 8;
const F_SOLICITED: u8 = 16;
const T_LOOPBACK: u8 = 0;
const T_TCP: u8 = 1;
const T_IB: u8 = 2;

fn put_ip(out: &mut [u8], ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            out[..4].copy_from_slice(&a.octets());
            false
        }
        IpAddr::V6(a) => {
            out[..16].copy_from_slice(&a.octets());
            true
        }
    }
}

fn get_ip(b: &[u8], v6: bool) -> IpAddr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&b[..16]);
    if v6 {
        IpAddr::V6(Ipv6Addr::from(o))
    } else {
        IpAddr::V4(Ipv4Addr::new(o[0], o[1], o[2], o[3]))
    }
}

/// The fixed part of a record.
#[allow(clippy::too_many_arguments)]
fn record_head(
    ts_ns: u64,
    dir: Dir,
    laddr: IpAddr,
    faddr: IpAddr,
    lane: u8,
    transport: &TapTransport,
    cap: u32,
    orig_len: u32,
) -> [u8; REC_HDR_LEN] {
    let mut h = [0u8; REC_HDR_LEN];
    h[0..4].copy_from_slice(&cap.to_le_bytes());
    h[4..8].copy_from_slice(&orig_len.to_le_bytes());
    h[8..16].copy_from_slice(&ts_ns.to_le_bytes());
    h[16] = u8::from(dir == Dir::Rx);
    h[17] = lane;
    let mut flags = 0;
    if put_ip(&mut h[20..36], laddr) {
        flags |= F_LADDR6;
    }
    if put_ip(&mut h[36..52], faddr) {
        flags |= F_FADDR6;
    }
    h[18] = match *transport {
        TapTransport::Loopback => T_LOOPBACK,
        TapTransport::Tcp { local, peer } => {
            if put_ip(&mut h[52..68], local.ip()) {
                flags |= F_TCP_LOCAL6;
            }
            h[68..70].copy_from_slice(&local.port().to_le_bytes());
            if put_ip(&mut h[70..86], peer.ip()) {
                flags |= F_TCP_PEER6;
            }
            h[86..88].copy_from_slice(&peer.port().to_le_bytes());
            T_TCP
        }
        TapTransport::Ib {
            local_qpn,
            peer_qpn,
            local_lid,
            peer_lid,
            solicited,
        } => {
            h[52..56].copy_from_slice(&local_qpn.to_le_bytes());
            h[56..60].copy_from_slice(&peer_qpn.to_le_bytes());
            h[60..62].copy_from_slice(&local_lid.to_le_bytes());
            h[62..64].copy_from_slice(&peer_lid.to_le_bytes());
            if solicited {
                flags |= F_SOLICITED;
            }
            T_IB
        }
    };
    h[19] = flags;
    h
}

/// Appends `frame` as one binary trace record (see [`REC_HDR_LEN`]) to `out`. The node's tap
/// writes the same bytes itself; this is for tests and tools that produce records.
pub fn encode_record(out: &mut Vec<u8>, frame: &TapFrame) {
    let cap = u32::try_from(frame.data.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&record_head(
        frame.ts_ns,
        frame.dir,
        frame.laddr,
        frame.faddr,
        frame.lane,
        &frame.transport,
        cap,
        frame.orig_len,
    ));
    out.extend_from_slice(&frame.data[..cap as usize]);
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

/// A malformed trace record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordDecodeError {
    /// The batch ends inside a record.
    #[error("trace record at byte {0} is cut short")]
    Truncated(usize),
    /// An unknown direction or transport code.
    #[error("trace record at byte {0} has an unknown direction or transport")]
    BadCode(usize),
}

/// One trace record of a batch, read in place ([`decode_record_refs`]): the fields are
/// decoded when asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapFrameRef<'a> {
    head: &'a [u8; REC_HDR_LEN],
    /// The captured bytes: `data` then `tail` (a payload kept by reference, in a chunk).
    data: &'a [u8],
    tail: &'a [u8],
}

impl<'a> TapFrameRef<'a> {
    fn le16(&self, o: usize) -> u16 {
        u16::from_le_bytes([self.head[o], self.head[o + 1]])
    }

    fn le32(&self, o: usize) -> u32 {
        u32::from_le_bytes([
            self.head[o],
            self.head[o + 1],
            self.head[o + 2],
            self.head[o + 3],
        ])
    }

    fn flag(&self, f: u8) -> bool {
        self.head[19] & f != 0
    }

    /// The record's fixed part from the direction on (offsets 16 to 88: direction, lane,
    /// transport, flags, addresses and endpoints). Two records with the same bytes here
    /// decode to the same direction, addresses and transport, so a consumer that decoded
    /// one may reuse that for the other.
    pub fn flow_bytes(&self) -> &'a [u8; FLOW_LEN] {
        self.head[16..]
            .try_into()
            .expect("the fixed part is REC_HDR_LEN bytes")
    }

    /// Nanoseconds since the Unix epoch.
    pub fn ts_ns(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.head[8..16]);
        u64::from_le_bytes(b)
    }

    /// Direction.
    pub fn dir(&self) -> Dir {
        // `decode_at` admits 0 and 1 only.
        if self.head[16] == 0 {
            Dir::Tx
        } else {
            Dir::Rx
        }
    }

    /// Local RDS address.
    pub fn laddr(&self) -> IpAddr {
        get_ip(&self.head[20..36], self.flag(F_LADDR6))
    }

    /// Peer RDS address.
    pub fn faddr(&self) -> IpAddr {
        get_ip(&self.head[36..52], self.flag(F_FADDR6))
    }

    /// Path (lane) index.
    pub fn lane(&self) -> u8 {
        self.head[17]
    }

    /// Transport endpoints.
    pub fn transport(&self) -> TapTransport {
        match self.head[18] {
            T_TCP => TapTransport::Tcp {
                local: SocketAddr::new(
                    get_ip(&self.head[52..68], self.flag(F_TCP_LOCAL6)),
                    self.le16(68),
                ),
                peer: SocketAddr::new(
                    get_ip(&self.head[70..86], self.flag(F_TCP_PEER6)),
                    self.le16(86),
                ),
            },
            T_IB => TapTransport::Ib {
                local_qpn: self.le32(52),
                peer_qpn: self.le32(56),
                local_lid: self.le16(60),
                peer_lid: self.le16(62),
                solicited: self.flag(F_SOLICITED),
            },
            // `decode_at` admits the three codes only.
            _ => TapTransport::Loopback,
        }
    }

    /// Length on the wire: 48 + payload bytes of this frame.
    pub fn orig_len(&self) -> u32 {
        self.le32(4)
    }

    /// Header and payload, cut at the snap length, in two pieces: the first holds at least
    /// the header; the second is empty, or the payload when the record (in a [`TapChunk`])
    /// keeps it by reference.
    pub fn bytes(&self) -> [&'a [u8]; 2] {
        [self.data, self.tail]
    }

    /// The record as an owned frame whose bytes are `data`.
    fn with_data(&self, data: Bytes) -> TapFrame {
        TapFrame {
            ts_ns: self.ts_ns(),
            dir: self.dir(),
            laddr: self.laddr(),
            faddr: self.faddr(),
            lane: self.lane(),
            transport: self.transport(),
            orig_len: self.orig_len(),
            data,
        }
    }
}

/// Decodes the record at `off` of `batch`: the record and the offset of the next one, `None`
/// at the end, or why the record is malformed. `shared` is the next payload kept by reference
/// of a chunk (offset in `batch` where it belongs, and its bytes): when that offset falls in
/// this record, the record's bytes are the inline ones up to it, then the shared payload.
fn decode_at<'a>(
    batch: &'a [u8],
    off: usize,
    shared: Option<&'a (usize, Bytes)>,
) -> Option<Result<(TapFrameRef<'a>, usize), RecordDecodeError>> {
    let rest = batch.get(off..).filter(|r| !r.is_empty())?;
    let Some((head, rest)) = rest.split_first_chunk::<REC_HDR_LEN>() else {
        return Some(Err(RecordDecodeError::Truncated(off)));
    };
    let cap = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let start = off + REC_HDR_LEN;
    let (inline, tail) = match shared {
        Some((at, b)) if *at <= start + cap => {
            match at.checked_sub(start).filter(|n| n + b.len() == cap) {
                Some(n) => (n, &b[..]),
                None => return Some(Err(RecordDecodeError::Truncated(off))),
            }
        }
        _ => (cap, &[][..]),
    };
    let Some(data) = rest.get(..inline) else {
        return Some(Err(RecordDecodeError::Truncated(off)));
    };
    if head[16] > 1 || !matches!(head[18], T_LOOPBACK | T_TCP | T_IB) {
        return Some(Err(RecordDecodeError::BadCode(off)));
    }
    Some(Ok((TapFrameRef { head, data, tail }, start + inline)))
}

/// Decodes a batch of binary trace records (see [`REC_HDR_LEN`]), borrowing each frame's
/// bytes from `batch`. Stops after the first malformed record, which it yields as an error.
pub fn decode_record_refs(batch: &[u8]) -> RecordRefIter<'_> {
    RecordRefIter { batch, off: 0 }
}

/// Iterator of [`decode_record_refs`].
#[derive(Debug)]
pub struct RecordRefIter<'a> {
    batch: &'a [u8],
    off: usize,
}

impl<'a> Iterator for RecordRefIter<'a> {
    type Item = Result<TapFrameRef<'a>, RecordDecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        let r = decode_at(self.batch, self.off, None)?;
        // Any error ends the batch.
        self.off = match &r {
            Ok((_, next)) => *next,
            Err(_) => self.batch.len(),
        };
        Some(r.map(|(f, _)| f))
    }
}

/// Decodes a batch of binary trace records (see [`REC_HDR_LEN`]); each frame's bytes are a
/// slice of `batch` (no copy). Stops after the first malformed record, which it yields as an
/// error.
pub fn decode_records(batch: Bytes) -> RecordIter {
    RecordIter { batch, off: 0 }
}

/// Iterator of [`decode_records`].
#[derive(Debug)]
pub struct RecordIter {
    batch: Bytes,
    off: usize,
}

impl Iterator for RecordIter {
    type Item = Result<TapFrame, RecordDecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (f, next) = match decode_at(&self.batch, self.off, None)? {
            Ok(r) => r,
            Err(e) => {
                // Any error ends the batch.
                self.off = self.batch.len();
                return Some(Err(e));
            }
        };
        let frame = f.with_data(self.batch.slice(next - f.data.len()..next));
        self.off = next;
        Some(Ok(frame))
    }
}

/// Trace records taken from the tap as the data path wrote them ([`Tap::take_chunks`]): the
/// long payloads it kept by reference are not copied into the records; [`TapChunk::records`]
/// reads them where they are.
#[derive(Debug)]
pub struct TapChunk(Chunk);

impl TapChunk {
    /// Records in the chunk.
    pub fn frames(&self) -> u32 {
        self.0.frames
    }

    /// The records back to back, as [`Tap::take_batches`] gives them (the payloads kept by
    /// reference are copied).
    pub fn into_batch(self) -> TapBatch {
        self.0.flatten(Vec::new()).0
    }

    /// The records, in order, read in place (see [`decode_record_refs`]).
    pub fn records(&self) -> ChunkRecords<'_> {
        ChunkRecords {
            data: &self.0.data,
            shared: &self.0.shared,
            off: 0,
        }
    }
}

/// Iterator of [`TapChunk::records`].
#[derive(Debug)]
pub struct ChunkRecords<'a> {
    data: &'a [u8],
    /// Payloads kept by reference not reached yet.
    shared: &'a [(usize, Bytes)],
    off: usize,
}

impl<'a> Iterator for ChunkRecords<'a> {
    type Item = Result<TapFrameRef<'a>, RecordDecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        match decode_at(self.data, self.off, self.shared.first())? {
            Ok((f, next)) => {
                if !f.tail.is_empty() {
                    self.shared = &self.shared[1..];
                }
                self.off = next;
                Some(Ok(f))
            }
            Err(e) => {
                // Any error ends the chunk.
                self.off = self.data.len();
                Some(Err(e))
            }
        }
    }
}

/// Trace records taken from the tap in one piece: `frames` records, back to back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TapBatch {
    /// Records in `data`.
    pub frames: u32,
    /// The records (see [`REC_HDR_LEN`]).
    pub data: Vec<u8>,
}

/// What the records of one connection and direction share.
#[derive(Debug, Clone, Copy)]
struct Origin {
    dir: Dir,
    laddr: IpAddr,
    faddr: IpAddr,
    lane: u8,
    transport: TapTransport,
}

impl Origin {
    fn new(dir: Dir, laddr: IpAddr, faddr: IpAddr, lane: usize, transport: TapTransport) -> Self {
        Origin {
            dir,
            laddr,
            faddr,
            lane: lane.min(255) as u8,
            transport,
        }
    }
}

/// Payloads shorter than this are copied into the chunk; longer ones are kept by reference
/// (the transport's own buffer, shared) and copied by the consumer.
const SHARE_MIN: usize = 256;

/// A chunk being filled by the data path: trace records whose long payloads are not copied
/// yet. `shared` holds them in order with the offset in `data` where each belongs; the
/// consumer flattens the chunk into records back to back ([`Tap::take_batches`]).
#[derive(Debug, Default)]
struct Chunk {
    frames: u32,
    data: Vec<u8>,
    shared: Vec<(usize, Bytes)>,
    /// Length of the flattened records.
    size: usize,
}

impl Chunk {
    fn new(data: Vec<u8>) -> Self {
        Chunk {
            data,
            ..Chunk::default()
        }
    }

    /// The records back to back in `out` (cleared first); returns the batch and the inline
    /// buffer, now free.
    fn flatten(self, mut out: Vec<u8>) -> (TapBatch, Vec<u8>) {
        if self.shared.is_empty() {
            return (
                TapBatch {
                    frames: self.frames,
                    data: self.data,
                },
                out,
            );
        }
        out.clear();
        out.reserve(self.size);
        let mut last = 0;
        for (off, b) in &self.shared {
            out.extend_from_slice(&self.data[last..*off]);
            out.extend_from_slice(b);
            last = *off;
        }
        out.extend_from_slice(&self.data[last..]);
        (
            TapBatch {
                frames: self.frames,
                data: out,
            },
            self.data,
        )
    }

    fn from_batch(b: TapBatch) -> Self {
        Chunk {
            frames: b.frames,
            size: b.data.len(),
            data: b.data,
            shared: Vec::new(),
        }
    }
}

#[derive(Debug)]
struct Session {
    /// Sealed chunks, oldest first.
    ready: VecDeque<Chunk>,
    /// The chunk being written.
    cur: Chunk,
    /// Recycled buffers.
    free: Vec<Vec<u8>>,
    /// Record bytes queued (`ready` and `cur`, flattened).
    bytes: usize,
    /// Frames queued.
    frames: usize,
    cap: usize,
    snaplen: usize,
    filter: TapFilter,
    dropped: u64,
    captured: u64,
    stopped: bool,
    /// The consumer waits on the condition variable (a notify is a system call even when
    /// nobody waits, so the data path notifies only then).
    waiting: bool,
}

impl Session {
    /// Moves the current chunk to `ready` and starts a new one whose buffer holds at least
    /// `need` bytes.
    fn seal(&mut self, need: usize) {
        let next = match self.free.pop() {
            Some(v) if v.capacity() >= need => v,
            _ => Vec::with_capacity(need.max(CHUNK_SIZE)),
        };
        let full = std::mem::replace(&mut self.cur, Chunk::new(next));
        if full.frames > 0 {
            self.ready.push_back(full);
        }
    }

    /// Queues one frame (or drops and counts it): `payload` is the frame's payload as far as the
    /// caller has it (all of it, or at least what the snap length keeps), `len` its length on
    /// the wire, `shared` the payload's `Bytes` when it may be kept by reference.
    ///
    /// `head` is the fixed part of the frame's record with the lengths (its first 8 bytes)
    /// still to fill: it is the same for every frame of one call of [`Tap::push_all`].
    fn push(
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
        if self.cur.frames > 0 && self.cur.size + rec > CHUNK_SIZE {
            self.seal(inline);
            wake = self.waiting;
        }
        let orig_len = u32::try_from(hdr.len() + len).unwrap_or(u32::MAX);
        let c = &mut self.cur;
        let at = c.data.len();
        c.data.extend_from_slice(head);
        c.data[at..at + 4].copy_from_slice(&((hdr.len() + keep) as u32).to_le_bytes());
        c.data[at + 4..at + 8].copy_from_slice(&orig_len.to_le_bytes());
        c.data.extend_from_slice(hdr);
        match share {
            Some(b) => c.shared.push((c.data.len(), b.slice(..keep))),
            None => c.data.extend_from_slice(&payload[..keep]),
        }
        c.size += rec;
        c.frames += 1;
        self.bytes += rec;
        self.frames += 1;
        self.captured += 1;
        Pushed::Queued { wake }
    }

    /// Takes the oldest `max` frames at most, flattened (whole chunks, not flattened yet, when
    /// `max` is `None`).
    fn take(&mut self, max: Option<usize>) -> Vec<Chunk> {
        if self.ready.is_empty() && self.cur.frames > 0 {
            self.seal(0);
        }
        let mut out: Vec<Chunk> = match max {
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
                        v.push(Chunk::from_batch(b));
                    } else {
                        v.push(Chunk::from_batch(split_front(&mut b, left)));
                        self.ready.push_front(Chunk::from_batch(b));
                        left = 0;
                    }
                }
                v
            }
        };
        out.retain(|c| c.frames > 0);
        for c in &out {
            self.bytes -= c.size;
            self.frames -= c.frames as usize;
        }
        out
    }
}

/// Cuts the first `n` (< `b.frames`) records off `b`.
fn split_front(b: &mut TapBatch, n: usize) -> TapBatch {
    let mut off = 0;
    for _ in 0..n {
        let cap = u32::from_le_bytes([
            b.data[off],
            b.data[off + 1],
            b.data[off + 2],
            b.data[off + 3],
        ]) as usize;
        off += REC_HDR_LEN + cap;
    }
    let rest = b.data.split_off(off);
    let front = std::mem::replace(&mut b.data, rest);
    b.frames -= n as u32;
    TapBatch {
        frames: n as u32,
        data: front,
    }
}

/// What [`Session::push`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pushed {
    /// Queued; `wake`: a chunk was sealed while the consumer waits for one.
    Queued { wake: bool },
    /// Not wanted by the session's filter.
    Filtered,
    /// Dropped (and counted): the queue is full.
    Dropped,
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
            Dir::Tx,
            laddr,
            faddr,
            lane,
            TapTransport::Tcp { local, peer },
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
        *s = Some(Session {
            ready: VecDeque::new(),
            cur: Chunk::new(Vec::with_capacity(CHUNK_SIZE)),
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
        });
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

    fn take_inner(&self, max: Option<usize>, timeout: Duration) -> Option<Vec<Chunk>> {
        let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let deadline = Instant::now() + timeout;
        loop {
            let sess = s.as_mut()?;
            if sess.stopped && sess.ready.is_empty() {
                let v = sess.take(max);
                if v.is_empty() {
                    *s = None;
                    return None;
                }
                return Some(v);
            }
            let now = Instant::now();
            if !sess.ready.is_empty() || now >= deadline {
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
        let chunks = self.take_inner(None, timeout)?;
        Some(chunks.into_iter().map(TapChunk).collect())
    }

    /// Returns a taken chunk's buffer to the session for reuse (and lets go of the payloads
    /// it kept).
    pub fn recycle_chunk(&self, c: TapChunk) {
        self.recycle(c.0.data);
    }

    /// Flattens a chunk outside the lock (the copies of shared payloads are the consumer's
    /// work, not the data path's), into a recycled buffer.
    fn flatten(&self, c: Chunk) -> TapBatch {
        if c.shared.is_empty() {
            return c.flatten(Vec::new()).0;
        }
        let need = c.size;
        let buf = {
            let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
            s.as_mut()
                .and_then(|s| {
                    let i = s.free.iter().position(|v| v.capacity() >= need)?;
                    Some(s.free.swap_remove(i))
                })
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
            if sess.free.len() < FREE_CHUNKS {
                sess.free.push(buf);
            }
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
                .flat_map(|c| decode_records(Bytes::from(c.flatten(Vec::new()).0.data)))
                .filter_map(Result::ok)
                .collect(),
        )
    }

    /// Records one frame (call only when [`Tap::enabled`]): `hdr` is the frame's 48-byte
    /// header, `payload` the bytes that follow it on the transport.
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
        let o = Origin::new(dir, laddr, faddr, lane, transport);
        self.push_all(&o, [(hdr, payload, payload.len(), None)]);
    }

    /// Records RDS/TCP frames `(header, payload)` of one connection and direction, such as
    /// those of one read or one transmit pass: one lock and one timestamp for all (call only
    /// when [`Tap::enabled`]). A long payload is kept by reference (no copy on the data path).
    #[allow(clippy::too_many_arguments)]
    pub fn record_tcp<'a>(
        &self,
        dir: Dir,
        laddr: IpAddr,
        faddr: IpAddr,
        lane: usize,
        local: SocketAddr,
        peer: SocketAddr,
        frames: impl IntoIterator<Item = (impl AsRef<[u8]>, &'a Bytes)>,
    ) {
        let o = Origin::new(dir, laddr, faddr, lane, TapTransport::Tcp { local, peer });
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
    /// transport posts, ACK-only frames included (`dir` [`Dir::Tx`], `solicited` as posted),
    /// and for every received fragment (`dir` [`Dir::Rx`], `solicited` from the completion if
    /// known, else `false`). `hdr` is the 48-byte RDS header, `payload` the fragment's bytes
    /// that follow it in the SEND (at most 4096; empty for ACK-only frames); `laddr`/`faddr`
    /// the connection's local and peer RDS (IP) addresses, `lane` its path index (0 on IB).
    #[allow(clippy::too_many_arguments)]
    pub fn record_ib(
        &self,
        dir: Dir,
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
            TapTransport::Ib {
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
                [(&hdr[..], &Bytes::from_static(&[1, 2, 3, 4, 5, 6]))],
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
        let payload = Bytes::from(vec![7u8; 1 << 20]);
        let per = REC_HDR_LEN + 48 + (1 << 20);
        let fit = MAX_QUEUED_BYTES / per;
        let rec = |tap: &Tap| {
            tap.record_tcp(
                Dir::Tx,
                "10.0.0.1".parse().unwrap(),
                "10.0.0.2".parse().unwrap(),
                0,
                addr("10.0.0.1:40000"),
                addr("10.0.0.2:16385"),
                [(&hdr[..], &payload)],
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
        let two = tap.take(2, Duration::ZERO).unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two[1].data.len(), 48 + (1 << 20));
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

    /// Frames go into chunks of CHUNK_SIZE; batches come out whole and in order, and take()
    /// splits them at `max` frames.
    #[test]
    fn chunks_batches_and_split() {
        let tap = Tap::default();
        tap.start(MAX_SNAPLEN, 1 << 16, TapFilter::default())
            .unwrap();
        let payload = Bytes::from(vec![9u8; 1000]);
        let per = REC_HDR_LEN + 48 + 1000;
        let n = CHUNK_SIZE / per + 5;
        for i in 0..n {
            let mut hdr = [0u8; 48];
            hdr[..8].copy_from_slice(&(i as u64).to_be_bytes());
            tap.record_tcp(
                Dir::Tx,
                "10.0.0.1".parse().unwrap(),
                "10.0.0.2".parse().unwrap(),
                1,
                addr("10.0.0.1:40001"),
                addr("10.0.0.2:16385"),
                [(&hdr[..], &payload)],
            );
        }
        // One full chunk is ready at once, the rest comes at the timeout.
        let b = tap.take_batches(Duration::from_secs(5)).unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].frames as usize, CHUNK_SIZE / per);
        assert_eq!(b[0].data.len(), (CHUNK_SIZE / per) * per);
        tap.recycle(b.into_iter().next().unwrap().data);
        let three = tap.take(3, Duration::ZERO).unwrap();
        let seqs: Vec<u64> = three
            .iter()
            .map(|f| u64::from_be_bytes(f.data[..8].try_into().unwrap()))
            .collect();
        assert_eq!(seqs, [n as u64 - 5, n as u64 - 4, n as u64 - 3]);
        let rest = tap.take_batches(Duration::ZERO).unwrap();
        assert_eq!(rest.iter().map(|b| b.frames).sum::<u32>(), 2);
        assert_eq!(tap.take_batches(Duration::ZERO).unwrap(), vec![]);
        tap.stop();
        assert!(tap.take_batches(Duration::ZERO).is_none());
    }

    /// Records received frames with payloads long and short into `tap` (snap length 48 + 700);
    /// returns the records `encode_record` writes for them (timestamps zero) and how many.
    fn record_mix(tap: &Tap) -> (Vec<u8>, u32) {
        let mut want = Vec::new();
        let mut frames = 0;
        for (i, len) in [0usize, 10, 255, 256, 1000, 5, 70_000, 300]
            .iter()
            .enumerate()
        {
            let mut hdr = [0u8; 48];
            hdr[..8].copy_from_slice(&(i as u64).to_be_bytes());
            let payload: Bytes = (0..*len).map(|x| (x * 31 + i) as u8).collect();
            let (local, peer) = endpoints();
            record_rx(tap, 1, [(&hdr[..], &payload)]);
            let keep = (*len).min(700);
            let mut data = hdr.to_vec();
            data.extend_from_slice(&payload[..keep]);
            let f = TapFrame {
                ts_ns: 0,
                dir: Dir::Rx,
                laddr: local.ip(),
                faddr: peer.ip(),
                lane: 1,
                transport: TapTransport::Tcp { local, peer },
                orig_len: (48 + len) as u32,
                data: data.into(),
            };
            encode_record(&mut want, &f);
            frames += 1;
        }
        (want, frames)
    }

    /// Long payloads are kept by reference and short ones copied; the batches come out as the
    /// same records `encode_record` writes, cut at the snap length, whatever the mix.
    #[test]
    fn shared_payloads_flatten_to_the_same_records() {
        let tap = Tap::default();
        tap.start(48 + 700, 1 << 16, TapFilter::default()).unwrap();
        let (want, frames) = record_mix(&tap);
        let b = tap.take_batches(Duration::ZERO).unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].frames, frames);
        // The timestamps differ: compare with them zeroed.
        assert_eq!(without_ts(b[0].data.clone()), want);
    }

    /// A chunk read in place gives the records of the flattened batch, field by field, with
    /// the payloads kept by reference as the second piece of their bytes.
    #[test]
    fn chunk_records_read_in_place_are_the_flattened_records() {
        let tap = Tap::default();
        tap.start(48 + 700, 1 << 16, TapFilter::default()).unwrap();
        let (want, frames) = record_mix(&tap);
        let chunks = tap.take_chunks(Duration::ZERO).unwrap();
        assert_eq!(chunks.len(), 1);
        let c = &chunks[0];
        assert_eq!(c.frames(), frames);
        // Kept by reference: the payloads of 256 bytes and more.
        assert_eq!(c.0.shared.len(), 4);
        let mut got = Vec::new();
        let mut pieces = Vec::new();
        let mut last_ts = 0;
        for f in c.records() {
            let f = f.unwrap();
            let [a, b] = f.bytes();
            pieces.push((a.len(), b.len()));
            let mut data = a.to_vec();
            data.extend_from_slice(b);
            assert!(f.ts_ns() >= last_ts && f.ts_ns() > 0);
            last_ts = f.ts_ns();
            let mut frame = f.with_data(data.into());
            frame.ts_ns = 0;
            encode_record(&mut got, &frame);
        }
        assert_eq!(got, want);
        let kept = |p: usize| (48, p);
        assert_eq!(
            pieces,
            [
                (48, 0),
                (58, 0),
                (303, 0),
                kept(256),
                kept(700),
                (53, 0),
                kept(700),
                kept(300)
            ]
        );
        // The same bytes as the flattened chunk.
        let flat = chunks.into_iter().next().unwrap().into_batch();
        assert_eq!(without_ts(flat.data), want);
    }

    /// A chunk whose payload kept by reference does not fit its record ends with an error.
    #[test]
    fn a_chunk_with_a_misplaced_payload_is_an_error() {
        let (local, peer) = endpoints();
        let f = |data: &[u8]| TapFrame {
            ts_ns: 1,
            dir: Dir::Tx,
            laddr: local.ip(),
            faddr: peer.ip(),
            lane: 0,
            transport: TapTransport::Tcp { local, peer },
            orig_len: 48 + 300,
            data: Bytes::copy_from_slice(data),
        };
        // A record that claims 348 captured bytes; only its 48 header bytes are inline.
        let mut rec = Vec::new();
        encode_record(&mut rec, &f(&[0u8; 348]));
        rec.truncate(REC_HDR_LEN + 48);
        for (at, len, ok) in [
            (REC_HDR_LEN + 48, 300, true),
            (REC_HDR_LEN + 48, 299, false),
            (REC_HDR_LEN + 48, 301, false),
            (REC_HDR_LEN + 47, 300, false),
        ] {
            let chunk = TapChunk(Chunk {
                frames: 1,
                data: rec.clone(),
                shared: vec![(at, Bytes::from(vec![1u8; len]))],
                size: 0,
            });
            let r: Vec<_> = chunk.records().collect();
            assert_eq!(r.len(), 1);
            assert_eq!(r[0].is_ok(), ok, "{at} {len}");
            if !ok {
                assert_eq!(r[0], Err(RecordDecodeError::Truncated(0)));
            }
        }
    }

    /// The TCP endpoints of the tests' frames: local, peer.
    fn endpoints() -> (SocketAddr, SocketAddr) {
        (addr("10.0.0.1:40001"), addr("10.0.0.2:16385"))
    }

    /// Records received frames of [`endpoints`] on `lane`.
    fn record_rx<'a>(
        tap: &Tap,
        lane: usize,
        frames: impl IntoIterator<Item = (impl AsRef<[u8]>, &'a Bytes)>,
    ) {
        let (local, peer) = endpoints();
        tap.record_tcp(Dir::Rx, local.ip(), peer.ip(), lane, local, peer, frames);
    }

    /// Records with their timestamps zeroed (frames recorded separately differ only there).
    fn without_ts(mut b: Vec<u8>) -> Vec<u8> {
        let mut off = 0;
        while off < b.len() {
            b[off + 8..off + 16].fill(0);
            let cap = u32::from_le_bytes(b[off..off + 4].try_into().unwrap()) as usize;
            off += REC_HDR_LEN + cap;
        }
        b
    }

    /// A transmit pass gathered in `TxFrames` records exactly what `record_tcp` records, at
    /// any snap length; a payload is referenced only when the snap length keeps enough of it.
    #[test]
    fn tx_frames_record_what_record_tcp_does() {
        let (local, peer) = endpoints();
        let payloads: Vec<Bytes> = [0usize, 10, 255, 256, 1000, 70_000]
            .iter()
            .map(|len| (0..*len).map(|x| (x * 7) as u8).collect())
            .collect();
        let hdr = |i: usize| {
            let mut h = [0u8; 48];
            h[..8].copy_from_slice(&(i as u64).to_be_bytes());
            h
        };
        for snaplen in [48, 48 + 100, 48 + 256, 48 + 700, MAX_SNAPLEN] {
            let tap = Tap::default();
            tap.start(snaplen, 1 << 16, TapFilter::default()).unwrap();
            let mut tx = TxFrames::default();
            assert!(tx.is_empty());
            for (i, p) in payloads.iter().enumerate() {
                let unique = p.is_unique();
                tx.push(&tap, &hdr(i), p);
                let referenced = p.len().min(snaplen - 48) >= SHARE_MIN;
                assert_eq!(
                    unique && !p.is_unique(),
                    referenced,
                    "snaplen {snaplen} len {}",
                    p.len()
                );
            }
            assert!(!tx.is_empty());
            tx.record(&tap, local.ip(), peer.ip(), 2, local, peer);
            assert!(tx.is_empty());
            tap.record_tcp(
                Dir::Tx,
                local.ip(),
                peer.ip(),
                2,
                local,
                peer,
                payloads.iter().enumerate().map(|(i, p)| (hdr(i), p)),
            );
            let b = tap.take_batches(Duration::ZERO).unwrap();
            assert_eq!(b.len(), 1);
            let n = payloads.len();
            assert_eq!(b[0].frames as usize, 2 * n);
            let all = without_ts(b[0].data.clone());
            let mut direct = 0;
            for _ in 0..n {
                let cap = u32::from_le_bytes(all[direct..direct + 4].try_into().unwrap());
                direct += REC_HDR_LEN + cap as usize;
            }
            assert_eq!(all[..direct], all[direct..], "snaplen {snaplen}");
            tap.stop();
        }
    }

    /// Once the queue is full, frames are counted as dropped without the lock until the
    /// consumer takes records; the count ends with the session and nothing is lost from it.
    #[test]
    fn a_full_queue_counts_drops_without_the_lock() {
        let peer = endpoints().1;
        let payload = Bytes::from_static(&[1; 8]);
        let rec = |tap: &Tap, n: usize| record_rx(tap, 0, (0..n).map(|_| ([0u8; 48], &payload)));
        let tap = Tap::default();
        tap.start(100, 2, TapFilter::default()).unwrap();
        rec(&tap, 3);
        let full = |tap: &Tap| tap.overflow.load(Ordering::Relaxed) & OVERFLOW_FULL != 0;
        assert!(full(&tap));
        rec(&tap, 4);
        assert_eq!(tap.overflow.load(Ordering::Relaxed) & OVERFLOW_COUNT, 4);
        assert_eq!(
            tap.stats(),
            TapStats {
                captured: 2,
                dropped: 5
            }
        );
        // Taking makes room: the next frames are queued again.
        assert_eq!(tap.take(1, Duration::ZERO).unwrap().len(), 1);
        assert!(!full(&tap));
        rec(&tap, 2);
        assert!(full(&tap));
        let st = tap.stop();
        assert_eq!(
            st,
            TapStats {
                captured: 3,
                dropped: 6
            }
        );
        // After the stop nothing more is counted.
        rec(&tap, 5);
        assert_eq!(tap.stats(), st);
        let mut left = 0;
        while let Some(f) = tap.take(10, Duration::ZERO) {
            left += f.len();
        }
        assert_eq!(left, 2);

        // With a filter, every frame goes through it: no lock-free count.
        tap.start(
            100,
            1,
            TapFilter {
                peer: Some(peer.ip()),
                port: None,
            },
        )
        .unwrap();
        rec(&tap, 2);
        assert!(!full(&tap));
        assert_eq!(
            tap.stop(),
            TapStats {
                captured: 1,
                dropped: 1
            }
        );
    }

    #[test]
    fn records_round_trip() {
        let frames = [
            TapFrame {
                ts_ns: 1_700_000_000_123_456_789,
                dir: Dir::Tx,
                laddr: "10.0.0.1".parse().unwrap(),
                faddr: "10.0.0.2".parse().unwrap(),
                lane: 7,
                transport: TapTransport::Tcp {
                    local: addr("10.0.0.1:40007"),
                    peer: addr("10.0.0.2:16385"),
                },
                orig_len: 1072,
                data: Bytes::from(vec![1u8; 60]),
            },
            TapFrame {
                ts_ns: 2,
                dir: Dir::Rx,
                laddr: "fd00::1".parse().unwrap(),
                faddr: "fd00::2".parse().unwrap(),
                lane: 0,
                transport: TapTransport::Tcp {
                    local: addr("[fd00::1]:16385"),
                    peer: addr("[fd00::2]:40000"),
                },
                orig_len: 48,
                data: Bytes::from(vec![2u8; 48]),
            },
            TapFrame {
                ts_ns: 3,
                dir: Dir::Rx,
                laddr: "192.168.1.1".parse().unwrap(),
                faddr: "192.168.1.2".parse().unwrap(),
                lane: 0,
                transport: TapTransport::Ib {
                    local_qpn: 0x12_3456,
                    peer_qpn: 0xab_cdef,
                    local_lid: 3,
                    peer_lid: 0x1234,
                    solicited: true,
                },
                orig_len: 48 + 4096,
                data: Bytes::from(vec![3u8; 48 + 4096]),
            },
            TapFrame {
                ts_ns: 4,
                dir: Dir::Tx,
                laddr: "10.0.0.1".parse().unwrap(),
                faddr: "10.0.0.1".parse().unwrap(),
                lane: 0,
                transport: TapTransport::Loopback,
                orig_len: 48,
                data: Bytes::from(vec![4u8; 48]),
            },
        ];
        let mut buf = Vec::new();
        for f in &frames {
            encode_record(&mut buf, f);
        }
        assert_eq!(
            buf.len(),
            4 * REC_HDR_LEN + 60 + 48 + 48 + 4096 + 48,
            "fixed part + captured bytes"
        );
        assert_eq!(&buf[..4], &60u32.to_le_bytes());
        assert_eq!(&buf[4..8], &1072u32.to_le_bytes());
        let back: Vec<TapFrame> = decode_records(Bytes::from(buf.clone()))
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, frames);
        // Cut or corrupted batches end with an error, never a panic.
        for cut in [1, REC_HDR_LEN - 1, REC_HDR_LEN + 10] {
            let v: Vec<_> = decode_records(Bytes::from(buf[..cut].to_vec())).collect();
            assert_eq!(v, vec![Err(RecordDecodeError::Truncated(0))]);
        }
        let mut bad = buf.clone();
        bad[18] = 9;
        assert_eq!(
            decode_records(Bytes::from(bad)).next(),
            Some(Err(RecordDecodeError::BadCode(0)))
        );
        let mut huge = buf;
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_records(Bytes::from(huge)).count(), 1);
    }

    /// The IB entry point records what the ERF writer needs.
    #[test]
    fn ib_fragments() {
        let tap = Tap::default();
        let l: IpAddr = "10.1.0.1".parse().unwrap();
        let p: IpAddr = "10.1.0.2".parse().unwrap();
        let qps = IbQps {
            local_qpn: 0x11,
            peer_qpn: 0x22,
            local_lid: 1,
            peer_lid: 2,
        };
        // Not enabled: nothing is recorded (and no lock is taken).
        tap.record_ib(Dir::Tx, l, p, 0, qps, true, &[0; 48], &[]);
        tap.start(MAX_SNAPLEN, 16, TapFilter::default()).unwrap();
        tap.record_ib(Dir::Tx, l, p, 0, qps, true, &[5; 48], &[]);
        tap.record_ib(Dir::Rx, l, p, 0, qps, false, &[6; 48], &[7; 4096]);
        tap.stop();
        let f = tap.take(10, Duration::ZERO).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(
            f[0].transport,
            TapTransport::Ib {
                local_qpn: 0x11,
                peer_qpn: 0x22,
                local_lid: 1,
                peer_lid: 2,
                solicited: true
            }
        );
        assert_eq!(
            (f[0].dir, f[0].orig_len, f[0].data.len()),
            (Dir::Tx, 48, 48)
        );
        assert_eq!((f[1].dir, f[1].orig_len), (Dir::Rx, 48 + 4096));
        assert_eq!(&f[1].data[48..], &[7; 4096][..]);
    }
}
