//! `rds-info` on the kernel's RDS: the same tables, read as the original reads them, from the
//! kernel's `RDS_INFO_*` getsockopts ([`rds_core::kernel::tables`]), each record converted into
//! [`format`]'s row of its table (rds-tools 2.0.7, or 2.3 with `-a`, which also asks for the
//! `RDS6_` tables and falls back to the IPv4 one where the kernel has none). With `-v`,
//! connection rows end with their transport and IB rows with the connection's limits. A table
//! the kernel cannot give (no `rds_rdma` for `-I`, no handler for `-p` upstream) is reported on
//! stderr with the original's message and is not fatal.
//!
//! [`format`]: crate::format

use std::io;

use rds_core::kernel::tables::{
    self as kinfo, KConn, KIb, KMsg, KSock, KTcp, KernelInfo, CONN_CONNECTED, CONN_CONNECTING,
    CONN_ERROR, CONN_SENDING,
};

use crate::format::{proc_comm, Category, ConnRow, IbRow, MsgRow, SockRow, Table, TcpRow};

/// `RDS_INFO_CONN_PATHS` (UEK only).
const CONN_PATHS: i32 = 10020;

fn flags(f: u8) -> String {
    [
        (CONN_SENDING, 's'),
        (CONN_CONNECTING, 'c'),
        (CONN_CONNECTED, 'C'),
        (CONN_ERROR, 'E'),
    ]
    .iter()
    .map(|&(b, c)| if f & b != 0 { c } else { '-' })
    .collect()
}

/// The rows of category `c` from the kernel (`all`: `-a`, the IPv6 tables too).
///
/// # Errors
/// The original's message when the kernel refuses the table.
pub fn table(k: &KernelInfo, c: Category, all: bool) -> Result<Table, String> {
    let fail = |e: io::Error| {
        format!(
            "rds-info: Unable to get statistics to process the \"{}\" info request: {e}",
            c.description()
        )
    };
    Ok(match c {
        Category::Counters => Table::Counters(k.counters().map_err(fail)?),
        Category::Sockets => Table::Sockets(
            k.sockets(all)
                .map_err(fail)?
                .iter()
                .map(|s| sock_row(s, all))
                .collect(),
        ),
        Category::Connections => Table::Connections(
            k.connections(all)
                .map_err(fail)?
                .iter()
                .map(conn_row)
                .collect(),
        ),
        Category::Recv | Category::Send | Category::Retrans => {
            let opt = match c {
                Category::Recv => kinfo::RECV_MESSAGES,
                Category::Send => kinfo::SEND_MESSAGES,
                _ => kinfo::RETRANS_MESSAGES,
            };
            Table::Messages(
                c,
                k.messages(opt, all)
                    .map_err(fail)?
                    .iter()
                    .map(msg_row)
                    .collect(),
            )
        }
        Category::Tcp => Table::Tcp(k.tcp(all).map_err(fail)?.iter().map(tcp_row).collect()),
        Category::Ib => Table::Ib(k.ib(all).map_err(fail)?.iter().map(ib_row).collect()),
        // UEK only; upstream has no handler and says ENOPROTOOPT.
        Category::Paths => Table::PathsUndecoded(k.raw(CONN_PATHS).map_err(fail)?.1),
    })
}

/// `-k`. With `-a` (`all`), the owner's pid and comm when the record names a pid whose comm
/// can be read.
pub fn sock_row(s: &KSock, all: bool) -> SockRow {
    let (pid, cong) = s.pid_cong.unwrap_or((0, 0));
    SockRow {
        bound: s.bound,
        connected: s.connected,
        sndbuf: u64::from(s.sndbuf),
        rcvbuf: u64::from(s.rcvbuf),
        inode: s.inode,
        // The original's mapping: 0 (no support) as -1, -1 (not congested) as 0.
        cong: match cong {
            0 => -1,
            -1 => 0,
            v => v,
        },
        owner: if all {
            proc_comm(pid).map(|comm| (pid, comm))
        } else {
            None
        },
    }
}

/// `-n`.
pub fn conn_row(c: &KConn) -> ConnRow {
    ConnRow {
        laddr: c.laddr,
        faddr: c.faddr,
        tos: c.tos,
        next_tx: c.next_tx_seq,
        next_rx: c.next_rx_seq,
        flags: flags(c.flags),
        more: format!("  transport={}", c.transport),
        detail: Vec::new(),
    }
}

/// `-r`, `-s`, `-t`.
pub fn msg_row(m: &KMsg) -> MsgRow {
    MsgRow {
        local: m.local,
        peer: m.peer,
        tos: m.tos,
        seq: m.seq,
        len: m.len,
    }
}

/// `-T`.
pub fn tcp_row(t: &KTcp) -> TcpRow {
    TcpRow {
        local: t.local,
        peer: t.peer,
        hdr_rem: t.hdr_rem,
        data_rem: t.data_rem,
        sent_nxt: t.last_sent_nxt,
        expected_una: t.last_expected_una,
        seen_una: t.last_seen_una,
        more: String::new(),
    }
}

