//! Data messages: the packed rds-stress header (63 bytes for IPv4, 96 for IPv6) at the start of
//! every request and ack, the `-v` payload pattern, and the receiver's checks with the
//! original's diagnostic block.
//!
//! | off | field |
//! |---|---|
//! | 0 | seq u32 BE |
//! | 4, 8 | from_addr, to_addr (IPv4, network order; 0 in IPv6 mode) |
//! | 12, 14 | from_port, to_port (network order) |
//! | 16 | index u16 BE |
//! | 18 | op u8 (1 = REQ, 2 = ACK) |
//! | 19 | rdma_op u8 |
//! | 20..52 | rdma_addr, rdma_phyaddr, rdma_pattern, rdma_key (u64 BE) |
//! | 52, 56 | rdma_size, rdma_vector (u32 BE) |
//! | 60, 61, 62 | retry, rdma_remote_err, pending (u8) |
//! | 63 | padding (IPv6 only) |
//! | 64, 80 | from_addr_v6, to_addr_v6 (IPv6 only) |

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Header size with IPv4 addresses.
pub const HEADER_SIZE: usize = 63;
/// Header size with IPv6 addresses.
pub const HEADER_V6_SIZE: usize = 96;
/// Bytes compared by the receiver (seq, addresses, ports, index, op).
pub const BASIC_HEADER_SIZE: usize = 19;
/// A request.
pub const OP_REQ: u8 = 1;
/// An ack.
pub const OP_ACK: u8 = 2;

/// The fields of a header that rds-stress without RDMA uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Per-flow sequence number.
    pub seq: u32,
    /// Sender address and port.
    pub from: SocketAddr,
    /// Receiver address and port.
    pub to: SocketAddr,
    /// Slot index.
    pub index: u16,
    /// [`OP_REQ`] or [`OP_ACK`].
    pub op: u8,
    /// `retry` byte (async mode of the original).
    pub retry: u8,
}

/// The header size for an address family.
pub fn header_size(v6: bool) -> usize {
    if v6 {
        HEADER_V6_SIZE
    } else {
        HEADER_SIZE
    }
}

fn v4_octets(a: IpAddr) -> [u8; 4] {
    match a {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or([0; 4], |a| a.octets()),
    }
}

fn v6_octets(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

impl Header {
    /// Writes the header into `buf[..header_size(v6)]`, zeroing the RDMA fields.
    ///
    /// # Panics
    /// `buf` is shorter than the header (callers size their buffers from the options, which
    /// are checked to be at least a header long).
    pub fn emit(&self, buf: &mut [u8], v6: bool) {
        let n = header_size(v6);
        buf[..n].fill(0);
        buf[0..4].copy_from_slice(&self.seq.to_be_bytes());
        if v6 {
            buf[64..80].copy_from_slice(&v6_octets(self.from.ip()));
            buf[80..96].copy_from_slice(&v6_octets(self.to.ip()));
        } else {
            buf[4..8].copy_from_slice(&v4_octets(self.from.ip()));
            buf[8..12].copy_from_slice(&v4_octets(self.to.ip()));
        }
        buf[12..14].copy_from_slice(&self.from.port().to_be_bytes());
        buf[14..16].copy_from_slice(&self.to.port().to_be_bytes());
        buf[16..18].copy_from_slice(&self.index.to_be_bytes());
        buf[18] = self.op;
        buf[60] = self.retry;
    }

    /// Reads a header; `None` when `buf` is shorter than a header.
    pub fn parse(buf: &[u8], v6: bool) -> Option<Header> {
        if buf.len() < header_size(v6) {
            return None;
        }
        let u16_at = |o: usize| u16::from_be_bytes([buf[o], buf[o + 1]]);
        let (from_ip, to_ip) = if v6 {
            let mut f = [0u8; 16];
            f.copy_from_slice(&buf[64..80]);
            let mut t = [0u8; 16];
            t.copy_from_slice(&buf[80..96]);
            (IpAddr::V6(Ipv6Addr::from(f)), IpAddr::V6(Ipv6Addr::from(t)))
        } else {
            (
                IpAddr::V4(Ipv4Addr::new(buf[4], buf[5], buf[6], buf[7])),
                IpAddr::V4(Ipv4Addr::new(buf[8], buf[9], buf[10], buf[11])),
            )
        };
        Some(Header {
            seq: u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]),
            from: SocketAddr::new(from_ip, u16_at(12)),
            to: SocketAddr::new(to_ip, u16_at(14)),
            index: u16_at(16),
            op: buf[18],
            retry: buf[60],
        })
    }
}

