//! [`Capture`]: binary trace records → one pcap file, with the counts a capture reports. The
//! node runs it when it writes a capture file itself (the file descriptor came from
//! `rds-trace` over the control socket), on the tap's chunks read in place
//! ([`Capture::write_chunk`]); `rds-trace` runs it when it streams a capture to its standard
//! output, on the batches the node sent it ([`Capture::write_batch`]). Either way the records
//! are read where they are, and each packet is built directly in the sink's output buffer.

use std::io::Write;

use serde::{Deserialize, Serialize};

use super::chunk::TapChunk;
use super::error::TraceError;
use super::frame::{FlowCache, RecordRef};
use super::record::{decode_record_refs, RecordDecodeError, TapFrameRef, Transport};
use super::tcp::TcpCaptureConfig;
use super::writer::PcapSink;

/// The transport whose frames a capture file holds (a pcap file has one link type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CaptureLink {
    /// RDS/TCP frames as Ethernet + IP + TCP packets (`LINKTYPE_ETHERNET`).
    Tcp,
    /// RDS/IB fragments as ERF InfiniBand records (`LINKTYPE_ERF`).
    Ib,
}

impl CaptureLink {
    /// `"tcp"` or `"ib"`.
    pub fn name(self) -> &'static str {
        match self {
            CaptureLink::Tcp => "tcp",
            CaptureLink::Ib => "ib",
        }
    }

    /// Whether frames of `t` go into a capture of this link.
    pub fn holds(self, t: &Transport) -> bool {
        matches!(
            (self, t),
            (CaptureLink::Tcp, Transport::Tcp { .. }) | (CaptureLink::Ib, Transport::Ib { .. })
        )
    }

    /// The default for a node running `node_transports` ("tcp", "ib"): IB when it runs IB and
    /// not TCP, else TCP.
    pub fn default_for(node_transports: &[String]) -> CaptureLink {
        let has = |t: &str| node_transports.iter().any(|x| x == t);
        if has("ib") && !has("tcp") {
            CaptureLink::Ib
        } else {
            CaptureLink::Tcp
        }
    }
}

/// What a capture wrote and left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureTally {
    /// Frames written.
    pub written: u64,
    /// Frames of the other transport, and same-node loopback frames (not written).
    pub other: u64,
    /// Inconsistent frames (not written).
    pub invalid: u64,
    /// Why the first inconsistent frame was left out.
    pub first_invalid: Option<String>,
}

/// Writes batches of trace records to a pcap sink (see the module documentation).
#[derive(Debug)]
pub struct Capture<W: Write> {
    sink: PcapSink<W>,
    link: CaptureLink,
    count: Option<u64>,
    tally: CaptureTally,
    flows: FlowCache,
}

impl<W: Write> Capture<W> {
    /// A capture of `link` frames into `out` (the pcap header is written now), ending after
    /// `count` frames when given. `tcp` lays out RDS/TCP captures.
    ///
    /// # Errors
    /// Writing the header failed, or `tcp` is invalid.
    pub fn new(
        out: W,
        link: CaptureLink,
        count: Option<u64>,
        tcp: TcpCaptureConfig,
    ) -> Result<Self, TraceError> {
        let sink = match link {
            CaptureLink::Tcp => PcapSink::ethernet(out, tcp)?,
            CaptureLink::Ib => PcapSink::erf(out)?,
        };
        Ok(Capture {
            sink,
            link,
            count,
            tally: CaptureTally::default(),
            flows: FlowCache::default(),
        })
    }

    /// The capture's link type.
    pub fn link(&self) -> CaptureLink {
        self.link
    }

    /// Whether `count` frames were written.
    pub fn full(&self) -> bool {
        self.count.is_some_and(|c| self.tally.written >= c)
    }

    /// The counts so far.
    pub fn tally(&self) -> &CaptureTally {
        &self.tally
    }

    /// The output.
    pub fn get_ref(&self) -> Option<&W> {
        self.sink.get_ref()
    }

    fn invalid(&mut self, why: String) {
        if self.tally.invalid == 0 {
            self.tally.first_invalid = Some(why);
        }
        self.tally.invalid += 1;
    }

    /// Writes the frames of one batch of binary trace records, up to the count. A malformed
    /// record ends the batch; it and inconsistent frames are counted as invalid.
    ///
    /// # Errors
    /// Writing to the output failed (nothing more should be written).
    pub fn write_batch(&mut self, batch: &[u8]) -> Result<(), TraceError> {
        self.write_records(decode_record_refs(batch))
    }

    /// [`Capture::write_batch`] of a chunk of records as the node's tap wrote them, read in
    /// place.
    ///
    /// # Errors
    /// Writing to the output failed (nothing more should be written).
    pub fn write_chunk(&mut self, chunk: &TapChunk) -> Result<(), TraceError> {
        self.write_records(chunk.records())
    }

    fn write_records<'a>(
        &mut self,
        records: impl Iterator<Item = Result<TapFrameRef<'a>, RecordDecodeError>>,
    ) -> Result<(), TraceError> {
        for f in records {
            if self.full() {
                break;
            }
            let f = match f {
                Ok(f) => f,
                Err(e) => {
                    self.invalid(e.to_string());
                    break;
                }
            };
            let Some(rec) =
                RecordRef::from_tap(&f, &mut self.flows).filter(|r| self.link.holds(&r.transport))
            else {
                self.tally.other += 1;
                continue;
            };
            match self.sink.write_ref(&rec) {
                Ok(()) => self.tally.written += 1,
                Err(TraceError::Record(e)) => self.invalid(e.to_string()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes held-back segments and flushes the output.
    ///
    /// # Errors
    /// Writing failed.
    pub fn flush(&mut self) -> Result<(), TraceError> {
        self.sink.flush()
    }

    /// Writes what is held back and returns the output and the counts.
    ///
    /// # Errors
    /// Writing failed.
    pub fn finish(self) -> Result<(W, CaptureTally), TraceError> {
        let tally = self.tally;
        Ok((self.sink.finish()?, tally))
    }
}
