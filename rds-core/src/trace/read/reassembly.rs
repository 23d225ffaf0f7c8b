//! TCP reassembly: the segments of each direction of each RDS/TCP connection → its byte
//! stream → RDS frames, cut by the 48-byte header's `h_len`.
//!
//! Each direction (source and destination endpoint) is its own stream, put in order by
//! sequence number: bytes seen before (retransmissions, overlaps) are dropped, and bytes
//! missing from the capture (lost or snapped) are gaps. A frame whose bytes stop being
//! captured is yielded at once with the bytes it has, and the stream skips to the frame's
//! end; a gap where a header was due drops the partial header and takes the next captured byte
//! as the start of a frame. SYN starts a stream afresh; FIN and RST end it, as does the end of
//! the capture, and a frame with a complete header is then yielded with what it has.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use bytes::Bytes;

use super::error::{PacketError, ReadError};
use super::frame::{CapturedFrame, FrameLink};
use crate::trace::net::tcp::flags;
use crate::trace::record::Direction;
use crate::wire::{HeaderPacket, HEADER_LEN, MAX_MSG_SIZE};

/// One direction of a TCP connection: (source, destination).
pub(super) type FlowKey = (SocketAddr, SocketAddr);

/// Frames and errors in the order the reader yields them.
pub(super) type Ready = VecDeque<Result<CapturedFrame, ReadError>>;

/// One TCP segment of an RDS stream.
#[derive(Debug)]
pub(super) struct Segment<'a> {
    pub(super) seq: u32,
    /// TCP flags ([`flags`]).
    pub(super) flags: u8,
    /// Captured payload bytes.
    pub(super) payload: &'a [u8],
    /// Payload length on the wire.
    pub(super) reported: u64,
    /// Direction relative to the capturing node, when the link layer shows it.
    pub(super) dir: Option<Direction>,
    /// TCP client port % 8.
    pub(super) lane: u8,
}

/// The capture packet a segment came in.
#[derive(Debug, Clone, Copy)]
pub(super) struct Packet {
    /// 1-based number.
    pub(super) frame_no: u64,
    /// Nanoseconds since the Unix epoch.
    pub(super) ts_ns: u64,
}

/// The streams of a capture.
#[derive(Debug, Default)]
pub(super) struct Reassembly {
    flows: HashMap<FlowKey, Flow>,
}

#[derive(Debug)]
enum Parse {
    /// Collecting the 48 header bytes.
    Header(Vec<u8>),
    /// Header complete; collecting the payload. `buf` holds header and payload so far.
    Body { buf: Vec<u8>, total: u64 },
    /// Dropping the rest of a frame that was already yielded.
    Skip(u64),
    /// Dropping bytes until the next segment.
    Resync,
}

/// One stream.
#[derive(Debug)]
struct Flow {
    next_seq: Option<u32>,
    parse: Parse,
    dir: Option<Direction>,
    lane: u8,
    /// Packet number and timestamp of the last packet that added bytes to the current frame.
    last_no: u64,
    last_ts: u64,
}

/// Where a stream puts what it yields, at the packet being read.
struct Out<'q> {
    key: FlowKey,
    frame_no: u64,
    ready: &'q mut Ready,
}

impl Out<'_> {
    fn error(&mut self, error: PacketError) {
        self.ready.push_back(Err(ReadError::Packet {
            frame_no: self.frame_no,
            error,
        }));
    }
}

impl Reassembly {
    /// Feeds one segment of stream `key`, which came in packet `at`; frames it completes
    /// and stream errors go to `ready`.
    pub(super) fn segment(
        &mut self,
        key: FlowKey,
        seg: Segment<'_>,
        at: Packet,
        ready: &mut Ready,
    ) {
        let mut out = Out {
            key,
            frame_no: at.frame_no,
            ready,
        };
        let mut flow = self.flows.remove(&key).unwrap_or_else(Flow::new);
        flow.dir = seg.dir;
        flow.lane = seg.lane;
        if seg.flags & (flags::SYN | flags::RST) != 0 {
            flow.end_stream(&mut out);
            if seg.flags & flags::SYN != 0 {
                flow.next_seq = Some(seg.seq.wrapping_add(1));
                self.flows.insert(key, flow);
            }
            return;
        }
        let next = *flow.next_seq.get_or_insert(seg.seq);
        if matches!(flow.parse, Parse::Resync) {
            flow.parse = Parse::Header(Vec::new());
        }
        let delta = seg.seq.wrapping_sub(next) as i32;
        let mut payload = seg.payload;
        let mut reported = seg.reported;
        if delta > 0 {
            flow.missing(&mut out, delta as u64);
        } else if delta < 0 {
            // Bytes seen before (retransmission or overlap): keep only what is new.
            let old = u64::from(delta.unsigned_abs());
            if old >= reported {
                if seg.flags & flags::FIN != 0 {
                    flow.end_stream(&mut out);
                } else {
                    self.flows.insert(key, flow);
                }
                return;
            }
            let cut = (old as usize).min(payload.len());
            payload = &payload[cut..];
            reported -= old;
        }
        let advance = reported;
        if !payload.is_empty() {
            flow.last_no = at.frame_no;
            flow.last_ts = at.ts_ns;
            flow.present(&mut out, payload);
        }
        let missing = reported - payload.len() as u64;
        if missing > 0 {
            flow.missing(&mut out, missing);
        }
        flow.next_seq = Some(
            next.wrapping_add(delta.max(0) as u32)
                .wrapping_add(advance as u32),
        );
        if seg.flags & flags::FIN != 0 {
            flow.end_stream(&mut out);
            flow.next_seq = flow.next_seq.map(|s| s.wrapping_add(1));
        }
        self.flows.insert(key, flow);
    }

