//! TCP headers (RFC 9293).
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 2 | source port |
//! | 2 | 2 | destination port |
//! | 4 | 4 | sequence number |
//! | 8 | 4 | acknowledgment number |
//! | 12 | 1 | data offset in 32-bit words (high nibble), reserved |
//! | 13 | 1 | flags ([`flags`]) |
//! | 14 | 2 | window |
//! | 16 | 2 | checksum (over a pseudo-header, the header and the payload) |
//! | 18 | 2 | urgent pointer |
//! | 20 | data offset * 4 - 20 | options |

use crate::trace::net::Error;

/// The flag bits of byte 13.
pub(crate) mod flags {
    /// No more data from the sender.
    pub(crate) const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub(crate) const SYN: u8 = 0x02;
    /// Reset the connection.
    pub(crate) const RST: u8 = 0x04;
    /// Push.
    pub(crate) const PSH: u8 = 0x08;
    /// The acknowledgment number is valid.
    pub(crate) const ACK: u8 = 0x10;
}

mod field {
    use core::ops::Range;
    pub(super) const SRC_PORT: Range<usize> = 0..2;
    pub(super) const DST_PORT: Range<usize> = 2..4;
    pub(super) const SEQ_NUM: Range<usize> = 4..8;
    pub(super) const ACK_NUM: Range<usize> = 8..12;
    pub(super) const DATA_OFF: usize = 12;
    pub(super) const FLAGS: usize = 13;
    pub(super) const WIN_SIZE: Range<usize> = 14..16;
    pub(super) const CHECKSUM: Range<usize> = 16..18;
    pub(super) const URGENT: Range<usize> = 18..20;
}

/// Length of the header without options.
pub(crate) const HEADER_LEN: usize = field::URGENT.end;

/// A view of a TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    view_constructors!(TcpPacket, HEADER_LEN);

    /// Checks the header length the data offset gives against the fixed header and the
    /// buffer.
    ///
    /// # Errors
    /// [`Error::Malformed`] if it is below [`HEADER_LEN`], [`Error::Truncated`] if the
    /// buffer ends before it.
    #[inline]
    pub(crate) fn check_header_len(&self) -> Result<(), Error> {
        let len = self.header_len();
        if len < HEADER_LEN {
            Err(Error::Malformed)
        } else if self.buffer.as_ref().len() < len {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    be_get!(
        /// The source port.
        src_port,
        u16,
        field::SRC_PORT
    );

    be_get!(
        /// The destination port.
        dst_port,
        u16,
        field::DST_PORT
    );

    be_get!(
        /// The sequence number.
        seq_number,
        u32,
        field::SEQ_NUM
    );

    #[cfg(test)]
    be_get!(
        /// The acknowledgment number.
        ack_number,
        u32,
        field::ACK_NUM
    );

    /// The header length in bytes (data offset * 4), options included.
    #[inline]
    pub(crate) fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFF] >> 4) * 4
    }

    /// The flags ([`flags`]).
    #[inline]
    pub(crate) fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    #[cfg(test)]
    be_get!(
        /// The window.
        window_len,
        u16,
        field::WIN_SIZE
    );

    #[cfg(test)]
    be_get!(
        /// The checksum as stored.
        checksum,
        u16,
        field::CHECKSUM
    );

    #[cfg(test)]
    be_get!(
        /// The urgent pointer.
        urgent_at,
        u16,
        field::URGENT
    );
}

