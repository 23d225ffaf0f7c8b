//! One RDS frame as the capture writers take it: [`TraceRecord`] (owned, with its RDS
//! addresses) and its borrowed form [`RecordRef`], read from a [`TapFrame`] or in place from a
//! [`TapFrameRef`] through a [`FlowCache`]; [`RecordRef::validate`] checks what the writers
//! rely on.

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;

use super::error::RecordError;
use super::record::{Direction, TapFrame, TapFrameRef, Transport, FLOW_LEN};
use crate::wire::{FRAG_SIZE, HEADER_LEN};

/// One RDS frame captured by a node's trace tap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRecord {
    /// Wall-clock time the frame was handed to (Tx) or taken from (Rx) the transport, in
    /// nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Whether the local node sent or received the frame.
    pub dir: Direction,
    /// The local node's RDS address.
    pub local: IpAddr,
    /// The peer's RDS address.
    pub peer: IpAddr,
    /// Path (lane) index, 0..=7. Over TCP each lane is its own connection.
    pub lane: u8,
    /// Transport endpoints.
    pub transport: Transport,
    /// Length of the frame on the wire: the 48-byte header plus the payload bytes that follow
    /// it. Over TCP that is `48 + h_len`; over IB it is the header plus this fragment's bytes.
    pub orig_len: u32,
    /// The captured bytes: the header followed by the payload, cut at the snap length, so
    /// `data.len() <= orig_len`. The writers need at least the 48 header bytes.
    pub data: Bytes,
}

impl TraceRecord {
    /// A complete (not snapped) RDS/TCP frame: `frame` is the 48-byte header and its payload.
    /// The RDS addresses are the TCP endpoints' IP addresses, as on every RDS/TCP connection.
    pub fn tcp(
        ts_ns: u64,
        dir: Direction,
        lane: u8,
        local: SocketAddr,
        peer: SocketAddr,
        frame: Bytes,
    ) -> Self {
        TraceRecord {
            ts_ns,
            dir,
            local: local.ip(),
            peer: peer.ip(),
            lane,
            transport: Transport::Tcp { local, peer },
            orig_len: u32::try_from(frame.len()).unwrap_or(u32::MAX),
            data: frame,
        }
    }

    /// A complete (not snapped) RDS fragment over InfiniBand (`transport` should be
    /// [`Transport::Ib`]; lane 0, as IB has one path).
    pub fn ib(
        ts_ns: u64,
        dir: Direction,
        local: IpAddr,
        peer: IpAddr,
        transport: Transport,
        frame: Bytes,
    ) -> Self {
        TraceRecord {
            ts_ns,
            dir,
            local,
            peer,
            lane: 0,
            transport,
            orig_len: u32::try_from(frame.len()).unwrap_or(u32::MAX),
            data: frame,
        }
    }

    /// The same record with its captured bytes cut to `snaplen` (never below the 48 header
    /// bytes); `orig_len` is kept.
    pub fn snapped(mut self, snaplen: usize) -> Self {
        let keep = snaplen.max(HEADER_LEN).min(self.data.len());
        self.data.truncate(keep);
        self
    }

    /// Whether the captured bytes are shorter than the frame.
    pub fn is_truncated(&self) -> bool {
        (self.data.len() as u64) < u64::from(self.orig_len)
    }

    /// Converts a frame of the node's trace tap. Loopback frames never touch a wire and give
    /// `None`.
    pub fn from_tap(frame: &TapFrame) -> Option<Self> {
        Self::from_tap_frame(frame.clone())
    }

    /// [`TraceRecord::from_tap`], taking the frame (its bytes are moved, not shared).
    pub fn from_tap_frame(frame: TapFrame) -> Option<Self> {
        if frame.transport == Transport::Loopback {
            return None;
        }
        Some(TraceRecord {
            ts_ns: frame.ts_ns,
            dir: frame.dir,
            local: frame.laddr,
            peer: frame.faddr,
            lane: frame.lane,
            transport: frame.transport,
            orig_len: frame.orig_len,
            data: frame.data,
        })
    }

    /// The record as the writers take it.
    pub(crate) fn view(&self) -> RecordRef<'_> {
        RecordRef {
            ts_ns: self.ts_ns,
            dir: self.dir,
            lane: self.lane,
            transport: self.transport,
            orig_len: self.orig_len,
            bytes: [&self.data, &[]],
            flow: None,
        }
    }

    /// Checks what the writers rely on; see [`RecordError`].
    pub fn validate(&self) -> Result<(), RecordError> {
        self.view().validate()
    }
}

/// A [`TraceRecord`] with its bytes borrowed, without the RDS addresses (which the capture
/// formats take from the transport): what the pcap writers take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordRef<'a> {
    pub ts_ns: u64,
    pub dir: Direction,
    pub lane: u8,
    pub transport: Transport,
    pub orig_len: u32,
    /// The captured bytes, in two pieces (the second often empty).
    pub bytes: [&'a [u8]; 2],
    /// For a record read from the tap, its flow as the [`FlowCache`] that decoded it
    /// identifies it: records with equal ids have equal direction, lane and transport.
    pub flow: Option<FlowId>,
}

/// The flow of a tap record ([`FlowCache`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlowId {
    /// The cache slot it is in (below [`FLOW_SLOTS`]).
    pub slot: u8,
    /// Never 0; never reused by its cache for other flow bytes.
    pub id: u64,
}

