//! RDS/TCP byte-stream reassembly (`tcp_recv.c`): the stream is back-to-back
//! `[48-byte header][h_len payload bytes]` with no other framing.
//!
//! The parser is fed whatever chunks the socket returns and yields whole frames. Payloads that
//! lie entirely inside one fed chunk are zero-copy slices of it; others are gathered. A length
//! above the configured limit is an error (the kernel trusts `h_len`; we refuse to allocate for
//! a hostile peer) and poisons the parser: the caller drops the connection.

use bytes::{Bytes, BytesMut};

use crate::wire::{HeaderRepr, HEADER_LEN};

/// A complete message read from the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Its header.
    pub hdr: HeaderRepr,
    /// Exactly `hdr.len` bytes.
    pub payload: Bytes,
}

/// Why the stream cannot be parsed further.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// A header announced more payload than the limit.
    #[error("message length {len} exceeds the limit of {max} bytes")]
    TooLong {
        /// `h_len` as received.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// An earlier error already poisoned the parser.
    #[error("stream already failed")]
    Poisoned,
}

/// Incremental parser of one direction of one RDS/TCP connection.
#[derive(Debug)]
pub struct StreamParser {
    max_len: u32,
    hdr: [u8; HEADER_LEN],
    hdr_have: usize,
    cur: Option<HeaderRepr>,
    data: BytesMut,
    data_rem: usize,
    poisoned: bool,
    bytes_in: u64,
}

impl StreamParser {
    /// A parser that refuses payloads longer than `max_len` bytes.
    pub fn new(max_len: u32) -> Self {
        StreamParser {
            max_len,
            hdr: [0; HEADER_LEN],
            hdr_have: 0,
            cur: None,
            data: BytesMut::new(),
            data_rem: 0,
            poisoned: false,
            bytes_in: 0,
        }
    }

    /// Header bytes still missing for the message in progress (`t_tinc_hdr_rem`): 48 between
    /// messages.
    pub fn hdr_rem(&self) -> usize {
        if self.cur.is_some() {
            0
        } else {
            HEADER_LEN - self.hdr_have
        }
    }

    /// Payload bytes still missing for the message in progress (`t_tinc_data_rem`).
    pub fn data_rem(&self) -> usize {
        self.data_rem
    }

    /// Total bytes fed so far.
    pub fn bytes_in(&self) -> u64 {
        self.bytes_in
    }

    /// Whether a message is partly received.
    pub fn in_message(&self) -> bool {
        self.hdr_have > 0 || self.cur.is_some()
    }

    /// Feeds a chunk of the stream, appending completed frames to `out`.
    ///
    /// # Errors
    /// [`StreamError::TooLong`] for an oversized `h_len` (frames completed before it are still
    /// in `out`); [`StreamError::Poisoned`] once failed.
    pub fn feed(&mut self, mut input: Bytes, out: &mut Vec<Frame>) -> Result<(), StreamError> {
        if self.poisoned {
            return Err(StreamError::Poisoned);
        }
        self.bytes_in += input.len() as u64;
        while !input.is_empty() {
            match self.cur {
                None => {
                    if self.hdr_have == 0 && input.len() >= HEADER_LEN {
                        // Fast path: a whole header in the chunk.
                        let hdr =
                            HeaderRepr::from_bytes(&input[..HEADER_LEN]).expect("48 bytes present");
                        let _ = input.split_to(HEADER_LEN);
                        self.start(hdr)?;
                    } else {
                        let n = (HEADER_LEN - self.hdr_have).min(input.len());
                        self.hdr[self.hdr_have..self.hdr_have + n].copy_from_slice(&input[..n]);
                        let _ = input.split_to(n);
                        self.hdr_have += n;
                        if self.hdr_have == HEADER_LEN {
                            self.hdr_have = 0;
                            let hdr = HeaderRepr::from_bytes(&self.hdr).expect("48 bytes present");
                            self.start(hdr)?;
                        }
                    }
                }
                Some(hdr) => {
                    if self.data.is_empty() && input.len() >= self.data_rem {
                        // Fast path: the whole payload in the chunk; slice it.
                        let payload = input.split_to(self.data_rem);
                        self.finish(hdr, payload, out);
                    } else {
                        let n = self.data_rem.min(input.len());
                        if self.data.capacity() == 0 {
                            self.data.reserve(self.data_rem);
                        }
                        self.data.extend_from_slice(&input[..n]);
                        let _ = input.split_to(n);
                        self.data_rem -= n;
                        if self.data_rem == 0 {
                            let payload = self.data.split().freeze();
                            self.data = BytesMut::new();
                            self.finish(hdr, payload, out);
                        }
                    }
                }
            }
            if self.cur.is_some() && self.data_rem == 0 {
                // Zero-length message: complete as soon as the header is.
                let hdr = self.cur.expect("checked");
                self.finish(hdr, Bytes::new(), out);
            }
        }
        Ok(())
    }

