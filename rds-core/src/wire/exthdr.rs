//! Extension headers in `h_exthdr` (Linux `net/rds/message.c`, `rds_exthdr_size[]`).
//!
//! The 16-byte area holds `type:u8` + a payload whose length is implied by the type (there is no
//! length byte). Type 0 ends the list. Unknown types below 16 read as zero-length items and
//! parsing continues at the next byte; types 16 and above end parsing; an item that would run
//! past byte 16 ends parsing.

use super::Error;

/// Size of the extension area (`RDS_HEADER_EXT_SPACE`).
pub const EXT_SPACE: usize = 16;
/// Types at or above this end parsing (`__RDS_EXTHDR_MAX`).
pub const EXT_TYPE_MAX: u8 = 16;

/// Extension type numbers (`RDS_EXTHDR_*`).
pub mod types {
    /// Terminator.
    pub const NONE: u8 = 0;
    /// Protocol version, BE u32 `major << 8 | minor`. Nobody sends it any more.
    pub const VERSION: u8 = 1;
    /// R_Key of the message's RDMA op, BE u32.
    pub const RDMA: u8 = 2;
    /// RDMA destination cookie: BE u32 r_key, BE u32 offset.
    pub const RDMA_DEST: u8 = 3;
    /// RDMA byte count (BE u32) and direction flags (u8), 3 pad bytes.
    pub const RDMA_BYTES: u8 = 4;
    /// Number of paths the sender supports, BE u16.
    pub const NPATHS: u8 = 5;
    /// The sender's generation number, BE u32.
    pub const GEN_NUM: u8 = 6;
    /// Source-port lane index capability, one (dummy) byte.
    pub const SPORT_IDX: u8 = 8;
}

/// Payload length implied by a type, as mainline's `rds_exthdr_size[]` gives it (types missing
/// from the table, UEK's 7 and 9 included, are zero-length).
pub const fn ext_len(ty: u8) -> usize {
    match ty {
        types::VERSION | types::RDMA | types::GEN_NUM => 4,
        types::RDMA_DEST | types::RDMA_BYTES => 8,
        types::NPATHS => 2,
        types::SPORT_IDX => 1,
        _ => 0,
    }
}

/// `rds_ext_header_rdma_bytes.h_rflags`: the RDMA op was a write.
pub const RDMA_BYTES_WRITE: u8 = 0x01;
/// `rds_ext_header_rdma_bytes.h_rflags`: the RDMA op was a read.
pub const RDMA_BYTES_READ: u8 = 0x02;

/// One decoded extension header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtHeader {
    /// `RDS_EXTHDR_VERSION` (1).
    Version(u32),
    /// `RDS_EXTHDR_RDMA` (2): r_key of the RDMA op.
    Rdma {
        /// The remote memory region's key.
        rkey: u32,
    },
    /// `RDS_EXTHDR_RDMA_DEST` (3): cookie `rkey | offset << 32` for the receiver.
    RdmaDest {
        /// R_Key.
        rkey: u32,
        /// Offset in the region.
        offset: u32,
    },
    /// `RDS_EXTHDR_RDMA_BYTES` (4): bytes moved by the RDMA op and its direction.
    RdmaBytes {
        /// Byte count.
        bytes: u32,
        /// [`RDMA_BYTES_WRITE`] or [`RDMA_BYTES_READ`].
        rflags: u8,
    },
    /// `RDS_EXTHDR_NPATHS` (5).
    Npaths(u16),
    /// `RDS_EXTHDR_GEN_NUM` (6).
    GenNum(u32),
    /// `RDS_EXTHDR_SPORT_IDX` (8): its one byte is a dummy (0).
    SportIdx(u8),
    /// A type below 16 that mainline does not know: zero-length.
    Unknown(u8),
}

