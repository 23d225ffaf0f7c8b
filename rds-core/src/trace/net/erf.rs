//! ERF (Endace Extensible Record Format) record headers, `LINKTYPE_ERF`: the link type of
//! RDS-over-InfiniBand captures, where each record holds one native IB packet (type 21).
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 8 | timestamp, little-endian: seconds (high 32 bits), binary fraction (low 32) |
//! | 8 | 1 | type (low 7 bits); bit 7: an extension header follows |
//! | 9 | 1 | flags: capture interface (bits 0-1), varying-length record (bit 2), ... |
//! | 10 | 2 | record length (header, extension headers, packet) |
//! | 12 | 2 | loss counter |
//! | 14 | 2 | length of the packet on the wire |
//!
//! Extension headers are 8 bytes each; bit 7 of the first byte says that another follows.

use crate::trace::net::Error;

mod field {
    use core::ops::Range;
    pub(super) const TIMESTAMP: Range<usize> = 0..8;
    pub(super) const TYPE: usize = 8;
    pub(super) const FLAGS: usize = 9;
    pub(super) const RLEN: Range<usize> = 10..12;
    pub(super) const LCTR: Range<usize> = 12..14;
    pub(super) const WLEN: Range<usize> = 14..16;
}

/// Length of the ERF header without extension headers.
pub(crate) const HEADER_LEN: usize = field::WLEN.end;
/// Length of one extension header.
pub(crate) const EXT_HEADER_LEN: usize = 8;

/// ERF record type of an InfiniBand packet starting with its LRH.
pub const ERF_TYPE_INFINIBAND: u8 = 21;
/// Type bit: an extension header follows the ERF header.
const TYPE_EXT: u8 = 0x80;
/// Flags: the capture interface.
const FLAG_INTERFACE: u8 = 0x03;
/// Flags: varying-length record.
pub(crate) const FLAG_VLEN: u8 = 0x04;

/// The ERF timestamp of `ts_ns` (nanoseconds since the Unix epoch): seconds in the high 32
/// bits, the binary fraction of a second in the low 32 bits.
pub(crate) fn erf_timestamp(ts_ns: u64) -> u64 {
    let secs = ts_ns / 1_000_000_000;
    let frac = ((ts_ns % 1_000_000_000) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

/// Inverse of [`erf_timestamp`]: exact for values it produced (rounds the fraction up).
pub(crate) fn erf_timestamp_ns(ts: u64) -> u64 {
    let secs = ts >> 32;
    let frac = ts & 0xffff_ffff;
    let ns = (frac * 1_000_000_000).div_ceil(1 << 32);
    secs.saturating_mul(1_000_000_000).saturating_add(ns)
}

/// A view of an ERF record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ErfRecord<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ErfRecord<T> {
    view_constructors!(ErfRecord, HEADER_LEN);

    /// The timestamp as stored ([`erf_timestamp_ns`] converts it).
    #[inline]
    pub(crate) fn timestamp(&self) -> u64 {
        let b = &self.buffer.as_ref()[field::TIMESTAMP];
        u64::from_le_bytes(b.try_into().expect("fixed field width"))
    }

    /// The record type, without the extension bit.
    #[inline]
    pub(crate) fn record_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE] & !TYPE_EXT
    }

    /// Whether extension headers follow the header.
    #[inline]
    pub(crate) fn has_extensions(&self) -> bool {
        self.buffer.as_ref()[field::TYPE] & TYPE_EXT != 0
    }

    /// The flags byte.
    #[cfg(test)]
    #[inline]
    pub(crate) fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The capture interface (0..=3) from the flags.
    #[inline]
    pub(crate) fn interface(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & FLAG_INTERFACE
    }

    #[cfg(test)]
    be_get!(
        /// The record length.
        record_len,
        u16,
        field::RLEN
    );

    #[cfg(test)]
    be_get!(
        /// The loss counter.
        loss_count,
        u16,
        field::LCTR
    );

    be_get!(
        /// The length of the packet on the wire.
        wire_len,
        u16,
        field::WLEN
    );
}

