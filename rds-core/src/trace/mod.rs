//! Wire capture: trace records, the pcap writer and the pcap reader behind `rds-trace`.
//!
//! A node's trace tap produces one [`TraceRecord`] per RDS frame it sends or receives: the
//! 48-byte header and its payload as they travel on the transport, cut at a snap length, with
//! a timestamp, a direction and the transport endpoints. This module turns such records into
//! capture files that Wireshark and tshark decode (with the RDS dissector shipped in
//! `wireshark/rds.lua`), and reads those files back.
//!
//! # Capture formats
//! - **RDS/TCP** ([`PcapSink::ethernet`]): classic pcap, nanosecond timestamps, snap length
//!   [`PCAP_SNAPLEN`], `LINKTYPE_ETHERNET`. Each record's bytes are appended to the byte stream
//!   of its TCP connection and direction, and that stream is cut into Ethernet + IPv4/IPv6 +
//!   TCP segments exactly as a TCP sender would put them on a wire (see
//!   [`PcapSink::ethernet`] for every rule: sequence and ACK numbers, segment boundaries,
//!   checksums, snapped frames).
//! - **RDS over InfiniBand** ([`PcapSink::erf`]): classic pcap with `LINKTYPE_ERF`; every
//!   record is one RDS fragment carried by one ERF record of type 21 (InfiniBand): LRH,
//!   BTH (RC SEND Only), the fragment padded to 4 bytes, ICRC and VCRC.
//!
//! [`PcapFrames`] reads either kind of file (and RDS/TCP captures taken by tcpdump) back into
//! RDS frames.
//!
//! # Conventions shared by the writer and the reader
//! - **Direction** (Ethernet captures): MAC addresses are synthetic. The capturing ("local")
//!   node's MAC is `02:00:a:b:c:d` and the peer's is `02:01:a:b:c:d`, where `a.b.c.d` are the
//!   last four bytes of the node's IP address ([`node_mac`]). The reader derives the direction
//!   from them.
//! - **Direction** (ERF captures): the ERF capture interface is 0 for frames the local node
//!   sent and 1 for frames it received.
//! - **Lane** (TCP): each lane is its own TCP connection; the lane is not on the wire. The
//!   reader reports `client port % 8`, the rule Linux (since the 2026 multipath series) and
//!   this stack use when they bind lane `i` to a source port `≡ i (mod 8)`.
//!
//! # Rooms
//! Each room imports only rooms named after it: `capture` (records to one file, with its
//! counts); `writer` ([`PcapSink`]); `read` ([`PcapFrames`]: the driver, the dissection of IP
//! links into TCP segments, ERF records into IB frames, TCP reassembly, the read-back types
//! and errors); `tcp` and `ib` (the packet synthesizers); `frame` ([`TraceRecord`] and its
//! borrowed form); `chunk` ([`TapChunk`], [`TapBatch`]); `record` (the tap's binary record
//! format: [`TapFrame`], [`Transport`], [`Direction`]); `net` (zero-copy views of the headers
//! around RDS frames in a capture: Ethernet and its VLAN tags, Linux cooked, IPv4, IPv6, TCP,
//! ERF, the IB LRH and BTH; the reader reads and the synthesizers write through them); `pcap`
//! (file and record headers, link types); `crc` (the IB CRCs; the Internet checksum is
//! [`crate::wire::checksum`]); `error` (the writers' errors). `direct` (the file written past
//! the page cache) stands apart. This file only names the public items; nothing in `trace`
//! imports the node.

mod capture;
mod chunk;
mod crc;
mod direct;
mod error;
mod frame;
mod ib;
mod net;
mod pcap;
mod read;
mod record;
mod tcp;
mod writer;

pub use capture::{Capture, CaptureLink, CaptureTally};
pub use chunk::{ChunkRecords, TapBatch, TapChunk};
pub use direct::{open_capture_file, CaptureFile};
pub use error::{RecordError, TraceError};
pub use frame::TraceRecord;
pub use ib::IB_MAX_FRAGMENT;
pub use net::erf::ERF_TYPE_INFINIBAND;
pub use pcap::{LINKTYPE_ERF, LINKTYPE_ETHERNET, PCAP_SNAPLEN};
pub use read::{CapturedFrame, FrameLink, PacketError, PcapFrames, ReadError, ReadStats};
pub(crate) use record::record_head;
pub use record::{
    decode_record_refs, decode_records, encode_record, Direction, RecordDecodeError, RecordIter,
    RecordRefIter, TapFrame, TapFrameRef, Transport, FLOW_LEN, MAX_RECORD, MAX_SNAPLEN,
    REC_HDR_LEN,
};
pub use tcp::{node_mac, TcpCaptureConfig, DEFAULT_MSS_V4, DEFAULT_MSS_V6};
pub use writer::{PcapSink, SinkStats};

#[cfg(test)]
pub(crate) mod tests;
