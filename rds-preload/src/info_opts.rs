//! The `RDS_INFO_*` getsockopt family: the tables `rds-info` reads, in the packed layouts of
//! `linux/rds.h` (`rds_info_counter`, `rds_info_connection`, `rds_info_message`,
//! `rds_info_socket`, `rds_info_tcp_socket` and their `rds6_` forms), with the kernel's
//! length protocol: a buffer shorter than the table gives `ENOSPC` and the needed length in
//! `*optlen`; success returns the element size, `*optlen` being the table's length.
//!
//! The tables are those of the node serving the socket: its embedded node, the daemon's
//! (when the socket goes through the daemon, or is unbound and a daemon runs), else this
//! process's default node.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use rds_core::abi::{
    RDS6_INFO_CONNECTIONS, RDS6_INFO_IB_CONNECTIONS, RDS6_INFO_RECV_MESSAGES,
    RDS6_INFO_RETRANS_MESSAGES, RDS6_INFO_SEND_MESSAGES, RDS6_INFO_SOCKETS, RDS6_INFO_TCP_SOCKETS,
    RDS_INFO_CONNECTIONS, RDS_INFO_COUNTERS, RDS_INFO_IB_CONNECTIONS, RDS_INFO_RECV_MESSAGES,
    RDS_INFO_RETRANS_MESSAGES, RDS_INFO_SEND_MESSAGES, RDS_INFO_SOCKETS, RDS_INFO_TCP_SOCKETS,
};
use rds_core::ctl::InfoSnapshot;
use rds_core::info::{ConnInfo, PathState, QueuedMsgInfo, SockInfo, TcpSockInfo};

use crate::sock::Entry;

/// What a `getsockopt` answers.
#[derive(Debug, PartialEq, Eq)]
pub struct OptOut {
    /// The call's return value (the element size for `RDS_INFO_*`, else 0).
    pub ret: i32,
    /// Bytes to copy to `optval` (at most `optlen` of them are copied).
    pub data: Vec<u8>,
    /// The value for `*optlen`.
    pub len: usize,
}

/// A failed `getsockopt`: the errno, and a length to store in `*optlen` (`ENOSPC`).
#[derive(Debug, PartialEq, Eq)]
pub struct OptErr {
    /// errno; `ops::FORWARD` for the generic socket code.
    pub errno: i32,
    /// `*optlen` to report.
    pub len: Option<usize>,
}

impl From<i32> for OptErr {
    fn from(errno: i32) -> Self {
        OptErr { errno, len: None }
    }
}

fn snapshot(e: &Entry) -> Result<InfoSnapshot, i32> {
    if let Some(n) = e.sock.node() {
        return Ok(rds_core::node::admin::snapshot(n));
    }
    let bound = e.sock.local_addr().is_ok();
    if e.sock.via_daemon() || (!bound && !rds_core::env::no_daemon()) {
        if let Some(ep) = rds_core::ctl::find_daemon() {
            let mut c =
                rds_core::ctl::client::CtlClient::connect(&ep.path).map_err(|e| e.errno())?;
            return c.info().map_err(|e| e.errno());
        }
    }
    let n = rds_core::socket::default_node().map_err(crate::sock::errno)?;
    Ok(rds_core::node::admin::snapshot(&n))
}

fn v4(ip: IpAddr) -> Option<[u8; 4]> {
    match ip {
        IpAddr::V4(v) => Some(v.octets()),
        IpAddr::V6(v) => v.to_ipv4_mapped().map(|v| v.octets()),
    }
}