impl<'a, T: AsRef<[u8]> + ?Sized> ErfRecord<&'a T> {
    /// The packet after the header and its extension headers, as far as the buffer holds
    /// it (empty if the extension headers run past the buffer). Only the first byte of each
    /// extension header need be there.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer ends before the first byte of an extension header.
    #[inline]
    pub(crate) fn payload(&self) -> Result<&'a [u8], Error> {
        let b = self.buffer.as_ref();
        let mut off = HEADER_LEN;
        if self.has_extensions() {
            loop {
                let &first = b.get(off).ok_or(Error::Truncated)?;
                off += EXT_HEADER_LEN;
                if first & TYPE_EXT == 0 {
                    break;
                }
            }
        }
        Ok(b.get(off..).unwrap_or(&[]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ErfRecord<T> {
    /// Sets the timestamp (an [`erf_timestamp`] value).
    #[inline]
    pub(crate) fn set_timestamp(&mut self, ts: u64) {
        self.buffer.as_mut()[field::TIMESTAMP].copy_from_slice(&ts.to_le_bytes());
    }

    /// Sets the type byte: the record type, no extension headers.
    #[inline]
    pub(crate) fn set_record_type(&mut self, value: u8) {
        self.buffer.as_mut()[field::TYPE] = value & !TYPE_EXT;
    }

    /// Sets the flags: `flags` ([`FLAG_VLEN`]) and the capture interface.
    #[inline]
    pub(crate) fn set_flags(&mut self, flags: u8, interface: u8) {
        self.buffer.as_mut()[field::FLAGS] =
            (flags & !FLAG_INTERFACE) | (interface & FLAG_INTERFACE);
    }

    be_set!(
        /// Sets the record length.
        set_record_len,
        u16,
        field::RLEN
    );

    be_set!(
        /// Sets the loss counter.
        set_loss_count,
        u16,
        field::LCTR
    );

    be_set!(
        /// Sets the length of the packet on the wire.
        set_wire_len,
        u16,
        field::WLEN
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1700000000.5 s, type 21, varying length, interface 1, record length 90, no loss,
    /// wire length 74, then the first packet byte (`trace::tests::ib::erf_record_byte_exact`).
    static RECORD_BYTES: [u8; 17] = [
        0x00, 0x00, 0x00, 0x80, 0x00, 0xf1, 0x53, 0x65, // timestamp
        0x15, 0x05, 0x00, 0x5a, 0x00, 0x00, 0x00, 0x4a, // type, flags, rlen, lctr, wlen
        0x00,
    ];

    #[test]
    fn deconstruct() {
        let r = ErfRecord::new_checked(&RECORD_BYTES[..]).unwrap();
        assert_eq!(r.timestamp(), 0x6553_f100_8000_0000);
        assert_eq!(erf_timestamp_ns(r.timestamp()), 1_700_000_000_500_000_000);
        assert_eq!(r.record_type(), ERF_TYPE_INFINIBAND);
        assert!(!r.has_extensions());
        assert_eq!(r.flags(), FLAG_VLEN | 1);
        assert_eq!(r.interface(), 1);
        assert_eq!(r.record_len(), 90);
        assert_eq!(r.loss_count(), 0);
        assert_eq!(r.wire_len(), 74);
        assert_eq!(r.payload(), Ok(&[0x00][..]));
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 17];
        let mut r = ErfRecord::new_unchecked(&mut buf[..]);
        r.set_timestamp(erf_timestamp(1_700_000_000_500_000_000));
        r.set_record_type(ERF_TYPE_INFINIBAND);
        r.set_flags(FLAG_VLEN, 1);
        r.set_record_len(90);
        r.set_loss_count(0);
        r.set_wire_len(74);
        buf[HEADER_LEN] = 0;
        assert_eq!(buf, RECORD_BYTES);
    }

    #[test]
    fn extension_headers() {
        // Two extension headers (the first says another follows), then the packet.
        let mut b = RECORD_BYTES[..16].to_vec();
        b[8] |= 0x80;
        b.extend_from_slice(&[0x81, 1, 2, 3, 4, 5, 6, 7, 0x01, 1, 2, 3, 4, 5, 6, 7, 0xee]);
        let r = ErfRecord::new_checked(&b[..]).unwrap();
        assert!(r.has_extensions());
        assert_eq!(r.record_type(), ERF_TYPE_INFINIBAND);
        assert_eq!(r.payload(), Ok(&[0xee][..]));
        // Only the first byte of an extension header need be there.
        let r = ErfRecord::new_checked(&b[..25]).unwrap();
        assert_eq!(r.payload(), Ok(&[][..]));
        let r = ErfRecord::new_checked(&b[..24]).unwrap();
        assert_eq!(r.payload(), Err(Error::Truncated));
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            ErfRecord::new_checked(&RECORD_BYTES[..15]),
            Err(Error::Truncated)
        );
        let r = ErfRecord::new_checked(&RECORD_BYTES[..16]).unwrap();
        assert_eq!(r.payload(), Ok(&[][..]));
    }

    #[test]
    fn timestamps_round_trip() {
        assert_eq!(
            erf_timestamp(1_700_000_000_500_000_000),
            0x6553_f100_8000_0000
        );
        let t0 = 1_700_000_000_123_456_789u64;
        for ns in [0u64, 1, 999_999_999, 123_456_789, t0, t0 + 987_654_320] {
            assert_eq!(erf_timestamp_ns(erf_timestamp(ns)), ns);
        }
    }
}
