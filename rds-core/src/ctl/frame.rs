//! Framing of the control protocol, one reader for both ends: the client's blocking
//! [`read_frame`] and the server's event loop, which cuts frames out of a non-blocking
//! connection's buffer with [`FrameHeader`] (`node/admin/event_loop.rs`). Every message in
//! either direction is one frame:
//!
//! | bytes | content |
//! |---|---|
//! | 4 | BE u32: length `J` of the JSON part (at most [`MAX_JSON`]) |
//! | 4 | BE u32: length `D` of the data part (at most [`MAX_DATA`]) |
//! | J | a request or a reply as JSON (`schema.rs`) |
//! | D | raw bytes: a message payload, a batch of binary trace records |
//!
//! A header over the limits is refused before anything is allocated for it.

use std::io::{self, Read, Write};

/// Largest JSON part of a frame.
pub const MAX_JSON: usize = 1 << 20;
/// Largest data part of a frame (a 1 MiB message and some room).
pub const MAX_DATA: usize = (1 << 20) + 4096;
/// Bytes of a frame header: the two lengths.
pub const HEADER_LEN: usize = 8;

/// A frame's header: the lengths of its JSON and data parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Length of the JSON part.
    pub json: usize,
    /// Length of the data part.
    pub data: usize,
}

impl FrameHeader {
    /// Reads a header (the lengths, not yet checked against the limits).
    pub fn decode(hdr: &[u8; HEADER_LEN]) -> FrameHeader {
        let [j0, j1, j2, j3, d0, d1, d2, d3] = *hdr;
        FrameHeader {
            json: u32::from_be_bytes([j0, j1, j2, j3]) as usize,
            data: u32::from_be_bytes([d0, d1, d2, d3]) as usize,
        }
    }

    /// The header at the start of `buf`; `None` while `buf` holds fewer than [`HEADER_LEN`]
    /// bytes.
    pub fn peek(buf: &[u8]) -> Option<FrameHeader> {
        buf.first_chunk::<HEADER_LEN>().map(FrameHeader::decode)
    }

    /// The header's bytes (for lengths within the limits).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut hdr = [0u8; HEADER_LEN];
        hdr[..4].copy_from_slice(&(self.json as u32).to_be_bytes());
        hdr[4..].copy_from_slice(&(self.data as u32).to_be_bytes());
        hdr
    }

    /// Whether both parts are within [`MAX_JSON`] and [`MAX_DATA`].
    pub fn within_limits(&self) -> bool {
        self.json <= MAX_JSON && self.data <= MAX_DATA
    }

    /// Bytes of the whole frame, header included.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.json + self.data
    }

    /// The JSON and data parts of the frame at the start of `buf`; `None` until `buf` holds
    /// all of it ([`FrameHeader::frame_len`] bytes).
    pub fn parts<'a>(&self, buf: &'a [u8]) -> Option<(&'a [u8], &'a [u8])> {
        let body = buf.get(HEADER_LEN..self.frame_len())?;
        Some(body.split_at(self.json))
    }
}

/// A frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection between frames.
    #[error("connection closed")]
    Closed,
    /// A length field is over the limit.
    #[error("frame too large ({json} + {data} bytes)")]
    TooLarge {
        /// JSON length claimed.
        json: usize,
        /// Data length claimed.
        data: usize,
    },
    /// I/O error.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Writes one frame.
///
/// # Errors
/// I/O errors; `InvalidInput` for parts over the limits.
pub fn write_frame(w: &mut impl Write, json: &[u8], data: &[u8]) -> io::Result<()> {
    let h = FrameHeader {
        json: json.len(),
        data: data.len(),
    };
    if !h.within_limits() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "frame too large",
        ));
    }
    let hdr = h.encode();
    let bufs = [
        io::IoSlice::new(&hdr),
        io::IoSlice::new(json),
        io::IoSlice::new(data),
    ];
    let total = h.frame_len();
    let n = w.write_vectored(&bufs)?;
    if n < total {
        // Rare: finish the rest plainly.
        let mut all = Vec::with_capacity(total);
        all.extend_from_slice(&hdr);
        all.extend_from_slice(json);
        all.extend_from_slice(data);
        w.write_all(&all[n..])?;
    }
    w.flush()
}

