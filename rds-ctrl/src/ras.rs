//! `ras` and `health`.
//!
//! `ras [-p] LEVEL` sets what the node's event ring keeps (`net.rds.ras_level`, see
//! [`rds_core::ras`]; `-p` also saves it for the daemon's next start), `ras extract` prints
//! the ring with timestamps, and `ras` alone shows the level in force.
//!
//! `health` is a report of a node for operators: who and how long, every connection with its
//! paths, reconnects and queues, drop counters, congestion, and a verdict. Its exit status is
//! 1 when something needs attention (a connection not up, a congested socket).

use std::io::Write;

use anyhow::{bail, Context};
use rds_core::ctl::client::CtlClient;
use rds_core::ctl::{InfoSnapshot, Reply, Request};
use rds_core::info::{ConnInfo, PathState};
use rds_core::ras::{level_name, RasEvent, RING_CAP};
use rds_core::tunables::TunableDef;

use crate::{util, RasArg};

/// The tunable that holds the level.
pub const LEVEL_TUNABLE: &str = "net.rds.ras_level";

/// `ras [-p] [LEVEL|extract]`.
///
/// # Errors
/// No node to act on (and no `-p`), `-p` with `extract` or without a level, permission.
pub fn command(
    out: &mut dyn Write,
    node: Option<&str>,
    persistent: bool,
    what: Option<RasArg>,
    json: bool,
) -> anyhow::Result<u8> {
    let level = match what {
        Some(RasArg::Extract) if persistent => {
            bail!("ras: -p goes with a level (minimal, normal, detail, maximal), not extract")
        }
        Some(RasArg::Extract) => return extract(out, &mut crate::connect(node)?, json),
        None if persistent => {
            bail!("ras: -p needs a level (minimal, normal, detail, maximal)")
        }
        None => return show(out, &mut crate::connect(node)?, json),
        Some(RasArg::Minimal) => 1,
        Some(RasArg::Normal) => 2,
        Some(RasArg::Detail) => 3,
        Some(RasArg::Maximal) => 4,
    };
    let name = level_name(level).unwrap_or("normal");
    let client = if persistent {
        crate::try_connect(node)?
    } else {
        Some(crate::connect(node)?)
    };
    if let Some(mut c) = client {
        c.call_ok(&Request::TunableSet {
            name: LEVEL_TUNABLE.into(),
            value: u64::from(level),
        })
        .with_context(|| format!("cannot set the RAS level of node '{}'", c.hello.node))?;
        writeln!(out, "RAS level of node '{}' set to {name}", c.hello.node)?;
    }
    if persistent {
        let def = TunableDef::find(LEVEL_TUNABLE).context("the RAS level tunable is missing")?;
        let (_, mut c) = crate::persistent_values()?;
        c.set(def, u64::from(level));
        let path = crate::save_config(&c)?;
        writeln!(
            out,
            "saved RAS level {name} ({LEVEL_TUNABLE} = {level}) in {}",
            path.display()
        )?;
    }
    Ok(0)
}

/// `ras` alone: the level in force (with `json`: `{node, level, ras_level}`).
fn show(out: &mut dyn Write, c: &mut CtlClient, json: bool) -> anyhow::Result<u8> {
    let level = c
        .tunables()?
        .into_iter()
        .find(|(n, _)| n == LEVEL_TUNABLE)
        .map_or(0, |(_, v)| v);
    let name = u8::try_from(level)
        .ok()
        .and_then(level_name)
        .unwrap_or("unknown");
    if json {
        return util::print_json(
            out,
            &serde_json::json!({
                "node": c.hello.node,
                "level": name,
                "ras_level": level,
            }),
        );
    }
    writeln!(out, "RAS level of node '{}': {name}", c.hello.node)?;
    writeln!(
        out,
        "  set it: rds-ctrl ras [-p] minimal|normal|detail|maximal; events: rds-ctrl ras \
         extract; health report: rds-ctrl health"
    )?;
    Ok(0)
}

/// One event as `ras extract` prints it.
pub fn event_line(e: &RasEvent) -> String {
    format!(
        "{}  {:<5}  {}",
        rds_core::ras::utc_ms(e.wall_ns),
        e.kind.name(),
        e.text
    )
}