/// `rdma_op` of a request that asks the peer to read our region.
pub const RDMA_OP_READ: u8 = 1;
/// `rdma_op` of a request that asks the peer to write our region.
pub const RDMA_OP_WRITE: u8 = 2;

/// The RDMA fields of a header (bytes 19..62): what a request offers and what its ack echoes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RdmaFields {
    /// [`RDMA_OP_READ`], [`RDMA_OP_WRITE`] or 0 (no RDMA).
    pub op: u8,
    /// The requester's own name for its buffer (echoed back in the ack).
    pub addr: u64,
    /// The address the responder targets in the region (0: zero-based regions).
    pub phyaddr: u64,
    /// The u64 word the buffer is filled with (`send_seq << 32 | pid`).
    pub pattern: u64,
    /// The region's cookie (0 in a request that registers it with `RDMA_MAP`).
    pub key: u64,
    /// Bytes per iovec (`-D`).
    pub size: u32,
    /// Number of iovecs (`-I`).
    pub vector: u32,
    /// `rdma_remote_err` (async mode of the original).
    pub remote_err: u8,
}

impl RdmaFields {
    /// Writes the fields into a header emitted by [`Header::emit`] (`buf` at least
    /// [`HEADER_SIZE`] long).
    pub fn emit(&self, buf: &mut [u8]) {
        if buf.len() < HEADER_SIZE {
            return;
        }
        buf[19] = self.op;
        buf[20..28].copy_from_slice(&self.addr.to_be_bytes());
        buf[28..36].copy_from_slice(&self.phyaddr.to_be_bytes());
        buf[36..44].copy_from_slice(&self.pattern.to_be_bytes());
        buf[44..52].copy_from_slice(&self.key.to_be_bytes());
        buf[52..56].copy_from_slice(&self.size.to_be_bytes());
        buf[56..60].copy_from_slice(&self.vector.to_be_bytes());
        buf[61] = self.remote_err;
    }

    /// Reads the fields; all zero when `buf` is shorter than a header.
    pub fn parse(buf: &[u8]) -> RdmaFields {
        if buf.len() < HEADER_SIZE {
            return RdmaFields::default();
        }
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[o..o + 8]);
            u64::from_be_bytes(b)
        };
        let u32_at = |o: usize| u32::from_be_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
        RdmaFields {
            op: buf[19],
            addr: u64_at(20),
            phyaddr: u64_at(28),
            pattern: u64_at(36),
            key: u64_at(44),
            size: u32_at(52),
            vector: u32_at(56),
            remote_err: buf[61],
        }
    }
}

/// The `-v` payload pattern: `k = 11`, then `k = 41 * (k + 3) + (i >> 8)` with the already
/// incremented index `i`; each byte is `k mod 256`.
pub fn pattern(len: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(len);
    let mut k: u32 = 11;
    let mut i: u32 = 0;
    while (i as usize) < len {
        p.push(k as u8);
        i = i.wrapping_add(1);
        k = 41u32.wrapping_mul(k.wrapping_add(3)).wrapping_add(i >> 8);
    }
    p
}

/// Why a received message is rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bogus {
    /// Header fields differ: the diagnostic block.
    Header(String),
    /// Payload pattern differs: the one-line report.
    Payload(String),
}

