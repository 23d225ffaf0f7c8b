//! The tables of `rds-info`, byte for byte as the original C tool prints them.
//!
//! Every table starts with `"\n<Title>:\n"` and a header line. Column widths follow rds-tools
//! 2.0.7 (addresses 15 wide, counter names 25); with `-a` they follow rds-tools 2.3 (addresses
//! 37 wide, counter names 32, the socket table's `Cong Pid Comm` columns, where a row has the
//! pid and comm only when they are known, as the original prints rows for a kernel that
//! reports no pid). The paths table
//! (`-p`) has no upstream format and is a comfy-table.
//!
//! Without `-a`, entries with IPv6 (not IPv4-mapped) addresses are left out, as the kernel's
//! IPv4 `RDS_INFO_*` options do; with `-a` they are shown and IPv4 addresses stay dotted quads.

use std::fmt::Write as _;
use std::net::IpAddr;

use rds_core::ctl::InfoSnapshot;
use rds_core::info::{canonical, ConnInfo, PathInfo, PathState, QueuedMsgInfo, TransportKind};

/// One info category, named by its option letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    /// `-I`: IB transport connections.
    Ib,
    /// `-T`: TCP transport sockets.
    Tcp,
    /// `-c`: statistic counters.
    Counters,
    /// `-k`: sockets.
    Sockets,
    /// `-n`: connections.
    Connections,
    /// `-p`: paths.
    Paths,
    /// `-r`: receive queue messages.
    Recv,
    /// `-s`: send queue messages.
    Send,
    /// `-t`: retransmit queue messages.
    Retrans,
}

impl Category {
    /// Every category in printing order: the ASCII order of the option letters, as the
    /// original tool prints them whatever the command-line order.
    pub const PRINT_ORDER: [Category; 9] = [
        Category::Ib,
        Category::Tcp,
        Category::Counters,
        Category::Sockets,
        Category::Connections,
        Category::Paths,
        Category::Recv,
        Category::Send,
        Category::Retrans,
    ];

    /// The order of the usage text (the original's table order, by `RDS_INFO_*` id).
    pub const USAGE_ORDER: [Category; 9] = [
        Category::Counters,
        Category::Connections,
        Category::Send,
        Category::Retrans,
        Category::Recv,
        Category::Sockets,
        Category::Tcp,
        Category::Ib,
        Category::Paths,
    ];

    /// The option letter.
    pub fn letter(self) -> char {
        match self {
            Category::Ib => 'I',
            Category::Tcp => 'T',
            Category::Counters => 'c',
            Category::Sockets => 'k',
            Category::Connections => 'n',
            Category::Paths => 'p',
            Category::Recv => 'r',
            Category::Send => 's',
            Category::Retrans => 't',
        }
    }

    /// The usage description (the original's strings).
    pub fn description(self) -> &'static str {
        match self {
            Category::Ib => "IB transport connections",
            Category::Tcp => "TCP transport sockets",
            Category::Counters => "statistic counters",
            Category::Sockets => "sockets",
            Category::Connections => "connections",
            Category::Paths => "paths",
            Category::Recv => "recv queue messages",
            Category::Send => "send queue messages",
            Category::Retrans => "retransmit queue messages",
        }
    }
}

/// How the tables are laid out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Layout {
    /// `-a`: IPv6 entries and the rds-tools 2.3 widths.
    pub all_families: bool,
    /// `-v` count.
    pub verbose: u8,
    /// The process that owns every socket of the node, shown in the `Pid` and `Comm` columns
    /// with `-a`: an embedded node's own process. `None` for the daemon, whose sockets belong
    /// to client processes that the snapshot does not name (the rows then end after `Cong`).
    pub socket_pid: Option<u32>,
}

impl Layout {
    fn w(self) -> usize {
        if self.all_families {
            37
        } else {
            15
        }
    }

    /// Whether an entry with these addresses is shown.
    fn shows(self, addrs: &[IpAddr]) -> bool {
        self.all_families || addrs.iter().all(|a| is_v4(*a))
    }
}

fn is_v4(ip: IpAddr) -> bool {
    canonical(ip).is_ipv4()
}

/// An address as `inet_ntop` prints it (IPv4-mapped addresses as dotted quads).
pub fn addr(ip: IpAddr) -> String {
    canonical(ip).to_string()
}