impl ExtHeader {
    /// The type byte.
    pub fn ty(&self) -> u8 {
        match self {
            ExtHeader::Version(_) => types::VERSION,
            ExtHeader::Rdma { .. } => types::RDMA,
            ExtHeader::RdmaDest { .. } => types::RDMA_DEST,
            ExtHeader::RdmaBytes { .. } => types::RDMA_BYTES,
            ExtHeader::Npaths(_) => types::NPATHS,
            ExtHeader::GenNum(_) => types::GEN_NUM,
            ExtHeader::SportIdx(_) => types::SPORT_IDX,
            ExtHeader::Unknown(t) => *t,
        }
    }

    /// Payload bytes (without the type byte).
    pub fn payload_len(&self) -> usize {
        ext_len(self.ty())
    }

    fn decode(ty: u8, b: &[u8]) -> ExtHeader {
        let be32 = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        match ty {
            types::VERSION => ExtHeader::Version(be32(0)),
            types::RDMA => ExtHeader::Rdma { rkey: be32(0) },
            types::RDMA_DEST => ExtHeader::RdmaDest {
                rkey: be32(0),
                offset: be32(4),
            },
            types::RDMA_BYTES => ExtHeader::RdmaBytes {
                bytes: be32(0),
                rflags: b[4],
            },
            types::NPATHS => ExtHeader::Npaths(u16::from_be_bytes([b[0], b[1]])),
            types::GEN_NUM => ExtHeader::GenNum(be32(0)),
            types::SPORT_IDX => ExtHeader::SportIdx(b[0]),
            other => ExtHeader::Unknown(other),
        }
    }

    fn encode(&self, out: &mut [u8]) {
        match *self {
            ExtHeader::Version(v) | ExtHeader::GenNum(v) | ExtHeader::Rdma { rkey: v } => {
                out[..4].copy_from_slice(&v.to_be_bytes())
            }
            ExtHeader::RdmaDest { rkey, offset } => {
                out[..4].copy_from_slice(&rkey.to_be_bytes());
                out[4..8].copy_from_slice(&offset.to_be_bytes());
            }
            ExtHeader::RdmaBytes { bytes, rflags } => {
                out[..4].copy_from_slice(&bytes.to_be_bytes());
                out[4] = rflags;
                out[5..8].fill(0);
            }
            ExtHeader::Npaths(n) => out[..2].copy_from_slice(&n.to_be_bytes()),
            ExtHeader::SportIdx(v) => out[0] = v,
            ExtHeader::Unknown(_) => {}
        }
    }
}

impl core::fmt::Display for ExtHeader {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ExtHeader::Version(v) => write!(f, "VERSION={}.{}", v >> 8, v & 0xff),
            ExtHeader::Rdma { rkey } => write!(f, "RDMA rkey={rkey:#x}"),
            ExtHeader::RdmaDest { rkey, offset } => {
                write!(f, "RDMA_DEST rkey={rkey:#x} offset={offset}")
            }
            ExtHeader::RdmaBytes { bytes, rflags } => {
                let dir = match *rflags {
                    RDMA_BYTES_WRITE => "write",
                    RDMA_BYTES_READ => "read",
                    _ => "?",
                };
                write!(f, "RDMA_BYTES={bytes} {dir}")
            }
            ExtHeader::Npaths(n) => write!(f, "NPATHS={n}"),
            ExtHeader::GenNum(g) => write!(f, "GEN_NUM={g}"),
            ExtHeader::SportIdx(v) => write!(f, "SPORT_IDX={v}"),
            ExtHeader::Unknown(t) => write!(f, "TYPE{t}"),
        }
    }
}

/// The raw 16-byte extension area. Keeps every byte, so unknown content round-trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtSpace {
    raw: [u8; EXT_SPACE],
}

impl ExtSpace {
    /// Wraps raw bytes.
    pub const fn from_bytes(raw: [u8; EXT_SPACE]) -> Self {
        ExtSpace { raw }
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; EXT_SPACE] {
        &self.raw
    }

