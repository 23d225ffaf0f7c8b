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
) -> anyhow::Result<u8> {
    let level = match what {
        Some(RasArg::Extract) if persistent => {
            bail!("ras: -p goes with a level (minimal, normal, detail, maximal), not extract")
        }
        Some(RasArg::Extract) => return extract(out, &mut crate::connect(node)?),
        None if persistent => {
            bail!("ras: -p needs a level (minimal, normal, detail, maximal)")
        }
        None => return show(out, &mut crate::connect(node)?),
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

/// `ras` alone: the level in force.
fn show(out: &mut dyn Write, c: &mut CtlClient) -> anyhow::Result<u8> {
    let level = c
        .tunables()?
        .into_iter()
        .find(|(n, _)| n == LEVEL_TUNABLE)
        .map_or(0, |(_, v)| v);
    let name = u8::try_from(level)
        .ok()
        .and_then(level_name)
        .unwrap_or("unknown");
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

/// `ras extract`: the ring, oldest event first.
///
/// # Errors
/// The node cannot be asked.
pub fn extract(out: &mut dyn Write, c: &mut CtlClient) -> anyhow::Result<u8> {
    let (level, overwritten, events) = match c.call(&Request::RasExtract, &[])?.0 {
        Reply::RasEvents {
            level,
            overwritten,
            events,
        } => (level, overwritten, events),
        other => bail!("unexpected reply from node '{}': {other:?}", c.hello.node),
    };
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

/// `health`: prints the report; returns 0 when healthy, 1 when there are warnings.
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