/// `-I`. Upstream records carry no queue pair numbers (0 with `-a`).
pub fn ib_row(i: &KIb) -> IbRow {
    let l = i.limits;
    IbRow {
        src: i.src,
        dst: i.dst,
        tos: i.tos,
        sl: i.sl,
        src_dev: i.src_gid.to_string(),
        dst_dev: i.dst_gid.to_string(),
        qpn: (0, 0),
        more: format!(
            "  send_wr={}, recv_wr={}, send_sge={}, rdma_mr_max={}, rdma_mr_size={}, \
             cache_allocs={}",
            l[0], l[1], l[2], l[3], l[4], i.cache_allocs
        ),
    }
}

/// The kernel's tables as JSON: each selected category's rows (field names as the kernel's
/// structs), or its error text.
pub fn json(k: &KernelInfo, cats: &[Category], all: bool) -> serde_json::Value {
    use serde_json::{json, Value};
    let mut map = serde_json::Map::new();
    map.insert("stack".into(), json!("kernel"));
    let e = |r: io::Error| json!({ "error": r.to_string() });
    for c in cats {
        let v: Value = match c {
            Category::Counters => k.counters().map_or_else(e, |v| json!(v)),
            Category::Sockets => k.sockets(all).map_or_else(e, |v| {
                json!(v
                    .iter()
                    .map(|s| json!({"bound": s.bound.to_string(),
                        "connected": s.connected.to_string(), "sndbuf": s.sndbuf,
                        "rcvbuf": s.rcvbuf, "inode": s.inode}))
                    .collect::<Vec<_>>())
            }),
            Category::Connections => k.connections(all).map_or_else(e, |v| {
                json!(v
                    .iter()
                    .map(
                        |c| json!({"laddr": c.laddr.to_string(), "faddr": c.faddr.to_string(),
                        "transport": c.transport, "next_tx_seq": c.next_tx_seq,
                        "next_rx_seq": c.next_rx_seq, "flags": flags(c.flags), "tos": c.tos})
                    )
                    .collect::<Vec<_>>())
            }),
            Category::Recv | Category::Send | Category::Retrans => {
                let opt = match c {
                    Category::Recv => kinfo::RECV_MESSAGES,
                    Category::Send => kinfo::SEND_MESSAGES,
                    _ => kinfo::RETRANS_MESSAGES,
                };
                k.messages(opt, all).map_or_else(e, |v| {
                    json!(v
                        .iter()
                        .map(|m| json!({"local": m.local.to_string(),
                            "peer": m.peer.to_string(), "seq": m.seq, "len": m.len}))
                        .collect::<Vec<_>>())
                })
            }
            Category::Tcp => k.tcp(all).map_or_else(e, |v| {
                json!(v
                    .iter()
                    .map(
                        |t| json!({"local": t.local.to_string(), "peer": t.peer.to_string(),
                        "hdr_rem": t.hdr_rem, "data_rem": t.data_rem,
                        "last_sent_nxt": t.last_sent_nxt,
                        "last_expected_una": t.last_expected_una,
                        "last_seen_una": t.last_seen_una})
                    )
                    .collect::<Vec<_>>())
            }),
            Category::Ib => k.ib(all).map_or_else(e, |v| {
                json!(v
                    .iter()
                    .map(
                        |i| json!({"src": i.src.to_string(), "dst": i.dst.to_string(),
                        "src_gid": i.src_gid.to_string(), "dst_gid": i.dst_gid.to_string(),
                        "tos": i.tos, "sl": i.sl})
                    )
                    .collect::<Vec<_>>())
            }),
            Category::Paths => continue,
        };
        let key = match c {
            Category::Ib => "ib",
            Category::Tcp => "tcp",
            Category::Counters => "counters",
            Category::Sockets => "sockets",
            Category::Connections => "connections",
            Category::Recv => "recv",
            Category::Send => "send",
            Category::Retrans => "retrans",
            Category::Paths => "paths",
        };
        map.insert(key.into(), v);
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{render, Layout};

    #[test]
    fn flag_letters() {
        assert_eq!(flags(0), "----");
        assert_eq!(flags(CONN_CONNECTED), "--C-");
        assert_eq!(flags(CONN_SENDING | CONN_CONNECTING | CONN_ERROR), "sc-E");
    }

    fn print(t: &Table, all: bool, verbose: u8) -> String {
        let mut s = String::new();
        let l = Layout {
            all_families: all,
            verbose,
            socket_pid: None,
        };
        render(&mut s, t, l);
        s
    }

    fn sock(bound: &str, connected: &str, inode: u64, pid_cong: Option<(u32, i32)>) -> KSock {
        KSock {
            bound: bound.parse().unwrap(),
            connected: connected.parse().unwrap(),
            sndbuf: 131072,
            rcvbuf: 262144,
            inode,
            pid_cong,
        }
    }

    #[test]
    fn sockets_2_0_7_and_2_3() {
        let rows = [
            sock("10.0.0.1:4000", "0.0.0.0:0", 5123, Some((0, 0))),
            sock("[fd00::1]:7", "[fd00::2]:9", 3, Some((0, -1))),
            sock("10.0.0.2:1", "10.0.0.3:2", 4, None),
        ];
        let t = |all| Table::Sockets(rows.iter().map(|s| sock_row(s, all)).collect());
        assert_eq!(
            print(&t(false), false, 0),
            "\nRDS Sockets:\n\
             \x20     BoundAddr BPort        ConnAddr CPort     SndBuf     RcvBuf    Inode\n\
             \x20      10.0.0.1  4000         0.0.0.0     0     131072     262144     5123\n\
             \x20      10.0.0.2     1        10.0.0.3     2     131072     262144        4\n"
        );
        // -a: the IPv6 socket too, and Cong as the original maps it (0: -1, -1: 0); pid 0
        // names no process, so those rows end after Cong.
        let s = print(&t(true), true, 0);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 6, "{s}");
        assert_eq!(
            lines[2],
            format!(
                "{:>37} BPort {:>37} CPort     SndBuf     RcvBuf    Inode     Cong        Pid             Comm",
                "BoundAddr", "ConnAddr"
            )
        );
        assert_eq!(
            lines[3],
            format!(
                "{:>37}  4000 {:>37}     0     131072     262144     5123       -1",
                "10.0.0.1", "0.0.0.0"
            )
        );
        assert_eq!(
            lines[4],
            format!(
                "{:>37}     7 {:>37}     9     131072     262144        3        0",
                "fd00::1", "fd00::2"
            )
        );
        assert!(lines[5].ends_with("        4       -1"), "{s}");
        // A pid whose comm can be read: its Pid and Comm columns.
        let me = std::process::id();
        let comm = proc_comm(me).expect("this process's comm");
        let row = sock_row(&sock("10.0.0.1:1", "0.0.0.0:0", 1, Some((me, 5))), true);
        assert_eq!((row.cong, row.owner), (5, Some((me, comm))));
        assert_eq!(
            sock_row(&sock("10.0.0.1:1", "0.0.0.0:0", 1, Some((me, 5))), false).owner,
            None
        );
    }

    #[test]
    fn connections_tos_flags_and_transport() {
        let rows = [
            KConn {
                next_tx_seq: 12,
                next_rx_seq: 5,
                laddr: "10.0.0.1".parse().unwrap(),
                faddr: "10.0.0.2".parse().unwrap(),
                transport: "tcp".into(),
                flags: CONN_SENDING | CONN_CONNECTED,
                tos: 3,
            },
            KConn {
                next_tx_seq: 1,
                next_rx_seq: 1,
                laddr: "fd00::1".parse().unwrap(),
                faddr: "fd00::2".parse().unwrap(),
                transport: "infiniband".into(),
                flags: CONN_ERROR,
                tos: 0,
            },
        ];
        let t = Table::Connections(rows.iter().map(conn_row).collect());
        assert_eq!(
            print(&t, false, 1),
            "\nRDS Connections:\n\
             \x20     LocalAddr      RemoteAddr  Tos           NextTX           NextRX Flgs\n\
             \x20      10.0.0.1        10.0.0.2    3               12                5 s-C-  transport=tcp\n"
        );
        assert!(print(&t, true, 0).ends_with(&format!(
            "{:>37} {:>37}    0                1                1 ---E\n",
            "fd00::1", "fd00::2"
        )));
    }

    #[test]
    fn messages_keep_their_tos() {
        let m = KMsg {
            seq: 11,
            len: 1048576,
            local: "10.0.0.1:4000".parse().unwrap(),
            peer: "10.0.0.2:5000".parse().unwrap(),
            flags: 0,
            tos: 2,
        };
        assert_eq!(
            print(
                &Table::Messages(Category::Send, vec![msg_row(&m)]),
                false,
                0
            ),
            "\nSend Message Queue:\n\
             \x20     LocalAddr LPort      RemoteAddr RPort  Tos              Seq      Bytes\n\
             \x20      10.0.0.1  4000        10.0.0.2  5000    2               11    1048576\n"
        );
    }

    #[test]
    fn ib_gids_limits_and_no_queue_pairs() {
        let i = KIb {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.3".parse().unwrap(),
            src_gid: "fe80::1".parse().unwrap(),
            dst_gid: "fe80::3".parse().unwrap(),
            limits: [256, 1024, 8, 4096, 257],
            tos: 1,
            sl: 2,
            cache_allocs: 6,
        };
        let t = Table::Ib(vec![ib_row(&i)]);
        let gids = format!("{:>32} {:>32}", "fe80::1", "fe80::3");
        assert_eq!(
            print(&t, false, 1),
            format!(
                "\nRDS IB Connections:\n\
                 \x20     LocalAddr      RemoteAddr  Tos  SL {:>32} {:>32}\n\
                 \x20      10.0.0.1        10.0.0.3    1   2 {gids}  send_wr=256, recv_wr=1024, \
                 send_sge=8, rdma_mr_max=4096, rdma_mr_size=257, cache_allocs=6\n",
                "LocalDev", "RemoteDev"
            )
        );
        assert!(print(&t, true, 0).ends_with(&format!("{gids}          0          0\n")));
    }
}
