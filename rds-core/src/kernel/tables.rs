//! The kernel's `RDS_INFO_*` tables (`getsockopt(SOL_RDS, RDS_INFO_*)`): the option numbers
//! (from [`crate::abi`]) and the records as plain structs, parsed from the packed upstream
//! layouts (`struct rds_info_*` and `rds6_info_*` of `linux/rds.h`). A record shorter than the
//! layout reads as zeros past its end and a longer one has its extra bytes ignored, as the
//! original rds-info reads them: the kernel's record size (`each`) decides.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::KernelSocket;

/// The `RDS_INFO_*` option numbers and connection flags under short names (values in
/// [`crate::abi`]).
pub use crate::abi::{
    RDS6_INFO_CONNECTIONS as CONNECTIONS6, RDS6_INFO_IB_CONNECTIONS as IB_CONNECTIONS6,
    RDS6_INFO_RECV_MESSAGES as RECV_MESSAGES6, RDS6_INFO_RETRANS_MESSAGES as RETRANS_MESSAGES6,
    RDS6_INFO_SEND_MESSAGES as SEND_MESSAGES6, RDS6_INFO_SOCKETS as SOCKETS6,
    RDS6_INFO_TCP_SOCKETS as TCP_SOCKETS6, RDS_INFO_CONNECTIONS as CONNECTIONS,
    RDS_INFO_CONNECTION_FLAG_CONNECTED as CONN_CONNECTED,
    RDS_INFO_CONNECTION_FLAG_CONNECTING as CONN_CONNECTING,
    RDS_INFO_CONNECTION_FLAG_ERROR as CONN_ERROR, RDS_INFO_CONNECTION_FLAG_SENDING as CONN_SENDING,
    RDS_INFO_COUNTERS as COUNTERS, RDS_INFO_IB_CONNECTIONS as IB_CONNECTIONS,
    RDS_INFO_RECV_MESSAGES as RECV_MESSAGES, RDS_INFO_RETRANS_MESSAGES as RETRANS_MESSAGES,
    RDS_INFO_SEND_MESSAGES as SEND_MESSAGES, RDS_INFO_SOCKETS as SOCKETS,
    RDS_INFO_TCP_SOCKETS as TCP_SOCKETS,
};

/// A record's bytes, zero past its end.
struct Rec<'a>(&'a [u8]);

impl Rec<'_> {
    fn bytes<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut b = [0u8; N];
        for (i, x) in b.iter_mut().enumerate() {
            *x = self.0.get(off + i).copied().unwrap_or(0);
        }
        b
    }
    fn u8(&self, off: usize) -> u8 {
        self.0.get(off).copied().unwrap_or(0)
    }
    fn u32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.bytes(off))
    }
    fn i32(&self, off: usize) -> i32 {
        i32::from_ne_bytes(self.bytes(off))
    }
    fn u64(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.bytes(off))
    }
    fn be16(&self, off: usize) -> u16 {
        u16::from_be_bytes(self.bytes(off))
    }
    /// An address of 4 bytes (`v6` false) or 16 (`v6` true).
    fn addr(&self, off: usize, v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(Ipv6Addr::from(self.bytes::<16>(off)))
        } else {
            IpAddr::V4(Ipv4Addr::from(self.bytes::<4>(off)))
        }
    }
    fn name(&self, off: usize, len: usize) -> String {
        let b = self
            .0
            .get(off..(off + len).min(self.0.len()))
            .unwrap_or_default();
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    }
}

/// Splits a table into records of `each` bytes.
fn records(buf: &[u8], each: usize) -> impl Iterator<Item = Rec<'_>> {
    buf.chunks_exact(each.max(1))
        .filter(move |_| each > 0)
        .map(Rec)
}

