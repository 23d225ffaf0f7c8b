//! The tables of a node of ours, from its info snapshot ([`InfoSnapshot`]): each category's
//! rows converted into [`format`](crate::format)'s row types. The node reports what the
//! kernel's records hold and more: with `-v`, the paths of each TCP connection under it
//! (`-n`) and each TCP socket's path and state (`-T`); `-p` lists every path. `Tos` is 0 (the
//! node has one type of service) and so is the IB `SL`.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use rds_core::ctl::InfoSnapshot;
use rds_core::info::{canonical, ConnInfo, PathInfo, PathState, QueuedMsgInfo, TransportKind};

use crate::format::{
    proc_comm, Category, ConnRow, IbRow, Layout, MsgRow, PathRow, SockRow, Table, TcpRow,
};

/// The rows of category `c`, or the line for stderr when the node cannot provide them.
///
/// # Errors
/// `-I` on a node without the IB transport ([`ib_unavailable`]).
pub fn table(snap: &InfoSnapshot, c: Category, l: Layout) -> Result<Table, String> {
    Ok(match c {
        Category::Ib => {
            if !has_ib(snap) {
                return Err(ib_unavailable(snap));
            }
            Table::Ib(ib(snap))
        }
        Category::Tcp => Table::Tcp(snap.tcp.iter().map(tcp_row).collect()),
        Category::Counters => Table::Counters(snap.counters.clone()),
        Category::Sockets => Table::Sockets(sockets(snap, l)),
        Category::Connections => {
            Table::Connections(snap.connections.iter().map(conn_row).collect())
        }
        Category::Paths => Table::Paths(
            snap.connections
                .iter()
                .flat_map(|c| {
                    c.paths.iter().map(|p| PathRow {
                        laddr: c.laddr,
                        faddr: c.faddr,
                        transport: c.kind.name(),
                        path: p.clone(),
                    })
                })
                .collect(),
        ),
        Category::Recv => Table::Messages(c, msg_rows(&snap.recv)),
        Category::Send => Table::Messages(c, msg_rows(&snap.send)),
        Category::Retrans => Table::Messages(c, msg_rows(&snap.retrans)),
    })
}

/// `-k`: with `-a`, every socket shows the owner the layout names (an embedded node's own
/// process), when its comm can be read.
fn sockets(snap: &InfoSnapshot, l: Layout) -> Vec<SockRow> {
    let owner = l
        .socket_pid
        .filter(|_| l.all_families)
        .and_then(|pid| proc_comm(pid).map(|c| (pid, c)));
    let none = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
    snap.sockets
        .iter()
        .map(|s| SockRow {
            bound: s.bound.unwrap_or(none),
            connected: s.connected.unwrap_or(none),
            sndbuf: s.sndbuf as u64,
            rcvbuf: s.rcvbuf as u64,
            inode: u64::from(s.id.index()),
            cong: i32::from(s.congested),
            owner: owner.clone(),
        })
        .collect()
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

/// `-n`: with `-v`, one line per path under each TCP connection.
fn conn_row(c: &ConnInfo) -> ConnRow {
    let (next_tx, next_rx) = path0(c).map_or((0, 0), |p| (p.next_tx_seq, p.next_rx_seq));
    let mut detail = Vec::new();
    if c.kind == TransportKind::Tcp {
        detail.push(format!(
            "    transport {}, {} paths agreed, peer generation {}",
            c.kind.name(),
            c.npaths,
            c.peer_gen
        ));
        detail.extend(c.paths.iter().map(path_detail));
    }
    ConnRow {
        laddr: c.laddr,
        faddr: c.faddr,
        tos: 0,
        next_tx,
        next_rx,
        flags: conn_flags(c),
        more: String::new(),
        detail,
    }
}

fn msg_rows(msgs: &[QueuedMsgInfo]) -> Vec<MsgRow> {
    msgs.iter()
        .map(|m| MsgRow {
            local: SocketAddr::new(m.laddr, m.lport),
            peer: SocketAddr::new(m.faddr, m.fport),
            tos: 0,
            seq: m.seq,
            len: m.len,
        })
        .collect()
}

/// `-T`: with `-v`, each row ends with its path and state.
fn tcp_row(s: &rds_core::info::TcpSockInfo) -> TcpRow {
    TcpRow {
        local: s.local,
        peer: s.peer,
        hdr_rem: s.hdr_rem,
        data_rem: s.data_rem,
        sent_nxt: s.last_sent_nxt,
        expected_una: s.last_expected_una,
        seen_una: s.last_seen_una,
        more: format!("  path={}, state={}", s.path, s.state),
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
fn ib(snap: &InfoSnapshot) -> Vec<IbRow> {
    snap.connections
        .iter()
        .filter(|c| c.kind == TransportKind::Ib)
        .map(|c| IbRow {
            src: c.laddr,
            dst: c.faddr,
            tos: 0,
            sl: 0,
            src_dev: gid(c.laddr).to_string(),
            dst_dev: gid(c.faddr).to_string(),
            qpn: snap
                .ib_qps
                .iter()
                .find(|q| q.conn == c.id)
                .map_or((0, 0), |q| (q.local_qpn, q.peer_qpn)),
            more: String::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{proc_comm, render};

    /// Prints one category of `snap` as rds-info does.
    fn category(
        out: &mut String,
        c: Category,
        snap: &InfoSnapshot,
        l: Layout,
    ) -> Result<(), String> {
        render(out, &table(snap, c, l)?, l);
        Ok(())
    }

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
}
