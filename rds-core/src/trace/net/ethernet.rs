//! Ethernet II frames (`LINKTYPE_ETHERNET`).
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 6 | destination MAC |
//! | 6 | 6 | source MAC |
//! | 12 | 2 | EtherType (or a tag's TPID) |
//!
//! An 802.1Q or 802.1ad tag puts its TPID ([`ethertype::VLAN`], [`ethertype::QINQ`]) in the
//! EtherType field; the rest of the tag is the start of the payload ([`super::vlan`]).

/// EtherType values.
pub(crate) mod ethertype {
    /// IPv4.
    pub(crate) const IPV4: u16 = 0x0800;
    /// IPv6.
    pub(crate) const IPV6: u16 = 0x86DD;
    /// An 802.1Q VLAN tag follows.
    pub(crate) const VLAN: u16 = 0x8100;
    /// An 802.1ad (Q-in-Q) service tag follows.
    pub(crate) const QINQ: u16 = 0x88A8;

    /// Whether a tag follows instead of the payload.
    #[inline]
    pub(crate) fn is_tag(ethertype: u16) -> bool {
        matches!(ethertype, VLAN | QINQ)
    }
}

mod field {
    use core::ops::Range;
    pub(super) const DESTINATION: Range<usize> = 0..6;
    pub(super) const SOURCE: Range<usize> = 6..12;
    pub(super) const ETHERTYPE: Range<usize> = 12..14;
}

/// Length of the Ethernet II header (without tags).
pub(crate) const HEADER_LEN: usize = field::ETHERTYPE.end;

/// A view of an Ethernet II frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    view_constructors!(EthernetFrame, HEADER_LEN);

    /// The destination MAC address.
    #[inline]
    pub(crate) fn dst_addr(&self) -> [u8; 6] {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        a
    }

    /// The source MAC address.
    #[inline]
    pub(crate) fn src_addr(&self) -> [u8; 6] {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        a
    }

    be_get!(
        /// The EtherType, or the TPID of a tag ([`ethertype::is_tag`]).
        ethertype,
        u16,
        field::ETHERTYPE
    );
}

impl<'a, T: AsRef<[u8]> + ?Sized> EthernetFrame<&'a T> {
    /// The bytes after the header.
    #[inline]
    pub(crate) fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub(crate) fn set_dst_addr(&mut self, addr: [u8; 6]) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&addr);
    }

    /// Sets the source MAC address.
    #[inline]
    pub(crate) fn set_src_addr(&mut self, addr: [u8; 6]) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&addr);
    }

    be_set!(
        /// Sets the EtherType.
        set_ethertype,
        u16,
        field::ETHERTYPE
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::net::Error;

    /// 02:01:0a:00:00:02 <- 02:00:0a:00:00:01, IPv4, two payload bytes.
    static FRAME_BYTES: [u8; 16] = [
        0x02, 0x01, 0x0a, 0x00, 0x00, 0x02, // destination
        0x02, 0x00, 0x0a, 0x00, 0x00, 0x01, // source
        0x08, 0x00, // IPv4
        0xaa, 0xbb, // payload
    ];

    #[test]
    fn deconstruct() {
        let f = EthernetFrame::new_checked(&FRAME_BYTES[..]).unwrap();
        assert_eq!(f.dst_addr(), [0x02, 0x01, 0x0a, 0x00, 0x00, 0x02]);
        assert_eq!(f.src_addr(), [0x02, 0x00, 0x0a, 0x00, 0x00, 0x01]);
        assert_eq!(f.ethertype(), ethertype::IPV4);
        assert_eq!(f.payload(), &[0xaa, 0xbb]);
        assert!(!ethertype::is_tag(f.ethertype()));
        assert!(ethertype::is_tag(ethertype::VLAN) && ethertype::is_tag(ethertype::QINQ));
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 16];
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        f.set_dst_addr([0x02, 0x01, 0x0a, 0x00, 0x00, 0x02]);
        f.set_src_addr([0x02, 0x00, 0x0a, 0x00, 0x00, 0x01]);
        f.set_ethertype(ethertype::IPV4);
        buf[HEADER_LEN..].copy_from_slice(&[0xaa, 0xbb]);
        assert_eq!(buf, FRAME_BYTES);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            EthernetFrame::new_checked(&FRAME_BYTES[..13]),
            Err(Error::Truncated)
        );
        let f = EthernetFrame::new_checked(&FRAME_BYTES[..14]).unwrap();
        assert_eq!(f.payload(), &[] as &[u8]);
    }
}
