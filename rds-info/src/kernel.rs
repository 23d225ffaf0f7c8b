//! `rds-info` on the kernel's RDS: the same tables, read as the original reads them, from the
//! kernel's `RDS_INFO_*` getsockopts ([`rds_core::kernel::info`]). Widths follow [`format`]'s
//! rules (rds-tools 2.0.7, or 2.3 with `-a`, which also asks for the `RDS6_` tables and falls
//! back to the IPv4 one where the kernel has none). A table the kernel cannot give (no
//! `rds_rdma` for `-I`, no handler for `-p` upstream) is reported on stderr with the original's
//! message and is not fatal.
//!
//! [`format`]: crate::format

use std::fmt::Write as _;
use std::io;
use std::net::{IpAddr, SocketAddr};

use rds_core::kernel::info::{
    self as kinfo, KernelInfo, CONN_CONNECTED, CONN_CONNECTING, CONN_ERROR, CONN_SENDING,
};

use crate::format::{addr, proc_comm, Category};

/// `RDS_INFO_CONN_PATHS` (UEK only).
const CONN_PATHS: i32 = 10020;

fn w(all: bool) -> usize {
    if all {
        37
    } else {
        15
    }
}

fn title(out: &mut String, t: &str) {
    out.push('\n');
    out.push_str(t);
    out.push_str(":\n");
}

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

fn shows(all: bool, ips: &[IpAddr]) -> bool {
    all || ips
        .iter()
        .all(|ip| rds_core::info::canonical(*ip).is_ipv4())
}

fn sa(a: SocketAddr) -> (String, u16) {
    (addr(a.ip()), a.port())
}

