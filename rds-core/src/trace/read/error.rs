//! Errors of [`super::PcapFrames`]: fatal ones ([`ReadError`]) and problems with one packet
//! or one TCP stream ([`PacketError`]), after which reading goes on.

use pcap_file::PcapError;

/// A problem with one packet or one TCP stream; reading goes on after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// A protocol header is cut short in the capture.
    #[error("{layer} header truncated")]
    Truncated {
        /// Which header.
        layer: &'static str,
    },
    /// A protocol header has an impossible field.
    #[error("malformed {layer} header: {what}")]
    Malformed {
        /// Which header.
        layer: &'static str,
        /// What is wrong.
        what: &'static str,
    },
    /// Bytes of a TCP stream are missing where an RDS header was due, so frame boundaries are
    /// uncertain until the next frame is found; `partial_header` header bytes were dropped.
    /// The next captured byte is taken as the start of a frame.
    #[error("{missing} bytes missing from the TCP stream where an RDS header was due ({partial_header} header bytes dropped)")]
    StreamGap {
        /// Missing bytes.
        missing: u64,
        /// Bytes of a partial header that were dropped.
        partial_header: usize,
    },
    /// An RDS header's `h_len` exceeds 1 MiB: the stream is not RDS or out of step. Bytes are
    /// dropped up to the next TCP segment, which is taken as the start of a frame.
    #[error("implausible RDS payload length {h_len}")]
    ImplausibleLength {
        /// The `h_len` read.
        h_len: u32,
    },
}

/// Errors of [`super::PcapFrames`].
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Not a classic pcap file, an I/O error, or the file ends inside a record. Fatal: the
    /// iterator ends after it.
    #[error("pcap input: {0}")]
    Pcap(#[from] PcapError),
    /// The capture's link type is not one this reader understands. Fatal.
    #[error("unsupported link type {0}")]
    UnsupportedLinkType(u32),
    /// A problem in one packet (1-based number). Not fatal.
    #[error("packet {frame_no}: {error}")]
    Packet {
        /// The packet's number.
        frame_no: u64,
        /// What is wrong.
        error: PacketError,
    },
}

impl ReadError {
    /// Whether reading stops after this error.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, ReadError::Packet { .. })
    }
}
