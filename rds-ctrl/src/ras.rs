//! `ras`: the event ring.
//!
//! `ras [-p] LEVEL` sets what the node's event ring keeps (`net.rds.ras_level`, see
//! [`rds_core::ras`]; `-p` also saves it for the daemon's next start), `ras extract` prints
//! the ring with timestamps, and `ras` alone shows the level in force.

use std::io::Write;

use anyhow::{bail, Context};
use rds_core::ctl::client::CtlClient;
use rds_core::ctl::{Reply, Request};
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
