//! Linux cooked captures (`tcpdump -i any`): `LINKTYPE_LINUX_SLL` (v1, 16 bytes) and
//! `LINKTYPE_LINUX_SLL2` (v2, 20 bytes). Both carry the payload's EtherType; neither has MAC
//! addresses a capture reader could take the direction from.
//!
//! v1:
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 2 | packet type (to us, broadcast, ..., sent by us) |
//! | 2 | 2 | ARPHRD type |
//! | 4 | 2 | link-layer address length |
//! | 6 | 8 | link-layer address |
//! | 14 | 2 | protocol (EtherType) |
//!
//! v2:
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 2 | protocol (EtherType) |
//! | 2 | 2 | reserved |
//! | 4 | 4 | interface index |
//! | 8 | 2 | ARPHRD type |
//! | 10 | 1 | packet type |
//! | 11 | 1 | link-layer address length |
//! | 12 | 8 | link-layer address |

#[allow(dead_code)] // the layout in full; a capture reader needs the protocol only
mod v1_field {
    use core::ops::Range;
    pub(super) const PKT_TYPE: Range<usize> = 0..2;
    pub(super) const HA_TYPE: Range<usize> = 2..4;
    pub(super) const HA_LEN: Range<usize> = 4..6;
    pub(super) const ADDR: Range<usize> = 6..14;
    pub(super) const PROTOCOL: Range<usize> = 14..16;
}

#[allow(dead_code)] // the layout in full; a capture reader needs the protocol only
mod v2_field {
    use core::ops::Range;
    pub(super) const PROTOCOL: Range<usize> = 0..2;
    pub(super) const RESERVED: Range<usize> = 2..4;
    pub(super) const IFINDEX: Range<usize> = 4..8;
    pub(super) const HA_TYPE: Range<usize> = 8..10;
    pub(super) const PKT_TYPE: usize = 10;
    pub(super) const HA_LEN: usize = 11;
    pub(super) const ADDR: Range<usize> = 12..20;
}

/// Length of the v1 header.
pub(crate) const SLL_HEADER_LEN: usize = v1_field::PROTOCOL.end;
/// Length of the v2 header.
pub(crate) const SLL2_HEADER_LEN: usize = v2_field::ADDR.end;

/// A view of a Linux cooked v1 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SllPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SllPacket<T> {
    view_constructors!(SllPacket, SLL_HEADER_LEN);

    be_get!(
        /// The payload's EtherType.
        protocol,
        u16,
        v1_field::PROTOCOL
    );
}

impl<'a, T: AsRef<[u8]> + ?Sized> SllPacket<&'a T> {
    /// The bytes after the header.
    #[inline]
    pub(crate) fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[SLL_HEADER_LEN..]
    }
}

/// A view of a Linux cooked v2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sll2Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Sll2Packet<T> {
    view_constructors!(Sll2Packet, SLL2_HEADER_LEN);

    be_get!(
        /// The payload's EtherType.
        protocol,
        u16,
        v2_field::PROTOCOL
    );
}

impl<'a, T: AsRef<[u8]> + ?Sized> Sll2Packet<&'a T> {
    /// The bytes after the header.
    #[inline]
    pub(crate) fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[SLL2_HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::net::ethernet::ethertype;
    use crate::trace::net::Error;

    /// v1: sent by us (4), ARPHRD_ETHER, 6-byte address 02:00:0a:00:00:01, IPv4, one byte.
    static SLL_BYTES: [u8; 17] = [
        0x00, 0x04, // packet type
        0x00, 0x01, // ARPHRD_ETHER
        0x00, 0x06, // address length
        0x02, 0x00, 0x0a, 0x00, 0x00, 0x01, 0x00, 0x00, // address, padded to 8
        0x08, 0x00, // IPv4
        0x45,
    ];

    /// v2: IPv6, interface 2, ARPHRD_LOOPBACK, to us (0), no address, one byte.
    static SLL2_BYTES: [u8; 21] = [
        0x86, 0xdd, // IPv6
        0x00, 0x00, // reserved
        0x00, 0x00, 0x00, 0x02, // interface index
        0x03, 0x04, // ARPHRD_LOOPBACK (772)
        0x00, // packet type
        0x00, // address length
        0, 0, 0, 0, 0, 0, 0, 0, // address
        0x60,
    ];

    #[test]
    fn deconstruct() {
        let p = SllPacket::new_checked(&SLL_BYTES[..]).unwrap();
        assert_eq!(p.protocol(), ethertype::IPV4);
        assert_eq!(p.payload(), &[0x45]);
        let p = Sll2Packet::new_checked(&SLL2_BYTES[..]).unwrap();
        assert_eq!(p.protocol(), ethertype::IPV6);
        assert_eq!(p.payload(), &[0x60]);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            SllPacket::new_checked(&SLL_BYTES[..15]),
            Err(Error::Truncated)
        );
        assert_eq!(
            Sll2Packet::new_checked(&SLL2_BYTES[..19]),
            Err(Error::Truncated)
        );
        assert_eq!(
            SllPacket::new_checked(&SLL_BYTES[..16]).unwrap().payload(),
            &[] as &[u8]
        );
        assert_eq!(
            Sll2Packet::new_checked(&SLL2_BYTES[..20])
                .unwrap()
                .payload(),
            &[] as &[u8]
        );
    }
}
