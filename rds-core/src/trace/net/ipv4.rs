//! IPv4 headers (RFC 791).
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 1 | version (high nibble), IHL in 32-bit words (low nibble) |
//! | 1 | 1 | DSCP, ECN |
//! | 2 | 2 | total length |
//! | 4 | 2 | identification |
//! | 6 | 2 | flags (DF 0x4000, MF 0x2000), fragment offset (low 13 bits, in 8 bytes) |
//! | 8 | 1 | TTL |
//! | 9 | 1 | protocol |
//! | 10 | 2 | header checksum |
//! | 12 | 4 | source address |
//! | 16 | 4 | destination address |
//! | 20 | IHL * 4 - 20 | options |

use std::net::Ipv4Addr;

use crate::trace::net::Error;
use crate::wire::checksum;

mod field {
    use core::ops::Range;
    pub(super) const VER_IHL: usize = 0;
    #[allow(dead_code)] // the layout in full; the writer leaves DSCP and ECN at 0
    pub(super) const DSCP_ECN: usize = 1;
    pub(super) const LENGTH: Range<usize> = 2..4;
    pub(super) const IDENT: Range<usize> = 4..6;
    pub(super) const FLG_OFF: Range<usize> = 6..8;
    pub(super) const TTL: usize = 8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const CHECKSUM: Range<usize> = 10..12;
    pub(super) const SRC_ADDR: Range<usize> = 12..16;
    pub(super) const DST_ADDR: Range<usize> = 16..20;
}

/// Length of the header without options.
pub(crate) const HEADER_LEN: usize = field::DST_ADDR.end;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET: u16 = 0x1fff;

