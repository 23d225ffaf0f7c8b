//! [`PcapSink`]: trace records → a classic pcap file.

use std::io::Write;

use pcap_file::DataLink;

use super::error::TraceError;
use super::frame::{RecordRef, TraceRecord};
use super::ib::IbSynth;
use super::pcap::{write_file_header, LINKTYPE_ERF, LINKTYPE_ETHERNET};
use super::record::Transport;
use super::tcp::{TcpCaptureConfig, TcpSynth};

/// Counters of a [`PcapSink`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkStats {
    /// Records accepted.
    pub records: u64,
    /// Records whose captured bytes were shorter than the frame.
    pub truncated: u64,
    /// Packets written to the file.
    pub packets: u64,
}

#[derive(Debug)]
enum Synth {
    Tcp(Box<TcpSynth>),
    Ib(IbSynth),
}

/// Writes [`TraceRecord`]s as a classic pcap capture (nanosecond timestamps, snap length
/// [`PCAP_SNAPLEN`](super::PCAP_SNAPLEN), little-endian) to any [`Write`].
///
/// One sink holds one link type: [`PcapSink::ethernet`] takes RDS/TCP records,
/// [`PcapSink::erf`] takes RDS-over-IB records (write them to a second file). Call
/// [`PcapSink::finish`] at the end: the Ethernet sink holds partial segments back, and
/// dropping a sink without finishing it writes them on a best-effort basis only.
#[derive(Debug)]
pub struct PcapSink<W: Write> {
    out: Option<W>,
    synth: Synth,
    stats: SinkStats,
    /// pcap records not yet written to `out`: the synthesizers build packets here, and the
    /// output takes them [`GATHER`] bytes at a time.
    buf: Vec<u8>,
}

/// Bytes of pcap records a sink gathers before it writes them to its output.
const GATHER: usize = 32 << 10;

impl<W: Write> PcapSink<W> {
    /// A `LINKTYPE_ETHERNET` capture of RDS/TCP records. Each record's frame is appended to
    /// the byte stream of its TCP connection (the record's 4-tuple) and direction, and the
    /// streams are written as Ethernet II + IPv4 or IPv6 + TCP packets:
    ///
    /// - **Sequence numbers** are contiguous per direction of each 4-tuple, starting at an
    ///   initial sequence number ([`TcpCaptureConfig::fixed_isn`]). No handshake is written;
    ///   Wireshark shows relative numbers from the first segment.
    /// - **ACK numbers** (flag ACK on every segment) are the other direction's next sequence
    ///   number at the time of writing, i.e. everything the peer sent so far is acknowledged.
    /// - **Segments** end at absolute stream offsets that are multiples of the MSS, so a
    ///   frame's header may straddle two segments exactly as on a wire. A partial last segment
    ///   is held for [`TcpCaptureConfig::hold_ns`] of record time; it is written when the next
    ///   frame of the same stream fills it, when a record that much newer arrives for any
    ///   stream, at a snapped frame of the same stream, or at [`PcapSink::flush`] /
    ///   [`PcapSink::finish`]. A segment ending at a frame boundary has PSH set.
    /// - **Timestamps**: a segment carries the timestamp of the newest record with bytes in
    ///   it; a held segment written later carries the newest timestamp written so far if that
    ///   is later, so file timestamps never go backwards.
    /// - **Checksums** are correct: the IPv4 header checksum always, the TCP checksum
    ///   (with pseudo-header) on every segment whose payload is entirely in the file. A
    ///   snapped segment's TCP checksum is 0, as its payload is not known.
    /// - **MAC addresses** follow [`super::node_mac`]; IPv4 has DF set, TTL/hop limit 64, and
    ///   an IP ID counting up per direction from 1; the TCP window is 65535.
    /// - **Snapped frames** (captured bytes shorter than `orig_len`): the stream's held
    ///   segment is written first, then the frame goes into one segment that starts at the
    ///   frame's first byte and carries all captured bytes. That segment reports
    ///   `max(MSS, captured + 1)` payload bytes (at most the frame, and at most what fits an IP
    ///   datagram), one more than it carries at least, so the packet is marked as cut: the
    ///   RDS header is dissected in that packet, and Wireshark does not wait to reassemble the
    ///   rest. The frame's remaining bytes are left out of the capture: the next segment of the
    ///   stream starts at the frame's end, a sequence gap Wireshark reports as "previous
    ///   segment not captured", and decoding continues with the next frame. Captured bytes
    ///   beyond 65494 are dropped (a segment must stay in one IP datagram and stay cut).
    ///
    /// # Errors
    /// [`TraceError::Config`] for an MSS out of range; [`TraceError::Pcap`] if the file
    /// header cannot be written.
    pub fn ethernet(out: W, cfg: TcpCaptureConfig) -> Result<Self, TraceError> {
        if cfg.mss_v4 == 0 || cfg.mss_v4 > 65495 {
            return Err(TraceError::Config("mss_v4 must be in 1..=65495"));
        }
        if cfg.mss_v6 == 0 {
            return Err(TraceError::Config("mss_v6 must be in 1..=65515"));
        }
        Ok(PcapSink {
            out: Some(write_file_header(out, DataLink::ETHERNET)?),
            synth: Synth::Tcp(Box::new(TcpSynth::new(cfg))),
            stats: SinkStats::default(),
            buf: Vec::new(),
        })
    }

