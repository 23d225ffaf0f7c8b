//! RDS/TCP byte-stream reassembly (`tcp_recv.c`): the stream is back-to-back
//! `[48-byte header][h_len payload bytes]` with no other framing.
//!
//! The parser is fed whatever chunks the socket returns and yields whole frames. What a frame
//! keeps alive is what it is charged ([`Frame::held`]): a payload smaller than
//! [`COPY_BELOW`] is copied out of the chunk (as the kernel copies into page fragments), so
//! that a small message never pins a whole read buffer; a larger one that lies entirely in
//! the chunk is a zero-copy slice of it and is charged the chunk's whole buffer; others are
//! gathered in a buffer of their own, which grows as the payload arrives (never reserved up
//! front from the header's length: a peer that announces 1 MiB and sends a byte makes the
//! parser hold a byte). [`StreamParser::partial_held`] is what the message in progress holds,
//! for the caller to charge. A length above the configured limit is an error (the kernel
//! trusts `h_len`; we refuse to allocate for a hostile peer) and poisons the parser: the
//! caller drops the connection.

use bytes::Bytes;

use crate::buf;
use crate::wire::{HeaderRepr, HEADER_LEN};

/// Payloads shorter than this are copied out of the chunk they arrived in.
pub const COPY_BELOW: usize = 64 << 10;

/// How much a gather buffer grows at least (beyond what is known to be coming).
const GROW_MIN: usize = 16 << 10;

