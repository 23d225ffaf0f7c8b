//! IPv6 headers (RFC 8200) and the extension headers a TCP segment may follow.
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 4 | version (4 bits), traffic class (8), flow label (20) |
//! | 4 | 2 | payload length (after this header, extension headers included) |
//! | 6 | 1 | next header |
//! | 7 | 1 | hop limit |
//! | 8 | 16 | source address |
//! | 24 | 16 | destination address |
//!
//! Hop-by-hop options, routing and destination options headers ([`Ipv6ExtHeader`]) start
//! with their next header and their length in 8-byte units after the first 8.

use std::net::Ipv6Addr;

use crate::trace::net::Error;

mod field {
    use core::ops::Range;
    pub(super) const VER_TC_FLOW: Range<usize> = 0..4;
    pub(super) const LENGTH: Range<usize> = 4..6;
    pub(super) const NXT_HDR: usize = 6;
    pub(super) const HOP_LIMIT: usize = 7;
    pub(super) const SRC_ADDR: Range<usize> = 8..24;
    pub(super) const DST_ADDR: Range<usize> = 24..40;
}

/// Length of the IPv6 header.
pub(crate) const HEADER_LEN: usize = field::DST_ADDR.end;

/// Next header: hop-by-hop options.
pub(crate) const NEXT_HOP_BY_HOP: u8 = 0;
/// Next header: routing.
pub(crate) const NEXT_ROUTING: u8 = 43;
/// Next header: destination options.
pub(crate) const NEXT_DST_OPTS: u8 = 60;
/// Extension headers [`Ipv6Packet::upper_layer`] steps over at most.
pub(crate) const MAX_EXT_HEADERS: usize = 8;

/// A view of an IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    view_constructors!(Ipv6Packet, HEADER_LEN);

    /// The version, traffic class and flow label word.
    #[cfg(test)]
    #[inline]
    pub(crate) fn ver_tc_flow(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    be_get!(
        /// The payload length: extension headers and upper-layer bytes. 0 in captures
        /// taken on a sending host with segmentation offload (or for a jumbogram).
        payload_len,
        u16,
        field::LENGTH
    );

    /// The next header after the fixed header.
    #[inline]
    pub(crate) fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// The hop limit.
    #[cfg(test)]
    #[inline]
    pub(crate) fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// The source address.
    #[inline]
    pub(crate) fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv6Addr::from(a)
    }

    /// The destination address.
    #[inline]
    pub(crate) fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv6Addr::from(a)
    }

    /// Steps over up to [`MAX_EXT_HEADERS`] hop-by-hop, routing and destination options
    /// headers: the next header that follows them and its offset from the packet's start.
    /// Only the first two bytes of each extension header need be in the buffer, so the
    /// offset may lie past its end; after `MAX_EXT_HEADERS` the next header is still one of
    /// theirs.
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer ends before the first two bytes of an extension
    /// header.
    #[inline]
    pub(crate) fn upper_layer(&self) -> Result<(u8, usize), Error> {
        let b = self.buffer.as_ref();
        let mut next = self.next_header();
        let mut off = HEADER_LEN;
        for _ in 0..MAX_EXT_HEADERS {
            if !matches!(next, NEXT_HOP_BY_HOP | NEXT_ROUTING | NEXT_DST_OPTS) {
                break;
            }
            let ext = Ipv6ExtHeader::new_checked(b.get(off..).unwrap_or(&[]))?;
            next = ext.next_header();
            off += ext.header_len();
        }
        Ok((next, off))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the version (6), traffic class and flow label.
    #[inline]
    pub(crate) fn set_ver_tc_flow(&mut self, version: u8, traffic_class: u8, flow_label: u32) {
        let w = (u32::from(version) << 28)
            | (u32::from(traffic_class) << 20)
            | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    be_set!(
        /// Sets the payload length.
        set_payload_len,
        u16,
        field::LENGTH
    );

    /// Sets the next header.
    #[inline]
    pub(crate) fn set_next_header(&mut self, value: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = value;
    }

    /// Sets the hop limit.
    #[inline]
    pub(crate) fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = value;
    }

    /// Sets the source address.
    #[inline]
    pub(crate) fn set_src_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub(crate) fn set_dst_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }
}

mod ext_field {
    pub(super) const NXT_HDR: usize = 0;
    pub(super) const LENGTH: usize = 1;
}