/// [`write_frame`] on a Unix stream socket with `fd` passed along (`SCM_RIGHTS`).
///
/// # Errors
/// The frame is too large, or the socket failed.
pub fn write_frame_with_fd(
    sock: &std::os::unix::net::UnixStream,
    json: &[u8],
    data: &[u8],
    fd: std::os::fd::BorrowedFd<'_>,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut all = Vec::new();
    write_frame(&mut all, json, data)?;
    crate::sys::send_with_fd(sock.as_raw_fd(), &all, fd.as_raw_fd())
}

/// A Unix stream socket read through `recvmsg`, keeping the file descriptors passed with the
/// bytes (a plain `read` would close them).
#[derive(Debug)]
pub struct FdReader<'a> {
    sock: &'a std::os::unix::net::UnixStream,
    /// Descriptors received so far, oldest first.
    pub fds: Vec<std::os::fd::OwnedFd>,
}

impl<'a> FdReader<'a> {
    /// Reads from `sock`.
    pub fn new(sock: &'a std::os::unix::net::UnixStream) -> Self {
        FdReader {
            sock,
            fds: Vec::new(),
        }
    }
}

impl Read for FdReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        crate::sys::recv_with_fds(self.sock.as_raw_fd(), buf, &mut self.fds)
    }
}

/// Reads one frame: `(json, data)`.
///
/// # Errors
/// [`FrameError::Closed`] at a clean end of stream, [`FrameError::TooLarge`], I/O errors.
pub fn read_frame(r: &mut impl Read) -> Result<(Vec<u8>, Vec<u8>), FrameError> {
    let mut hdr = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut hdr[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let h = FrameHeader::decode(&hdr);
    if !h.within_limits() {
        return Err(FrameError::TooLarge {
            json: h.json,
            data: h.data,
        });
    }
    let mut j = vec![0u8; h.json];
    r.read_exact(&mut j)?;
    let mut d = vec![0u8; h.data];
    r.read_exact(&mut d)?;
    Ok((j, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &[u8] = br#"{"op":"ctl_stats"}"#;

    #[test]
    fn frames_round_trip_and_limits() {
        let mut buf = Vec::new();
        write_frame(&mut buf, JSON, b"payload").unwrap();
        assert_eq!(&buf[..4], &(JSON.len() as u32).to_be_bytes());
        assert_eq!(&buf[4..8], &7u32.to_be_bytes());
        assert_eq!(&buf[8..8 + JSON.len()], JSON);
        let (j, d) = read_frame(&mut &buf[..]).unwrap();
        assert_eq!(j, JSON);
        assert_eq!(d, b"payload");
        // An oversized length is refused before any allocation.
        let mut bad = Vec::new();
        bad.extend_from_slice(&u32::MAX.to_be_bytes());
        bad.extend_from_slice(&0u32.to_be_bytes());
        assert!(matches!(
            read_frame(&mut &bad[..]),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(matches!(read_frame(&mut &[][..]), Err(FrameError::Closed)));
        assert!(matches!(read_frame(&mut &buf[..5]), Err(FrameError::Io(_))));
        assert!(write_frame(&mut Vec::new(), &vec![b' '; MAX_JSON + 1], b"").is_err());
    }

    #[test]
    fn a_buffer_yields_its_frame_once_complete() {
        let mut buf = Vec::new();
        write_frame(&mut buf, JSON, b"abc").unwrap();
        write_frame(&mut buf, b"{}", b"").unwrap();
        assert_eq!(FrameHeader::peek(&buf[..7]), None);
        let h = FrameHeader::peek(&buf).unwrap();
        assert_eq!(
            h,
            FrameHeader {
                json: JSON.len(),
                data: 3
            }
        );
        assert!(h.within_limits());
        assert_eq!(h.frame_len(), 8 + JSON.len() + 3);
        assert_eq!(h.parts(&buf[..h.frame_len() - 1]), None);
        assert_eq!(h.parts(&buf), Some((JSON, &b"abc"[..])));
        let next = FrameHeader::peek(&buf[h.frame_len()..]).unwrap();
        assert_eq!(
            next.parts(&buf[h.frame_len()..]),
            Some((&b"{}"[..], &b""[..]))
        );
        let over = FrameHeader {
            json: MAX_JSON,
            data: MAX_DATA + 1,
        };
        assert_eq!(FrameHeader::decode(&over.encode()), over);
        assert!(!over.within_limits());
    }
}
