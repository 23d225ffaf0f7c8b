//! Classic pcap framing shared by the capture writers: the file header (nanosecond
//! timestamps, [`PCAP_SNAPLEN`], little-endian) and the 16-byte header of each record.

use std::io::Write;

use pcap_file::pcap::PcapHeader;
use pcap_file::{DataLink, Endianness, TsResolution};

use super::error::TraceError;

/// The snap length written into every capture header. Large enough for the largest packet the
/// writer produces (an IPv6 datagram of 65535 payload bytes in an Ethernet frame).
pub const PCAP_SNAPLEN: u32 = 262_144;
/// `LINKTYPE_ETHERNET`.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// `LINKTYPE_ERF` (Endace Extensible Record Format).
pub const LINKTYPE_ERF: u32 = 197;
/// `LINKTYPE_RAW`: raw IPv4 or IPv6.
pub(crate) const LINKTYPE_RAW: u32 = 101;
/// `LINKTYPE_LINUX_SLL`: Linux cooked v1.
pub(crate) const LINKTYPE_LINUX_SLL: u32 = 113;
/// `LINKTYPE_IPV4`: raw IPv4.
pub(crate) const LINKTYPE_IPV4: u32 = 228;
/// `LINKTYPE_IPV6`: raw IPv6.
pub(crate) const LINKTYPE_IPV6: u32 = 229;
/// `LINKTYPE_LINUX_SLL2`: Linux cooked v2.
pub(crate) const LINKTYPE_LINUX_SLL2: u32 = 276;

/// Writes the file header: nanosecond magic, version 2.4, [`PCAP_SNAPLEN`], little-endian.
pub(crate) fn write_file_header<W: Write>(mut out: W, datalink: DataLink) -> Result<W, TraceError> {
    let header = PcapHeader {
        datalink,
        ts_resolution: TsResolution::NanoSecond,
        snaplen: PCAP_SNAPLEN,
        endianness: Endianness::Little,
        ..PcapHeader::default()
    };
    header.write_to(&mut out)?;
    Ok(out)
}

/// The 16-byte header of a pcap record (seconds, nanoseconds, captured length, length on the
/// wire; little-endian) of a packet of `incl` captured bytes. The sink checked the timestamp
/// ([`super::PcapSink::write`]); the synthesizers never build a packet longer than
/// [`PCAP_SNAPLEN`] or than its length on the wire.
pub(crate) fn pcap_record_header(ts_ns: u64, incl: usize, orig_len: u32) -> [u8; 16] {
    debug_assert!(ts_ns / 1_000_000_000 <= u64::from(u32::MAX));
    debug_assert!(incl <= PCAP_SNAPLEN as usize && incl <= orig_len as usize);
    let mut hdr = [0u8; 16];
    hdr[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
    hdr[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
    hdr[8..12].copy_from_slice(&(incl as u32).to_le_bytes());
    hdr[12..16].copy_from_slice(&orig_len.to_le_bytes());
    hdr
}