    /// A `LINKTYPE_ERF` capture of RDS-over-InfiniBand records. Each record (one RDS
    /// fragment: header and at most 4096 payload bytes) becomes one ERF record of type 21
    /// (InfiniBand) carrying one RC SEND Only packet:
    ///
    /// - ERF header: timestamp from the record (Wireshark uses it instead of the pcap
    ///   record's), flags "varying length" plus the capture interface: **0 for frames the
    ///   local node sent, 1 for frames it received**; `wlen` is the IB packet length.
    /// - LRH: VL 0, SL 0, LNH 2 (BTH follows), DLID/SLID from the record's LIDs, PktLen in
    ///   4-byte words from the LRH through the ICRC.
    /// - BTH: opcode 0x04, SE from [`Transport::Ib::solicited`], PadCnt, P_Key 0xFFFF,
    ///   DestQP = the receiving side's QP, AckReq set, and a PSN counting from 0 per
    ///   (SLID, DLID, DestQP).
    /// - The fragment, zero-padded to a multiple of 4 bytes, then the ICRC (CRC-32 over LRH
    ///   through the pad with LRH VL and the BTH reserved byte taken as all ones) and the VCRC
    ///   (CRC-16, polynomial 0x100B, over LRH through ICRC), both least significant byte
    ///   first. Wireshark 4.0 shows but does not verify them.
    /// - A snapped fragment (captured bytes shorter than `orig_len`) is written as a complete,
    ///   consistent IB packet that carries only the captured bytes (PktLen, PadCnt and both
    ///   CRCs describe that shorter packet): Wireshark's InfiniBand dissector hands a payload to
    ///   the RDS heuristic only when the whole packet its LRH declares is in the file. The ERF
    ///   `wlen` (and the pcap record's length on the wire) keep the length of the real packet,
    ///   so Wireshark shows the record as cut, and the dissector and [`super::PcapFrames`] tell
    ///   how much of the fragment is missing.
    ///
    /// # Errors
    /// [`TraceError::Pcap`] if the file header cannot be written.
    pub fn erf(out: W) -> Result<Self, TraceError> {
        Ok(PcapSink {
            out: Some(write_file_header(out, DataLink::ERF)?),
            synth: Synth::Ib(IbSynth::default()),
            stats: SinkStats::default(),
            buf: Vec::new(),
        })
    }