    /// Iterates the extension headers with the kernel's rules
    /// (`rds_message_next_extension`).
    pub fn iter(&self) -> ExtIter<'_> {
        ExtIter {
            raw: &self.raw,
            pos: 0,
        }
    }

    /// The first extension of type `ty`, if any.
    pub fn find(&self, ty: u8) -> Option<ExtHeader> {
        self.iter().find(|e| e.ty() == ty)
    }

    /// Byte offset just after the last extension the parser accepts.
    fn end(&self) -> usize {
        let mut it = self.iter();
        while it.next().is_some() {}
        it.pos
    }

    /// Appends an extension after the existing ones, as newer kernels' writer does (the area
    /// may end up full with no terminator). Older kernels' writer accepted only one extension;
    /// their parser reads several.
    ///
    /// # Errors
    /// [`Error::ExtSpaceFull`] if `1 + payload` bytes do not fit after the existing chain; the
    /// area is unchanged then.
    pub fn push(&mut self, ext: ExtHeader) -> Result<(), Error> {
        let at = self.end();
        let len = ext.payload_len();
        if at + 1 + len > EXT_SPACE || ext.ty() == types::NONE || ext.ty() >= EXT_TYPE_MAX {
            return Err(Error::ExtSpaceFull);
        }
        self.raw[at] = ext.ty();
        ext.encode(&mut self.raw[at + 1..at + 1 + len]);
        if at + 1 + len < EXT_SPACE {
            self.raw[at + 1 + len] = types::NONE;
        }
        Ok(())
    }
}

/// Iterator over the extension headers of an [`ExtSpace`].
#[derive(Debug, Clone)]
pub struct ExtIter<'a> {
    raw: &'a [u8; EXT_SPACE],
    pos: usize,
}