/// Slots of a [`FlowCache`]: one per direction and lane.
pub(crate) const FLOW_SLOTS: usize = 16;

/// The transports of the last tap records [`RecordRef::from_tap`] decoded, by their flow
/// bytes ([`TapFrameRef::flow_bytes`]), one per direction and lane: a record of a flow seen
/// last in its slot is not decoded again, and gets the same [`FlowId`], by which a writer
/// finds its state without comparing endpoints.
#[derive(Debug, Clone)]
pub(crate) struct FlowCache {
    slots: [FlowSlot; FLOW_SLOTS],
    /// The last id given out.
    last_id: u64,
}

#[derive(Debug, Clone, Copy)]
struct FlowSlot {
    flow: [u8; FLOW_LEN],
    transport: Transport,
    /// 0: empty.
    id: u64,
}

impl Default for FlowCache {
    fn default() -> Self {
        FlowCache {
            slots: [FlowSlot {
                flow: [0; FLOW_LEN],
                transport: Transport::Loopback,
                id: 0,
            }; FLOW_SLOTS],
            last_id: 0,
        }
    }
}

impl<'a> RecordRef<'a> {
    /// A frame of a tap batch; `None` for loopback frames. The transport is decoded only when
    /// the record's flow is not the last one in its slot of `cache`.
    pub(crate) fn from_tap(f: &TapFrameRef<'a>, cache: &mut FlowCache) -> Option<Self> {
        let flow = f.flow_bytes();
        // Flow bytes 0 and 1: direction (0 or 1) and lane.
        let slot = ((usize::from(flow[0]) << 3) | usize::from(flow[1] & 7)) % FLOW_SLOTS;
        let s = &mut cache.slots[slot];
        if s.id == 0 || s.flow != *flow {
            cache.last_id += 1;
            *s = FlowSlot {
                flow: *flow,
                transport: f.transport(),
                id: cache.last_id,
            };
        }
        if s.transport == Transport::Loopback {
            return None;
        }
        Some(RecordRef {
            ts_ns: f.ts_ns(),
            dir: f.dir(),
            lane: f.lane(),
            transport: s.transport,
            orig_len: f.orig_len(),
            bytes: f.bytes(),
            flow: Some(FlowId {
                slot: slot as u8,
                id: s.id,
            }),
        })
    }

    /// Captured bytes.
    pub(crate) fn len(&self) -> usize {
        self.bytes[0].len() + self.bytes[1].len()
    }

    /// Captured bytes `from..to` (within [`RecordRef::len`]), in at most two pieces.
    pub(crate) fn range(&self, from: usize, to: usize) -> [&'a [u8]; 2] {
        let [a, b] = self.bytes;
        let cut = |p: &'a [u8], f: usize, t: usize| &p[f.min(p.len())..t.min(p.len())];
        let n = a.len();
        [
            cut(a, from, to),
            cut(b, from.saturating_sub(n), to.saturating_sub(n)),
        ]
    }

    /// Whether the captured bytes are shorter than the frame.
    pub(crate) fn is_truncated(&self) -> bool {
        (self.len() as u64) < u64::from(self.orig_len)
    }

    /// Checks what the writers rely on; see [`RecordError`].
    pub(crate) fn validate(&self) -> Result<(), RecordError> {
        if self.lane > 7 {
            return Err(RecordError::BadLane(self.lane));
        }
        if (self.orig_len as usize) < HEADER_LEN {
            return Err(RecordError::FrameTooShort(self.orig_len));
        }
        let len = self.len();
        if len < HEADER_LEN {
            return Err(RecordError::HeaderNotCaptured(len));
        }
        if len as u64 > u64::from(self.orig_len) {
            return Err(RecordError::CapturedExceedsFrame {
                captured: len,
                orig_len: self.orig_len,
            });
        }
        // h_len: header bytes 16..20 (at least 48 bytes are there, in either piece).
        let mut h = [0u8; 4];
        let [a, b] = self.range(16, 20);
        h[..a.len()].copy_from_slice(a);
        h[a.len()..a.len() + b.len()].copy_from_slice(b);
        let h_len = u32::from_be_bytes(h);
        match self.transport {
            Transport::Tcp { local, peer } => {
                if local.is_ipv4() != peer.is_ipv4() {
                    return Err(RecordError::MixedAddressFamilies);
                }
                if u64::from(h_len) + HEADER_LEN as u64 != u64::from(self.orig_len) {
                    return Err(RecordError::LengthMismatch {
                        h_len,
                        orig_len: self.orig_len,
                    });
                }
            }
            Transport::Ib {
                local_qpn,
                peer_qpn,
                ..
            } => {
                for qpn in [local_qpn, peer_qpn] {
                    if !(2..=0xFF_FFFF).contains(&qpn) {
                        return Err(RecordError::BadQpn(qpn));
                    }
                }
                let frag = self.orig_len as usize - HEADER_LEN;
                if frag > FRAG_SIZE || frag as u64 > u64::from(h_len) {
                    return Err(RecordError::BadFragment {
                        h_len,
                        orig_len: self.orig_len,
                    });
                }
            }
            Transport::Loopback => return Err(RecordError::Loopback),
        }
        Ok(())
    }
}
