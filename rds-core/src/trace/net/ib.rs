//! The InfiniBand headers of an RC SEND packet (IBA vol. 1, chapters 7 and 9): the Local
//! Route Header ([`LrhPacket`]), an optional 40-byte Global Route Header, and the Base
//! Transport Header ([`BthPacket`]), followed by the payload, its pad to 4 bytes, the ICRC
//! (4 bytes) and the VCRC (2 bytes).
//!
//! LRH:
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 1 | VL (high nibble), LVer |
//! | 1 | 1 | SL (high nibble), reserved, LNH (low 2 bits) |
//! | 2 | 2 | destination LID |
//! | 4 | 2 | packet length in 4-byte words, LRH through ICRC (low 11 bits) |
//! | 6 | 2 | source LID |
//!
//! BTH:
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 1 | opcode |
//! | 1 | 1 | SE (bit 7), MigReq (bit 6), PadCnt (bits 4-5), TVer |
//! | 2 | 2 | P_Key |
//! | 4 | 1 | reserved |
//! | 5 | 3 | destination QP |
//! | 8 | 1 | AckReq (bit 7), reserved |
//! | 9 | 3 | PSN |

mod lrh_field {
    use core::ops::Range;
    pub(super) const VL_LVER: usize = 0;
    pub(super) const SL_LNH: usize = 1;
    pub(super) const DLID: Range<usize> = 2..4;
    pub(super) const PKT_LEN: Range<usize> = 4..6;
    pub(super) const SLID: Range<usize> = 6..8;
}

mod bth_field {
    use core::ops::Range;
    pub(super) const OPCODE: usize = 0;
    pub(super) const SE_M_PAD_TVER: usize = 1;
    pub(super) const PKEY: Range<usize> = 2..4;
    pub(super) const RESERVED: usize = 4;
    pub(super) const DEST_QP: Range<usize> = 5..8;
    pub(super) const ACKREQ: usize = 8;
    pub(super) const PSN: Range<usize> = 9..12;
}

/// Length of the Local Route Header.
pub(crate) const LRH_LEN: usize = lrh_field::SLID.end;
/// Length of the Global Route Header.
pub(crate) const GRH_LEN: usize = 40;
/// Length of the Base Transport Header.
pub(crate) const BTH_LEN: usize = bth_field::PSN.end;
/// Length of the immediate data of a SEND with Immediate.
pub(crate) const IMMDT_LEN: usize = 4;
/// Length of the invariant CRC.
pub(crate) const ICRC_LEN: usize = 4;
/// Length of the variant CRC.
pub(crate) const VCRC_LEN: usize = 2;
/// Byte offset of the BTH's reserved byte, a variant field (all ones in the ICRC).
pub(crate) const BTH_RESERVED_AT: usize = bth_field::RESERVED;
/// Byte offset of the LRH's VL, a variant field (all ones in the ICRC; high nibble).
pub(crate) const LRH_VL_AT: usize = lrh_field::VL_LVER;

/// LRH "link next header": IBA transport header (BTH) follows directly.
pub(crate) const LNH_IBA_LOCAL: u8 = 2;
/// LRH "link next header": a GRH follows.
pub(crate) const LNH_IBA_GLOBAL: u8 = 3;
/// BTH opcode RC SEND Only.
pub(crate) const OP_RC_SEND_ONLY: u8 = 0x04;
/// BTH opcode RC SEND Only with Immediate.
pub(crate) const OP_RC_SEND_ONLY_IMM: u8 = 0x05;
/// The default partition key.
pub(crate) const P_KEY_DEFAULT: u16 = 0xffff;

const LNH_MASK: u8 = 0x03;
const PKT_LEN_MASK: u16 = 0x07ff;
const SE: u8 = 0x80;
const PAD_SHIFT: u8 = 4;
const PAD_MASK: u8 = 0x03;
const ACKREQ: u8 = 0x80;

/// Reads a 24-bit big-endian field.
fn be24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