fn unspecified(all_families: bool) -> IpAddr {
    let _ = all_families;
    IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
}

fn title(out: &mut String, t: &str) {
    out.push('\n');
    out.push_str(t);
    out.push_str(":\n");
}

/// `-c`: the counters in the node's order (core list, then TCP).
pub fn counters(out: &mut String, snap: &InfoSnapshot, l: Layout) {
    let w = if l.all_families { 32 } else { 25 };
    title(out, "Counters");
    let _ = writeln!(out, "{:>w$} {:>16}", "CounterName", "Value");
    for (name, v) in &snap.counters {
        let _ = writeln!(out, "{name:>w$} {v:>16}");
    }
}

/// `-k`: RDS sockets.
pub fn sockets(out: &mut String, snap: &InfoSnapshot, l: Layout) {
    let w = l.w();
    title(out, "RDS Sockets");
    let _ = write!(
        out,
        "{:>w$} {:>5} {:>w$} {:>5} {:>10} {:>10} {:>8}",
        "BoundAddr", "BPort", "ConnAddr", "CPort", "SndBuf", "RcvBuf", "Inode"
    );
    if l.all_families {
        let _ = write!(out, " {:>8} {:>10} {:>16}", "Cong", "Pid", "Comm");
    }
    out.push('\n');
    let owner = l
        .socket_pid
        .filter(|_| l.all_families)
        .and_then(|pid| proc_comm(pid).map(|c| (pid, c)));
    for s in &snap.sockets {
        let none = unspecified(l.all_families);
        let (ba, bp) = s.bound.map_or((none, 0), |a| (a.ip(), a.port()));
        let (ca, cp) = s.connected.map_or((none, 0), |a| (a.ip(), a.port()));
        if !l.shows(&[ba]) {
            continue;
        }
        let _ = write!(
            out,
            "{:>w$} {:>5} {:>w$} {:>5} {:>10} {:>10} {:>8}",
            addr(ba),
            bp,
            addr(ca),
            cp,
            s.sndbuf,
            s.rcvbuf,
            s.id.index()
        );
        if l.all_families {
            let _ = write!(out, " {:>8}", i32::from(s.congested));
            if let Some((pid, comm)) = &owner {
                let _ = write!(out, " {pid:>10} {comm:>16}");
            }
        }
        out.push('\n');
    }
}