impl Iterator for ExtIter<'_> {
    type Item = ExtHeader;

    fn next(&mut self) -> Option<ExtHeader> {
        let ty = *self.raw.get(self.pos)?;
        if ty == types::NONE || ty >= EXT_TYPE_MAX {
            return None;
        }
        let start = self.pos + 1;
        let end = start + ext_len(ty);
        if end > EXT_SPACE {
            return None;
        }
        self.pos = end;
        Some(ExtHeader::decode(ty, &self.raw[start..end]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(bytes: &[u8]) -> ExtSpace {
        let mut raw = [0u8; 16];
        raw[..bytes.len()].copy_from_slice(bytes);
        ExtSpace::from_bytes(raw)
    }

    #[test]
    fn implied_length_table() {
        // mainline rds_exthdr_size[]
        let expect = [0, 4, 4, 8, 8, 2, 4, 0, 1, 0, 0, 0, 0, 0, 0, 0];
        for (ty, want) in expect.iter().enumerate() {
            assert_eq!(ext_len(ty as u8), *want, "type {ty}");
        }
    }

    #[test]
    fn each_type_decodes() {
        let cases: &[(&[u8], ExtHeader)] = &[
            (&[1, 0, 0, 3, 1], ExtHeader::Version(0x0301)),
            (&[2, 1, 2, 3, 4], ExtHeader::Rdma { rkey: 0x0102_0304 }),
            (
                &[3, 0, 0, 0, 9, 0, 0, 0x0f, 0xff],
                ExtHeader::RdmaDest {
                    rkey: 9,
                    offset: 0xfff,
                },
            ),
            (
                &[4, 0, 1, 0, 0, 2, 0xaa, 0xbb, 0xcc],
                ExtHeader::RdmaBytes {
                    bytes: 0x10000,
                    rflags: RDMA_BYTES_READ,
                },
            ),
            (&[5, 0, 8], ExtHeader::Npaths(8)),
            (&[6, 0xde, 0xad, 0xbe, 0xef], ExtHeader::GenNum(0xdead_beef)),
            (&[8, 0], ExtHeader::SportIdx(0)),
            (&[7], ExtHeader::Unknown(7)),
            (&[9], ExtHeader::Unknown(9)),
            (&[15], ExtHeader::Unknown(15)),
        ];
        for (bytes, want) in cases {
            let s = space(bytes);
            assert_eq!(s.iter().next(), Some(*want), "{bytes:?}");
            assert_eq!(want.ty(), bytes[0]);
        }
    }

    #[test]
    fn unknown_types_are_zero_length_and_parsing_continues() {
        // 7 (UEK CAP_BITS) then NPATHS: a mainline parser reads 7 as zero-length.
        let s = space(&[7, 5, 0, 4]);
        let v: Vec<_> = s.iter().collect();
        assert_eq!(v, [ExtHeader::Unknown(7), ExtHeader::Npaths(4)]);
    }

    #[test]
    fn type_16_and_above_end_parsing() {
        let s = space(&[5, 0, 2, 16, 5, 0, 3]);
        assert_eq!(s.iter().collect::<Vec<_>>(), [ExtHeader::Npaths(2)]);
        let s = space(&[0xff, 5, 0, 3]);
        assert_eq!(s.iter().count(), 0);
    }

    #[test]
    fn item_running_past_the_end_stops() {
        // GEN_NUM at offset 12 needs bytes 13..17: does not fit.
        let s = space(&[5, 0, 1, 5, 0, 2, 5, 0, 3, 5, 0, 4, 6, 1, 2, 3]);
        let v: Vec<_> = s.iter().collect();
        assert_eq!(v.len(), 4);
        // Exactly filling all 16 bytes works, no terminator needed.
        let s = space(&[3, 0, 0, 0, 1, 0, 0, 0, 2, 1, 0, 0, 3, 1, 8, 0]);
        let v: Vec<_> = s.iter().collect();
        assert_eq!(
            v,
            [
                ExtHeader::RdmaDest { rkey: 1, offset: 2 },
                ExtHeader::Version(0x0301),
                ExtHeader::SportIdx(0),
            ]
        );
    }

    #[test]
    fn push_appends_like_new_kernels() {
        let mut s = ExtSpace::default();
        s.push(ExtHeader::Npaths(8)).unwrap();
        s.push(ExtHeader::GenNum(0x0102_0304)).unwrap();
        s.push(ExtHeader::SportIdx(0)).unwrap();
        assert_eq!(
            s.as_bytes(),
            &[5, 0, 8, 6, 1, 2, 3, 4, 8, 0, 0, 0, 0, 0, 0, 0]
        );
        // 6 bytes left at offset 10: RDMA_DEST (9) does not fit, RDMA (5) does.
        assert_eq!(
            s.push(ExtHeader::RdmaDest { rkey: 1, offset: 1 }),
            Err(Error::ExtSpaceFull)
        );
        s.push(ExtHeader::Rdma { rkey: 0xaabb_ccdd }).unwrap();
        assert_eq!(&s.as_bytes()[10..], &[2, 0xaa, 0xbb, 0xcc, 0xdd, 0]);
        // One byte left: SPORT_IDX needs 2.
        assert_eq!(s.push(ExtHeader::SportIdx(0)), Err(Error::ExtSpaceFull));
        assert_eq!(s.iter().count(), 4);
        assert_eq!(s.find(types::GEN_NUM), Some(ExtHeader::GenNum(0x0102_0304)));
    }

    #[test]
    fn push_fills_exactly() {
        let mut s = ExtSpace::default();
        s.push(ExtHeader::RdmaDest { rkey: 1, offset: 2 }).unwrap(); // 9 bytes
        s.push(ExtHeader::Version(0x301)).unwrap(); // 5 bytes -> 14
        s.push(ExtHeader::SportIdx(0)).unwrap(); // 2 bytes -> 16, no terminator
        assert_eq!(s.iter().count(), 3);
        assert_eq!(s.push(ExtHeader::Unknown(9)), Err(Error::ExtSpaceFull));
    }

    #[test]
    fn push_rejects_invalid_types() {
        let mut s = ExtSpace::default();
        assert!(s.push(ExtHeader::Unknown(0)).is_err());
        assert!(s.push(ExtHeader::Unknown(16)).is_err());
        assert_eq!(s, ExtSpace::default());
    }
}