/// `struct rds_info_connection` / `rds6_info_connection`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KConn {
    /// Next sequence number to send (path 0).
    pub next_tx_seq: u64,
    /// Next sequence number expected (path 0).
    pub next_rx_seq: u64,
    /// Local address.
    pub laddr: IpAddr,
    /// Peer address.
    pub faddr: IpAddr,
    /// Transport name (`tcp`, `infiniband`, `loopback`).
    pub transport: String,
    /// `RDS_INFO_CONNECTION_FLAG_*`.
    pub flags: u8,
    /// Type of service.
    pub tos: u8,
}

/// `struct rds_info_message` / `rds6_info_message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KMsg {
    /// Sequence number.
    pub seq: u64,
    /// Payload length.
    pub len: u32,
    /// Local address and port.
    pub local: SocketAddr,
    /// Peer address and port.
    pub peer: SocketAddr,
    /// `RDS_INFO_MESSAGE_FLAG_*`.
    pub flags: u8,
    /// Type of service.
    pub tos: u8,
}

/// `struct rds_info_socket` / `rds6_info_socket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KSock {
    /// Bound address and port.
    pub bound: SocketAddr,
    /// Connected address and port (unspecified when none).
    pub connected: SocketAddr,
    /// Send buffer (bytes).
    pub sndbuf: u32,
    /// Receive buffer (bytes).
    pub rcvbuf: u32,
    /// The socket's inode number.
    pub inode: u64,
    /// Owner pid and congestion state, on kernels whose records carry them (UEK).
    pub pid_cong: Option<(u32, i32)>,
}

/// `struct rds_info_tcp_socket` / `rds6_info_tcp_socket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KTcp {
    /// Local address and port.
    pub local: SocketAddr,
    /// Peer address and port.
    pub peer: SocketAddr,
    /// Header bytes still to read.
    pub hdr_rem: u64,
    /// Data bytes still to read.
    pub data_rem: u64,
    /// `last_sent_nxt`.
    pub last_sent_nxt: u32,
    /// `last_expected_una`.
    pub last_expected_una: u32,
    /// `last_seen_una`.
    pub last_seen_una: u32,
}

/// `struct rds_info_rdma_connection` / `rds6_info_rdma_connection`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KIb {
    /// Local address.
    pub src: IpAddr,
    /// Peer address.
    pub dst: IpAddr,
    /// Local GID.
    pub src_gid: Ipv6Addr,
    /// Peer GID.
    pub dst_gid: Ipv6Addr,
    /// `max_send_wr`, `max_recv_wr`, `max_send_sge`, `rdma_mr_max`, `rdma_mr_size`.
    pub limits: [u32; 5],
    /// Type of service.
    pub tos: u8,
    /// Service level.
    pub sl: u8,
    /// `cache_allocs`.
    pub cache_allocs: u32,
}

/// Parses `RDS_INFO_COUNTERS` records: (name, value).
pub fn parse_counters(buf: &[u8], each: usize) -> Vec<(String, u64)> {
    records(buf, each)
        .map(|r| (r.name(0, 32), r.u64(32)))
        .collect()
}

/// Parses connection records (`v6`: the `rds6_` layout).
pub fn parse_connections(buf: &[u8], each: usize, v6: bool) -> Vec<KConn> {
    let (a, t) = if v6 { (16, 48) } else { (4, 24) };
    records(buf, each)
        .map(|r| KConn {
            next_tx_seq: r.u64(0),
            next_rx_seq: r.u64(8),
            laddr: r.addr(16, v6),
            faddr: r.addr(16 + a, v6),
            transport: r.name(t, 16),
            flags: r.u8(t + 16),
            tos: r.u8(t + 17),
        })
        .collect()
}

/// Parses message-queue records.
pub fn parse_messages(buf: &[u8], each: usize, v6: bool) -> Vec<KMsg> {
    let a = if v6 { 16 } else { 4 };
    let p = 12 + 2 * a;
    records(buf, each)
        .map(|r| KMsg {
            seq: r.u64(0),
            len: r.u32(8),
            local: SocketAddr::new(r.addr(12, v6), r.be16(p)),
            peer: SocketAddr::new(r.addr(12 + a, v6), r.be16(p + 2)),
            flags: r.u8(p + 4),
            tos: r.u8(p + 5),
        })
        .collect()
}

