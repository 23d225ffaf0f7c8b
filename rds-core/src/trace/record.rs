//! The binary trace record: what a node's tap captures of one RDS frame ([`TapFrame`]: a
//! timestamp, the [`Direction`], the RDS addresses, the lane, the [`Transport`] endpoints and
//! the frame's bytes cut at a snap length) and its byte layout ([`REC_HDR_LEN`]).
//!
//! The tap writes records itself (with [`record_head`]); [`encode_record`] writes the same bytes
//! for tests and tools. [`decode_records`] and [`decode_record_refs`] read a batch of records
//! back to back; [`super::TapChunk`] reads records whose long payloads are kept by reference.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::Bytes;

use crate::wire::{HEADER_LEN, MAX_MSG_SIZE};

/// Direction of a frame as seen by the node that captured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Sent by the local node to the peer.
    Tx,
    /// Received by the local node from the peer.
    Rx,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Tx => "tx",
            Direction::Rx => "rx",
        })
    }
}

/// The transport a traced frame travelled on, with its endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// RDS/TCP: the real TCP connection of the frame's lane. The passive (server) side is on
    /// port 16385; every lane is a separate connection with its own client port.
    Tcp {
        /// The local node's TCP endpoint of this connection.
        local: SocketAddr,
        /// The peer's TCP endpoint of this connection.
        peer: SocketAddr,
    },
    /// RDS over InfiniBand (RC queue pair). Each record is one RDS fragment: the 48-byte header
    /// and at most [`FRAG_SIZE`](crate::wire::FRAG_SIZE) payload bytes, carried by one IB SEND.
    Ib {
        /// The local queue pair number (24 bits, at least 2).
        local_qpn: u32,
        /// The peer's queue pair number (24 bits, at least 2).
        peer_qpn: u32,
        /// The local port's LID (source LID of the frames the local node sends; 0 when
        /// unknown, e.g. RoCE).
        local_lid: u16,
        /// The peer port's LID (0 when unknown).
        peer_lid: u16,
        /// The SEND's solicited-event bit: set on the last fragment of each message and on
        /// ACK-only frames.
        solicited: bool,
    },
    /// Same-node delivery: never on a wire, so the capture writers leave it out.
    Loopback,
}

/// One captured frame, as a trace record holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapFrame {
    /// Nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Direction.
    pub dir: Direction,
    /// Local RDS address.
    pub laddr: IpAddr,
    /// Peer RDS address.
    pub faddr: IpAddr,
    /// Path (lane) index.
    pub lane: u8,
    /// Transport endpoints.
    pub transport: Transport,
    /// Length on the wire: 48 + payload bytes of this frame.
    pub orig_len: u32,
    /// Header and payload, cut at the snap length.
    pub data: Bytes,
}

/// Largest snap length: a whole frame of the largest message.
pub const MAX_SNAPLEN: usize = HEADER_LEN + MAX_MSG_SIZE;

/// Largest trace record: the fixed part and [`MAX_SNAPLEN`] frame bytes.
pub const MAX_RECORD: usize = REC_HDR_LEN + MAX_SNAPLEN;

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

/// The fixed part of a record: `cap` frame bytes follow it, of a frame of `orig_len` bytes
/// on the wire.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_head(
    ts_ns: u64,
    dir: Direction,
    laddr: IpAddr,
    faddr: IpAddr,
    lane: u8,
    transport: &Transport,
    cap: u32,
    orig_len: u32,
) -> [u8; REC_HDR_LEN] {
    let mut h = [0u8; REC_HDR_LEN];
    h[0..4].copy_from_slice(&cap.to_le_bytes());
    h[4..8].copy_from_slice(&orig_len.to_le_bytes());
    h[8..16].copy_from_slice(&ts_ns.to_le_bytes());
    h[16] = u8::from(dir == Direction::Rx);
    h[17] = lane;
    let mut flags = 0;
    if put_ip(&mut h[20..36], laddr) {
        flags |= F_LADDR6;
    }
    if put_ip(&mut h[36..52], faddr) {
        flags |= F_FADDR6;
    }
    h[18] = match *transport {
        Transport::Loopback => T_LOOPBACK,
        Transport::Tcp { local, peer } => {
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
        Transport::Ib {
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
    pub fn dir(&self) -> Direction {
        // `decode_at` admits 0 and 1 only.
        if self.head[16] == 0 {
            Direction::Tx
        } else {
            Direction::Rx
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
    pub fn transport(&self) -> Transport {
        match self.head[18] {
            T_TCP => Transport::Tcp {
                local: SocketAddr::new(
                    get_ip(&self.head[52..68], self.flag(F_TCP_LOCAL6)),
                    self.le16(68),
                ),
                peer: SocketAddr::new(
                    get_ip(&self.head[70..86], self.flag(F_TCP_PEER6)),
                    self.le16(86),
                ),
            },
            T_IB => Transport::Ib {
                local_qpn: self.le32(52),
                peer_qpn: self.le32(56),
                local_lid: self.le16(60),
                peer_lid: self.le16(62),
                solicited: self.flag(F_SOLICITED),
            },
            // `decode_at` admits the three codes only.
            _ => Transport::Loopback,
        }
    }

    /// Length on the wire: 48 + payload bytes of this frame.
    pub fn orig_len(&self) -> u32 {
        self.le32(4)
    }

    /// Header and payload, cut at the snap length, in two pieces: the first holds at least
    /// the header; the second is empty, or the payload when the record (in a
    /// [`super::TapChunk`])
    /// keeps it by reference.
    pub fn bytes(&self) -> [&'a [u8]; 2] {
        [self.data, self.tail]
    }

    /// The record as an owned frame whose bytes are `data`.
    pub(crate) fn with_data(&self, data: Bytes) -> TapFrame {
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
pub(crate) fn decode_at<'a>(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn records_round_trip() {
        let frames = [
            TapFrame {
                ts_ns: 1_700_000_000_123_456_789,
                dir: Direction::Tx,
                laddr: "10.0.0.1".parse().unwrap(),
                faddr: "10.0.0.2".parse().unwrap(),
                lane: 7,
                transport: Transport::Tcp {
                    local: addr("10.0.0.1:40007"),
                    peer: addr("10.0.0.2:16385"),
                },
                orig_len: 1072,
                data: Bytes::from(vec![1u8; 60]),
            },
            TapFrame {
                ts_ns: 2,
                dir: Direction::Rx,
                laddr: "fd00::1".parse().unwrap(),
                faddr: "fd00::2".parse().unwrap(),
                lane: 0,
                transport: Transport::Tcp {
                    local: addr("[fd00::1]:16385"),
                    peer: addr("[fd00::2]:40000"),
                },
                orig_len: 48,
                data: Bytes::from(vec![2u8; 48]),
            },
            TapFrame {
                ts_ns: 3,
                dir: Direction::Rx,
                laddr: "192.168.1.1".parse().unwrap(),
                faddr: "192.168.1.2".parse().unwrap(),
                lane: 0,
                transport: Transport::Ib {
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
                dir: Direction::Tx,
                laddr: "10.0.0.1".parse().unwrap(),
                faddr: "10.0.0.1".parse().unwrap(),
                lane: 0,
                transport: Transport::Loopback,
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
}