    /// The capture's link type ([`LINKTYPE_ETHERNET`] or [`LINKTYPE_ERF`]).
    pub fn link_type(&self) -> u32 {
        match self.synth {
            Synth::Tcp(_) => LINKTYPE_ETHERNET,
            Synth::Ib(_) => LINKTYPE_ERF,
        }
    }

    /// Whether `rec`'s transport belongs in this capture.
    pub fn accepts(&self, rec: &TraceRecord) -> bool {
        self.holds(&rec.transport)
    }

    fn holds(&self, t: &Transport) -> bool {
        matches!(
            (&self.synth, t),
            (Synth::Tcp(_), Transport::Tcp { .. }) | (Synth::Ib(_), Transport::Ib { .. })
        )
    }

    /// Adds one record. Records should come in timestamp order. The packets are gathered
    /// and written to the output in pieces of 32 KiB, and at [`PcapSink::flush`].
    ///
    /// # Errors
    /// [`TraceError::Record`] if the record fails [`TraceRecord::validate`],
    /// [`TraceError::WrongLink`] if its transport does not match the sink,
    /// [`TraceError::Timestamp`] past the year 2106, [`TraceError::Pcap`] on output errors,
    /// [`TraceError::Finished`] after [`PcapSink::finish`] failed half-way.
    pub fn write(&mut self, rec: &TraceRecord) -> Result<(), TraceError> {
        self.write_ref(&rec.view())
    }

    /// [`PcapSink::write`] of a borrowed record.
    pub(crate) fn write_ref(&mut self, rec: &RecordRef<'_>) -> Result<(), TraceError> {
        if !self.holds(&rec.transport) {
            let record = match rec.transport {
                Transport::Tcp { .. } => "tcp",
                Transport::Ib { .. } => "ib",
                Transport::Loopback => "loopback",
            };
            let sink = match self.synth {
                Synth::Tcp(_) => "ethernet",
                Synth::Ib(_) => "erf",
            };
            return Err(TraceError::WrongLink { record, sink });
        }
        rec.validate()?;
        if rec.ts_ns / 1_000_000_000 > u64::from(u32::MAX) {
            return Err(TraceError::Timestamp(rec.ts_ns));
        }
        if self.out.is_none() {
            return Err(TraceError::Finished);
        }
        self.stats.packets += match &mut self.synth {
            Synth::Tcp(t) => t.push(rec, &mut self.buf),
            Synth::Ib(i) => u64::from(i.push(rec, &mut self.buf)),
        };
        self.stats.records += 1;
        if rec.is_truncated() {
            self.stats.truncated += 1;
        }
        if self.buf.len() >= GATHER {
            self.write_out()?;
        }
        Ok(())
    }

    /// Writes the gathered records to the output (they are gone either way).
    fn write_out(&mut self) -> Result<(), TraceError> {
        let out = self.out.as_mut().ok_or(TraceError::Finished)?;
        let res = out.write_all(&self.buf);
        self.buf.clear();
        Ok(res?)
    }

    /// Writes every held partial segment and flushes the output.
    ///
    /// # Errors
    /// Output errors.
    pub fn flush(&mut self) -> Result<(), TraceError> {
        if let Synth::Tcp(t) = &mut self.synth {
            self.stats.packets += t.flush_all(&mut self.buf);
        }
        self.write_out()?;
        if let Some(out) = self.out.as_mut() {
            out.flush()?;
        }
        Ok(())
    }

    /// Counters so far.
    pub fn stats(&self) -> SinkStats {
        self.stats
    }

    /// The output (`None` once finished).
    pub fn get_ref(&self) -> Option<&W> {
        self.out.as_ref()
    }

    /// Writes every held segment, flushes and returns the output.
    ///
    /// # Errors
    /// Output errors.
    pub fn finish(mut self) -> Result<W, TraceError> {
        self.flush()?;
        self.out.take().ok_or(TraceError::Finished)
    }
}

impl<W: Write> Drop for PcapSink<W> {
    fn drop(&mut self) {
        if self.out.is_some() {
            let _ = self.flush();
        }
    }
}