/// Parses socket records.
pub fn parse_sockets(buf: &[u8], each: usize, v6: bool) -> Vec<KSock> {
    let a = if v6 { 16 } else { 4 };
    let p = 4 + 2 * a;
    let base = p + 4 + 4 + 8;
    records(buf, each)
        .map(|r| KSock {
            bound: SocketAddr::new(r.addr(4, v6), r.be16(p)),
            connected: SocketAddr::new(r.addr(4 + a, v6), r.be16(p + 2)),
            sndbuf: r.u32(0),
            rcvbuf: r.u32(p + 4),
            inode: r.u64(p + 8),
            pid_cong: (each >= base + 8).then(|| (r.u32(base), r.i32(base + 4))),
        })
        .collect()
}

/// Parses RDS/TCP socket records.
pub fn parse_tcp(buf: &[u8], each: usize, v6: bool) -> Vec<KTcp> {
    let a = if v6 { 16 } else { 4 };
    let q = 2 * (a + 2);
    records(buf, each)
        .map(|r| KTcp {
            local: SocketAddr::new(r.addr(0, v6), r.be16(a)),
            peer: SocketAddr::new(r.addr(a + 2, v6), r.be16(2 * a + 2)),
            hdr_rem: r.u64(q),
            data_rem: r.u64(q + 8),
            last_sent_nxt: r.u32(q + 16),
            last_expected_una: r.u32(q + 20),
            last_seen_una: r.u32(q + 24),
        })
        .collect()
}

/// Parses RDS/IB connection records (not packed: `cache_allocs` is 4-aligned).
pub fn parse_ib(buf: &[u8], each: usize, v6: bool) -> Vec<KIb> {
    let a = if v6 { 16 } else { 4 };
    let g = 2 * a;
    let l = g + 32;
    records(buf, each)
        .map(|r| KIb {
            src: r.addr(0, v6),
            dst: r.addr(a, v6),
            src_gid: Ipv6Addr::from(r.bytes::<16>(g)),
            dst_gid: Ipv6Addr::from(r.bytes::<16>(g + 16)),
            limits: [
                r.u32(l),
                r.u32(l + 4),
                r.u32(l + 8),
                r.u32(l + 12),
                r.u32(l + 16),
            ],
            tos: r.u8(l + 20),
            sl: r.u8(l + 21),
            cache_allocs: r.u32(l + 24),
        })
        .collect()
}

/// An unbound kernel RDS socket for reading the tables.
#[derive(Debug)]
pub struct KernelInfo {
    sock: KernelSocket,
}

impl KernelInfo {
    /// Opens the socket the tables are read through.
    ///
    /// # Errors
    /// `EAFNOSUPPORT` when the kernel has no RDS.
    pub fn open() -> io::Result<KernelInfo> {
        Ok(KernelInfo {
            sock: KernelSocket::new()?,
        })
    }

    /// One table: its bytes and record size.
    ///
    /// # Errors
    /// The kernel's (`ENOPROTOOPT`: no handler, e.g. the transport's module is not loaded).
    pub fn raw(&self, opt: i32) -> io::Result<(Vec<u8>, usize)> {
        self.sock.info_raw(opt)
    }

    /// `RDS_INFO_COUNTERS`: every counter in the kernel's order (core, then each loaded
    /// transport's).
    ///
    /// # Errors
    /// As [`KernelInfo::raw`].
    pub fn counters(&self) -> io::Result<Vec<(String, u64)>> {
        let (b, each) = self.raw(COUNTERS)?;
        Ok(parse_counters(&b, each))
    }

    /// Reads with the IPv6 option when `v6` is asked, falling back to the IPv4 one when the
    /// kernel has no IPv6 handler (as rds-info 2.3 does); returns whether the v6 layout came.
    fn pick(&self, v4: i32, v6: i32, want_v6: bool) -> io::Result<(Vec<u8>, usize, bool)> {
        if want_v6 {
            match self.raw(v6) {
                Ok((b, e)) => return Ok((b, e, true)),
                Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => {}
                Err(e) => return Err(e),
            }
        }
        let (b, e) = self.raw(v4)?;
        Ok((b, e, false))
    }

