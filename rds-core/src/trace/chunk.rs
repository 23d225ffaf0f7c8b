//! Containers of trace records: a [`TapChunk`] holds records as a node's tap writes them (a
//! long payload kept by reference, not copied into the chunk's buffer) and reads them in place
//! ([`TapChunk::records`]); a [`TapBatch`] holds records back to back, as the control protocol
//! carries them. A chunk flattens into a batch.

use bytes::Bytes;

use super::record::{decode_at, RecordDecodeError, TapFrameRef, REC_HDR_LEN};

/// Trace records as the data path wrote them: the long payloads it kept by reference are not
/// copied into the records' buffer; [`TapChunk::records`] reads them where they are.
///
/// `shared` holds those payloads in order, each with the offset in `data` where it belongs;
/// `size` is the length of the records flattened ([`TapChunk::into_batch`]).
#[derive(Debug, Default)]
pub struct TapChunk {
    frames: u32,
    data: Vec<u8>,
    shared: Vec<(usize, Bytes)>,
    size: usize,
}

impl TapChunk {
    /// Records in the chunk.
    #[inline]
    pub fn frames(&self) -> u32 {
        self.frames
    }

    /// The records back to back (the payloads kept by reference are copied).
    pub fn into_batch(self) -> TapBatch {
        self.flatten(Vec::new()).0
    }

    /// The records, in order, read in place (see [`super::decode_record_refs`]).
    pub fn records(&self) -> ChunkRecords<'_> {
        ChunkRecords {
            data: &self.data,
            shared: &self.shared,
            off: 0,
        }
    }

    /// An empty chunk that writes its records into `data` (an empty buffer, possibly with
    /// capacity).
    pub(crate) fn with_buffer(data: Vec<u8>) -> Self {
        TapChunk {
            data,
            ..TapChunk::default()
        }
    }

    /// Length of the records flattened.
    #[inline]
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Whether a payload is kept by reference (flattening copies).
    pub(crate) fn has_shared(&self) -> bool {
        !self.shared.is_empty()
    }

    /// Payloads kept by reference.
    #[cfg(test)]
    pub(crate) fn shared_count(&self) -> usize {
        self.shared.len()
    }

    /// The buffer of the records (the payloads kept by reference are let go).
    pub(crate) fn into_buffer(self) -> Vec<u8> {
        self.data
    }

    /// Appends one record: `head` (the fixed part, whose lengths this fills in), the frame's
    /// header bytes `hdr`, then the payload bytes `kept` (what the snap length keeps of a
    /// payload of `orig_len - hdr.len()` bytes). `kept` is copied, unless `shared` holds the
    /// same payload: then its first `kept.len()` bytes are kept by reference.
    #[inline]
    pub(crate) fn push(
        &mut self,
        head: &[u8; REC_HDR_LEN],
        orig_len: u32,
        hdr: &[u8],
        kept: &[u8],
        shared: Option<&Bytes>,
    ) {
        let at = self.data.len();
        self.data.extend_from_slice(head);
        self.data[at..at + 4].copy_from_slice(&((hdr.len() + kept.len()) as u32).to_le_bytes());
        self.data[at + 4..at + 8].copy_from_slice(&orig_len.to_le_bytes());
        self.data.extend_from_slice(hdr);
        match shared {
            Some(b) => self.shared.push((self.data.len(), b.slice(..kept.len()))),
            None => self.data.extend_from_slice(kept),
        }
        self.size += REC_HDR_LEN + hdr.len() + kept.len();
        self.frames += 1;
    }

    /// The records back to back in `out` (cleared first); returns the batch and the inline
    /// buffer, now free.
    pub(crate) fn flatten(self, mut out: Vec<u8>) -> (TapBatch, Vec<u8>) {
        if self.shared.is_empty() {
            return (
                TapBatch {
                    frames: self.frames,
                    data: self.data,
                },
                out,
            );
        }
        out.clear();
        out.reserve(self.size);
        let mut last = 0;
        for (off, b) in &self.shared {
            out.extend_from_slice(&self.data[last..*off]);
            out.extend_from_slice(b);
            last = *off;
        }
        out.extend_from_slice(&self.data[last..]);
        (
            TapBatch {
                frames: self.frames,
                data: out,
            },
            self.data,
        )
    }

    /// The records of a batch as a chunk (none kept by reference).
    pub(crate) fn from_batch(b: TapBatch) -> Self {
        TapChunk {
            frames: b.frames,
            size: b.data.len(),
            data: b.data,
            shared: Vec::new(),
        }
    }
}