/// A view of a Local Route Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LrhPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> LrhPacket<T> {
    view_constructors!(LrhPacket, LRH_LEN);

    /// The virtual lane.
    #[cfg(test)]
    #[inline]
    pub(crate) fn vl(&self) -> u8 {
        self.buffer.as_ref()[lrh_field::VL_LVER] >> 4
    }

    /// The link next header ([`LNH_IBA_LOCAL`], [`LNH_IBA_GLOBAL`]).
    #[inline]
    pub(crate) fn lnh(&self) -> u8 {
        self.buffer.as_ref()[lrh_field::SL_LNH] & LNH_MASK
    }

    be_get!(
        /// The destination LID.
        dlid,
        u16,
        lrh_field::DLID
    );

    /// The packet length in 4-byte words, LRH through ICRC.
    #[inline]
    pub(crate) fn packet_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[lrh_field::PKT_LEN];
        u16::from_be_bytes([b[0], b[1]]) & PKT_LEN_MASK
    }

    be_get!(
        /// The source LID.
        slid,
        u16,
        lrh_field::SLID
    );
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> LrhPacket<T> {
    /// Sets the link next header (the SL and reserved bits are kept).
    #[inline]
    pub(crate) fn set_lnh(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[lrh_field::SL_LNH];
        *b = (*b & !LNH_MASK) | (value & LNH_MASK);
    }

    be_set!(
        /// Sets the destination LID.
        set_dlid,
        u16,
        lrh_field::DLID
    );

    /// Sets the packet length in words (11 bits; the reserved bits above are cleared).
    #[inline]
    pub(crate) fn set_packet_len(&mut self, words: u16) {
        self.buffer.as_mut()[lrh_field::PKT_LEN]
            .copy_from_slice(&(words & PKT_LEN_MASK).to_be_bytes());
    }

    be_set!(
        /// Sets the source LID.
        set_slid,
        u16,
        lrh_field::SLID
    );
}

