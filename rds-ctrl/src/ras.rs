//! `ras`: a health report of a node for operators: who and how long, every connection with
//! its paths, reconnects and queues, drop counters, congestion, and a verdict. The exit status
//! is 1 when something needs attention (a connection not up, a congested socket).

use std::io::Write;

use rds_core::ctl::client::CtlClient;
use rds_core::ctl::InfoSnapshot;
use rds_core::info::{ConnInfo, PathState};

use crate::util;

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

/// Prints the report; returns 0 when healthy, 1 when there are warnings.
///
/// # Errors
/// Write errors.
pub fn report(out: &mut dyn Write, client: &mut CtlClient) -> anyhow::Result<u8> {
    let snap = client.info()?;
    let h = client.hello.clone();
    writeln!(
        out,
        "RDS health report for node '{}' (pid {}, rds-tools {}, RDS protocol {})",
        h.node, h.pid, h.version, h.rds_protocol
    )?;
    let uptime = util::pid_uptime(h.pid).map_or_else(|| "unknown".into(), util::human_duration);
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
    let ib = if rds_info::format::has_ib(&snap) {
        String::new()
    } else if let Some(why) = &snap.ib_unavailable {
        format!(" (IB: unavailable: {why})")
    } else {
        " (IB: not available)".to_string()
    };
    writeln!(out, "  transports:  {}{ib}", snap.transports.join(", "))?;
    let congested = snap.sockets.iter().filter(|s| s.congested).count();
    writeln!(
        out,
        "  sockets:     {} bound, {} congested",
        snap.sockets.len(),
        congested
    )?;
    let up = snap
        .connections
        .iter()
        .filter(|c| c.paths.first().is_some_and(|p| p.state == PathState::Up))
        .count();
    writeln!(
        out,
        "  connections: {} ({} up, {} not up)",
        snap.connections.len(),
        up,
        snap.connections.len() - up
    )?;
    if !snap.connections.is_empty() {
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
        for c in &snap.connections {
            let reconnects: u64 = c.paths.iter().map(|p| p.ups.saturating_sub(1)).sum();
            let p0 = c.paths.first();
            t.add_row(vec![
                rds_info::format::addr(c.laddr),
                rds_info::format::addr(c.faddr),
                c.kind.name().to_string(),
                p0.map_or("-", |p| p.state.name()).to_string(),
                format!("{}/{}", paths_up(c), c.paths.len()),
                reconnects.to_string(),
                c.paths
                    .iter()
                    .map(|p| p.send_queued)
                    .sum::<usize>()
                    .to_string(),
                c.paths
                    .iter()
                    .map(|p| p.retrans_queued)
                    .sum::<usize>()
                    .to_string(),
                p0.map_or(0, |p| p.next_tx_seq).to_string(),
                p0.map_or(0, |p| p.next_rx_seq).to_string(),
            ]);
        }
        writeln!(out, "{t}")?;
    }
    let list = |names: &[&str]| -> String {
        names
            .iter()
            .filter_map(|n| counter(&snap, n).map(|v| format!("{n} {v}")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    writeln!(out, "  resets and drops: {}", list(DROP_COUNTERS))?;
    if let Some(line) = bounds_line(&snap) {
        writeln!(out, "{line}")?;
    }
    writeln!(
        out,
        "  congestion:  {}; {congested} congested socket(s)",
        list(CONG_COUNTERS)
    )?;
    let w = warnings(&snap);
    if w.is_empty() {
        writeln!(out, "verdict: healthy")?;
        Ok(0)
    } else {
        writeln!(out, "verdict: {} warning(s)", w.len())?;
        for line in &w {
            writeln!(out, "  - {line}")?;
        }
        Ok(1)
    }
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
