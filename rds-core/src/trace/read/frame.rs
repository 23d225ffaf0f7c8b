//! [`CapturedFrame`]: one RDS frame as [`super::PcapFrames`] reads it back, and how it
//! travelled ([`FrameLink`]).

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;

use crate::trace::frame::TraceRecord;
use crate::trace::record::{Direction, Transport};
use crate::wire::HeaderRepr;

/// How a [`CapturedFrame`] travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameLink {
    /// RDS/TCP.
    Tcp {
        /// Sender's TCP endpoint.
        src: SocketAddr,
        /// Receiver's TCP endpoint.
        dst: SocketAddr,
    },
    /// RDS over InfiniBand: one RC SEND Only packet.
    Ib {
        /// Source LID.
        slid: u16,
        /// Destination LID.
        dlid: u16,
        /// Destination queue pair (the receiver's QP).
        dest_qpn: u32,
        /// Packet sequence number.
        psn: u32,
        /// BTH opcode (0x04 SEND Only or 0x05 SEND Only with Immediate).
        opcode: u8,
        /// The solicited-event bit.
        solicited: bool,
    },
}

/// One RDS frame read back from a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFrame {
    /// Number (1-based, as Wireshark counts) of the capture packet that completed the frame:
    /// the one carrying its last captured byte. Wireshark shows the frame's RDS fields there.
    pub frame_no: u64,
    /// Timestamp of that packet, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Direction relative to the capturing node, when the capture records it (MAC convention
    /// of Ethernet captures, interface number of ERF captures; see the module documentation).
    pub dir: Option<Direction>,
    /// Lane: TCP client port % 8 (0 for IB).
    pub lane: u8,
    /// Transport endpoints.
    pub link: FrameLink,
    /// Length of the frame on the wire: `48 + h_len` over TCP, the fragment length over IB.
    pub orig_len: u32,
    /// The captured bytes of the frame: header and payload, possibly cut short.
    pub data: Bytes,
}

impl CapturedFrame {
    /// Whether bytes of the frame are missing from the capture.
    pub fn is_truncated(&self) -> bool {
        (self.data.len() as u64) < u64::from(self.orig_len)
    }

    /// The RDS header, if its 48 bytes were captured.
    pub fn header(&self) -> Option<HeaderRepr> {
        HeaderRepr::from_bytes(&self.data).ok()
    }

    /// The sender's IP address (TCP only).
    pub fn src_ip(&self) -> Option<IpAddr> {
        match self.link {
            FrameLink::Tcp { src, .. } => Some(src.ip()),
            FrameLink::Ib { .. } => None,
        }
    }

    /// The receiver's IP address (TCP only).
    pub fn dst_ip(&self) -> Option<IpAddr> {
        match self.link {
            FrameLink::Tcp { dst, .. } => Some(dst.ip()),
            FrameLink::Ib { .. } => None,
        }
    }

    /// The trace record this frame came from, for RDS/TCP frames whose direction is known.
    /// (IB frames do not carry the sender's QP number, so they cannot be turned back.)
    pub fn to_record(&self) -> Option<TraceRecord> {
        let FrameLink::Tcp { src, dst } = self.link else {
            return None;
        };
        let (local, peer) = match self.dir? {
            Direction::Tx => (src, dst),
            Direction::Rx => (dst, src),
        };
        Some(TraceRecord {
            ts_ns: self.ts_ns,
            dir: self.dir?,
            local: local.ip(),
            peer: peer.ip(),
            lane: self.lane,
            transport: Transport::Tcp { local, peer },
            orig_len: self.orig_len,
            data: self.data.clone(),
        })
    }
}
