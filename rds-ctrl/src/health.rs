//! `health`: a node's health as a monitoring plugin reports it ([`crate::plugin`]), followed
//! by a report for operators.
//!
//! The first line is `RDS STATUS - summary | perfdata`, and the exit status is the plugin's:
//! 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN. What each finding weighs (rds-ctrl(8), HEALTH):
//!
//! - CRITICAL: a connection whose first path is not up while messages wait on it (they are
//!   not getting through: a peer that went away or refuses);
//! - WARNING: a connection whose first path is not up with nothing waiting (a peer gone
//!   quiet, or one connecting right now), a congested socket (its reader falls behind);
//! - UNKNOWN: no node to ask, or its state cannot be read.
//!
//! Counters (resets, drops, memory bounds hit) only go up over a node's life, so they weigh
//! nothing here: they are perfdata (and metrics, `stats --format prometheus`), for rates and
//! alerts of the monitoring system. The report that follows the first line: who and how long,
//! every connection with its paths, reconnects and queues, drop counters, congestion, and the
//! findings.

use std::io::Write;

use rds_core::ctl::client::NodeHello;
use rds_core::ctl::InfoSnapshot;
use rds_core::info::{ConnInfo, PathState};

use crate::plugin::{self, Perf, Status};
use crate::util;

/// The service name of the status line.
pub const SERVICE: &str = "RDS";

/// The connection table's style: a line under the header, columns apart, no `|`.
const TABLE_STYLE: &str = "     -             ";

/// How many findings the summary names (the report lists every one).
const SUMMARY_FINDINGS: usize = 3;

/// Counters that count lost or refused work.
pub const DROP_COUNTERS: &[&str] = &[
    "conn_reset",
    "recv_drop_bad_checksum",
    "recv_drop_old_seq",
    "recv_drop_no_sock",
    "recv_drop_dead_sock",
    "send_queue_full",
    "send_stuck_rm",
    "conn_drop_bad_frame",
    "conn_drop_oversize",
    "conn_drop_bad_cong_map",
    "send_drop_peer_restart",
    "tcp_sndbuf_full",
];

/// Counters of the node's memory bounds: work refused or dropped because a per-connection pong
/// cap, a socket's receive queue cap or the node budget (`net.rds.mem_budget`) was reached.
pub const BOUND_COUNTERS: &[&str] = &[
    "mem_send_error",
    "recv_drop_no_mem",
    "recv_drop_rcvq_full",
    "send_pong_drop_full",
    "send_pong_drop_down",
    "conn_refused_no_mem",
];

/// The report's line about memory bounds: the counters of [`BOUND_COUNTERS`] that are not
/// zero, or `None` when none was hit.
pub fn bounds_line(snap: &InfoSnapshot) -> Option<String> {
    let hit: Vec<String> = BOUND_COUNTERS
        .iter()
        .filter_map(|n| {
            counter(snap, n)
                .filter(|&v| v > 0)
                .map(|v| format!("{n} {v}"))
        })
        .collect();
    (!hit.is_empty()).then(|| format!("  memory bounds hit: {}", hit.join(", ")))
}

/// Counters about congestion.
pub const CONG_COUNTERS: &[&str] = &[
    "cong_update_queued",
    "cong_update_received",
    "cong_send_error",
    "cong_send_blocked",
];

fn counter(snap: &InfoSnapshot, name: &str) -> Option<u64> {
    snap.counters
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| *v)
}

fn paths_up(c: &ConnInfo) -> usize {
    c.paths.iter().filter(|p| p.state == PathState::Up).count()
}

/// A problem found in a snapshot: how much it weighs and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// [`Status::Warning`] or [`Status::Critical`].
    pub status: Status,
    /// One line.
    pub text: String,
}

/// The messages waiting on a connection: queued to send, or sent and not acknowledged.
fn waiting(c: &ConnInfo) -> usize {
    c.paths
        .iter()
        .map(|p| p.send_queued + p.retrans_queued)
        .sum()
}