/// A view of an IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    view_constructors!(Ipv4Packet, HEADER_LEN);

    /// Checks the header length the IHL gives against the fixed header and the buffer.
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

    /// The header length in bytes (IHL * 4), options included.
    #[inline]
    pub(crate) fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    be_get!(
        /// The total length: header and payload. 0 in captures taken on a sending host
        /// with segmentation offload, where the packet was not cut yet.
        total_len,
        u16,
        field::LENGTH
    );

    #[cfg(test)]
    be_get!(
        /// The identification.
        ident,
        u16,
        field::IDENT
    );

    #[cfg(test)]
    /// Don't Fragment.
    #[inline]
    pub(crate) fn dont_frag(&self) -> bool {
        self.flags_offset() & FLAG_DF != 0
    }

    /// More Fragments.
    #[inline]
    pub(crate) fn more_frags(&self) -> bool {
        self.flags_offset() & FLAG_MF != 0
    }

    /// The fragment offset in 8-byte units.
    #[inline]
    pub(crate) fn frag_offset(&self) -> u16 {
        self.flags_offset() & FRAG_OFFSET
    }

    be_get!(
        /// Flags and fragment offset.
        flags_offset,
        u16,
        field::FLG_OFF
    );

    #[cfg(test)]
    /// The TTL.
    #[inline]
    pub(crate) fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The protocol of the payload ([`super::IP_PROTO_TCP`]).
    #[inline]
    pub(crate) fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    #[cfg(test)]
    be_get!(
        /// The header checksum as stored.
        checksum,
        u16,
        field::CHECKSUM
    );

    /// The source address.
    #[inline]
    pub(crate) fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The destination address.
    #[inline]
    pub(crate) fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv4Packet<&'a T> {
    /// The bytes after the header as far as the buffer holds them: the payload once
    /// [`Ipv4Packet::check_header_len`] passed (empty if the header runs past the buffer),
    /// up to the buffer's end, whatever the total length says.
    #[inline]
    pub(crate) fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        b.get(self.header_len()..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the version (4) and the header length in bytes (a multiple of 4, at most 60).
    #[inline]
    pub(crate) fn set_version_and_header_len(&mut self, version: u8, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = (version << 4) | ((header_len / 4) as u8 & 0x0f);
    }

    be_set!(
        /// Sets the total length.
        set_total_len,
        u16,
        field::LENGTH
    );

    be_set!(
        /// Sets the identification.
        set_ident,
        u16,
        field::IDENT
    );

    /// Sets Don't Fragment (the rest of the field, MF and the offset, is left as it is).
    #[inline]
    pub(crate) fn set_dont_frag(&mut self, value: bool) {
        let f = self.flags_offset() & !FLAG_DF;
        self.set_flags_offset(if value { f | FLAG_DF } else { f });
    }

    be_set!(
        /// Sets flags and fragment offset.
        set_flags_offset,
        u16,
        field::FLG_OFF
    );

    /// Sets the TTL.
    #[inline]
    pub(crate) fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::TTL] = value;
    }

    /// Sets the protocol.
    #[inline]
    pub(crate) fn set_protocol(&mut self, value: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = value;
    }

    be_set!(
        /// Sets the header checksum verbatim.
        set_checksum,
        u16,
        field::CHECKSUM
    );

    /// Sets the source address.
    #[inline]
    pub(crate) fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub(crate) fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    /// Computes the header checksum over the header ([`Ipv4Packet::header_len`] bytes) and
    /// stores it.
    ///
    /// # Panics
    /// If the buffer is shorter than the header length.
    #[inline]
    pub(crate) fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let c = match self.header_len() {
            // The header without options (every one the writer builds), summed with its
            // length known to the compiler.
            HEADER_LEN => checksum(&b[..HEADER_LEN]),
            len => checksum(&b[..len]),
        };
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10.0.0.1 -> 10.0.0.2, TCP, total 92, ID 1, DF, TTL 64, checksum 0x2699, then the first
    /// payload byte (the packet of `trace::tests::tcp::ipv4_segment_byte_exact`).
    static PACKET_BYTES: [u8; 21] = [
        0x45, 0x00, 0x00, 0x5c, // version 4, IHL 5, DSCP 0, total 92
        0x00, 0x01, 0x40, 0x00, // ID 1, DF, offset 0
        0x40, 0x06, 0x26, 0x99, // TTL 64, TCP, checksum
        0x0a, 0x00, 0x00, 0x01, // source
        0x0a, 0x00, 0x00, 0x02, // destination
        0x9c,
    ];

    /// IHL 6 (one option word), a fragment (MF, offset 185 * 8), UDP.
    static OPTIONS_BYTES: [u8; 25] = [
        0x46, 0x00, 0x00, 0x19, 0x12, 0x34, 0x20, 0xb9, 0x01, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0x02, 0x01, 0x01, 0x01, 0x00, 0x77,
    ];

    #[test]
    fn deconstruct() {
        let p = Ipv4Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        p.check_header_len().unwrap();
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 92);
        assert_eq!(p.ident(), 1);
        assert!(p.dont_frag() && !p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.protocol(), super::super::IP_PROTO_TCP);
        assert_eq!(p.checksum(), 0x2699);
        assert_eq!(checksum(&PACKET_BYTES[..20]), 0, "a valid checksum");
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p.payload(), &[0x9c]);

        let p = Ipv4Packet::new_checked(&OPTIONS_BYTES[..]).unwrap();
        p.check_header_len().unwrap();
        assert_eq!(p.header_len(), 24);
        assert!(!p.dont_frag() && p.more_frags());
        assert_eq!(p.frag_offset(), 185);
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.payload(), &[0x77]);
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 21];
        // DSCP and ECN have no setter: the writer leaves them at 0.
        buf[1] = 0;
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
        p.set_version_and_header_len(4, HEADER_LEN);
        p.set_total_len(92);
        p.set_ident(1);
        p.set_flags_offset(0);
        p.set_dont_frag(true);
        p.set_hop_limit(64);
        p.set_protocol(super::super::IP_PROTO_TCP);
        p.set_src_addr(Ipv4Addr::new(10, 0, 0, 1));
        p.set_dst_addr(Ipv4Addr::new(10, 0, 0, 2));
        p.set_checksum(0xbeef);
        p.fill_checksum();
        buf[HEADER_LEN] = 0x9c;
        assert_eq!(buf, PACKET_BYTES);
        // DF off again leaves MF and the offset alone.
        let mut frag = OPTIONS_BYTES;
        let mut p = Ipv4Packet::new_unchecked(&mut frag[..]);
        p.set_dont_frag(true);
        p.set_dont_frag(false);
        assert_eq!(frag, OPTIONS_BYTES);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            Ipv4Packet::new_checked(&PACKET_BYTES[..19]),
            Err(Error::Truncated)
        );
        // Options cut by the capture.
        let cut = Ipv4Packet::new_checked(&OPTIONS_BYTES[..22]).unwrap();
        assert_eq!(cut.check_header_len(), Err(Error::Truncated));
        assert_eq!(cut.payload(), &[] as &[u8]);
        // IHL below 5.
        let mut bad = PACKET_BYTES;
        bad[0] = 0x44;
        let p = Ipv4Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(p.check_header_len(), Err(Error::Malformed));
        assert_eq!(p.header_len(), 16);
    }
}