/// A complete message read from the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Its header.
    pub hdr: HeaderRepr,
    /// Exactly `hdr.len` bytes.
    pub payload: Bytes,
    /// Bytes of memory the payload keeps alive (its length, or the buffer it is a slice of).
    pub held: usize,
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
    /// The payload in progress, gathered (capacity grows as it arrives).
    data: Vec<u8>,
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
            data: Vec::new(),
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

    /// Gives up the message in progress and everything after it (the connection is being
    /// dropped): its buffer is freed now, and the parser is poisoned.
    pub fn abandon(&mut self) {
        buf::give(std::mem::take(&mut self.data));
        self.cur = None;
        self.data_rem = 0;
        self.hdr_have = 0;
        self.poisoned = true;
    }

    /// Bytes of memory the message in progress holds (its gather buffer).
    pub fn partial_held(&self) -> usize {
        self.data.capacity()
    }

    /// Feeds a chunk of the stream whose buffer holds just these bytes (see
    /// [`StreamParser::feed_chunk`]).
    ///
    /// # Errors
    /// As [`StreamParser::feed_chunk`].
    pub fn feed(&mut self, input: Bytes, out: &mut Vec<Frame>) -> Result<(), StreamError> {
        let held = input.len();
        self.feed_chunk(input, held, out)
    }

    /// Feeds a chunk of the stream, appending completed frames to `out`; `held` is the size of
    /// the buffer `input` lies in (what a payload sliced from it keeps alive).
    ///
    /// # Errors
    /// [`StreamError::TooLong`] for an oversized `h_len` (frames completed before it are still
    /// in `out`); [`StreamError::Poisoned`] once failed.
    pub fn feed_chunk(
        &mut self,
        input: Bytes,
        held: usize,
        out: &mut Vec<Frame>,
    ) -> Result<(), StreamError> {
        self.feed_from(&input, Some((&input, held)), out)
            .map(|_| ())
    }

    /// Feeds bytes of the stream from a buffer the caller keeps (and reuses), appending
    /// completed frames to `out`: headers and small payloads are copied out as from a chunk
    /// ([`StreamParser::feed_chunk`]), so nothing refers to `input` afterwards. Stops before a
    /// payload of [`COPY_BELOW`] bytes or more that lies whole in `input`, which a chunk would
    /// slice rather than copy: returns how many bytes it took, and the caller feeds the rest as
    /// a chunk. Takes everything otherwise.
    ///
    /// # Errors
    /// As [`StreamParser::feed_chunk`].
    pub fn feed_slice(&mut self, input: &[u8], out: &mut Vec<Frame>) -> Result<usize, StreamError> {
        self.feed_from(input, None, out)
    }

    /// The parser: `chunk`, when given, is `input` as [`Bytes`] and the size of its buffer,
    /// for zero-copy slices of large payloads; without it, parsing stops before such a payload.
    /// Returns the bytes taken.
    fn feed_from(
        &mut self,
        input: &[u8],
        chunk: Option<(&Bytes, usize)>,
        out: &mut Vec<Frame>,
    ) -> Result<usize, StreamError> {
        if self.poisoned {
            return Err(StreamError::Poisoned);
        }
        let mut at = 0;
        let r = self.parse(input, chunk, &mut at, out);
        self.bytes_in += at as u64;
        r.map(|()| at)
    }

    fn parse(
        &mut self,
        input: &[u8],
        chunk: Option<(&Bytes, usize)>,
        at: &mut usize,
        out: &mut Vec<Frame>,
    ) -> Result<(), StreamError> {
        while *at < input.len() {
            let rest = &input[*at..];
            match self.cur {
                None => {
                    if self.hdr_have == 0 && rest.len() >= HEADER_LEN {
                        // Fast path: a whole header in the chunk.
                        let hdr =
                            HeaderRepr::from_bytes(&rest[..HEADER_LEN]).expect("48 bytes present");
                        *at += HEADER_LEN;
                        self.start(hdr)?;
                    } else {
                        let n = (HEADER_LEN - self.hdr_have).min(rest.len());
                        self.hdr[self.hdr_have..self.hdr_have + n].copy_from_slice(&rest[..n]);
                        *at += n;
                        self.hdr_have += n;
                        if self.hdr_have == HEADER_LEN {
                            self.hdr_have = 0;
                            let hdr = HeaderRepr::from_bytes(&self.hdr).expect("48 bytes present");
                            self.start(hdr)?;
                        }
                    }
                }
                Some(hdr) => {
                    if self.data.is_empty() && rest.len() >= self.data_rem {
                        // Fast path: the whole payload in the chunk.
                        let len = self.data_rem;
                        let frame = if len < COPY_BELOW {
                            Frame {
                                hdr,
                                payload: Bytes::copy_from_slice(&rest[..len]),
                                held: len,
                            }
                        } else if let Some((c, held)) = chunk {
                            Frame {
                                hdr,
                                payload: c.slice(*at..*at + len),
                                held,
                            }
                        } else {
                            // A borrowed buffer cannot be sliced: the caller feeds the rest
                            // as a chunk.
                            return Ok(());
                        };
                        *at += len;
                        self.finish(frame, out);
                    } else {
                        let n = self.data_rem.min(rest.len());
                        self.grow(n);
                        self.data.extend_from_slice(&rest[..n]);
                        *at += n;
                        self.data_rem -= n;
                        if self.data_rem == 0 {
                            self.complete(hdr, out);
                        }
                    }
                }
            }
            if self.cur.is_some() && self.data_rem == 0 {
                // Zero-length message: complete as soon as the header is.
                let hdr = self.cur.expect("checked");
                self.finish(
                    Frame {
                        hdr,
                        payload: Bytes::new(),
                        held: 0,
                    },
                    out,
                );
            }
        }
        Ok(())
    }

    /// Makes room in the gather buffer for `n` more bytes, growing it to at least twice its
    /// contents (capped at the payload's length), from the buffer pool when large.
    fn grow(&mut self, n: usize) {
        let need = self.data.len() + n;
        if self.data.capacity() >= need {
            return;
        }
        let total = self.data.len() + self.data_rem;
        let want = need.max(2 * self.data.len()).max(GROW_MIN).min(total);
        let mut v = buf::take(want);
        v.extend_from_slice(&self.data);
        buf::give(std::mem::replace(&mut self.data, v));
    }

    /// While the rest of a large payload (at least `min` bytes) is outstanding: the buffer it
    /// is gathered in, with room for at least the next `avail` bytes of it (what the socket
    /// holds now), and how many bytes are missing, so that the caller can read the stream
    /// straight into the buffer's spare capacity (no gather copy), then call
    /// [`StreamParser::direct_done`]. `None` otherwise (feed the bytes with
    /// [`StreamParser::feed_chunk`]).
    pub fn direct_buf(&mut self, min: usize, avail: usize) -> Option<(&mut Vec<u8>, usize)> {
        if self.poisoned || self.cur.is_none() || self.data_rem < min {
            return None;
        }
        self.grow(avail.clamp(1, self.data_rem));
        let room = self.data.capacity() - self.data.len();
        Some((&mut self.data, self.data_rem.min(room)))
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
            self.complete(hdr, out);
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

    /// The gathered payload is whole: it becomes the frame (a pooled buffer goes back to the
    /// pool when the message is dropped).
    fn complete(&mut self, hdr: HeaderRepr, out: &mut Vec<Frame>) {
        let v = std::mem::take(&mut self.data);
        let held = v.capacity();
        self.finish(
            Frame {
                hdr,
                payload: buf::freeze(v),
                held,
            },
            out,
        );
    }

    fn finish(&mut self, frame: Frame, out: &mut Vec<Frame>) {
        self.cur = None;
        self.data_rem = 0;
        out.push(frame);
    }
}