/// Problems found in a snapshot, the most severe first (in snapshot order within a severity).
pub fn findings(snap: &InfoSnapshot) -> Vec<Finding> {
    let mut f = Vec::new();
    for c in &snap.connections {
        let Some(p0) = c.paths.first().filter(|p| p.state != PathState::Up) else {
            continue;
        };
        let queued = waiting(c);
        f.push(Finding {
            status: if queued > 0 {
                Status::Critical
            } else {
                Status::Warning
            },
            text: format!(
                "connection {} -> {} is {} ({queued} message(s) waiting)",
                rds_info::format::addr(c.laddr),
                rds_info::format::addr(c.faddr),
                p0.state.name(),
            ),
        });
    }
    for s in snap.sockets.iter().filter(|s| s.congested) {
        f.push(Finding {
            status: Status::Warning,
            text: format!(
                "socket {} is congested (its receive queue is over its receive buffer)",
                s.bound
                    .map_or_else(|| "unbound".to_string(), |a| a.to_string())
            ),
        });
    }
    f.sort_by_key(|x| std::cmp::Reverse(x.status));
    f
}

/// One row of the health report's connection table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnRow {
    /// Local address.
    pub local: String,
    /// Peer address.
    pub peer: String,
    /// Transport.
    pub transport: String,
    /// State of path 0 (`-` when it has no path).
    pub path0: String,
    /// Paths up.
    pub paths_up: usize,
    /// Paths.
    pub paths: usize,
    /// Reconnects over all paths.
    pub reconnects: u64,
    /// Messages queued to send.
    pub send_queued: usize,
    /// Messages sent and waiting for their acknowledgement.
    pub retrans_queued: usize,
    /// Path 0's next sequence number to send.
    pub next_tx: u64,
    /// Path 0's next sequence number expected.
    pub next_rx: u64,
}

/// The health report's facts, gathered once and printed as text or JSON.
#[derive(Debug, Clone)]
pub struct Health {
    /// Who the node is.
    pub hello: NodeHello,
    /// How long its process has run, when known.
    pub uptime: Option<std::time::Duration>,
    /// The node's transports.
    pub transports: Vec<String>,
    /// Why IB is not there (`None` when it is, or when the node gave no reason).
    pub ib_missing: Option<String>,
    /// Whether the node runs IB.
    pub has_ib: bool,
    /// Bound sockets.
    pub sockets: usize,
    /// Congested sockets.
    pub congested: usize,
    /// Connections whose path 0 is up.
    pub up: usize,
    /// Connections whose path 0 is not up while messages wait on them.
    pub stalled: usize,
    /// The connection table.
    pub connections: Vec<ConnRow>,
    /// [`DROP_COUNTERS`] the node has.
    pub drops: Vec<(String, u64)>,
    /// [`BOUND_COUNTERS`] the node has.
    pub bounds: Vec<(String, u64)>,
    /// [`CONG_COUNTERS`] the node has.
    pub congestion: Vec<(String, u64)>,
    /// Problems, the most severe first.
    pub findings: Vec<Finding>,
}

impl Health {
    /// Gathers the report from the node's hello and snapshot.
    pub fn new(hello: NodeHello, snap: &InfoSnapshot) -> Health {
        let pick = |names: &[&str]| -> Vec<(String, u64)> {
            names
                .iter()
                .filter_map(|n| counter(snap, n).map(|v| (n.to_string(), v)))
                .collect()
        };
        let connections = snap
            .connections
            .iter()
            .map(|c| {
                let p0 = c.paths.first();
                ConnRow {
                    local: rds_info::format::addr(c.laddr),
                    peer: rds_info::format::addr(c.faddr),
                    transport: c.kind.name().to_string(),
                    path0: p0.map_or("-", |p| p.state.name()).to_string(),
                    paths_up: paths_up(c),
                    paths: c.paths.len(),
                    reconnects: c.paths.iter().map(|p| p.ups.saturating_sub(1)).sum(),
                    send_queued: c.paths.iter().map(|p| p.send_queued).sum(),
                    retrans_queued: c.paths.iter().map(|p| p.retrans_queued).sum(),
                    next_tx: p0.map_or(0, |p| p.next_tx_seq),
                    next_rx: p0.map_or(0, |p| p.next_rx_seq),
                }
            })
            .collect();
        let has_ib = rds_info::node::has_ib(snap);
        Health {
            uptime: util::pid_uptime(hello.pid),
            hello,
            transports: snap.transports.clone(),
            ib_missing: if has_ib {
                None
            } else {
                snap.ib_unavailable.clone()
            },
            has_ib,
            sockets: snap.sockets.len(),
            congested: snap.sockets.iter().filter(|s| s.congested).count(),
            up: snap
                .connections
                .iter()
                .filter(|c| c.paths.first().is_some_and(|p| p.state == PathState::Up))
                .count(),
            stalled: snap
                .connections
                .iter()
                .filter(|c| {
                    c.paths.first().is_some_and(|p| p.state != PathState::Up) && waiting(c) > 0
                })
                .count(),
            connections,
            drops: pick(DROP_COUNTERS),
            bounds: pick(BOUND_COUNTERS),
            congestion: pick(CONG_COUNTERS),
            findings: findings(snap),
        }
    }