/// Compares a message with the expected header (and the pattern when `verify`). `expected.op`
/// is taken from the message by the caller, as the original does.
pub fn check(msg: &[u8], expected: &Header, v6: bool, verify: Option<&[u8]>) -> Result<(), Bogus> {
    let n = header_size(v6);
    // On the stack: this runs for every message received.
    let mut want = [0u8; HEADER_V6_SIZE];
    expected.emit(&mut want[..n], v6);
    let got = Header::parse(msg, v6).unwrap_or(*expected);
    let same = msg.len() >= n
        && msg[..BASIC_HEADER_SIZE] == want[..BASIC_HEADER_SIZE]
        && (!v6 || msg[64..96] == want[64..96]);
    if !same {
        return Err(Bogus::Header(diag_block(expected, &got)));
    }
    if let Some(p) = verify {
        let body = &msg[n..];
        let total = body.len();
        let mut first = None;
        let mut count = 0u32;
        for (i, b) in body.iter().enumerate() {
            if p.get(i) != Some(b) {
                first.get_or_insert(i);
                count += 1;
            }
        }
        if let Some(off) = first {
            return Err(Bogus::Payload(format!(
                "An incoming message has a corrupted payload at offset {off}; \
                 {count} out of {total} bytes corrupted\n"
            )));
        }
    }
    Ok(())
}