/// `ras extract`: the ring, oldest event first (with `json`: one document, see
/// rds-ctrl(8)).
///
/// # Errors
/// The node cannot be asked.
pub fn extract(out: &mut dyn Write, c: &mut CtlClient, json: bool) -> anyhow::Result<u8> {
    let (level, overwritten, events) = match c.call(&Request::RasExtract, &[])?.0 {
        Reply::RasEvents {
            level,
            overwritten,
            events,
        } => (level, overwritten, events),
        other => bail!("unexpected reply from node '{}': {other:?}", c.hello.node),
    };
    if json {
        let events: Vec<serde_json::Value> = events
            .iter()
            .map(|e| {
                serde_json::json!({
                    "time": rds_core::ras::utc_ms(e.wall_ns),
                    "wall_ns": e.wall_ns,
                    "kind": e.kind.name(),
                    "text": e.text,
                })
            })
            .collect();
        return util::print_json(
            out,
            &serde_json::json!({
                "node": c.hello.node,
                "level": level_name(level).unwrap_or("unknown"),
                "ring_capacity": RING_CAP,
                "overwritten": overwritten,
                "events": events,
            }),
        );
    }
    writeln!(
        out,
        "RAS events of node '{}' (level {}, {} event(s), ring of {RING_CAP}, {overwritten} overwritten):",
        c.hello.node,
        level_name(level).unwrap_or("unknown"),
        events.len()
    )?;
    for e in &events {
        writeln!(out, "{}", event_line(e))?;
    }
    Ok(0)
}

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

/// Problems found in a snapshot, one line each.
pub fn warnings(snap: &InfoSnapshot) -> Vec<String> {
    let mut w = Vec::new();
    for c in &snap.connections {
        let p0 = c.paths.first();
        if p0.is_some_and(|p| p.state != PathState::Up) {
            let queued: usize = c
                .paths
                .iter()
                .map(|p| p.send_queued + p.retrans_queued)
                .sum();
            w.push(format!(
                "connection {} -> {} is {} ({} message(s) waiting)",
                rds_info::format::addr(c.laddr),
                rds_info::format::addr(c.faddr),
                p0.map_or("DOWN", |p| p.state.name()),
                queued
            ));
        }
    }
    for s in snap.sockets.iter().filter(|s| s.congested) {
        w.push(format!(
            "socket {} is congested (its receive queue is over its receive buffer)",
            s.bound
                .map_or_else(|| "unbound".to_string(), |a| a.to_string())
        ));
    }
    w
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
    pub hello: rds_core::ctl::client::NodeHello,
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
    /// The connection table.
    pub connections: Vec<ConnRow>,
    /// [`DROP_COUNTERS`] the node has.
    pub drops: Vec<(String, u64)>,
    /// [`BOUND_COUNTERS`] the node has.
    pub bounds: Vec<(String, u64)>,
    /// [`CONG_COUNTERS`] the node has.
    pub congestion: Vec<(String, u64)>,
    /// Problems, one line each.
    pub warnings: Vec<String>,
}

impl Health {
    /// Gathers the report from the node's hello and snapshot.
    pub fn new(hello: rds_core::ctl::client::NodeHello, snap: &InfoSnapshot) -> Health {
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
        let has_ib = rds_info::format::has_ib(snap);
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
            connections,
            drops: pick(DROP_COUNTERS),
            bounds: pick(BOUND_COUNTERS),
            congestion: pick(CONG_COUNTERS),
            warnings: warnings(snap),
        }
    }

    /// The exit status: 0 healthy, 1 with warnings.
    pub fn status(&self) -> u8 {
        u8::from(!self.warnings.is_empty())
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
            "warnings": self.warnings,
            "healthy": self.warnings.is_empty(),
        })
    }

    /// Prints the report as text.
    ///
    /// # Errors
    /// Write errors.
    pub fn text(&self, out: &mut dyn Write) -> anyhow::Result<()> {
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
            writeln!(out, "{t}")?;
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
        if self.warnings.is_empty() {
            writeln!(out, "verdict: healthy")?;
        } else {
            writeln!(out, "verdict: {} warning(s)", self.warnings.len())?;
            for line in &self.warnings {
                writeln!(out, "  - {line}")?;
            }
        }
        Ok(())
    }
}

/// `health`: prints the report (text, or one JSON document with `json`); returns 0 when
/// healthy, 1 when there are warnings.
///
/// # Errors
/// The node cannot be asked; write errors.
pub fn report(out: &mut dyn Write, client: &mut CtlClient, json: bool) -> anyhow::Result<u8> {
    let snap = client.info()?;
    let h = Health::new(client.hello.clone(), &snap);
    if json {
        util::print_json(out, &h.json())?;
    } else {
        h.text(out)?;
    }
    Ok(h.status())
}

#[cfg(test)]
mod tests {
    use super::*;

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
