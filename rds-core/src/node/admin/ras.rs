//! The sampler that fills a node's RAS event ring ([`crate::ras`]): a thread that looks at
//! the node's paths and counters every [`SAMPLE_EVERY`], turns the differences into events at
//! the level `net.rds.ras_level` asks for, keeps them in the ring, and (for the daemon) logs
//! each (the `log` facade: `ras KIND: text`, errors at error level, paths going down, resets
//! and drops as warnings, the rest as information). It ends with the control server.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Ctx;
use crate::ctl::Reply;
use crate::node::Node;
use crate::ras::{self, RasEvent, RasKind, Ring, Sample};

/// How often the sampler looks at the node.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn sample(node: &Node) -> Sample {
    let stats = node.stats();
    Sample::new(&node.connections(), stats)
}

/// Adds events to the ring, and to the log when `log` is set.
fn keep(ring: &Mutex<Ring>, events: Vec<RasEvent>, log: bool) {
    if events.is_empty() {
        return;
    }
    if log {
        for ev in &events {
            let level = match ev.kind {
                RasKind::Error => log::Level::Error,
                RasKind::Down | RasKind::Reset | RasKind::Drop => log::Level::Warn,
                RasKind::Up | RasKind::Conn | RasKind::Count | RasKind::Ras => log::Level::Info,
            };
            log::log!(level, "ras {}: {}", ev.kind.name(), ev.text);
        }
    }
    let mut r = ring.lock().unwrap_or_else(|p| p.into_inner());
    for ev in events {
        r.push(ev);
    }
}

/// Starts the sampler of the server `ctx`; `log`: also log the events.
pub(super) fn spawn(ctx: Weak<Ctx>, log: bool) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("rds-ras".into())
        .spawn(move || run(ctx, log))
        .map(|_| ())
}

fn run(ctx: Weak<Ctx>, log: bool) {
    let mut last: Option<(Sample, u8)> = None;
    loop {
        let Some(c) = ctx.upgrade() else { return };
        if c.stop.load(Ordering::SeqCst) {
            return;
        }
        if let Some(node) = c.node() {
            let level = node.tunables().ras_level;
            let now = sample(&node);
            drop(node);
            let mut events = Vec::new();
            let name = ras::level_name(level).unwrap_or("normal");
            match &last {
                None => events.push(RasEvent {
                    wall_ns: wall_ns(),
                    kind: RasKind::Ras,
                    text: format!("event ring started at level {name}"),
                }),
                Some((old, old_level)) => {
                    if *old_level != level {
                        events.push(RasEvent {
                            wall_ns: wall_ns(),
                            kind: RasKind::Ras,
                            text: format!("level set to {name}"),
                        });
                    }
                    events.extend(ras::diff(old, &now, level, wall_ns()));
                }
            }
            keep(&c.ras, events, log);
            last = Some((now, level));
        }
        drop(c);
        std::thread::sleep(SAMPLE_EVERY);
    }
}

/// The reply to [`crate::ctl::Request::RasExtract`].
pub(super) fn extract(ctx: &Ctx, node: &Node) -> Reply {
    let r = ctx.ras.lock().unwrap_or_else(|p| p.into_inner());
    Reply::RasEvents {
        level: node.tunables().ras_level,
        overwritten: r.overwritten(),
        events: r.events(),
    }
}
