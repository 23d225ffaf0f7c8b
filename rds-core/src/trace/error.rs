//! Why a trace record cannot be written ([`RecordError`]) and the errors of the capture
//! writers ([`TraceError`]).

/// Why a [`super::TraceRecord`] cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The lane index is above 7.
    #[error("lane {0} is out of range (0..=7)")]
    BadLane(u8),
    /// `orig_len` is below the 48-byte header.
    #[error("frame length {0} is shorter than the 48-byte RDS header")]
    FrameTooShort(u32),
    /// Fewer than 48 bytes were captured.
    #[error("only {0} bytes captured; the 48-byte RDS header is needed")]
    HeaderNotCaptured(usize),
    /// More bytes captured than the frame has.
    #[error("{captured} bytes captured for a frame of {orig_len} bytes")]
    CapturedExceedsFrame {
        /// Captured bytes.
        captured: usize,
        /// The record's `orig_len`.
        orig_len: u32,
    },
    /// TCP: `48 + h_len` differs from `orig_len`, so the synthesized byte stream would not
    /// frame.
    #[error("h_len {h_len} does not match the frame length {orig_len} (48 + h_len expected)")]
    LengthMismatch {
        /// `h_len` from the captured header.
        h_len: u32,
        /// The record's `orig_len`.
        orig_len: u32,
    },
    /// TCP: one endpoint is IPv4 and the other IPv6.
    #[error("TCP endpoints mix IPv4 and IPv6")]
    MixedAddressFamilies,
    /// IB: a queue pair number is 0, 1 (management QPs) or wider than 24 bits.
    #[error("queue pair number {0:#x} is not a 24-bit data QP (>= 2)")]
    BadQpn(u32),
    /// IB: the fragment carries more than 4096 payload bytes or more than `h_len`.
    #[error(
        "IB fragment of {orig_len} bytes is not a valid fragment of a message with h_len {h_len}"
    )]
    BadFragment {
        /// `h_len` from the captured header.
        h_len: u32,
        /// The record's `orig_len`.
        orig_len: u32,
    },
    /// A same-node loopback frame: it never travels on a wire, so no capture holds it.
    #[error("a loopback frame has no wire to be captured on")]
    Loopback,
}

/// Errors of [`super::PcapSink`].
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The record is inconsistent.
    #[error("invalid trace record: {0}")]
    Record(#[from] RecordError),
    /// A TCP record given to an ERF sink or an IB record given to an Ethernet sink.
    #[error("a {record} record cannot go into a {sink} capture")]
    WrongLink {
        /// The record's transport ("tcp" or "ib").
        record: &'static str,
        /// The sink's link type ("ethernet" or "erf").
        sink: &'static str,
    },
    /// The timestamp does not fit a pcap record (seconds beyond `u32`, i.e. after 2106).
    #[error("timestamp {0} ns does not fit a pcap record")]
    Timestamp(u64),
    /// Invalid configuration.
    #[error("invalid capture configuration: {0}")]
    Config(&'static str),
    /// The sink was already finished.
    #[error("the capture was already finished")]
    Finished,
    /// Writing the file failed.
    #[error("pcap output: {0}")]
    Pcap(#[from] pcap_file::PcapError),
    /// Flushing the output failed.
    #[error("output: {0}")]
    Io(#[from] std::io::Error),
}

impl TraceError {
    /// The output's I/O error, if that is what this is.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            TraceError::Io(io) | TraceError::Pcap(pcap_file::PcapError::IoError(io)) => Some(io),
            _ => None,
        }
    }
}