    /// `RDS_INFO_CONNECTIONS` (`RDS6_` with `v6`).
    ///
    /// # Errors
    /// As [`KernelInfo::raw`].
    pub fn connections(&self, v6: bool) -> io::Result<Vec<KConn>> {
        let (b, e, v6) = self.pick(CONNECTIONS, CONNECTIONS6, v6)?;
        Ok(parse_connections(&b, e, v6))
    }

    /// `RDS_INFO_{SEND,RETRANS,RECV}_MESSAGES` by the v4 option number (`RDS6_` with `v6`).
    ///
    /// # Errors
    /// As [`KernelInfo::raw`].
    pub fn messages(&self, v4_opt: i32, v6: bool) -> io::Result<Vec<KMsg>> {
        let (b, e, v6) = self.pick(v4_opt, v4_opt + 9, v6)?;
        Ok(parse_messages(&b, e, v6))
    }

    /// `RDS_INFO_SOCKETS`.
    ///
    /// # Errors
    /// As [`KernelInfo::raw`].
    pub fn sockets(&self, v6: bool) -> io::Result<Vec<KSock>> {
        let (b, e, v6) = self.pick(SOCKETS, SOCKETS6, v6)?;
        Ok(parse_sockets(&b, e, v6))
    }

    /// `RDS_INFO_TCP_SOCKETS`.
    ///
    /// # Errors
    /// As [`KernelInfo::raw`]; `ENOPROTOOPT` without `rds_tcp`.
    pub fn tcp(&self, v6: bool) -> io::Result<Vec<KTcp>> {
        let (b, e, v6) = self.pick(TCP_SOCKETS, TCP_SOCKETS6, v6)?;
        Ok(parse_tcp(&b, e, v6))
    }