    /// The verdict: the most severe finding's, OK without any.
    pub fn status(&self) -> Status {
        self.findings
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Ok)
    }

    /// The texts of the findings of one severity.
    fn texts(&self, status: Status) -> Vec<&str> {
        self.findings
            .iter()
            .filter(|f| f.status == status)
            .map(|f| f.text.as_str())
            .collect()
    }

    /// The status line's summary: the node, then how many connections are up and how many
    /// sockets are bound, or the first findings.
    pub fn summary(&self) -> String {
        let node = format!("node '{}'", self.hello.node);
        if self.findings.is_empty() {
            return format!(
                "{node}: {} connection(s) up, {} socket(s)",
                self.up, self.sockets
            );
        }
        let mut shown: Vec<&str> = self
            .findings
            .iter()
            .take(SUMMARY_FINDINGS)
            .map(|f| f.text.as_str())
            .collect();
        let more = self.findings.len() - shown.len();
        let more = format!("{more} more");
        if self.findings.len() > SUMMARY_FINDINGS {
            shown.push(&more);
        }
        format!("{node}: {}", shown.join("; "))
    }

    /// The perfdata: connections (all, up, not up: warning above 0, stalled: critical above
    /// 0), sockets (bound, congested: warning above 0), the messages waiting on connections,
    /// then counters (`c`): resets (`conn_reset`), drops (the other [`DROP_COUNTERS`] added
    /// up) and bounds hit ([`BOUND_COUNTERS`] added up), and the node's uptime when known.
    pub fn perfdata(&self) -> Vec<Perf> {
        let n = self.connections.len();
        let waiting = |c: &ConnRow| c.send_queued + c.retrans_queued;
        let sum = |v: &[(String, u64)], skip: &str| -> u64 {
            v.iter()
                .filter(|(n, _)| n != skip)
                .fold(0u64, |a, (_, v)| a.saturating_add(*v))
        };
        let resets = self
            .drops
            .iter()
            .find(|(n, _)| n == "conn_reset")
            .map_or(0, |(_, v)| *v);
        let mut p = vec![
            Perf::new("connections", n as u64, ""),
            Perf::new("connections_up", self.up as u64, ""),
            Perf::new("connections_not_up", (n - self.up) as u64, "").warn("0"),
            Perf::new("connections_stalled", self.stalled as u64, "").crit("0"),
            Perf::new("sockets", self.sockets as u64, ""),
            Perf::new("sockets_congested", self.congested as u64, "").warn("0"),
            Perf::new(
                "messages_waiting",
                self.connections.iter().map(waiting).sum::<usize>() as u64,
                "",
            ),
            Perf::new("resets", resets, "c"),
            Perf::new("drops", sum(&self.drops, "conn_reset"), "c"),
            Perf::new("bounds_hit", sum(&self.bounds, ""), "c"),
        ];
        if let Some(u) = self.uptime {
            p.push(Perf::new("uptime", u.as_secs(), "s"));
        }
        p
    }

    /// The first line: `RDS STATUS - summary | perfdata`.
    pub fn status_line(&self) -> String {
        plugin::line(SERVICE, self.status(), &self.summary(), &self.perfdata())
    }

    /// The report as one JSON document (see JSON SCHEMA in rds-ctrl(8)).
    pub fn json(&self) -> serde_json::Value {
        let h = &self.hello;
        let connections: Vec<serde_json::Value> = self
            .connections
            .iter()
            .map(|c| {
                serde_json::json!({
                    "local": c.local,
                    "peer": c.peer,
                    "transport": c.transport,
                    "path0": c.path0,
                    "paths_up": c.paths_up,
                    "paths": c.paths,
                    "reconnects": c.reconnects,
                    "send_queued": c.send_queued,
                    "retrans_queued": c.retrans_queued,
                    "next_tx": c.next_tx,
                    "next_rx": c.next_rx,
                })
            })
            .collect();
        serde_json::json!({
            "node": h.node,
            "pid": h.pid,
            "version": h.version,
            "rds_protocol": h.rds_protocol,
            "uptime_s": self.uptime.map(|d| d.as_secs()),
            "addresses": h.addrs.iter().map(|a| rds_info::format::addr(*a)).collect::<Vec<_>>(),
            "transports": self.transports,
            "ib_unavailable": self.ib_missing,
            "sockets": {"bound": self.sockets, "congested": self.congested},
            "connections": connections,
            "drops": util::counters_json(self.drops.clone()),
            "bounds": util::counters_json(self.bounds.clone()),
            "congestion": util::counters_json(self.congestion.clone()),
            "status": self.status().name(),
            "critical": self.texts(Status::Critical),
            "warnings": self.texts(Status::Warning),
            "healthy": self.findings.is_empty(),
        })
    }

    /// Prints the status line, then the report (the plugin's long output: no `|` in it).
    ///
    /// # Errors
    /// Write errors.
    pub fn text(&self, out: &mut dyn Write) -> anyhow::Result<()> {
        writeln!(out, "{}", self.status_line())?;
        let mut report = Vec::new();
        self.report(&mut report)?;
        out.write_all(plugin::clean_lines(&String::from_utf8_lossy(&report)).as_bytes())?;
        Ok(())
    }

    /// The report after the status line.
    fn report(&self, out: &mut dyn Write) -> anyhow::Result<()> {
        let h = &self.hello;
        writeln!(
            out,
            "RDS health report for node '{}' (pid {}, rds-tools {}, RDS protocol {})",
            h.node, h.pid, h.version, h.rds_protocol
        )?;
        let uptime = self
            .uptime
            .map_or_else(|| "unknown".into(), util::human_duration);
        writeln!(out, "  uptime:      {uptime}")?;
        writeln!(
            out,
            "  addresses:   {}",
            h.addrs
                .iter()
                .map(|a| rds_info::format::addr(*a))
                .collect::<Vec<_>>()
                .join(" ")
        )?;
        let ib = if self.has_ib {
            String::new()
        } else if let Some(why) = &self.ib_missing {
            format!(" (IB: unavailable: {why})")
        } else {
            " (IB: not available)".to_string()
        };
        writeln!(out, "  transports:  {}{ib}", self.transports.join(", "))?;
        writeln!(
            out,
            "  sockets:     {} bound, {} congested",
            self.sockets, self.congested
        )?;
        let n = self.connections.len();
        writeln!(
            out,
            "  connections: {n} ({} up, {} not up)",
            self.up,
            n - self.up
        )?;
        if n > 0 {
            let mut t = rds_cli::table(vec![
                "Local",
                "Peer",
                "Trans",
                "Path 0",
                "Paths up",
                "Reconnects",
                "SendQ",
                "RetransQ",
                "NextTX",
                "NextRX",
            ]);
            // No `|`: this is the plugin's long output, where `|` starts perfdata.
            t.load_preset(TABLE_STYLE);
            for c in &self.connections {
                t.add_row(vec![
                    c.local.clone(),
                    c.peer.clone(),
                    c.transport.clone(),
                    c.path0.clone(),
                    format!("{}/{}", c.paths_up, c.paths),
                    c.reconnects.to_string(),
                    c.send_queued.to_string(),
                    c.retrans_queued.to_string(),
                    c.next_tx.to_string(),
                    c.next_rx.to_string(),
                ]);
            }
            for c in t.column_iter_mut() {
                c.set_padding((0, 2));
            }
            for line in t.to_string().lines() {
                writeln!(out, "  {}", line.trim_end())?;
            }
        }
        let list = |v: &[(String, u64)]| -> String {
            v.iter()
                .map(|(n, v)| format!("{n} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        writeln!(out, "  resets and drops: {}", list(&self.drops))?;
        let hit: Vec<(String, u64)> = self.bounds.iter().filter(|b| b.1 > 0).cloned().collect();
        if !hit.is_empty() {
            writeln!(out, "  memory bounds hit: {}", list(&hit))?;
        }
        writeln!(
            out,
            "  congestion:  {}; {} congested socket(s)",
            list(&self.congestion),
            self.congested
        )?;
        if self.findings.is_empty() {
            writeln!(out, "verdict: healthy")?;
        } else {
            writeln!(
                out,
                "verdict: {}: {} critical, {} warning(s)",
                self.status().name(),
                self.texts(Status::Critical).len(),
                self.texts(Status::Warning).len()
            )?;
            for f in &self.findings {
                writeln!(out, "  - {}: {}", f.status.name(), f.text)?;
            }
        }
        Ok(())
    }
}

/// `health`: the status line and the report (or one JSON document with `json`) of the node
/// the command acts on; returns the plugin's exit status. No node to ask, or a state it cannot
/// read, is UNKNOWN (3): `RDS UNKNOWN - why` (with `json`: `{"status": "UNKNOWN", "error":
/// why}`).
///
/// # Errors
/// Write errors only.
pub fn command(out: &mut dyn Write, node: Option<&str>, json: bool) -> anyhow::Result<u8> {
    let read = crate::connect(node).and_then(|mut c| {
        let snap = c.info()?;
        Ok(Health::new(c.hello.clone(), &snap))
    });
    let h = match read {
        Ok(h) => h,
        Err(e) => {
            let why = format!("{e:#}");
            if json {
                util::print_json(
                    out,
                    &serde_json::json!({"status": Status::Unknown.name(), "error": why}),
                )?;
            } else {
                writeln!(out, "{}", plugin::line(SERVICE, Status::Unknown, &why, &[]))?;
            }
            return Ok(Status::Unknown.code());
        }
    };
    if json {
        util::print_json(out, &h.json())?;
    } else {
        h.text(out)?;
    }
    Ok(h.status().code())
}

#[cfg(test)]
mod tests {
    use super::*;

    use rds_core::info::{ConnInfo, SockInfo};

    fn conn(faddr: &str, state: PathState, send: usize, retrans: usize) -> ConnInfo {
        serde_json::from_value(serde_json::json!({
            "id": 1, "laddr": "10.0.0.1", "faddr": faddr, "kind": "tcp", "npaths": 1,
            "peer_gen": 0,
            "paths": [{"index": 0, "state": state, "next_tx_seq": 5, "next_rx_seq": 3,
                "send_queued": send, "retrans_queued": retrans, "sending": false, "ups": 2,
                "draining": false, "reconnect_pending": false}],
        }))
        .unwrap()
    }

    fn sock(port: u16, congested: bool) -> SockInfo {
        serde_json::from_value(serde_json::json!({
            "id": port, "bound": format!("10.0.0.1:{port}"), "connected": null,
            "sndbuf": 1, "rcvbuf": 1, "snd_bytes": 0, "rcv_bytes": 0, "congested": congested,
            "transport": "tcp",
        }))
        .unwrap()
    }

    fn health(snap: &InfoSnapshot) -> Health {
        let hello = NodeHello {
            node: "n|1".into(),
            version: "0.1.0".into(),
            rds_protocol: "3.1".into(),
            // No such process: no uptime, no uptime perfdata.
            pid: u32::MAX,
            owner_uid: 0,
            addrs: vec!["10.0.0.1".parse().unwrap()],
        };
        Health::new(hello, snap)
    }

    fn snap(connections: Vec<ConnInfo>, sockets: Vec<SockInfo>) -> InfoSnapshot {
        let mut counters: Vec<(String, u64)> =
            DROP_COUNTERS.iter().map(|n| (n.to_string(), 1)).collect();
        counters[0].1 = 4; // conn_reset
        counters.extend(BOUND_COUNTERS.iter().map(|n| (n.to_string(), 2)));
        InfoSnapshot {
            connections,
            sockets,
            counters,
            transports: vec!["tcp".into()],
            ..InfoSnapshot::default()
        }
    }

    #[test]
    fn healthy_is_ok() {
        let h = health(&snap(
            vec![conn("10.0.0.2", PathState::Up, 3, 1)],
            vec![sock(4000, false)],
        ));
        assert_eq!(h.status(), Status::Ok);
        assert_eq!(
            h.status_line(),
            "RDS OK - node 'n/1': 1 connection(s) up, 1 socket(s) | connections=1;;;0 \
             connections_up=1;;;0 connections_not_up=0;0;;0 connections_stalled=0;;0;0 \
             sockets=1;;;0 sockets_congested=0;0;;0 messages_waiting=4;;;0 resets=4c;;;0 \
             drops=11c;;;0 bounds_hit=12c;;;0"
        );
        assert_eq!(h.json()["status"], "OK");
        assert_eq!(h.json()["healthy"], true);
    }

    #[test]
    fn what_weighs_what() {
        // A congested socket, a connection down with nothing waiting: warnings.
        let h = health(&snap(
            vec![
                conn("10.0.0.2", PathState::Up, 0, 0),
                conn("10.0.0.3", PathState::Down, 0, 0),
            ],
            vec![sock(4000, true)],
        ));
        assert_eq!(h.status(), Status::Warning);
        assert_eq!(
            h.summary(),
            "node 'n|1': connection 10.0.0.1 -> 10.0.0.3 is DOWN (0 message(s) waiting); \
             socket 10.0.0.1:4000 is congested (its receive queue is over its receive buffer)"
        );
        // A connection not up with messages waiting: critical, named first.
        let h = health(&snap(
            vec![
                conn("10.0.0.3", PathState::Down, 0, 0),
                conn("10.0.0.4", PathState::Connecting, 0, 2),
                conn("10.0.0.5", PathState::Error, 1, 0),
                conn("10.0.0.6", PathState::Up, 1, 0),
            ],
            vec![sock(4000, true), sock(4001, false)],
        ));
        assert_eq!(h.status(), Status::Critical);
        assert_eq!(h.status().code(), 2);
        let line = h.status_line();
        assert!(
            line.starts_with(
                "RDS CRITICAL - node 'n/1': connection 10.0.0.1 -> 10.0.0.4 is CONNECTING (2 \
                 message(s) waiting); connection 10.0.0.1 -> 10.0.0.5 is ERROR (1 message(s) \
                 waiting); connection 10.0.0.1 -> 10.0.0.3 is DOWN (0 message(s) waiting); 1 \
                 more | connections=4;;;0 connections_up=1;;;0 connections_not_up=3;0;;0 \
                 connections_stalled=2;;0;0 sockets=2;;;0 sockets_congested=1;0;;0 \
                 messages_waiting=4;;;0 "
            ),
            "{line}"
        );
        let j = h.json();
        assert_eq!(j["status"], "CRITICAL");
        assert_eq!(j["critical"].as_array().unwrap().len(), 2);
        assert_eq!(j["warnings"].as_array().unwrap().len(), 2);
        assert_eq!(j["healthy"], false);
        // The text: the status line first, then no `|` at all.
        let mut out = Vec::new();
        h.text(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let (first, rest) = text.split_once('\n').unwrap();
        assert_eq!(first, line);
        assert!(!rest.contains('|'), "{rest}");
        assert!(
            rest.starts_with("RDS health report for node 'n/1' (pid "),
            "{rest}"
        );
        assert!(
            rest.ends_with(
                "verdict: CRITICAL: 2 critical, 2 warning(s)\n\
                 \x20 - CRITICAL: connection 10.0.0.1 -> 10.0.0.4 is CONNECTING (2 message(s) \
                 waiting)\n\
                 \x20 - CRITICAL: connection 10.0.0.1 -> 10.0.0.5 is ERROR (1 message(s) \
                 waiting)\n\
                 \x20 - WARNING: connection 10.0.0.1 -> 10.0.0.3 is DOWN (0 message(s) \
                 waiting)\n\
                 \x20 - WARNING: socket 10.0.0.1:4000 is congested (its receive queue is over \
                 its receive buffer)\n"
            ),
            "{rest}"
        );
        assert!(
            rest.contains(&format!(
                "\n  Local     Peer      Trans  Path 0      Paths up  Reconnects  SendQ  RetransQ  \
                 NextTX  NextRX\n  {}\n  10.0.0.1  10.0.0.3  tcp    DOWN        0/1       \
                 1           0      0         5       3\n  10.0.0.1  10.0.0.4  tcp    CONNECTING  \
                 0/1       1           0      2         5       3\n",
                "-".repeat(94)
            )),
            "{rest}"
        );
    }

    #[test]
    fn bounds_line_lists_the_counters_hit() {
        let mut snap = InfoSnapshot {
            counters: BOUND_COUNTERS.iter().map(|n| (n.to_string(), 0)).collect(),
            ..InfoSnapshot::default()
        };
        assert_eq!(bounds_line(&snap), None);
        snap.counters[1].1 = 7;
        snap.counters[3].1 = 1000;
        assert_eq!(
            bounds_line(&snap).as_deref(),
            Some("  memory bounds hit: recv_drop_no_mem 7, send_pong_drop_full 1000")
        );
    }
}