/// The original's (2.3) block for a header that does not match, width 37.
pub fn diag_block(want: &Header, got: &Header) -> String {
    let eq = |a: bool| if a { " =" } else { "!=" };
    let w = 37;
    let mut s = format!(
        "An incoming message had a {} header which\ndidn't contain the fields we expected:\n",
        if got.retry != 0 { "RETRY" } else { "" }
    );
    s += &format!("    member {:>w$} eq {:>w$}\n", "expected", "got");
    s += &format!(
        "       seq {:>w$} {} {:>w$}\n",
        want.seq,
        eq(want.seq == got.seq),
        got.seq
    );
    s += &format!(
        " from_addr {:>w$} {} {:>w$}\n",
        want.from.ip().to_string(),
        eq(want.from.ip() == got.from.ip()),
        got.from.ip().to_string()
    );
    s += &format!(
        " from_port {:>w$} {} {:>w$}\n",
        want.from.port(),
        eq(want.from.port() == got.from.port()),
        got.from.port()
    );
    s += &format!(
        "   to_addr {:>w$} {} {:>w$}\n",
        want.to.ip().to_string(),
        eq(want.to.ip() == got.to.ip()),
        got.to.ip().to_string()
    );
    s += &format!(
        "   to_port {:>w$} {} {:>w$}\n",
        want.to.port(),
        eq(want.to.port() == got.to.port()),
        got.to.port()
    );
    s += &format!(
        "     index {:>w$} {} {:>w$}\n",
        want.index,
        eq(want.index == got.index),
        got.index
    );
    s += &format!(
        "        op {:>w$} {} {:>w$}\n",
        want.op,
        eq(want.op == got.op),
        got.op
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h() -> Header {
        Header {
            seq: 7,
            from: "10.1.2.3:4001".parse().unwrap(),
            to: "10.1.2.4:4002".parse().unwrap(),
            index: 3,
            op: OP_REQ,
            retry: 0,
        }
    }

    #[test]
    fn pattern_bytes() {
        assert_eq!(
            pattern(20),
            [
                0x0b, 0x3e, 0x69, 0x4c, 0xa7, 0x3a, 0xc5, 0x08, 0xc3, 0xb6, 0xa1, 0x44, 0x5f, 0xb2,
                0xfd, 0x00, 0x7b, 0x2e, 0xd9, 0x3c
            ]
        );
    }

    #[test]
    fn header_bytes() {
        let mut b = [0xa5u8; HEADER_SIZE];
        h().emit(&mut b, false);
        assert_eq!(&b[..4], &[0, 0, 0, 7]);
        assert_eq!(&b[4..8], &[10, 1, 2, 3]);
        assert_eq!(&b[8..12], &[10, 1, 2, 4]);
        assert_eq!(&b[12..14], &4001u16.to_be_bytes());
        assert_eq!(&b[14..16], &4002u16.to_be_bytes());
        assert_eq!(&b[16..18], &[0, 3]);
        assert_eq!(b[18], 1);
        assert!(b[19..].iter().all(|&x| x == 0));
        assert_eq!(Header::parse(&b, false), Some(h()));
        assert_eq!(Header::parse(&b[..62], false), None);
        let mut b6 = [0xa5u8; HEADER_V6_SIZE];
        let mut h6 = h();
        h6.from = "[fd00::1]:4001".parse().unwrap();
        h6.to = "[fd00::2]:4002".parse().unwrap();
        h6.emit(&mut b6, true);
        assert!(b6[4..12].iter().all(|&x| x == 0));
        assert_eq!(Header::parse(&b6, true), Some(h6));
    }

    #[test]
    fn rdma_fields_bytes() {
        let f = RdmaFields {
            op: RDMA_OP_WRITE,
            addr: 0x0102_0304_0506_0708,
            phyaddr: 0,
            pattern: 0x0000_000b_0000_04d2,
            key: 0x0000_0a00_1234_5678,
            size: 8192,
            vector: 4,
            remote_err: 0,
        };
        let mut b = [0xa5u8; HEADER_SIZE];
        h().emit(&mut b, false);
        f.emit(&mut b);
        assert_eq!(b[19], 2);
        assert_eq!(&b[20..28], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[28..36], &[0; 8]);
        assert_eq!(&b[36..44], &[0, 0, 0, 0x0b, 0, 0, 0x04, 0xd2]);
        assert_eq!(&b[44..52], &[0, 0, 0x0a, 0, 0x12, 0x34, 0x56, 0x78]);
        assert_eq!(&b[52..56], &[0, 0, 0x20, 0]);
        assert_eq!(&b[56..60], &[0, 0, 0, 4]);
        assert_eq!((b[60], b[61], b[62]), (0, 0, 0));
        assert_eq!(RdmaFields::parse(&b), f);
        assert_eq!(Header::parse(&b, false), Some(h()));
        assert_eq!(RdmaFields::parse(&b[..62]), RdmaFields::default());
    }

    #[test]
    fn check_reports() {
        let mut m = vec![0u8; 100];
        h().emit(&mut m, false);
        let p = pattern(100);
        m[HEADER_SIZE..].copy_from_slice(&p[..100 - HEADER_SIZE]);
        assert_eq!(check(&m, &h(), false, Some(&p)), Ok(()));
        let mut bad = m.clone();
        bad[70] ^= 1;
        bad[71] ^= 1;
        assert_eq!(
            check(&bad, &h(), false, Some(&p)),
            Err(Bogus::Payload(
                "An incoming message has a corrupted payload at offset 7; 2 out of 37 bytes corrupted\n"
                    .into()
            ))
        );
        let mut want = h();
        want.seq = 8;
        let Err(Bogus::Header(block)) = check(&m, &want, false, None) else {
            panic!("no mismatch");
        };
        let lines: Vec<&str> = block.lines().collect();
        assert_eq!(lines[0], "An incoming message had a  header which");
        assert_eq!(lines[1], "didn't contain the fields we expected:");
        assert_eq!(
            lines[2],
            format!("    member {:>37} eq {:>37}", "expected", "got")
        );
        assert_eq!(lines[3], format!("       seq {:>37} != {:>37}", 8, 7));
        assert_eq!(
            lines[4],
            format!(" from_addr {:>37}  = {:>37}", "10.1.2.3", "10.1.2.3")
        );
        assert_eq!(lines.len(), 10);
    }
}