    /// The end of the capture: every stream ends, in the order of the packet that last fed
    /// it (then by endpoints), so the output does not depend on the map's order.
    pub(super) fn finish(&mut self, ready: &mut Ready) {
        let mut flows: Vec<_> = std::mem::take(&mut self.flows).into_iter().collect();
        flows.sort_by_key(|(k, f)| (f.last_no, *k));
        for (key, mut flow) in flows {
            let mut out = Out {
                key,
                frame_no: 0,
                ready,
            };
            flow.end_stream(&mut out);
        }
    }
}

impl Flow {
    fn new() -> Self {
        Flow {
            next_seq: None,
            parse: Parse::Header(Vec::new()),
            dir: None,
            lane: 0,
            last_no: 0,
            last_ts: 0,
        }
    }

    /// Captured stream bytes.
    fn present(&mut self, out: &mut Out<'_>, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match &mut self.parse {
                Parse::Header(buf) => {
                    let take = (HEADER_LEN - buf.len()).min(bytes.len());
                    buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if buf.len() == HEADER_LEN {
                        let h_len = HeaderPacket::new_unchecked(&buf[..]).len();
                        if h_len as usize > MAX_MSG_SIZE {
                            self.parse = Parse::Resync;
                            out.error(PacketError::ImplausibleLength { h_len });
                            return;
                        }
                        let total = HEADER_LEN as u64 + u64::from(h_len);
                        let buf = std::mem::take(buf);
                        self.parse = Parse::Body { buf, total };
                        self.complete_if_done(out);
                    }
                }
                Parse::Body { buf, total } => {
                    let want = (*total - buf.len() as u64) as usize;
                    let take = want.min(bytes.len());
                    buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    self.complete_if_done(out);
                }
                Parse::Skip(rest) => {
                    let take = (*rest).min(bytes.len() as u64);
                    *rest -= take;
                    bytes = &bytes[take as usize..];
                    if *rest == 0 {
                        self.parse = Parse::Header(Vec::new());
                    }
                }
                Parse::Resync => return,
            }
        }
    }

    /// Stream bytes that are not in the capture.
    fn missing(&mut self, out: &mut Out<'_>, mut n: u64) {
        while n > 0 {
            match &mut self.parse {
                Parse::Header(buf) => {
                    let partial_header = buf.len();
                    self.parse = Parse::Header(Vec::new());
                    out.error(PacketError::StreamGap {
                        missing: n,
                        partial_header,
                    });
                    return;
                }
                Parse::Body { buf, total } => {
                    let rest = *total - buf.len() as u64;
                    let buf = std::mem::take(buf);
                    let total = *total;
                    self.emit(out, buf, total);
                    self.parse = Parse::Skip(rest);
                }
                Parse::Skip(rest) => {
                    let take = (*rest).min(n);
                    *rest -= take;
                    n -= take;
                    if *rest == 0 {
                        self.parse = Parse::Header(Vec::new());
                    }
                }
                Parse::Resync => return,
            }
        }
    }

    fn complete_if_done(&mut self, out: &mut Out<'_>) {
        if let Parse::Body { buf, total } = &mut self.parse {
            if buf.len() as u64 == *total {
                let buf = std::mem::take(buf);
                let total = *total;
                self.parse = Parse::Header(Vec::new());
                self.emit(out, buf, total);
            }
        }
    }

    fn emit(&self, out: &mut Out<'_>, buf: Vec<u8>, total: u64) {
        out.ready.push_back(Ok(CapturedFrame {
            frame_no: self.last_no,
            ts_ns: self.last_ts,
            dir: self.dir,
            lane: self.lane,
            link: FrameLink::Tcp {
                src: out.key.0,
                dst: out.key.1,
            },
            orig_len: u32::try_from(total).unwrap_or(u32::MAX),
            data: Bytes::from(buf),
        }));
    }

    /// End of a stream (FIN, RST, SYN, end of file): a frame with a complete header is
    /// yielded with what it has; a partial header is dropped.
    fn end_stream(&mut self, out: &mut Out<'_>) {
        if let Parse::Body { buf, total } = &mut self.parse {
            let buf = std::mem::take(buf);
            let total = *total;
            self.emit(out, buf, total);
        }
        self.parse = Parse::Header(Vec::new());
    }
}