impl Drop for StreamParser {
    fn drop(&mut self) {
        buf::give(std::mem::take(&mut self.data));
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
    fn a_borrowed_buffer_stops_before_a_large_payload_it_holds_whole() {
        let big: Vec<u8> = (0..COPY_BELOW as u32 + 10)
            .map(|i| (i % 251) as u8)
            .collect();
        let msgs = vec![
            (1, vec![7; 100]),
            (2, vec![]),
            (3, big.clone()),
            (4, vec![9; 30]),
        ];
        let s = stream(&msgs);
        let mut p = StreamParser::new(MAX_MSG_SIZE as u32);
        let mut out = vec![];
        // The small frames and the large one's header are taken, copied: nothing refers to
        // the buffer afterwards.
        let mut buf = s.clone();
        let k = p.feed_slice(&buf, &mut out).unwrap();
        assert_eq!(k, 2 * HEADER_LEN + 100 + HEADER_LEN);
        assert_eq!(
            (out.len(), p.data_rem(), p.bytes_in()),
            (2, big.len(), k as u64)
        );
        assert_eq!(
            out.iter().map(|f| f.held).collect::<Vec<_>>(),
            [100, 0],
            "small payloads are charged their length"
        );
        buf.fill(0);
        assert_eq!(&out[0].payload[..], &[7; 100][..]);
        // The rest, as a chunk, slices the large payload (charged the whole buffer).
        let chunk = Bytes::from(s.clone());
        p.feed_chunk(chunk.slice(k..), 1 << 20, &mut out).unwrap();
        assert_eq!(out.len(), 4);
        assert_eq!((&out[2].payload[..], out[2].held), (&big[..], 1 << 20));
        assert_eq!((&out[3].payload[..], out[3].held), (&[9; 30][..], 30));
        assert_eq!(p.bytes_in(), s.len() as u64);
        // A large payload that is not whole in the buffer is gathered from it, as from a
        // chunk: everything is taken.
        let mut p = StreamParser::new(MAX_MSG_SIZE as u32);
        let mut out = vec![];
        let cut = 2 * HEADER_LEN + 100 + HEADER_LEN + 1000;
        assert_eq!(p.feed_slice(&s[..cut], &mut out).unwrap(), cut);
        assert_eq!(p.feed_slice(&s[cut..], &mut out).unwrap(), s.len() - cut);
        assert_eq!(out.len(), 4);
        assert_eq!(&out[2].payload[..], &big[..]);
        // A bad length poisons it as feed_chunk does.
        let bad = HeaderRepr::data(5, 10, 20, u32::MAX).to_bytes();
        let mut p = StreamParser::new(MAX_MSG_SIZE as u32);
        assert!(matches!(
            p.feed_slice(&bad, &mut out),
            Err(StreamError::TooLong { .. })
        ));
        assert_eq!(p.feed_slice(&s, &mut out), Err(StreamError::Poisoned));
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
        assert!(
            p.direct_buf(200_000, 1 << 20).is_none(),
            "below the minimum"
        );
        // Only what has arrived is held.
        assert!(p.partial_held() < 64 << 10, "{}", p.partial_held());
        let mut at = 1000;
        while let Some((buf, rem)) = p.direct_buf(16, 7000) {
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
