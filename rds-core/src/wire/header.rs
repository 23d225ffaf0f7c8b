//! `struct rds_header` (Linux `net/rds/rds.h`): 48 bytes, every multi-byte field big-endian,
//! no implicit padding.
//!
//! | off | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `h_sequence` |
//! | 8 | 8 | `h_ack` |
//! | 16 | 4 | `h_len` |
//! | 20 | 2 | `h_sport` |
//! | 22 | 2 | `h_dport` |
//! | 24 | 1 | `h_flags` |
//! | 25 | 1 | `h_credit` |
//! | 26 | 4 | `h_padding` |
//! | 30 | 2 | `h_csum` |
//! | 32 | 16 | `h_exthdr` |

use super::checksum::checksum;
use super::exthdr::{ExtHeader, ExtIter, ExtSpace};
use super::Error;

/// Size of `struct rds_header`.
pub const HEADER_LEN: usize = field::EXT.end;
/// Largest message payload (`RDS_MAX_MSG_SIZE`, 1 MiB). Equal is allowed.
pub const MAX_MSG_SIZE: usize = 1 << 20;
/// Payload bytes per IB fragment (`RDS_FRAG_SIZE`), whatever the page size.
pub const FRAG_SIZE: usize = 1 << 12;
/// The reserved port of the multipath handshake probe (`RDS_FLAG_PROBE_PORT`): the `h_sport` of
/// a probe ping and the `h_dport` of its pong. Never bindable.
pub const PROBE_PORT: u16 = 1;

/// `h_flags` bits (`RDS_FLAG_*`).
pub mod flags {
    /// The payload is an 8192-byte congestion map. Receivers test `h_flags ==` this value.
    pub const CONG_BITMAP: u8 = 0x01;
    /// The receiver must acknowledge at once (IB only on the wire).
    pub const ACK_REQUIRED: u8 = 0x02;
    /// Resent after a reconnect; drives the receiver's duplicate suppression.
    pub const RETRANSMITTED: u8 = 0x04;
    /// Oracle UEK heartbeat ping. Not used by mainline; never reuse.
    pub const HB_PING: u8 = 0x08;
    /// Oracle UEK heartbeat pong. Not used by mainline; never reuse.
    pub const HB_PONG: u8 = 0x10;
    /// Set by newer IB senders that added an `RDMA_BYTES` extension. Nothing reads it.
    pub const EXTHDR_EXTENSION: u8 = 0x20;

    /// Every flag with its name, in bit order (for trace output).
    pub const NAMES: [(u8, &str); 6] = [
        (CONG_BITMAP, "CONG_BITMAP"),
        (ACK_REQUIRED, "ACK_REQUIRED"),
        (RETRANSMITTED, "RETRANSMITTED"),
        (HB_PING, "HB_PING"),
        (HB_PONG, "HB_PONG"),
        (EXTHDR_EXTENSION, "EXTHDR_EXTENSION"),
    ];
}

mod field {
    use core::ops::Range;
    pub const SEQ: Range<usize> = 0..8;
    pub const ACK: Range<usize> = 8..16;
    pub const LEN: Range<usize> = 16..20;
    pub const SPORT: Range<usize> = 20..22;
    pub const DPORT: Range<usize> = 22..24;
    pub const FLAGS: usize = 24;
    pub const CREDIT: usize = 25;
    pub const PADDING: Range<usize> = 26..30;
    pub const CSUM: Range<usize> = 30..32;
    pub const EXT: Range<usize> = 32..48;
}

/// `h_len` from the first bytes of a header that may be cut short (a snapped capture):
/// `None` unless its four bytes are there.
pub(crate) fn peek_len(prefix: &[u8]) -> Option<u32> {
    let b = prefix.get(field::LEN)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// A zero-copy view of a 48-byte RDS header at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPacket<T: AsRef<[u8]>> {
    buffer: T,
}

macro_rules! be_get {
    ($name:ident, $ty:ty, $range:expr, $doc:literal) => {
        #[doc = $doc]
        pub fn $name(&self) -> $ty {
            let b = &self.buffer.as_ref()[$range];
            <$ty>::from_be_bytes(b.try_into().expect("fixed field width"))
        }
    };
}

macro_rules! be_set {
    ($name:ident, $ty:ty, $range:expr, $doc:literal) => {
        #[doc = $doc]
        pub fn $name(&mut self, value: $ty) {
            self.buffer.as_mut()[$range].copy_from_slice(&value.to_be_bytes());
        }
    };
}