/// Iterator of [`TapChunk::records`].
#[derive(Debug)]
pub struct ChunkRecords<'a> {
    data: &'a [u8],
    /// Payloads kept by reference not reached yet.
    shared: &'a [(usize, Bytes)],
    off: usize,
}

impl<'a> Iterator for ChunkRecords<'a> {
    type Item = Result<TapFrameRef<'a>, RecordDecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        match decode_at(self.data, self.off, self.shared.first())? {
            Ok((f, next)) => {
                if !f.bytes()[1].is_empty() {
                    self.shared = &self.shared[1..];
                }
                self.off = next;
                Some(Ok(f))
            }
            Err(e) => {
                // Any error ends the chunk.
                self.off = self.data.len();
                Some(Err(e))
            }
        }
    }
}

/// Trace records in one piece: `frames` records, back to back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TapBatch {
    /// Records in `data`.
    pub frames: u32,
    /// The records (see [`REC_HDR_LEN`]).
    pub data: Vec<u8>,
}

impl TapBatch {
    /// Cuts the first `n` (< `self.frames`) records off.
    pub(crate) fn split_front(&mut self, n: usize) -> TapBatch {
        let mut off = 0;
        for _ in 0..n {
            let cap = u32::from_le_bytes([
                self.data[off],
                self.data[off + 1],
                self.data[off + 2],
                self.data[off + 3],
            ]) as usize;
            off += REC_HDR_LEN + cap;
        }
        let rest = self.data.split_off(off);
        let front = std::mem::replace(&mut self.data, rest);
        self.frames -= n as u32;
        TapBatch {
            frames: n as u32,
            data: front,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::{encode_record, Direction, TapFrame, Transport};
    use super::*;

    /// A chunk whose payload kept by reference does not fit its record ends with an error.
    #[test]
    fn a_chunk_with_a_misplaced_payload_is_an_error() {
        let local = "10.0.0.1:40001".parse().unwrap();
        let peer: std::net::SocketAddr = "10.0.0.2:16385".parse().unwrap();
        let f = |data: &[u8]| TapFrame {
            ts_ns: 1,
            dir: Direction::Tx,
            laddr: "10.0.0.1".parse().unwrap(),
            faddr: peer.ip(),
            lane: 0,
            transport: Transport::Tcp { local, peer },
            orig_len: 48 + 300,
            data: Bytes::copy_from_slice(data),
        };
        // A record that claims 348 captured bytes; only its 48 header bytes are inline.
        let mut rec = Vec::new();
        encode_record(&mut rec, &f(&[0u8; 348]));
        rec.truncate(REC_HDR_LEN + 48);
        for (at, len, ok) in [
            (REC_HDR_LEN + 48, 300, true),
            (REC_HDR_LEN + 48, 299, false),
            (REC_HDR_LEN + 48, 301, false),
            (REC_HDR_LEN + 47, 300, false),
        ] {
            let chunk = TapChunk {
                frames: 1,
                data: rec.clone(),
                shared: vec![(at, Bytes::from(vec![1u8; len]))],
                size: 0,
            };
            let r: Vec<_> = chunk.records().collect();
            assert_eq!(r.len(), 1);
            assert_eq!(r[0].is_ok(), ok, "{at} {len}");
            if !ok {
                assert_eq!(r[0], Err(RecordDecodeError::Truncated(0)));
            }
        }
    }
}
