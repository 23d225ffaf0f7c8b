//! RDS/IB receive-side reassembly (`ib_recv.c` `rds_ib_process_recv`): every IB SEND carries a
//! copy of the 48-byte header followed by at most 4096 payload bytes; all fragments but the
//! last carry exactly 4096. Continuations must repeat the first fragment's sequence, length and
//! ports. ACK-only frames may arrive between fragments.

use bytes::BytesMut;

use crate::wire::{HeaderPacket, HeaderRepr, FRAG_SIZE, HEADER_LEN};

use super::stream::Frame;

/// What one received IB SEND carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FragInfo {
    /// The piggybacked cumulative ack (`h_ack`), present on every frame.
    pub ack: u64,
    /// Credits advertised (`h_credit`).
    pub credit: u8,
    /// An ACK-only frame (no message content).
    pub ack_only: bool,
    /// The message this fragment completed, if any.
    pub complete: Option<Frame>,
    /// The completed message was discarded (see [`FragAssembler::discard`]): `complete`
    /// holds its header and an empty payload.
    pub discarded: bool,
}

/// A fragment that breaks the protocol; the connection must be dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FragError {
    /// Shorter than a header.
    #[error("frame of {0} bytes has no complete header")]
    NoHeader(usize),
    /// The header checksum is wrong.
    #[error("bad header checksum")]
    BadChecksum,
    /// A continuation's header differs from the first fragment's.
    #[error("fragment header mismatch")]
    HeaderMismatch,
    /// A fragment carries the wrong number of payload bytes.
    #[error("fragment carries {got} payload bytes, expected {want}")]
    BadFragLen {
        /// Bytes carried.
        got: usize,
        /// Bytes expected.
        want: usize,
    },
    /// `h_len` over the limit.
    #[error("message length {0} exceeds the limit")]
    TooLong(u32),
}

/// Reassembles one IB connection's incoming fragments.
#[derive(Debug)]
pub struct FragAssembler {
    max_len: u32,
    cur: Option<(HeaderRepr, BytesMut, usize)>,
    /// The message in progress is checked fragment by fragment but not stored.
    discard: bool,
}

impl FragAssembler {
    /// An assembler refusing messages longer than `max_len`.
    pub fn new(max_len: u32) -> Self {
        FragAssembler {
            max_len,
            cur: None,
            discard: false,
        }
    }

    /// Drops a partly received message (on connection reset).
    pub fn reset(&mut self) {
        self.cur = None;
        self.discard = false;
    }

    /// The full length of the message being reassembled, if one is.
    pub fn pending_len(&self) -> Option<u32> {
        self.cur.as_ref().map(|(h, _, _)| h.len)
    }

    /// Frees the buffer of the message being reassembled: its remaining fragments are still
    /// checked, and its completion is reported with [`FragInfo::discarded`] set.
    pub fn discard(&mut self) {
        if let Some((_, buf, _)) = self.cur.as_mut() {
            *buf = BytesMut::new();
            self.discard = true;
        }
    }

    /// Whether a message is partly received.
    pub fn in_message(&self) -> bool {
        self.cur.is_some()
    }

    /// Processes one received SEND (`frame` = header + payload as received).
    ///
    /// # Errors
    /// Any [`FragError`]; the connection must then be dropped.
    pub fn push(&mut self, frame: &[u8]) -> Result<FragInfo, FragError> {
        let pkt = HeaderPacket::new_checked(frame).map_err(|_| FragError::NoHeader(frame.len()))?;
        if !pkt.checksum_ok() {
            return Err(FragError::BadChecksum);
        }
        let hdr = HeaderRepr::parse(&pkt);
        let data = &frame[HEADER_LEN..];
        let mut info = FragInfo {
            ack: hdr.ack,
            credit: hdr.credit,
            ack_only: false,
            complete: None,
            discarded: false,
        };
        if hdr.sport == 0 && hdr.dport == 0 && data.is_empty() {
            info.ack_only = true;
            return Ok(info);
        }
        let (first, mut buf, rem) = match self.cur.take() {
            None => {
                if hdr.len > self.max_len {
                    return Err(FragError::TooLong(hdr.len));
                }
                (
                    hdr,
                    BytesMut::with_capacity(hdr.len as usize),
                    hdr.len as usize,
                )
            }
            Some((first, buf, rem)) => {
                if (hdr.seq, hdr.len, hdr.sport, hdr.dport)
                    != (first.seq, first.len, first.sport, first.dport)
                {
                    return Err(FragError::HeaderMismatch);
                }
                (first, buf, rem)
            }
        };
        let want = rem.min(FRAG_SIZE);
        if data.len() != want {
            return Err(FragError::BadFragLen {
                got: data.len(),
                want,
            });
        }
        if !self.discard {
            buf.extend_from_slice(data);
        }
        let rem = rem - want;
        if rem == 0 {
            // Flags of the last fragment are authoritative for ACK_REQUIRED (identical in
            // practice); keep the first header's fields otherwise.
            let mut h = first;
            h.flags |= hdr.flags;
            info.discarded = std::mem::take(&mut self.discard);
            let held = buf.capacity();
            info.complete = Some(Frame {
                hdr: h,
                payload: buf.freeze(),
                held,
            });
        } else {
            self.cur = Some((first, buf, rem));
        }
        Ok(info)
    }
}