#[allow(clippy::len_without_is_empty)] // `len` is the wire field `h_len`
impl<T: AsRef<[u8]>> HeaderPacket<T> {
    /// Wraps a buffer without checking its length; accessors panic if it is shorter than
    /// [`HEADER_LEN`]. Use [`HeaderPacket::new_checked`] for untrusted input.
    pub const fn new_unchecked(buffer: T) -> Self {
        HeaderPacket { buffer }
    }

    /// Wraps a buffer of at least [`HEADER_LEN`] bytes (extra bytes, the payload, are kept).
    ///
    /// # Errors
    /// [`Error::Truncated`] if the buffer is shorter than 48 bytes.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let got = buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(Error::Truncated {
                got,
                need: HEADER_LEN,
            });
        }
        Ok(HeaderPacket { buffer })
    }

    /// Gives the wrapped buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    be_get!(
        seq,
        u64,
        field::SEQ,
        "`h_sequence`: the per-path sequence number."
    );
    be_get!(
        ack,
        u64,
        field::ACK,
        "`h_ack`: piggybacked cumulative ack (IB only)."
    );
    be_get!(
        len,
        u32,
        field::LEN,
        "`h_len`: payload length, header not included."
    );
    be_get!(
        sport,
        u16,
        field::SPORT,
        "`h_sport`: the sender's RDS port."
    );
    be_get!(
        dport,
        u16,
        field::DPORT,
        "`h_dport`: the destination RDS port."
    );
    be_get!(
        csum,
        u16,
        field::CSUM,
        "`h_csum`: the header checksum (0 = none)."
    );

    /// `h_flags`.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// `h_credit`: IB flow-control credits advertised.
    pub fn credit(&self) -> u8 {
        self.buffer.as_ref()[field::CREDIT]
    }

    /// `h_padding`: always zero on the wire.
    pub fn padding(&self) -> [u8; 4] {
        let mut p = [0u8; 4];
        p.copy_from_slice(&self.buffer.as_ref()[field::PADDING]);
        p
    }

    /// The 16-byte extension area.
    pub fn ext_space(&self) -> ExtSpace {
        let mut raw = [0u8; 16];
        raw.copy_from_slice(&self.buffer.as_ref()[field::EXT]);
        ExtSpace::from_bytes(raw)
    }

    /// The 48 header bytes.
    pub fn header_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..HEADER_LEN]
    }

    /// Bytes after the header that are present in the buffer (may be fewer than `len()`).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// The kernel's `rds_message_verify_checksum`: a checksum of 0 means none and is accepted;
    /// otherwise the checksum over the 48 bytes as received must come out as 0.
    pub fn checksum_ok(&self) -> bool {
        self.csum() == 0 || checksum(self.header_bytes()) == 0
    }

    /// Like [`HeaderPacket::checksum_ok`], as a `Result`.
    ///
    /// # Errors
    /// [`Error::BadChecksum`] with the received checksum.
    pub fn verify_checksum(&self) -> Result<(), Error> {
        if self.checksum_ok() {
            Ok(())
        } else {
            Err(Error::BadChecksum(self.csum()))
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> HeaderPacket<T> {
    be_set!(set_seq, u64, field::SEQ, "Sets `h_sequence`.");
    be_set!(set_ack, u64, field::ACK, "Sets `h_ack`.");
    be_set!(set_len, u32, field::LEN, "Sets `h_len`.");
    be_set!(set_sport, u16, field::SPORT, "Sets `h_sport`.");
    be_set!(set_dport, u16, field::DPORT, "Sets `h_dport`.");
    be_set!(set_csum, u16, field::CSUM, "Sets `h_csum` verbatim.");

    /// Sets `h_flags`.
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    /// Sets `h_credit`.
    pub fn set_credit(&mut self, value: u8) {
        self.buffer.as_mut()[field::CREDIT] = value;
    }

    /// Sets `h_padding`.
    pub fn set_padding(&mut self, value: [u8; 4]) {
        self.buffer.as_mut()[field::PADDING].copy_from_slice(&value);
    }

    /// Sets the 16-byte extension area.
    pub fn set_ext_space(&mut self, value: &ExtSpace) {
        self.buffer.as_mut()[field::EXT].copy_from_slice(value.as_bytes());
    }

    /// The kernel's `rds_message_make_checksum`: zero `h_csum`, then store the checksum of all
    /// 48 bytes (extension area included).
    pub fn fill_checksum(&mut self) {
        self.set_csum(0);
        let c = checksum(self.header_bytes());
        self.set_csum(c);
    }
}

/// The header as a plain value. `parse` and `emit` are exact inverses: every byte, padding and
/// unknown extension bytes included, survives a round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderRepr {
    /// `h_sequence`.
    pub seq: u64,
    /// `h_ack`.
    pub ack: u64,
    /// `h_len`.
    pub len: u32,
    /// `h_sport`.
    pub sport: u16,
    /// `h_dport`.
    pub dport: u16,
    /// `h_flags` (see [`flags`]).
    pub flags: u8,
    /// `h_credit`.
    pub credit: u8,
    /// `h_padding`, zero on every frame Linux sends.
    pub padding: [u8; 4],
    /// `h_csum` as stored; see [`HeaderRepr::emit_checksummed`].
    pub csum: u16,
    /// `h_exthdr`.
    pub ext: ExtSpace,
}

impl HeaderRepr {
    /// A data message header: sequence, ports and payload length; everything else zero.
    pub fn data(seq: u64, sport: u16, dport: u16, len: u32) -> Self {
        HeaderRepr {
            seq,
            sport,
            dport,
            len,
            ..Default::default()
        }
    }

    /// The zero-length pong that answers a ping from `ping_sport`: sent from port 0.
    pub fn pong(seq: u64, ping_sport: u16) -> Self {
        Self::data(seq, 0, ping_sport, 0)
    }

    /// The congestion-map message header: `h_flags` exactly [`flags::CONG_BITMAP`], length 8192,
    /// ports 0, sequence 0, no extensions.
    pub fn cong_map() -> Self {
        HeaderRepr {
            len: super::CONG_MAP_BYTES as u32,
            flags: flags::CONG_BITMAP,
            ..Default::default()
        }
    }

    /// An IB ACK-only frame carrying cumulative ack `ack`: sequence, ports and length 0.
    pub fn ack_only(ack: u64) -> Self {
        HeaderRepr {
            ack,
            ..Default::default()
        }
    }

    /// Reads a checked view. Never fails: every 48-byte pattern is a header.
    pub fn parse<T: AsRef<[u8]>>(packet: &HeaderPacket<T>) -> Self {
        HeaderRepr {
            seq: packet.seq(),
            ack: packet.ack(),
            len: packet.len(),
            sport: packet.sport(),
            dport: packet.dport(),
            flags: packet.flags(),
            credit: packet.credit(),
            padding: packet.padding(),
            csum: packet.csum(),
            ext: packet.ext_space(),
        }
    }

    /// Parses the first 48 bytes of `bytes`.
    ///
    /// # Errors
    /// [`Error::Truncated`] if fewer than 48 bytes are given.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        Ok(Self::parse(&HeaderPacket::new_checked(bytes)?))
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first 48 bytes of `buf`, `h_csum` verbatim.
    ///
    /// # Panics
    /// If `buf` is shorter than [`HEADER_LEN`].
    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = HeaderPacket::new_unchecked(&mut buf[..HEADER_LEN]);
        p.set_seq(self.seq);
        p.set_ack(self.ack);
        p.set_len(self.len);
        p.set_sport(self.sport);
        p.set_dport(self.dport);
        p.set_flags(self.flags);
        p.set_credit(self.credit);
        p.set_padding(self.padding);
        p.set_csum(self.csum);
        p.set_ext_space(&self.ext);
    }

    /// The header as 48 bytes, `h_csum` verbatim.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        self.emit(&mut b);
        b
    }

    /// Writes the header with a freshly computed checksum (IB), ignoring `self.csum`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`HEADER_LEN`].
    pub fn emit_checksummed(&self, buf: &mut [u8]) {
        self.emit(buf);
        HeaderPacket::new_unchecked(&mut buf[..HEADER_LEN]).fill_checksum();
    }

    /// Iterates the extension headers with the kernel's parsing rules.
    pub fn exts(&self) -> ExtIter<'_> {
        self.ext.iter()
    }

    /// Appends an extension header the way newer kernels do.
    ///
    /// # Errors
    /// [`Error::ExtSpaceFull`] if it does not fit in the 16-byte area.
    pub fn push_ext(&mut self, ext: ExtHeader) -> Result<(), Error> {
        self.ext.push(ext)
    }

    /// `h_flags` is exactly [`flags::CONG_BITMAP`]: the kernel tests it with equality.
    pub fn is_cong_map(&self) -> bool {
        self.flags == flags::CONG_BITMAP
    }

    /// A ping: destination port 0 (a probe ping included).
    pub fn is_ping(&self) -> bool {
        self.dport == 0
    }

    /// The multipath handshake probe ping: `(sport, dport) == (1, 0)`.
    pub fn is_probe_ping(&self) -> bool {
        self.sport == PROBE_PORT && self.dport == 0
    }

    /// The multipath handshake probe pong: `(sport, dport) == (0, 1)`.
    pub fn is_probe_pong(&self) -> bool {
        self.sport == 0 && self.dport == PROBE_PORT
    }

    /// `RDS_HS_PROBE`: either direction of the handshake probe.
    pub fn is_hs_probe(&self) -> bool {
        self.is_probe_ping() || self.is_probe_pong()
    }

    /// An IB ACK-only frame: ports 0 and no payload.
    pub fn is_ack_only(&self) -> bool {
        self.sport == 0 && self.dport == 0 && self.len == 0
    }

    /// Tests a flag bit.
    pub fn has_flag(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

impl core::fmt::Display for HeaderRepr {
    /// tcpdump-like one-line form: `4000 > 5000 seq 7 len 3 [ACK_REQUIRED] ext [NPATHS=8]`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} > {} seq {} len {}",
            self.sport, self.dport, self.seq, self.len
        )?;
        if self.ack != 0 {
            write!(f, " ack {}", self.ack)?;
        }
        if self.credit != 0 {
            write!(f, " credit {}", self.credit)?;
        }
        if self.csum != 0 {
            write!(f, " csum {:#06x}", self.csum)?;
        }
        if self.flags != 0 {
            f.write_str(" [")?;
            let mut first = true;
            let mut rest = self.flags;
            for (bit, name) in flags::NAMES {
                if self.flags & bit != 0 {
                    if !first {
                        f.write_str(",")?;
                    }
                    f.write_str(name)?;
                    first = false;
                    rest &= !bit;
                }
            }
            if rest != 0 {
                if !first {
                    f.write_str(",")?;
                }
                write!(f, "{rest:#04x}")?;
            }
            f.write_str("]")?;
        }
        let mut exts = self.exts().peekable();
        if exts.peek().is_some() {
            f.write_str(" ext [")?;
            for (i, e) in exts.enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{e}")?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe ping as a [new] kernel sends it: seq 1, sport 1, dport 0, extensions
    /// NPATHS=8, GEN_NUM=0x11223344, SPORT_IDX=0. Written by hand from the layout table.
    static PROBE_BYTES: [u8; 48] = [
        0, 0, 0, 0, 0, 0, 0, 1, // h_sequence
        0, 0, 0, 0, 0, 0, 0, 0, // h_ack
        0, 0, 0, 0, // h_len
        0, 1, // h_sport
        0, 0, // h_dport
        0, // h_flags
        0, // h_credit
        0, 0, 0, 0, // h_padding
        0, 0, // h_csum
        5, 0, 8, // NPATHS = 8
        6, 0x11, 0x22, 0x33, 0x44, // GEN_NUM
        8, 0, // SPORT_IDX
        0, 0, 0, 0, 0, 0, // NONE + zeros
    ];

    /// Every field distinct so that a swapped offset shows.
    static FIELDS_BYTES: [u8; 48] = [
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // seq
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // ack
        0x00, 0x10, 0x00, 0x00, // len = 1 MiB
        0x0f, 0xa0, // sport 4000
        0x13, 0x88, // dport 5000
        0x06, // ACK_REQUIRED | RETRANSMITTED
        0xff, // credit 255
        0xa1, 0xa2, 0xa3, 0xa4, // padding (nonzero on purpose)
        0xbe, 0xef, // csum verbatim
        3, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x10, 0x00, // RDMA_DEST rkey, offset 4096
        2, 0xca, 0xfe, 0xba, 0xbe, // RDMA rkey
        0, 0, // NONE
    ];

    #[test]
    fn deconstruct_all_fields() {
        let p = HeaderPacket::new_checked(&FIELDS_BYTES[..]).unwrap();
        assert_eq!(p.seq(), 0x0102_0304_0506_0708);
        assert_eq!(p.ack(), 0x1112_1314_1516_1718);
        assert_eq!(p.len(), 1 << 20);
        assert_eq!(p.sport(), 4000);
        assert_eq!(p.dport(), 5000);
        assert_eq!(p.flags(), flags::ACK_REQUIRED | flags::RETRANSMITTED);
        assert_eq!(p.credit(), 255);
        assert_eq!(p.padding(), [0xa1, 0xa2, 0xa3, 0xa4]);
        assert_eq!(p.csum(), 0xbeef);
        let exts: Vec<_> = p.ext_space().iter().collect();
        assert_eq!(
            exts,
            [
                ExtHeader::RdmaDest {
                    rkey: 0xdead_beef,
                    offset: 4096
                },
                ExtHeader::Rdma { rkey: 0xcafe_babe }
            ]
        );
    }

    #[test]
    fn construct_prefilled() {
        let repr = HeaderRepr::parse(&HeaderPacket::new_checked(&FIELDS_BYTES[..]).unwrap());
        let mut buf = [0xa5u8; 48];
        repr.emit(&mut buf);
        assert_eq!(buf, FIELDS_BYTES);
    }

    #[test]
    fn probe_vector() {
        let mut repr = HeaderRepr::data(1, PROBE_PORT, 0, 0);
        repr.push_ext(ExtHeader::Npaths(8)).unwrap();
        repr.push_ext(ExtHeader::GenNum(0x1122_3344)).unwrap();
        repr.push_ext(ExtHeader::SportIdx(0)).unwrap();
        let mut buf = [0xa5u8; 48];
        repr.emit(&mut buf);
        assert_eq!(buf, PROBE_BYTES);
        assert!(repr.is_probe_ping() && repr.is_ping() && repr.is_hs_probe());
        assert!(!repr.is_probe_pong() && !repr.is_ack_only());
    }

    #[test]
    fn truncated() {
        assert_eq!(
            HeaderPacket::new_checked(&PROBE_BYTES[..47]).unwrap_err(),
            Error::Truncated { got: 47, need: 48 }
        );
        assert!(HeaderRepr::from_bytes(&[]).is_err());
    }

    #[test]
    fn peek_len_of_a_cut_header() {
        assert_eq!(peek_len(&FIELDS_BYTES[..20]), Some(1 << 20));
        assert_eq!(peek_len(&FIELDS_BYTES[..19]), None);
        assert_eq!(peek_len(&[]), None);
    }

    #[test]
    fn setters_write_their_own_bytes_only() {
        let mut buf = [0u8; 48];
        let mut p = HeaderPacket::new_unchecked(&mut buf[..]);
        p.set_dport(0xabcd);
        assert_eq!(&buf[22..24], &[0xab, 0xcd]);
        assert!(buf[..22].iter().chain(&buf[24..]).all(|&b| b == 0));
    }

    #[test]
    fn checksum_known_vector() {
        // Header of all zero bytes but seq = 1 and len = 0x0100: word sum = 0x0001 + 0x0100
        // = 0x0101; complement = 0xfefe. Computed by hand.
        let mut repr = HeaderRepr::data(1, 0, 0, 0x100);
        let mut buf = [0u8; 48];
        repr.emit_checksummed(&mut buf);
        assert_eq!(&buf[30..32], &[0xfe, 0xfe]);
        let p = HeaderPacket::new_checked(&buf[..]).unwrap();
        assert!(p.checksum_ok());
        assert_eq!(checksum(&buf), 0);
        // Flip one bit anywhere (extension area too): the check fails.
        for i in (0..48).filter(|i| !(30..32).contains(i)) {
            let mut bad = buf;
            bad[i] ^= 0x40;
            let p = HeaderPacket::new_checked(&bad[..]).unwrap();
            assert_eq!(
                p.verify_checksum(),
                Err(Error::BadChecksum(0xfefe)),
                "byte {i}"
            );
        }
        // Zero means "no checksum" and is always accepted.
        repr.csum = 0;
        repr.seq = 99;
        assert!(HeaderPacket::new_checked(&repr.to_bytes()[..])
            .unwrap()
            .checksum_ok());
    }

    #[test]
    fn port_rules() {
        assert!(HeaderRepr::pong(3, 77).dport == 77 && HeaderRepr::pong(3, 77).sport == 0);
        assert!(HeaderRepr::data(0, 0, PROBE_PORT, 0).is_probe_pong());
        assert!(HeaderRepr::ack_only(5).is_ack_only());
        let cm = HeaderRepr::cong_map();
        assert!(cm.is_cong_map() && !cm.is_ack_only() && cm.len == 8192);
        let mut not_cm = cm;
        not_cm.flags |= flags::RETRANSMITTED;
        assert!(!not_cm.is_cong_map(), "equality test, as the kernel does");
    }

    #[test]
    fn display() {
        let repr = HeaderRepr::parse(&HeaderPacket::new_checked(&PROBE_BYTES[..]).unwrap());
        assert_eq!(
            repr.to_string(),
            "1 > 0 seq 1 len 0 ext [NPATHS=8,GEN_NUM=287454020,SPORT_IDX=0]"
        );
        let mut r = HeaderRepr::data(9, 4000, 5000, 12);
        r.flags = flags::ACK_REQUIRED | flags::RETRANSMITTED | 0x80;
        assert_eq!(
            r.to_string(),
            "4000 > 5000 seq 9 len 12 [ACK_REQUIRED,RETRANSMITTED,0x80]"
        );
    }
}