/// The `Comm` column for `pid`, as the original reads it: at most 16 bytes of
/// `/proc/<pid>/comm` without their last byte (the newline); `None` for pid 0 or an unreadable
/// file (the row then has no pid and comm).
pub fn proc_comm(pid: u32) -> Option<String> {
    use std::io::Read as _;
    if pid == 0 {
        return None;
    }
    let mut f = std::fs::File::open(format!("/proc/{pid}/comm")).ok()?;
    let mut b = [0u8; 16];
    let mut n = 0;
    while n < b.len() {
        match f.read(&mut b[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let end = n.max(1) - 1;
    let text = &b[..end];
    let text = text.split(|&c| c == 0).next().unwrap_or_default();
    Some(String::from_utf8_lossy(text).into_owned())
}

fn path0(c: &ConnInfo) -> Option<&PathInfo> {
    c.paths.iter().find(|p| p.index == 0).or(c.paths.first())
}

/// The `Flgs` column: `s` sending, `c` connecting, `C` connected, `E` error (never set:
/// upstream Linux does not report it), `-` for each flag not set; from path 0, as the kernel
/// reports path 0.
pub fn conn_flags(c: &ConnInfo) -> String {
    let p = path0(c);
    let f = |on: bool, ch: char| if on { ch } else { '-' };
    let sending = p.is_some_and(|p| p.sending);
    let connecting = p.is_some_and(|p| p.state == PathState::Connecting);
    let up = p.is_some_and(|p| p.state == PathState::Up);
    [f(sending, 's'), f(connecting, 'c'), f(up, 'C'), '-']
        .iter()
        .collect()
}

fn path_detail(p: &PathInfo) -> String {
    let mut s = format!(
        "    path {}: {}, next_tx {}, next_rx {}, send queue {}, retransmit queue {}, up {} times",
        p.index,
        p.state.name(),
        p.next_tx_seq,
        p.next_rx_seq,
        p.send_queued,
        p.retrans_queued,
        p.ups
    );
    for (on, what) in [
        (p.sending, "sending"),
        (p.draining, "draining"),
        (p.reconnect_pending, "reconnect pending"),
    ] {
        if on {
            s.push_str(", ");
            s.push_str(what);
        }
    }
    s
}

/// `-n`: RDS connections (with `-v`, one line per path under each TCP connection).
pub fn connections(out: &mut String, snap: &InfoSnapshot, l: Layout) {
    let w = l.w();
    title(out, "RDS Connections");
    let _ = writeln!(
        out,
        "{:>w$} {:>w$} {:>4} {:>16} {:>16} {:>4}",
        "LocalAddr", "RemoteAddr", "Tos", "NextTX", "NextRX", "Flgs"
    );
    for c in &snap.connections {
        if !l.shows(&[c.laddr, c.faddr]) {
            continue;
        }
        let (tx, rx) = path0(c).map_or((0, 0), |p| (p.next_tx_seq, p.next_rx_seq));
        let _ = writeln!(
            out,
            "{:>w$} {:>w$} {:>4} {:>16} {:>16} {}",
            addr(c.laddr),
            addr(c.faddr),
            0,
            tx,
            rx,
            conn_flags(c)
        );
        if l.verbose > 0 && c.kind == TransportKind::Tcp {
            let _ = writeln!(
                out,
                "    transport {}, {} paths agreed, peer generation {}",
                c.kind.name(),
                c.npaths,
                c.peer_gen
            );
            for p in &c.paths {
                out.push_str(&path_detail(p));
                out.push('\n');
            }
        }
    }
}

/// `-p`: every path of every connection (no upstream format: a table).
pub fn paths(out: &mut String, snap: &InfoSnapshot, l: Layout) {
    title(out, "RDS Paths");
    let mut t = rds_cli::table(vec![
        "LocalAddr",
        "RemoteAddr",
        "Trans",
        "Path",
        "State",
        "NextTX",
        "NextRX",
        "SendQ",
        "RetransQ",
        "Ups",
        "Flags",
    ]);
    for c in &snap.connections {
        if !l.shows(&[c.laddr, c.faddr]) {
            continue;
        }
        for p in &c.paths {
            let mut flags = Vec::new();
            if p.sending {
                flags.push("sending");
            }
            if p.draining {
                flags.push("draining");
            }
            if p.reconnect_pending {
                flags.push("reconnect");
            }
            t.add_row(vec![
                addr(c.laddr),
                addr(c.faddr),
                c.kind.name().to_string(),
                p.index.to_string(),
                p.state.name().to_string(),
                p.next_tx_seq.to_string(),
                p.next_rx_seq.to_string(),
                p.send_queued.to_string(),
                p.retrans_queued.to_string(),
                p.ups.to_string(),
                if flags.is_empty() {
                    "-".to_string()
                } else {
                    flags.join(",")
                },
            ]);
        }
    }
    out.push_str(&t.to_string());
    out.push('\n');
}

/// `-r`, `-s`, `-t`: `<Receive|Send|Retransmit> Message Queue`.
pub fn messages(out: &mut String, which: &str, msgs: &[QueuedMsgInfo], l: Layout) {
    let w = l.w();
    title(out, &format!("{which} Message Queue"));
    let _ = writeln!(
        out,
        "{:>w$} {:>5} {:>w$} {:>5} {:>4} {:>16} {:>10}",
        "LocalAddr", "LPort", "RemoteAddr", "RPort", "Tos", "Seq", "Bytes"
    );
    for m in msgs {
        if !l.shows(&[m.laddr, m.faddr]) {
            continue;
        }
        let _ = writeln!(
            out,
            "{:>w$} {:>5} {:>w$} {:>5} {:>4} {:>16} {:>10}",
            addr(m.laddr),
            m.lport,
            addr(m.faddr),
            m.fport,
            0,
            m.seq,
            m.len
        );
    }
}

/// `-T`: TCP transport sockets (with `-v`, each row ends with its path and state).
pub fn tcp(out: &mut String, snap: &InfoSnapshot, l: Layout) {
    let w = l.w();
    title(out, "TCP Connections");
    let _ = writeln!(
        out,
        "{:>w$} {:>5} {:>w$} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "LocalAddr",
        "LPort",
        "RemoteAddr",
        "RPort",
        "HdrRemain",
        "DataRemain",
        "SentNxt",
        "ExpectUna",
        "SeenUna"
    );
    for s in &snap.tcp {
        if !l.shows(&[s.local.ip(), s.peer.ip()]) {
            continue;
        }
        let _ = write!(
            out,
            "{:>w$} {:>5} {:>w$} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10}",
            addr(s.local.ip()),
            s.local.port(),
            addr(s.peer.ip()),
            s.peer.port(),
            s.hdr_rem,
            s.data_rem,
            s.last_sent_nxt,
            s.last_expected_una,
            s.last_seen_una
        );
        if l.verbose > 0 {
            let _ = write!(out, "  path={}, state={}", s.path, s.state);
        }
        out.push('\n');
    }
}

/// Whether the node runs the IB transport.
pub fn has_ib(snap: &InfoSnapshot) -> bool {
    snap.transports
        .iter()
        .any(|t| t == "ib" || t == "infiniband")
}

/// The message printed (to stderr) for `-I` on a node without the IB transport, with the
/// reason when the node was asked to run IB and could not.
pub fn ib_unavailable(snap: &InfoSnapshot) -> String {
    let mut m = format!(
        "rds-info: IB transport connections: the IB transport is not available on this node \
         (it runs: {})",
        if snap.transports.is_empty() {
            "no transport".to_string()
        } else {
            snap.transports.join(", ")
        }
    );
    if let Some(why) = &snap.ib_unavailable {
        let _ = write!(m, ": {why}");
    }
    m
}

/// The GID of an address as the IB transport uses it: it listens and connects only on
/// addresses a device's GID table holds as such (RoCE), IPv4 as IPv4-mapped IPv6.
fn gid(ip: IpAddr) -> std::net::Ipv6Addr {
    match canonical(ip) {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// `-I` on a node with the IB transport: one row per IB connection. `LocalDev`/`RemoteDev`
/// are the GIDs of the two addresses (see [`gid`]); `SL` is 0 (the service level of RoCE and
/// of the default path). With `-a` (the rds-tools 2.3 columns), `SrcQPNo` and `DstQPNo` are the
/// local and the peer's queue pair numbers, 0 for a connection without a queue pair (as the
/// kernel reports it).
pub fn ib(out: &mut String, snap: &InfoSnapshot, l: Layout) {
    title(out, "RDS IB Connections");
    let w = l.w();
    let _ = write!(
        out,
        "{:>w$} {:>w$} {:>4} {:>3} {:>32} {:>32}",
        "LocalAddr", "RemoteAddr", "Tos", "SL", "LocalDev", "RemoteDev"
    );
    if l.all_families {
        let _ = write!(out, " {:>10} {:>10}", "SrcQPNo", "DstQPNo");
    }
    out.push('\n');
    for c in &snap.connections {
        if c.kind != TransportKind::Ib || !l.shows(&[c.laddr, c.faddr]) {
            continue;
        }
        let _ = write!(
            out,
            "{:>w$} {:>w$} {:>4} {:>3} {:>32} {:>32}",
            addr(c.laddr),
            addr(c.faddr),
            0,
            0,
            gid(c.laddr).to_string(),
            gid(c.faddr).to_string()
        );
        if l.all_families {
            let (src, dst) = snap
                .ib_qps
                .iter()
                .find(|q| q.conn == c.id)
                .map_or((0, 0), |q| (q.local_qpn, q.peer_qpn));
            let _ = write!(out, " {src:>10} {dst:>10}");
        }
        out.push('\n');
    }
}

/// Prints one category into `out`; returns an error line for stderr instead when the node
/// cannot provide it.
pub fn category(
    out: &mut String,
    c: Category,
    snap: &InfoSnapshot,
    l: Layout,
) -> Result<(), String> {
    match c {
        Category::Ib => {
            if !has_ib(snap) {
                return Err(ib_unavailable(snap));
            }
            ib(out, snap, l);
        }
        Category::Tcp => tcp(out, snap, l),
        Category::Counters => counters(out, snap, l),
        Category::Sockets => sockets(out, snap, l),
        Category::Connections => connections(out, snap, l),
        Category::Paths => paths(out, snap, l),
        Category::Recv => messages(out, "Receive", &snap.recv, l),
        Category::Send => messages(out, "Send", &snap.send, l),
        Category::Retrans => messages(out, "Retransmit", &snap.retrans, l),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot built from JSON, as a node would send it.
    fn snap() -> InfoSnapshot {
        serde_json::from_str(
            r#"{
  "connections": [
    {"id": 0, "laddr": "10.0.0.1", "faddr": "10.0.0.2", "kind": "tcp", "npaths": 2,
     "peer_gen": 7, "paths": [
       {"index": 0, "state": "Up", "next_tx_seq": 12, "next_rx_seq": 5, "send_queued": 1,
        "retrans_queued": 2, "sending": true, "ups": 1, "draining": false,
        "reconnect_pending": false},
       {"index": 1, "state": "Connecting", "next_tx_seq": 1, "next_rx_seq": 1,
        "send_queued": 0, "retrans_queued": 0, "sending": false, "ups": 0, "draining": false,
        "reconnect_pending": true}]},
    {"id": 1, "laddr": "fd00::1", "faddr": "fd00::2", "kind": "tcp", "npaths": 0,
     "peer_gen": 0, "paths": [
       {"index": 0, "state": "Connecting", "next_tx_seq": 1, "next_rx_seq": 1,
        "send_queued": 3, "retrans_queued": 0, "sending": false, "ups": 0, "draining": false,
        "reconnect_pending": false}]}
  ],
  "sockets": [
    {"id": 3, "bound": "10.0.0.1:4000", "connected": null, "sndbuf": 106496,
     "rcvbuf": 106496, "snd_bytes": 0, "rcv_bytes": 0, "congested": false, "transport": "tcp"},
    {"id": 4, "bound": "[fd00::1]:4001", "connected": "[fd00::2]:9", "sndbuf": 1000,
     "rcvbuf": 2000, "snd_bytes": 0, "rcv_bytes": 0, "congested": true, "transport": "tcp"}
  ],
  "send": [{"seq": 0, "len": 100, "laddr": "10.0.0.1", "faddr": "10.0.0.2", "lport": 4000,
            "fport": 5000, "path": 0}],
  "retrans": [{"seq": 11, "len": 1048576, "laddr": "10.0.0.1", "faddr": "10.0.0.2",
               "lport": 4000, "fport": 5000, "path": 0},
              {"seq": 2, "len": 1, "laddr": "fd00::1", "faddr": "fd00::2",
               "lport": 1, "fport": 2, "path": 0}],
  "recv": [{"seq": 4, "len": 0, "laddr": "10.0.0.1", "faddr": "10.0.0.2", "lport": 4000,
            "fport": 5001, "path": 0}],
  "tcp": [{"local": "10.0.0.1:40000", "peer": "10.0.0.2:16385", "hdr_rem": 48,
           "data_rem": 0, "last_sent_nxt": 4294967295, "last_expected_una": 100,
           "last_seen_una": 90, "path": 0, "state": "UP"}],
  "counters": [["conn_reset", 1], ["recv_bytes_freed_fromsock", 18446744073709551615],
               ["tcp_listen_closed_stale", 0]],
  "transports": ["tcp"]
}"#,
        )
        .expect("valid snapshot")
    }

    fn print(c: Category, l: Layout) -> String {
        let mut s = String::new();
        category(&mut s, c, &snap(), l).unwrap();
        s
    }

    const V4: Layout = Layout {
        all_families: false,
        verbose: 0,
        socket_pid: None,
    };
    const V6: Layout = Layout {
        all_families: true,
        verbose: 0,
        socket_pid: None,
    };

    #[test]
    fn counters_2_0_7_and_2_3() {
        assert_eq!(
            print(Category::Counters, V4),
            "\nCounters:\n\
             \x20             CounterName            Value\n\
             \x20              conn_reset                1\n\
             recv_bytes_freed_fromsock 18446744073709551615\n\
             \x20 tcp_listen_closed_stale                0\n"
        );
        let s = print(Category::Counters, V6);
        assert!(s.contains(&format!("{}CounterName            Value\n", " ".repeat(21))));
    }

    #[test]
    fn sockets_skip_ipv6_without_a() {
        assert_eq!(
            print(Category::Sockets, V4),
            "\nRDS Sockets:\n\
             \x20     BoundAddr BPort        ConnAddr CPort     SndBuf     RcvBuf    Inode\n\
             \x20      10.0.0.1  4000         0.0.0.0     0     106496     106496        3\n"
        );
        let s = print(Category::Sockets, V6);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[1], "RDS Sockets:");
        assert_eq!(
            lines[2],
            format!(
                "{:>37} BPort {:>37} CPort     SndBuf     RcvBuf    Inode     Cong        Pid             Comm",
                "BoundAddr", "ConnAddr"
            )
        );
        assert_eq!(
            lines[4],
            format!(
                "{:>37}  4001 {:>37}     9       1000       2000        4        1",
                "fd00::1", "fd00::2"
            )
        );
    }

    #[test]
    fn sockets_pid_and_comm_with_a() {
        // The comm of this process as /proc shows it, newline dropped (15 bytes at most).
        let me = std::process::id();
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        let comm = comm.trim_end_matches('\n');
        assert!(!comm.is_empty() && comm.len() <= 15);
        assert_eq!(proc_comm(me).as_deref(), Some(comm));
        assert_eq!(proc_comm(0), None);
        assert_eq!(proc_comm(u32::MAX), None);
        let l = Layout {
            socket_pid: Some(me),
            ..V6
        };
        let s = print(Category::Sockets, l);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 5, "{s}");
        assert_eq!(
            lines[3],
            format!(
                "{:>37}  4000 {:>37}     0     106496     106496        3        0 {me:>10} {comm:>16}",
                "10.0.0.1", "0.0.0.0"
            )
        );
        assert_eq!(
            lines[4],
            format!(
                "{:>37}  4001 {:>37}     9       1000       2000        4        1 {me:>10} {comm:>16}",
                "fd00::1", "fd00::2"
            )
        );
        // Header and rows agree: each row is as wide as the header.
        assert_eq!(lines[3].len(), lines[2].len());
        // Without -a: the 2.0.7 table, no pid.
        let l = Layout {
            socket_pid: Some(me),
            ..V4
        };
        assert_eq!(print(Category::Sockets, l), print(Category::Sockets, V4));
    }

    #[test]
    fn connections_and_flags() {
        assert_eq!(
            print(Category::Connections, V4),
            "\nRDS Connections:\n\
             \x20     LocalAddr      RemoteAddr  Tos           NextTX           NextRX Flgs\n\
             \x20      10.0.0.1        10.0.0.2    0               12                5 s-C-\n"
        );
        let v = print(
            Category::Connections,
            Layout {
                all_families: false,
                verbose: 1,
                socket_pid: None,
            },
        );
        assert!(v.ends_with(
            "    transport tcp, 2 paths agreed, peer generation 7\n\
             \x20   path 0: UP, next_tx 12, next_rx 5, send queue 1, retransmit queue 2, up 1 times, sending\n\
             \x20   path 1: CONNECTING, next_tx 1, next_rx 1, send queue 0, retransmit queue 0, up 0 times, reconnect pending\n"
        ), "{v}");
        let s = print(Category::Connections, V6);
        assert!(s.ends_with(&format!(
            "{:>37} {:>37}    0                1                1 -c--\n",
            "fd00::1", "fd00::2"
        )));
    }

    #[test]
    fn message_queues() {
        assert_eq!(
            print(Category::Retrans, V4),
            "\nRetransmit Message Queue:\n\
             \x20     LocalAddr LPort      RemoteAddr RPort  Tos              Seq      Bytes\n\
             \x20      10.0.0.1  4000        10.0.0.2  5000    0               11    1048576\n"
        );
        assert!(print(Category::Send, V4).starts_with("\nSend Message Queue:\n"));
        assert!(print(Category::Recv, V4).ends_with(
            "       10.0.0.1  4000        10.0.0.2  5001    0                4          0\n"
        ));
        assert_eq!(print(Category::Retrans, V6).lines().count(), 5);
    }

    #[test]
    fn tcp_sockets() {
        assert_eq!(
            print(Category::Tcp, V4),
            "\nTCP Connections:\n\
             \x20     LocalAddr LPort      RemoteAddr RPort  HdrRemain DataRemain    SentNxt  ExpectUna    SeenUna\n\
             \x20      10.0.0.1 40000        10.0.0.2 16385         48          0 4294967295        100         90\n"
        );
        let v = print(
            Category::Tcp,
            Layout {
                all_families: false,
                verbose: 1,
                socket_pid: None,
            },
        );
        assert!(v.ends_with("90  path=0, state=UP\n"), "{v}");
    }

    /// `snap()` on a node that runs IB, with these IB connections added.
    fn ib_snap(conns: &[(&str, &str)]) -> InfoSnapshot {
        let mut s = snap();
        s.transports.push("infiniband".into());
        for (i, (l, f)) in conns.iter().enumerate() {
            let mut c = s.connections[0].clone();
            // Ids of their own (a node numbers its connections).
            c.id = serde_json::from_str(&(100 + i).to_string()).unwrap();
            c.laddr = l.parse().unwrap();
            c.faddr = f.parse().unwrap();
            c.kind = TransportKind::Ib;
            s.connections.push(c);
        }
        s
    }

    const IB_HEAD: &str = concat!(
        "      LocalAddr      RemoteAddr  Tos  SL                         LocalDev",
        "                        RemoteDev\n"
    );

    #[test]
    fn ib_empty_table() {
        // TCP connections are not listed; the header is the original's %15s ... %32s.
        let mut s = String::new();
        category(&mut s, Category::Ib, &ib_snap(&[]), V4).unwrap();
        assert_eq!(s, format!("\nRDS IB Connections:\n{IB_HEAD}"));
    }

    #[test]
    fn ib_rows_2_0_7_and_2_3() {
        let mut snap = ib_snap(&[("10.0.0.1", "10.0.0.3"), ("fd00::1", "fd00::3")]);
        // The IPv4 connection has queue pairs; the IPv6 one has none (yet).
        let id = snap.connections[snap.connections.len() - 2].id;
        snap.ib_qps.push(rds_core::node::IbQpInfo {
            conn: id,
            local_qpn: 17,
            peer_qpn: 0x12345,
        });
        let mut s = String::new();
        category(&mut s, Category::Ib, &snap, V4).unwrap();
        assert_eq!(
            s,
            format!(
                "\nRDS IB Connections:\n{IB_HEAD}{}{}",
                "       10.0.0.1        10.0.0.3    0   0                  ::ffff:10.0.0.1",
                "                  ::ffff:10.0.0.3\n"
            )
        );
        let mut s = String::new();
        category(&mut s, Category::Ib, &snap, V6).unwrap();
        let w = " ".repeat(28);
        assert_eq!(
            s,
            [
                "\nRDS IB Connections:\n".to_string(),
                format!("{w}LocalAddr{w}RemoteAddr  Tos  SL                         LocalDev"),
                "                        RemoteDev    SrcQPNo    DstQPNo\n".into(),
                format!("{w} 10.0.0.1{w}  10.0.0.3    0   0                  ::ffff:10.0.0.1"),
                "                  ::ffff:10.0.0.3         17      74565\n".into(),
                format!("{w}  fd00::1{w}   fd00::3    0   0                          fd00::1"),
                "                          fd00::3          0          0\n".into(),
            ]
            .concat()
        );
    }

    #[test]
    fn ib_unavailable_says_why() {
        let mut snap = snap();
        snap.ib_unavailable = Some("no RDMA devices".into());
        let mut s = String::new();
        let e = category(&mut s, Category::Ib, &snap, V4).unwrap_err();
        assert!(s.is_empty());
        assert_eq!(
            e,
            "rds-info: IB transport connections: the IB transport is not available on this node (it runs: tcp): no RDMA devices"
        );
    }

    #[test]
    fn ib_is_reported_unavailable() {
        let mut s = String::new();
        let e = category(&mut s, Category::Ib, &snap(), V4).unwrap_err();
        assert!(s.is_empty());
        assert_eq!(
            e,
            "rds-info: IB transport connections: the IB transport is not available on this node (it runs: tcp)"
        );
    }

    #[test]
    fn paths_table() {
        let s = print(Category::Paths, V4);
        assert!(s.starts_with("\nRDS Paths:\n+"), "{s}");
        assert!(
            s.contains("| 10.0.0.1  | 10.0.0.2   | tcp   | 1    | CONNECTING |"),
            "{s}"
        );
        assert!(!s.contains("fd00::1"));
    }

    #[test]
    fn letters_are_in_ascii_order() {
        let l: Vec<char> = Category::PRINT_ORDER.iter().map(|c| c.letter()).collect();
        let mut sorted = l.clone();
        sorted.sort_unstable();
        assert_eq!(l, sorted);
    }
}
