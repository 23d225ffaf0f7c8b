//! The rest of an 802.1Q (VLAN) or 802.1ad (Q-in-Q) tag after its TPID, which sits in the
//! EtherType field of the header before it ([`super::ethernet`]).
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 2 | TCI: priority, drop eligible, VLAN id |
//! | 2 | 2 | EtherType of what follows (or the TPID of another tag) |

mod field {
    use core::ops::Range;
    #[allow(dead_code)] // the layout in full; a capture reader only steps over tags
    pub(super) const TCI: Range<usize> = 0..2;
    pub(super) const ETHERTYPE: Range<usize> = 2..4;
}

/// Bytes a tag adds to a frame.
pub(crate) const HEADER_LEN: usize = field::ETHERTYPE.end;

/// A view of a tag's TCI and the EtherType after it, at the start of an Ethernet payload
/// whose EtherType was a TPID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    view_constructors!(VlanTag, HEADER_LEN);

    be_get!(
        /// The EtherType after the tag: the payload's type, or the TPID of another tag.
        ethertype,
        u16,
        field::ETHERTYPE
    );
}

impl<'a, T: AsRef<[u8]> + ?Sized> VlanTag<&'a T> {
    /// The bytes after the tag.
    #[inline]
    pub(crate) fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::net::ethernet::ethertype;
    use crate::trace::net::Error;

    /// VLAN 5, priority 3, then IPv6 and one payload byte.
    static TAG_BYTES: [u8; 5] = [0x60, 0x05, 0x86, 0xdd, 0x60];

    #[test]
    fn deconstruct() {
        let t = VlanTag::new_checked(&TAG_BYTES[..]).unwrap();
        assert_eq!(t.ethertype(), ethertype::IPV6);
        assert_eq!(t.payload(), &[0x60]);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(VlanTag::new_checked(&TAG_BYTES[..3]), Err(Error::Truncated));
        assert_eq!(
            VlanTag::new_checked(&TAG_BYTES[..4]).unwrap().payload(),
            &[] as &[u8]
        );
    }
}