impl<'a, T: AsRef<[u8]> + ?Sized> TcpPacket<&'a T> {
    /// The bytes after the header as far as the buffer holds them: the payload once
    /// [`TcpPacket::check_header_len`] passed (empty if the header runs past the buffer).
    #[inline]
    pub(crate) fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        b.get(self.header_len()..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    be_set!(
        /// Sets the source port.
        set_src_port,
        u16,
        field::SRC_PORT
    );

    be_set!(
        /// Sets the destination port.
        set_dst_port,
        u16,
        field::DST_PORT
    );

    be_set!(
        /// Sets the sequence number.
        set_seq_number,
        u32,
        field::SEQ_NUM
    );

    be_set!(
        /// Sets the acknowledgment number.
        set_ack_number,
        u32,
        field::ACK_NUM
    );

    /// Sets the header length in bytes (a multiple of 4, at most 60); the reserved bits are
    /// cleared.
    #[inline]
    pub(crate) fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::DATA_OFF] = ((len / 4) as u8) << 4;
    }

    /// Sets the flags.
    #[inline]
    pub(crate) fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    be_set!(
        /// Sets the window.
        set_window_len,
        u16,
        field::WIN_SIZE
    );

    be_set!(
        /// Sets the checksum verbatim.
        set_checksum,
        u16,
        field::CHECKSUM
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 40000 -> 16385, seq 1000, ack 1000, offset 5, ACK|PSH, window 65535, checksum 0x0fd1,
    /// then the first payload byte (the segment of `trace::tests::tcp::ipv4_segment_byte_exact`).
    static SEGMENT_BYTES: [u8; 21] = [
        0x9c, 0x40, 0x40, 0x01, // ports
        0x00, 0x00, 0x03, 0xe8, // seq
        0x00, 0x00, 0x03, 0xe8, // ack
        0x50, 0x18, 0xff, 0xff, // offset 5, ACK|PSH, window
        0x0f, 0xd1, 0x00, 0x00, // checksum, urgent
        0x00,
    ];

    /// Offset 6 (an MSS option), SYN, then one payload byte.
    static OPTIONS_BYTES: [u8; 25] = [
        0x40, 0x01, 0x9c, 0x41, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00, 0x60, 0x02, 0x20,
        0x00, 0x00, 0x00, 0x00, 0x07, 0x02, 0x04, 0x05, 0xb4, 0x33,
    ];

    #[test]
    fn deconstruct() {
        let p = TcpPacket::new_checked(&SEGMENT_BYTES[..]).unwrap();
        p.check_header_len().unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (40000, 16385));
        assert_eq!((p.seq_number(), p.ack_number()), (1000, 1000));
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.flags(), flags::ACK | flags::PSH);
        assert_eq!(p.window_len(), 0xffff);
        assert_eq!(p.checksum(), 0x0fd1);
        assert_eq!(p.urgent_at(), 0);
        assert_eq!(p.payload(), &[0x00]);

        let p = TcpPacket::new_checked(&OPTIONS_BYTES[..]).unwrap();
        p.check_header_len().unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (16385, 40001));
        assert_eq!(p.seq_number(), 0x1234_5678);
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.flags(), flags::SYN);
        assert_eq!(p.urgent_at(), 7);
        assert_eq!(p.payload(), &[0x33]);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 21];
        // The urgent pointer has no setter: the writer leaves it at 0.
        buf[18..20].fill(0);
        let mut p = TcpPacket::new_unchecked(&mut buf[..]);
        p.set_src_port(40000);
        p.set_dst_port(16385);
        p.set_seq_number(1000);
        p.set_ack_number(1000);
        p.set_header_len(HEADER_LEN);
        p.set_flags(flags::ACK | flags::PSH);
        p.set_window_len(0xffff);
        p.set_checksum(0x0fd1);
        buf[HEADER_LEN] = 0;
        assert_eq!(buf, SEGMENT_BYTES);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            TcpPacket::new_checked(&SEGMENT_BYTES[..19]),
            Err(Error::Truncated)
        );
        // Options cut by the capture.
        let cut = TcpPacket::new_checked(&OPTIONS_BYTES[..23]).unwrap();
        assert_eq!(cut.check_header_len(), Err(Error::Truncated));
        assert_eq!(cut.payload(), &[] as &[u8]);
        // Data offset below 5: the ports are still there to read.
        let mut bad = SEGMENT_BYTES;
        bad[12] = 0x40;
        let p = TcpPacket::new_checked(&bad[..]).unwrap();
        assert_eq!(p.check_header_len(), Err(Error::Malformed));
        assert_eq!(p.dst_port(), 16385);
    }
}