/// A view of a Base Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BthPacket<T> {
    view_constructors!(BthPacket, BTH_LEN);

    /// The opcode.
    #[inline]
    pub(crate) fn opcode(&self) -> u8 {
        self.buffer.as_ref()[bth_field::OPCODE]
    }

    /// The solicited event bit.
    #[inline]
    pub(crate) fn solicited(&self) -> bool {
        self.buffer.as_ref()[bth_field::SE_M_PAD_TVER] & SE != 0
    }

    /// Pad bytes after the payload (0..=3).
    #[inline]
    pub(crate) fn pad_count(&self) -> usize {
        usize::from((self.buffer.as_ref()[bth_field::SE_M_PAD_TVER] >> PAD_SHIFT) & PAD_MASK)
    }

    #[cfg(test)]
    be_get!(
        /// The partition key.
        pkey,
        u16,
        bth_field::PKEY
    );

    /// The destination queue pair.
    #[inline]
    pub(crate) fn dest_qp(&self) -> u32 {
        be24(&self.buffer.as_ref()[bth_field::DEST_QP])
    }

    /// The acknowledge request bit.
    #[cfg(test)]
    #[inline]
    pub(crate) fn ack_req(&self) -> bool {
        self.buffer.as_ref()[bth_field::ACKREQ] & ACKREQ != 0
    }

    /// The packet sequence number.
    #[inline]
    pub(crate) fn psn(&self) -> u32 {
        be24(&self.buffer.as_ref()[bth_field::PSN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthPacket<T> {
    /// Sets the opcode.
    #[inline]
    pub(crate) fn set_opcode(&mut self, value: u8) {
        self.buffer.as_mut()[bth_field::OPCODE] = value;
    }

    /// Sets the solicited event bit.
    #[inline]
    pub(crate) fn set_solicited(&mut self, value: bool) {
        let b = &mut self.buffer.as_mut()[bth_field::SE_M_PAD_TVER];
        *b = if value { *b | SE } else { *b & !SE };
    }

    /// Sets the pad count (0..=3).
    #[inline]
    pub(crate) fn set_pad_count(&mut self, value: usize) {
        let b = &mut self.buffer.as_mut()[bth_field::SE_M_PAD_TVER];
        *b = (*b & !(PAD_MASK << PAD_SHIFT)) | ((value as u8 & PAD_MASK) << PAD_SHIFT);
    }

    be_set!(
        /// Sets the partition key.
        set_pkey,
        u16,
        bth_field::PKEY
    );

    /// Sets the destination queue pair (24 bits).
    #[inline]
    pub(crate) fn set_dest_qp(&mut self, qpn: u32) {
        self.buffer.as_mut()[bth_field::DEST_QP].copy_from_slice(&qpn.to_be_bytes()[1..]);
    }

    /// Sets the acknowledge request bit.
    #[inline]
    pub(crate) fn set_ack_req(&mut self, value: bool) {
        let b = &mut self.buffer.as_mut()[bth_field::ACKREQ];
        *b = if value { *b | ACKREQ } else { *b & !ACKREQ };
    }

    /// Sets the packet sequence number (24 bits).
    #[inline]
    pub(crate) fn set_psn(&mut self, psn: u32) {
        self.buffer.as_mut()[bth_field::PSN].copy_from_slice(&psn.to_be_bytes()[1..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::net::Error;

    /// LRH: VL 0, LNH 2, DLID 1, 18 words, SLID 2; BTH: SEND Only, SE, pad 0, P_Key ffff,
    /// DestQP 0x123, AckReq, PSN 0 (`trace::tests::ib::erf_record_byte_exact`).
    static HEADERS_BYTES: [u8; 20] = [
        0x00, 0x02, 0x00, 0x01, 0x00, 0x12, 0x00, 0x02, // LRH
        0x04, 0x80, 0xff, 0xff, 0x00, 0x00, 0x01, 0x23, 0x80, 0x00, 0x00, 0x00, // BTH
    ];

    /// LRH: VL 15, SL 3, LNH 3 (GRH), reserved bits in the length; BTH: SEND Only with
    /// Immediate, pad 3, DestQP 0xabcdef, no AckReq, PSN 0xfedcba.
    static OTHER_BYTES: [u8; 20] = [
        0xf0, 0x33, 0x12, 0x34, 0xf8, 0x01, 0x56, 0x78, // LRH
        0x05, 0x30, 0x7f, 0xff, 0x00, 0xab, 0xcd, 0xef, 0x00, 0xfe, 0xdc, 0xba, // BTH
    ];

    #[test]
    fn deconstruct() {
        let l = LrhPacket::new_checked(&HEADERS_BYTES[..]).unwrap();
        assert_eq!((l.vl(), l.lnh()), (0, LNH_IBA_LOCAL));
        assert_eq!((l.dlid(), l.packet_len(), l.slid()), (1, 18, 2));
        let b = BthPacket::new_checked(&HEADERS_BYTES[LRH_LEN..]).unwrap();
        assert_eq!(b.opcode(), OP_RC_SEND_ONLY);
        assert!(b.solicited() && b.ack_req());
        assert_eq!((b.pad_count(), b.pkey()), (0, P_KEY_DEFAULT));
        assert_eq!((b.dest_qp(), b.psn()), (0x123, 0));

        let l = LrhPacket::new_checked(&OTHER_BYTES[..]).unwrap();
        assert_eq!((l.vl(), l.lnh()), (15, LNH_IBA_GLOBAL));
        assert_eq!((l.dlid(), l.packet_len(), l.slid()), (0x1234, 1, 0x5678));
        let b = BthPacket::new_checked(&OTHER_BYTES[LRH_LEN..]).unwrap();
        assert_eq!(b.opcode(), OP_RC_SEND_ONLY_IMM);
        assert!(!b.solicited() && !b.ack_req());
        assert_eq!((b.pad_count(), b.pkey()), (3, 0x7fff));
        assert_eq!((b.dest_qp(), b.psn()), (0xab_cdef, 0xfe_dcba));
    }

    #[test]
    fn construct() {
        let mut buf = [0xa5u8; 20];
        // What no setter writes (the writer leaves it at 0): LRH VL, LVer and SL; BTH MigReq,
        // TVer, the reserved byte and the reserved bits after AckReq.
        buf[0] = 0;
        buf[1] = 0;
        buf[LRH_LEN + 1] = 0;
        buf[LRH_LEN + 4] = 0;
        buf[LRH_LEN + 8] = 0;
        let mut l = LrhPacket::new_unchecked(&mut buf[..LRH_LEN]);
        l.set_lnh(LNH_IBA_LOCAL);
        l.set_dlid(1);
        l.set_packet_len(18);
        l.set_slid(2);
        let mut b = BthPacket::new_unchecked(&mut buf[LRH_LEN..]);
        b.set_opcode(OP_RC_SEND_ONLY);
        b.set_solicited(true);
        b.set_pad_count(0);
        b.set_pkey(P_KEY_DEFAULT);
        b.set_dest_qp(0x123);
        b.set_ack_req(true);
        b.set_psn(0);
        assert_eq!(buf, HEADERS_BYTES);
        // Setters of bit fields touch their own bits only.
        let mut other = OTHER_BYTES;
        let mut l = LrhPacket::new_unchecked(&mut other[..LRH_LEN]);
        l.set_lnh(LNH_IBA_GLOBAL);
        let mut b = BthPacket::new_unchecked(&mut other[LRH_LEN..]);
        b.set_solicited(false);
        b.set_pad_count(3);
        b.set_ack_req(false);
        assert_eq!(other, OTHER_BYTES);
        let mut b = BthPacket::new_unchecked(&mut other[LRH_LEN..]);
        b.set_solicited(true);
        b.set_pad_count(1);
        assert_eq!(other[LRH_LEN + 1], 0x90);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            LrhPacket::new_checked(&HEADERS_BYTES[..LRH_LEN - 1]),
            Err(Error::Truncated)
        );
        assert_eq!(
            BthPacket::new_checked(&HEADERS_BYTES[LRH_LEN..19]),
            Err(Error::Truncated)
        );
    }
}