    /// `RDS_INFO_IB_CONNECTIONS`.
    ///
    /// # Errors
    /// As [`KernelInfo::raw`]; `ENOPROTOOPT` without `rds_rdma`.
    pub fn ib(&self, v6: bool) -> io::Result<Vec<KIb>> {
        let (b, e, v6) = self.pick(IB_CONNECTIONS, IB_CONNECTIONS6, v6)?;
        Ok(parse_ib(&b, e, v6))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_records() {
        let mut b = vec![0u8; 80];
        b[..10].copy_from_slice(b"conn_reset");
        b[32..40].copy_from_slice(&7u64.to_ne_bytes());
        b[40..49].copy_from_slice(b"recv_ping");
        b[72..80].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert_eq!(
            parse_counters(&b, 40),
            vec![("conn_reset".into(), 7), ("recv_ping".into(), u64::MAX)]
        );
    }

    #[test]
    fn connection_record_v4_and_short() {
        let mut b = vec![0xa5u8; 42];
        b[..8].copy_from_slice(&12u64.to_ne_bytes());
        b[8..16].copy_from_slice(&5u64.to_ne_bytes());
        b[16..20].copy_from_slice(&[198, 18, 0, 2]);
        b[20..24].copy_from_slice(&[198, 18, 0, 4]);
        b[24..40].copy_from_slice(b"tcp\0\0\0\0\0\0\0\0\0\0\0\0\0");
        b[40] = CONN_CONNECTED;
        b[41] = 3;
        let c = &parse_connections(&b, 42, false)[0];
        assert_eq!((c.next_tx_seq, c.next_rx_seq), (12, 5));
        assert_eq!(c.laddr.to_string(), "198.18.0.2");
        assert_eq!(c.faddr.to_string(), "198.18.0.4");
        assert_eq!((c.transport.as_str(), c.flags, c.tos), ("tcp", 4, 3));
        // the oldest layout (41 bytes, no tos) reads tos as 0
        let c = &parse_connections(&b[..41], 41, false)[0];
        assert_eq!(c.tos, 0);
    }

    #[test]
    fn message_socket_tcp_ib_records() {
        let mut m = vec![0u8; 26];
        m[..8].copy_from_slice(&9u64.to_ne_bytes());
        m[8..12].copy_from_slice(&100u32.to_ne_bytes());
        m[12..16].copy_from_slice(&[127, 23, 0, 1]);
        m[16..20].copy_from_slice(&[127, 23, 0, 2]);
        m[20..22].copy_from_slice(&4000u16.to_be_bytes());
        m[22..24].copy_from_slice(&4001u16.to_be_bytes());
        let k = &parse_messages(&m, 26, false)[0];
        assert_eq!((k.seq, k.len), (9, 100));
        assert_eq!(k.local.to_string(), "127.23.0.1:4000");
        assert_eq!(k.peer.to_string(), "127.23.0.2:4001");

        let mut s = vec![0u8; 28];
        s[..4].copy_from_slice(&131072u32.to_ne_bytes());
        s[4..8].copy_from_slice(&[127, 23, 0, 1]);
        s[12..14].copy_from_slice(&4000u16.to_be_bytes());
        s[16..20].copy_from_slice(&262144u32.to_ne_bytes());
        s[20..28].copy_from_slice(&555u64.to_ne_bytes());
        let k = &parse_sockets(&s, 28, false)[0];
        assert_eq!(k.bound.to_string(), "127.23.0.1:4000");
        assert_eq!(k.connected.to_string(), "0.0.0.0:0");
        assert_eq!(
            (k.sndbuf, k.rcvbuf, k.inode, k.pid_cong),
            (131072, 262144, 555, None)
        );

        let mut t = vec![0u8; 41];
        t[..4].copy_from_slice(&[127, 23, 0, 1]);
        t[4..6].copy_from_slice(&16385u16.to_be_bytes());
        t[6..10].copy_from_slice(&[127, 23, 0, 2]);
        t[10..12].copy_from_slice(&40000u16.to_be_bytes());
        t[12..20].copy_from_slice(&48u64.to_ne_bytes());
        t[36..40].copy_from_slice(&77u32.to_ne_bytes());
        let k = &parse_tcp(&t, 41, false)[0];
        assert_eq!(k.local.to_string(), "127.23.0.1:16385");
        assert_eq!(k.peer.to_string(), "127.23.0.2:40000");
        assert_eq!((k.hdr_rem, k.last_seen_una), (48, 77));

        let mut i = vec![0u8; 68];
        i[..4].copy_from_slice(&[198, 18, 0, 2]);
        i[4..8].copy_from_slice(&[198, 18, 0, 4]);
        i[8..24].copy_from_slice(&Ipv4Addr::new(198, 18, 0, 2).to_ipv6_mapped().octets());
        i[40..44].copy_from_slice(&256u32.to_ne_bytes());
        i[61] = 1;
        i[64..68].copy_from_slice(&3u32.to_ne_bytes());
        let k = &parse_ib(&i, 68, false)[0];
        assert_eq!(k.dst.to_string(), "198.18.0.4");
        assert_eq!(k.src_gid.to_string(), "::ffff:198.18.0.2");
        assert_eq!((k.limits[0], k.sl, k.cache_allocs), (256, 1, 3));
    }

    #[test]
    fn v6_socket_record() {
        let mut s = vec![0u8; 52];
        s[4..20].copy_from_slice(&"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        s[36..38].copy_from_slice(&7u16.to_be_bytes());
        s[44..52].copy_from_slice(&9u64.to_ne_bytes());
        let k = &parse_sockets(&s, 52, true)[0];
        assert_eq!(k.bound.to_string(), "[fd00::1]:7");
        assert_eq!(k.inode, 9);
    }

    #[test]
    fn zero_record_size_yields_nothing() {
        assert!(parse_counters(&[0u8; 40], 0).is_empty());
    }
}