    /// While the rest of a large payload (at least `min` bytes) is outstanding: the buffer it
    /// is gathered in and how many bytes are missing, so that the caller can read the stream
    /// straight into the buffer's spare capacity (no gather copy), then call
    /// [`StreamParser::direct_done`]. `None` otherwise (feed the bytes with
    /// [`StreamParser::feed`]).
    pub fn direct_buf(&mut self, min: usize) -> Option<(&mut BytesMut, usize)> {
        if self.poisoned || self.cur.is_none() || self.data_rem < min {
            return None;
        }
        if self.data.capacity() - self.data.len() < self.data_rem {
            self.data.reserve(self.data_rem);
        }
        Some((&mut self.data, self.data_rem))
    }

    /// `n` bytes were appended to the buffer of [`StreamParser::direct_buf`] (at most the
    /// missing count); completes the frame when the payload is whole.
    pub fn direct_done(&mut self, n: usize, out: &mut Vec<Frame>) {
        let Some(hdr) = self.cur else {
            return;
        };
        let n = n.min(self.data_rem);
        self.bytes_in += n as u64;
        self.data_rem -= n;
        if self.data_rem == 0 {
            let payload = self.data.split().freeze();
            self.data = BytesMut::new();
            self.finish(hdr, payload, out);
        }
    }

    fn start(&mut self, hdr: HeaderRepr) -> Result<(), StreamError> {
        if hdr.len > self.max_len {
            self.poisoned = true;
            return Err(StreamError::TooLong {
                len: hdr.len,
                max: self.max_len,
            });
        }
        self.cur = Some(hdr);
        self.data_rem = hdr.len as usize;
        Ok(())
    }

    fn finish(&mut self, hdr: HeaderRepr, payload: Bytes, out: &mut Vec<Frame>) {
        self.cur = None;
        self.data_rem = 0;
        out.push(Frame { hdr, payload });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::MAX_MSG_SIZE;

    fn stream(frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut v = vec![];
        for (seq, p) in frames {
            v.extend_from_slice(&HeaderRepr::data(*seq, 10, 20, p.len() as u32).to_bytes());
            v.extend_from_slice(p);
        }
        v
    }

    #[test]
    fn every_split_point_gives_the_same_frames() {
        let msgs = vec![
            (1, vec![]),
            (2, vec![7; 100]),
            (3, vec![]),
            (4, vec![9; 5000]),
        ];
        let s = stream(&msgs);
        for cut1 in 0..s.len() {
            for cut2 in [cut1, (cut1 + 49).min(s.len()), s.len()] {
                let mut p = StreamParser::new(MAX_MSG_SIZE as u32);
                let mut out = vec![];
                let b = Bytes::from(s.clone());
                p.feed(b.slice(..cut1), &mut out).unwrap();
                p.feed(b.slice(cut1..cut2), &mut out).unwrap();
                p.feed(b.slice(cut2..), &mut out).unwrap();
                assert_eq!(out.len(), 4, "cut {cut1}/{cut2}");
                for (f, (seq, payload)) in out.iter().zip(&msgs) {
                    assert_eq!(f.hdr.seq, *seq);
                    assert_eq!(&f.payload[..], &payload[..]);
                }
                assert!(!p.in_message());
                assert_eq!(p.hdr_rem(), 48);
            }
        }
    }

    #[test]
    fn byte_by_byte() {
        let msgs = vec![(1, vec![1, 2, 3]), (2, vec![])];
        let s = stream(&msgs);
        let mut p = StreamParser::new(100);
        let mut out = vec![];
        for (i, b) in s.iter().enumerate() {
            p.feed(Bytes::copy_from_slice(&[*b]), &mut out).unwrap();
            if i == 47 {
                assert_eq!((p.hdr_rem(), p.data_rem()), (0, 3));
            }
        }
        assert_eq!(out.len(), 2);
        assert_eq!(p.bytes_in(), s.len() as u64);
    }

    #[test]
    fn direct_reads_complete_large_payloads() {
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let s = stream(&[(1, big.clone()), (2, vec![5; 10])]);
        let mut p = StreamParser::new(MAX_MSG_SIZE as u32);
        let mut out = vec![];
        // Header and a little payload through feed, the bulk read "directly", the rest fed.
        p.feed(Bytes::copy_from_slice(&s[..1000]), &mut out)
            .unwrap();
        assert!(p.direct_buf(200_000).is_none(), "below the minimum");
        let mut at = 1000;
        while let Some((buf, rem)) = p.direct_buf(16) {
            let n = rem.min(7000);
            buf.extend_from_slice(&s[at..at + n]);
            at += n;
            p.direct_done(n, &mut out);
        }
        assert_eq!(at, 48 + big.len());
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0].payload[..], &big[..]);
        p.feed(Bytes::copy_from_slice(&s[at..]), &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(p.bytes_in(), s.len() as u64);
        assert!(!p.in_message());
    }

    #[test]
    fn oversize_poisons() {
        let mut s = stream(&[(1, vec![0; 3])]);
        s.extend_from_slice(&HeaderRepr::data(2, 1, 1, 101).to_bytes());
        let mut p = StreamParser::new(100);
        let mut out = vec![];
        assert_eq!(
            p.feed(Bytes::from(s), &mut out),
            Err(StreamError::TooLong { len: 101, max: 100 })
        );
        assert_eq!(out.len(), 1, "frames before the bad header are kept");
        assert_eq!(
            p.feed(Bytes::from_static(b"x"), &mut out),
            Err(StreamError::Poisoned)
        );
    }
}