/// Splits a message into IB fragments: `(offset, len)` of each fragment's payload.
pub fn fragments(len: usize) -> impl Iterator<Item = (usize, usize)> {
    let n = len.div_ceil(FRAG_SIZE).max(1);
    (0..n).map(move |i| (i * FRAG_SIZE, (len - i * FRAG_SIZE).min(FRAG_SIZE)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(hdr: &HeaderRepr, data: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; 48];
        hdr.emit_checksummed(&mut v);
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn fragment_offsets() {
        assert_eq!(fragments(0).collect::<Vec<_>>(), [(0, 0)]);
        assert_eq!(fragments(4096).collect::<Vec<_>>(), [(0, 4096)]);
        assert_eq!(
            fragments(8193).collect::<Vec<_>>(),
            [(0, 4096), (4096, 4096), (8192, 1)]
        );
    }

    #[test]
    fn multi_fragment_with_interleaved_ack() {
        let payload: Vec<u8> = (0..10000u32).map(|i| i as u8).collect();
        let h = HeaderRepr::data(5, 1, 2, 10000);
        let mut a = FragAssembler::new(1 << 20);
        let mut done = None;
        for (i, (off, len)) in fragments(10000).enumerate() {
            let r = a.push(&frag(&h, &payload[off..off + len])).unwrap();
            if i == 0 {
                let ack = a.push(&frag(&HeaderRepr::ack_only(3), &[])).unwrap();
                assert!(ack.ack_only && ack.ack == 3);
            }
            done = r.complete.or(done);
        }
        let f = done.unwrap();
        assert_eq!(f.hdr.seq, 5);
        assert_eq!(&f.payload[..], &payload[..]);
        assert!(!a.in_message());
    }

    #[test]
    fn zero_length_message_is_one_frame() {
        let mut a = FragAssembler::new(100);
        let r = a.push(&frag(&HeaderRepr::data(1, 9, 0, 0), &[])).unwrap();
        assert!(!r.ack_only);
        assert_eq!(r.complete.unwrap().hdr.dport, 0);
    }

    #[test]
    fn protocol_errors() {
        let mut a = FragAssembler::new(1 << 20);
        assert_eq!(a.push(&[0; 47]), Err(FragError::NoHeader(47)));
        let mut bad = frag(&HeaderRepr::data(1, 1, 1, 1), &[0]);
        bad[3] ^= 1;
        assert_eq!(a.push(&bad), Err(FragError::BadChecksum));
        let h = HeaderRepr::data(1, 1, 2, 5000);
        a.push(&frag(&h, &[0; 4096])).unwrap();
        let mut other = h;
        other.seq = 2;
        assert_eq!(
            a.push(&frag(&other, &[0; 904])),
            Err(FragError::HeaderMismatch)
        );
        let mut a = FragAssembler::new(1 << 20);
        assert_eq!(
            a.push(&frag(&h, &[0; 100])),
            Err(FragError::BadFragLen {
                got: 100,
                want: 4096
            })
        );
        assert_eq!(
            a.push(&frag(&HeaderRepr::data(1, 1, 1, 2 << 20), &[0; 4096])),
            Err(FragError::TooLong(2 << 20))
        );
        // An unchecksummed header (0) is accepted.
        let mut plain = vec![0u8; 48];
        HeaderRepr::data(3, 4, 5, 1).emit(&mut plain);
        plain.push(9);
        assert!(a.push(&plain).unwrap().complete.is_some());
    }
}