fn v6(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

fn name16(s: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    let n = s.len().min(15);
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
    b
}

/// Element size and records of table `opt` (`None`: no such table, ENOPROTOOPT).
fn table(opt: i32, s: &InfoSnapshot) -> Option<(usize, Vec<Vec<u8>>)> {
    let v6 = opt >= RDS6_INFO_CONNECTIONS;
    Some(match opt {
        RDS_INFO_COUNTERS => (40, s.counters.iter().map(|(n, v)| counter(n, *v)).collect()),
        RDS_INFO_CONNECTIONS | RDS6_INFO_CONNECTIONS => {
            let each = if v6 { 65 } else { 42 };
            let rows = s.connections.iter().filter_map(|c| conn(c, v6)).collect();
            (each, rows)
        }
        RDS_INFO_SEND_MESSAGES..=RDS_INFO_RECV_MESSAGES
        | RDS6_INFO_SEND_MESSAGES..=RDS6_INFO_RECV_MESSAGES => {
            let list = match opt {
                RDS_INFO_SEND_MESSAGES | RDS6_INFO_SEND_MESSAGES => &s.send,
                RDS_INFO_RETRANS_MESSAGES | RDS6_INFO_RETRANS_MESSAGES => &s.retrans,
                _ => &s.recv,
            };
            let each = if v6 { 50 } else { 26 };
            (each, list.iter().filter_map(|m| message(m, v6)).collect())
        }
        RDS_INFO_SOCKETS | RDS6_INFO_SOCKETS => {
            let each = if v6 { 52 } else { 28 };
            (
                each,
                s.sockets.iter().filter_map(|k| socket(k, v6)).collect(),
            )
        }
        RDS_INFO_TCP_SOCKETS | RDS6_INFO_TCP_SOCKETS => {
            let each = if v6 { 64 } else { 41 };
            (each, s.tcp.iter().filter_map(|t| tcp(t, v6)).collect())
        }
        // IB connections: none are reported through the preload library.
        RDS_INFO_IB_CONNECTIONS => (68, Vec::new()),
        RDS6_INFO_IB_CONNECTIONS => (92, Vec::new()),
        _ => return None,
    })
}

fn counter(name: &str, v: u64) -> Vec<u8> {
    let mut b = vec![0u8; 40];
    let n = name.len().min(31);
    b[..n].copy_from_slice(&name.as_bytes()[..n]);
    b[32..].copy_from_slice(&v.to_ne_bytes());
    b
}

fn conn(c: &ConnInfo, v6: bool) -> Option<Vec<u8>> {
    let p = c.paths.first();
    let mut b = Vec::with_capacity(65);
    b.extend_from_slice(&p.map_or(0, |p| p.next_tx_seq).to_ne_bytes());
    b.extend_from_slice(&p.map_or(0, |p| p.next_rx_seq).to_ne_bytes());
    if v6 {
        b.extend_from_slice(&self::v6(c.laddr));
        b.extend_from_slice(&self::v6(c.faddr));
    } else {
        b.extend_from_slice(&v4(c.laddr)?);
        b.extend_from_slice(&v4(c.faddr)?);
    }
    b.extend_from_slice(&name16(c.kind.name()));
    let mut flags = 0u8;
    if let Some(p) = p {
        if p.sending {
            flags |= 0x01;
        }
        match p.state {
            PathState::Connecting => flags |= 0x02,
            PathState::Up => flags |= 0x04,
            _ => {}
        }
    }
    b.push(flags);
    if !v6 {
        b.push(0); // tos
    }
    Some(b)
}

fn addr_pair(b: &mut Vec<u8>, l: IpAddr, f: IpAddr, v6: bool) -> Option<()> {
    if v6 {
        b.extend_from_slice(&self::v6(l));
        b.extend_from_slice(&self::v6(f));
    } else {
        b.extend_from_slice(&v4(l)?);
        b.extend_from_slice(&v4(f)?);
    }
    Some(())
}

fn message(m: &QueuedMsgInfo, v6: bool) -> Option<Vec<u8>> {
    let mut b = Vec::with_capacity(50);
    b.extend_from_slice(&m.seq.to_ne_bytes());
    b.extend_from_slice(&m.len.to_ne_bytes());
    addr_pair(&mut b, m.laddr, m.faddr, v6)?;
    b.extend_from_slice(&m.lport.to_be_bytes());
    b.extend_from_slice(&m.fport.to_be_bytes());
    b.push(0); // flags
    b.push(0); // tos
    Some(b)
}

fn socket(k: &SockInfo, v6: bool) -> Option<Vec<u8>> {
    let none = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0);
    let bound = k.bound.unwrap_or(none);
    let conn = k.connected.unwrap_or(none);
    let zero4 = |ip: IpAddr| {
        if ip.is_unspecified() {
            Some([0; 4])
        } else {
            v4(ip)
        }
    };
    let u32v = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
    let mut b = Vec::with_capacity(52);
    b.extend_from_slice(&u32v(k.sndbuf).to_ne_bytes());
    if v6 {
        b.extend_from_slice(&self::v6(bound.ip()));
        b.extend_from_slice(&self::v6(conn.ip()));
    } else {
        b.extend_from_slice(&zero4(bound.ip())?);
        b.extend_from_slice(&zero4(conn.ip())?);
    }
    b.extend_from_slice(&bound.port().to_be_bytes());
    b.extend_from_slice(&conn.port().to_be_bytes());
    b.extend_from_slice(&u32v(k.rcvbuf).to_ne_bytes());
    b.extend_from_slice(&u64::from(k.id.index()).to_ne_bytes());
    Some(b)
}

fn tcp(t: &TcpSockInfo, v6: bool) -> Option<Vec<u8>> {
    let mut b = Vec::with_capacity(64);
    if v6 {
        b.extend_from_slice(&self::v6(t.local.ip()));
        b.extend_from_slice(&t.local.port().to_be_bytes());
        b.extend_from_slice(&self::v6(t.peer.ip()));
        b.extend_from_slice(&t.peer.port().to_be_bytes());
    } else {
        b.extend_from_slice(&v4(t.local.ip())?);
        b.extend_from_slice(&t.local.port().to_be_bytes());
        b.extend_from_slice(&v4(t.peer.ip())?);
        b.extend_from_slice(&t.peer.port().to_be_bytes());
    }
    b.extend_from_slice(&t.hdr_rem.to_ne_bytes());
    b.extend_from_slice(&t.data_rem.to_ne_bytes());
    b.extend_from_slice(&t.last_sent_nxt.to_ne_bytes());
    b.extend_from_slice(&t.last_expected_una.to_ne_bytes());
    b.extend_from_slice(&t.last_seen_una.to_ne_bytes());
    if !v6 {
        b.push(0); // tos
    }
    Some(b)
}

/// `getsockopt(SOL_RDS, RDS_INFO_*)` with a buffer of `optlen` bytes.
///
/// # Errors
/// `ENOPROTOOPT` for an id with no table; `ENOSPC` (and the needed length) for a short buffer.
pub fn getsockopt(e: &Entry, opt: i32, optlen: usize) -> Result<OptOut, OptErr> {
    if optlen > i32::MAX as usize {
        return Err(libc::EINVAL.into());
    }
    let s = snapshot(e)?;
    let (each, rows) = table(opt, &s).ok_or(libc::ENOPROTOOPT)?;
    let total = each * rows.len();
    if total > optlen {
        return Err(OptErr {
            errno: libc::ENOSPC,
            len: Some(total),
        });
    }
    Ok(OptOut {
        ret: each as i32,
        data: rows.concat(),
        len: total,
    })
}