/// Prints one category from the kernel into `out`, or returns the line for stderr.
///
/// # Errors
/// The original's message when the kernel refuses the table.
pub fn category(
    k: &KernelInfo,
    out: &mut String,
    c: Category,
    all: bool,
    verbose: u8,
) -> Result<(), String> {
    let fail = |e: io::Error| {
        format!(
            "rds-info: Unable to get statistics to process the \"{}\" info request: {e}",
            c.description()
        )
    };
    let w = w(all);
    match c {
        Category::Counters => {
            let cw = if all { 32 } else { 25 };
            let rows = k.counters().map_err(fail)?;
            title(out, "Counters");
            let _ = writeln!(out, "{:>cw$} {:>16}", "CounterName", "Value");
            for (n, v) in rows {
                let _ = writeln!(out, "{n:>cw$} {v:>16}");
            }
        }
        Category::Sockets => {
            let rows = k.sockets(all).map_err(fail)?;
            title(out, "RDS Sockets");
            let _ = write!(
                out,
                "{:>w$} {:>5} {:>w$} {:>5} {:>10} {:>10} {:>8}",
                "BoundAddr", "BPort", "ConnAddr", "CPort", "SndBuf", "RcvBuf", "Inode"
            );
            if all {
                let _ = write!(out, " {:>8} {:>10} {:>16}", "Cong", "Pid", "Comm");
            }
            out.push('\n');
            for s in rows {
                if !shows(all, &[s.bound.ip()]) {
                    continue;
                }
                let (ba, bp) = sa(s.bound);
                let (ca, cp) = sa(s.connected);
                let _ = write!(
                    out,
                    "{ba:>w$} {bp:>5} {ca:>w$} {cp:>5} {:>10} {:>10} {:>8}",
                    s.sndbuf, s.rcvbuf, s.inode
                );
                if all {
                    let (pid, cong) = s.pid_cong.unwrap_or((0, 0));
                    // The original's mapping: 0 (no support) as -1, -1 (not congested) as 0.
                    let shown = match cong {
                        0 => -1,
                        -1 => 0,
                        v => v,
                    };
                    let _ = write!(out, " {shown:>8}");
                    if let Some(comm) = proc_comm(pid) {
                        let _ = write!(out, " {pid:>10} {comm:>16}");
                    }
                }
                out.push('\n');
            }
        }
        Category::Connections => {
            let rows = k.connections(all).map_err(fail)?;
            title(out, "RDS Connections");
            let _ = writeln!(
                out,
                "{:>w$} {:>w$} {:>4} {:>16} {:>16} {:>4}",
                "LocalAddr", "RemoteAddr", "Tos", "NextTX", "NextRX", "Flgs"
            );
            for c in rows {
                if !shows(all, &[c.laddr, c.faddr]) {
                    continue;
                }
                let _ = write!(
                    out,
                    "{:>w$} {:>w$} {:>4} {:>16} {:>16} {}",
                    addr(c.laddr),
                    addr(c.faddr),
                    c.tos,
                    c.next_tx_seq,
                    c.next_rx_seq,
                    flags(c.flags)
                );
                if verbose > 0 {
                    let _ = write!(out, "  transport={}", c.transport);
                }
                out.push('\n');
            }
        }
        Category::Recv | Category::Send | Category::Retrans => {
            let (opt, which) = match c {
                Category::Recv => (kinfo::RECV_MESSAGES, "Receive"),
                Category::Send => (kinfo::SEND_MESSAGES, "Send"),
                _ => (kinfo::RETRANS_MESSAGES, "Retransmit"),
            };
            let rows = k.messages(opt, all).map_err(fail)?;
            title(out, &format!("{which} Message Queue"));
            let _ = writeln!(
                out,
                "{:>w$} {:>5} {:>w$} {:>5} {:>4} {:>16} {:>10}",
                "LocalAddr", "LPort", "RemoteAddr", "RPort", "Tos", "Seq", "Bytes"
            );
            for m in rows {
                if !shows(all, &[m.local.ip(), m.peer.ip()]) {
                    continue;
                }
                let (la, lp) = sa(m.local);
                let (fa, fp) = sa(m.peer);
                let _ = writeln!(
                    out,
                    "{la:>w$} {lp:>5} {fa:>w$} {fp:>5} {:>4} {:>16} {:>10}",
                    m.tos, m.seq, m.len
                );
            }
        }
        Category::Tcp => {
            let rows = k.tcp(all).map_err(fail)?;
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
            for t in rows {
                if !shows(all, &[t.local.ip(), t.peer.ip()]) {
                    continue;
                }
                let (la, lp) = sa(t.local);
                let (fa, fp) = sa(t.peer);
                let _ = writeln!(
                    out,
                    "{la:>w$} {lp:>5} {fa:>w$} {fp:>5} {:>10} {:>10} {:>10} {:>10} {:>10}",
                    t.hdr_rem, t.data_rem, t.last_sent_nxt, t.last_expected_una, t.last_seen_una
                );
            }
        }
        Category::Ib => {
            let rows = k.ib(all).map_err(fail)?;
            title(out, "RDS IB Connections");
            let _ = write!(
                out,
                "{:>w$} {:>w$} {:>4} {:>3} {:>32} {:>32}",
                "LocalAddr", "RemoteAddr", "Tos", "SL", "LocalDev", "RemoteDev"
            );
            if all {
                let _ = write!(out, " {:>10} {:>10}", "SrcQPNo", "DstQPNo");
            }
            out.push('\n');
            for i in rows {
                if !shows(all, &[i.src, i.dst]) {
                    continue;
                }
                let _ = write!(
                    out,
                    "{:>w$} {:>w$} {:>4} {:>3} {:>32} {:>32}",
                    addr(i.src),
                    addr(i.dst),
                    i.tos,
                    i.sl,
                    i.src_gid.to_string(),
                    i.dst_gid.to_string()
                );
                if all {
                    // Upstream records carry no queue pair numbers.
                    let _ = write!(out, " {:>10} {:>10}", 0, 0);
                }
                if verbose > 0 {
                    let l = i.limits;
                    let _ = write!(
                        out,
                        "  send_wr={}, recv_wr={}, send_sge={}, rdma_mr_max={}, \
                         rdma_mr_size={}, cache_allocs={}",
                        l[0], l[1], l[2], l[3], l[4], i.cache_allocs
                    );
                }
                out.push('\n');
            }
        }
        Category::Paths => {
            // UEK only; upstream has no handler and says ENOPROTOOPT.
            let (_, each) = k.raw(CONN_PATHS).map_err(fail)?;
            title(out, "RDS Paths");
            let _ = writeln!(
                out,
                "(record size {each}: this kernel's paths layout is not decoded)"
            );
        }
    }
    Ok(())
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

    #[test]
    fn flag_letters() {
        assert_eq!(flags(0), "----");
        assert_eq!(flags(CONN_CONNECTED), "--C-");
        assert_eq!(flags(CONN_SENDING | CONN_CONNECTING | CONN_ERROR), "sc-E");
    }
}