/// Length of the fixed part of an extension header: next header and length.
pub(crate) const EXT_HEADER_LEN: usize = ext_field::LENGTH + 1;

/// A view of a hop-by-hop, routing or destination options header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ipv6ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6ExtHeader<T> {
    view_constructors!(Ipv6ExtHeader, EXT_HEADER_LEN);

    /// The next header.
    #[inline]
    pub(crate) fn next_header(&self) -> u8 {
        self.buffer.as_ref()[ext_field::NXT_HDR]
    }

    /// The header's length in bytes: 8 plus 8 per unit of its length field.
    #[inline]
    pub(crate) fn header_len(&self) -> usize {
        (usize::from(self.buffer.as_ref()[ext_field::LENGTH]) + 1) * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::net::IP_PROTO_TCP;

    /// fd00::1 -> fd00::2, class 0x12, flow 0x34567, payload 9, hop-by-hop options (8 bytes,
    /// next TCP), then one TCP byte.
    static PACKET_BYTES: [u8; 49] = [
        0x61, 0x23, 0x45, 0x67, // version 6, class 0x12, flow 0x34567
        0x00, 0x09, 0x00, 0x40, // payload 9, hop-by-hop, hop limit 64
        0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // source
        0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, // destination
        0x06, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00, // hop-by-hop: next TCP, PadN
        0x9c,
    ];

    #[test]
    fn deconstruct() {
        let p = Ipv6Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.ver_tc_flow(), 0x6123_4567);
        assert_eq!(p.payload_len(), 9);
        assert_eq!(p.next_header(), NEXT_HOP_BY_HOP);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "fd00::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "fd00::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.upper_layer(), Ok((IP_PROTO_TCP, 48)));
        let ext = Ipv6ExtHeader::new_checked(&PACKET_BYTES[40..]).unwrap();
        assert_eq!((ext.next_header(), ext.header_len()), (IP_PROTO_TCP, 8));
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 49];
        let mut p = Ipv6Packet::new_unchecked(&mut buf[..]);
        p.set_ver_tc_flow(6, 0x12, 0x34567);
        p.set_payload_len(9);
        p.set_next_header(NEXT_HOP_BY_HOP);
        p.set_hop_limit(64);
        p.set_src_addr("fd00::1".parse().unwrap());
        p.set_dst_addr("fd00::2".parse().unwrap());
        buf[HEADER_LEN..].copy_from_slice(&PACKET_BYTES[HEADER_LEN..]);
        assert_eq!(buf, PACKET_BYTES);
    }

    #[test]
    fn extension_chains() {
        // No extension header: TCP right after the fixed header.
        let mut b = PACKET_BYTES;
        b[6] = IP_PROTO_TCP;
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer(), Ok((IP_PROTO_TCP, 40)));
        // Routing (16 bytes) then destination options (8), then TCP.
        let mut b = PACKET_BYTES[..40].to_vec();
        b[6] = NEXT_ROUTING;
        b.extend_from_slice(&[NEXT_DST_OPTS, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&[IP_PROTO_TCP, 0, 0, 0, 0, 0, 0, 0]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer(), Ok((IP_PROTO_TCP, 64)));
        // A fragment header (44) is not stepped over.
        b[6] = 44;
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer(), Ok((44, 40)));
        // Nine hop-by-hop headers: the walk stops after eight.
        let mut b = PACKET_BYTES[..40].to_vec();
        for _ in 0..9 {
            b.extend_from_slice(&[NEXT_HOP_BY_HOP, 0, 0, 0, 0, 0, 0, 0]);
        }
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer(), Ok((NEXT_HOP_BY_HOP, 40 + 64)));
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            Ipv6Packet::new_checked(&PACKET_BYTES[..39]),
            Err(Error::Truncated)
        );
        // The extension header's first two bytes must be there; its body need not be.
        let p = Ipv6Packet::new_checked(&PACKET_BYTES[..41]).unwrap();
        assert_eq!(p.upper_layer(), Err(Error::Truncated));
        let p = Ipv6Packet::new_checked(&PACKET_BYTES[..42]).unwrap();
        assert_eq!(p.upper_layer(), Ok((IP_PROTO_TCP, 48)));
        assert_eq!(
            Ipv6ExtHeader::new_checked(&PACKET_BYTES[40..41]),
            Err(Error::Truncated)
        );
    }
}
