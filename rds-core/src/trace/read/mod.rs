//! [`PcapFrames`]: a pcap capture → RDS frames (for `rds-trace -r`).
//!
//! Rooms, each importing only rooms named after it: this file drives the others (it reads
//! the pcap records, numbers and timestamps them, and hands each to the room of its link
//! type); `tcp` (a packet of an IP link → the RDS/TCP segment it carries); `ib` (an ERF
//! record → the RDS fragment over InfiniBand it carries); `reassembly` (TCP segments →
//! frames); `frame` ([`CapturedFrame`], [`FrameLink`]); `error` ([`ReadError`],
//! [`PacketError`]). The headers are read through the views of `trace::net`.

mod error;
mod frame;
mod ib;
mod reassembly;
mod tcp;

use std::io::Read;

use pcap_file::pcap::{PcapReader, RawPcapPacket};
use pcap_file::TsResolution;

pub use error::{PacketError, ReadError};
pub use frame::{CapturedFrame, FrameLink};
use reassembly::{Packet, Ready, Reassembly};
use tcp::IpLink;

use super::pcap::{
    LINKTYPE_ERF, LINKTYPE_ETHERNET, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2, LINKTYPE_RAW,
};

/// Counters of a [`PcapFrames`] reader.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Capture packets read.
    pub packets: u64,
    /// RDS frames yielded.
    pub frames: u64,
    /// Packets that are not RDS (other protocols, other ports, IP fragments, other IB
    /// opcodes, pure TCP ACKs are not counted here).
    pub ignored: u64,
    /// Non-fatal errors reported.
    pub errors: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Ip(IpLink),
    Erf,
}

/// Reads a classic pcap capture (from [`super::PcapSink`] or tcpdump) and yields its RDS
/// frames in the order they complete.
///
/// Link types: Ethernet (1, with up to two VLAN tags), raw IP (101, 228, 229), Linux cooked
/// (113, 276) and ERF (197, InfiniBand records). RDS/TCP is recognised by TCP port 16385 on
/// either side; each direction of each 4-tuple is reassembled as a byte stream (by sequence
/// number: retransmitted bytes are dropped, missing bytes are gaps) and cut into frames by the
/// 48-byte header's `h_len`. A frame whose bytes stop being captured (a snapped packet or a
/// gap) is yielded at once with the bytes it has; the stream then skips to the frame's end.
/// SYN starts a stream afresh, FIN and RST end it. Over ERF, every RC SEND Only packet is one
/// frame.
///
/// Never panics on any input. Per-packet problems are `Err` items with
/// [`ReadError::is_fatal`] false; reading continues after them.
#[derive(Debug)]
pub struct PcapFrames<R: Read> {
    reader: PcapReader<R>,
    st: State,
}

#[derive(Debug)]
struct State {
    link: Link,
    linktype: u32,
    nanos: bool,
    frame_no: u64,
    streams: Reassembly,
    ready: Ready,
    done: bool,
    stats: ReadStats,
}

impl<R: Read> PcapFrames<R> {
    /// Opens a capture: reads and checks the file header.
    ///
    /// # Errors
    /// [`ReadError::Pcap`] if this is not a classic pcap file (pcapng is not read),
    /// [`ReadError::UnsupportedLinkType`] for other link types.
    pub fn new(input: R) -> Result<Self, ReadError> {
        let reader = PcapReader::new(input)?;
        let header = reader.header();
        let linktype = u32::from(header.datalink);
        let link = match linktype {
            LINKTYPE_ETHERNET => Link::Ip(IpLink::Ethernet),
            LINKTYPE_RAW | LINKTYPE_IPV4 | LINKTYPE_IPV6 => Link::Ip(IpLink::Raw),
            LINKTYPE_LINUX_SLL => Link::Ip(IpLink::Sll),
            LINKTYPE_LINUX_SLL2 => Link::Ip(IpLink::Sll2),
            LINKTYPE_ERF => Link::Erf,
            other => return Err(ReadError::UnsupportedLinkType(other)),
        };
        Ok(PcapFrames {
            reader,
            st: State {
                link,
                linktype,
                nanos: header.ts_resolution == TsResolution::NanoSecond,
                frame_no: 0,
                streams: Reassembly::default(),
                ready: Ready::new(),
                done: false,
                stats: ReadStats::default(),
            },
        })
    }

    /// The capture's link type.
    pub fn link_type(&self) -> u32 {
        self.st.linktype
    }

    /// Counters so far.
    pub fn stats(&self) -> ReadStats {
        self.st.stats
    }
}

impl<R: Read> Iterator for PcapFrames<R> {
    type Item = Result<CapturedFrame, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.st.ready.pop_front() {
                match &item {
                    Ok(_) => self.st.stats.frames += 1,
                    Err(e) if !e.is_fatal() => self.st.stats.errors += 1,
                    Err(_) => {}
                }
                return Some(item);
            }
            if self.st.done {
                return None;
            }
            match self.reader.next_raw_packet() {
                None => {
                    self.st.done = true;
                    self.st.streams.finish(&mut self.st.ready);
                }
                Some(Err(e)) => {
                    self.st.done = true;
                    self.st.streams.finish(&mut self.st.ready);
                    self.st.ready.push_back(Err(ReadError::Pcap(e)));
                }
                Some(Ok(raw)) => self.st.packet(&raw),
            }
        }
    }
}

impl State {
    fn packet(&mut self, raw: &RawPcapPacket<'_>) {
        self.frame_no += 1;
        self.stats.packets += 1;
        let frac = u64::from(raw.ts_frac);
        let ts_ns = u64::from(raw.ts_sec)
            .saturating_mul(1_000_000_000)
            .saturating_add(if self.nanos {
                frac
            } else {
                frac.saturating_mul(1000)
            });
        let data: &[u8] = &raw.data;
        let wire = u64::from(raw.orig_len).max(data.len() as u64);
        let at = Packet {
            frame_no: self.frame_no,
            ts_ns,
        };
        match self.link {
            Link::Erf => match ib::frame(data, at.frame_no) {
                Ok(Some(frame)) => self.ready.push_back(Ok(frame)),
                Ok(None) => self.stats.ignored += 1,
                Err(error) => self.error(error),
            },
            Link::Ip(link) => match tcp::segment(link, data, wire) {
                Ok(Some((key, seg))) => self.streams.segment(key, seg, at, &mut self.ready),
                Ok(None) => self.stats.ignored += 1,
                Err(error) => self.error(error),
            },
        }
    }

    fn error(&mut self, error: PacketError) {
        self.ready.push_back(Err(ReadError::Packet {
            frame_no: self.frame_no,
            error,
        }));
    }
}
