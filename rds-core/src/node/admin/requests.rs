//! The requests a worker runs: hello, info, counters, tunables, connection restart and kill,
//! shutdown; trace sessions start here and run in [`super::trace`]; client-socket requests go
//! to the connection's socket table.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use super::introspect::{counters, info};
use super::{denied, no_client_sockets, send, trace, Action, Conn, Ctx};
use crate::ctl::{Reply, Request, PROTO_VERSION};
use crate::node::tap::TapFilter;
use crate::node::Node;
use crate::sys;
use crate::tunables::{TunableDef, TUNABLES};

/// Answers `action`'s reply (or passes a park on); `None` when the connection must close.
fn answer(conn: &mut Conn, action: Action) -> Option<Action> {
    match action {
        Action::Reply(reply, out) => {
            send(&mut conn.stream, &reply, &out).ok()?;
            Some(Action::Reply(Reply::Ok, Vec::new()))
        }
        park => Some(park),
    }
}

/// Runs one request a worker took (`Err`: why it is malformed) and answers it. Returns the
/// next step of the connection (a reply means: back to the event loop), `None` when it must
/// close. `file`: the descriptor that came with the request.
pub(super) fn frame(
    ctx: &Ctx,
    conn: &mut Conn,
    req: Result<Request, String>,
    data: Vec<u8>,
    file: Option<OwnedFd>,
) -> Option<Action> {
    let req: Request = match req {
        Ok(r) => r,
        Err(e) => {
            let r = Reply::error(libc::EINVAL, format!("malformed request: {e}"));
            return answer(conn, Action::Reply(r, Vec::new()));
        }
    };
    let Some(node) = ctx.node() else {
        let _ = send(
            &mut conn.stream,
            &Reply::error(libc::ENETDOWN, "the node is shutting down"),
            &[],
        );
        return None;
    };
    let privileged = conn.peer.privileged;
    if let Request::TraceStart {
        snaplen,
        peer,
        port,
        output,
    } = req
    {
        if !privileged {
            return answer(conn, Action::Reply(denied(), Vec::new()));
        }
        let output = output.map(|o| (o, file));
        // The session runs on a thread of its own at a lower priority ([`TRACE_NICE`],
        // then `SCHED_IDLE` while it captures; see `trace`).
        let filter = TapFilter { peer, port };
        let stream = &mut conn.stream;
        let go_on = std::thread::scope(|sc| {
            std::thread::Builder::new()
                .name("rds-trace-out".into())
                .spawn_scoped(sc, || {
                    let _ = sys::set_thread_nice(trace::TRACE_NICE);
                    trace::trace(stream, &node, snaplen, filter, output)
                })
                .map(|h| h.join().unwrap_or(false))
                .unwrap_or(false)
        });
        return go_on.then_some(Action::Reply(Reply::Ok, Vec::new()));
    }
    let shutdown = matches!(req, Request::Shutdown) && privileged;
    let action = handle(ctx, &node, conn, req, data);
    drop(node);
    let next = answer(conn, action)?;
    if shutdown {
        if let Some(n) = ctx.node() {
            std::thread::spawn(move || n.shutdown());
        }
    }
    Some(next)
}

/// Runs a request other than a trace on a worker.
fn handle(ctx: &Ctx, node: &Node, conn: &mut Conn, req: Request, data: Vec<u8>) -> Action {
    let r = |reply| Action::Reply(reply, Vec::new());
    let privileged = conn.peer.privileged;
    let needs_priv = matches!(
        req,
        Request::StatsReset
            | Request::TunableSet { .. }
            | Request::TunableDefault { .. }
            | Request::ConnRestart { .. }
            | Request::ConnKill { .. }
            | Request::Shutdown
    );
    if needs_priv && !privileged {
        return r(denied());
    }
    match req {
        Request::Hello { v } => {
            if v != PROTO_VERSION {
                return r(Reply::error(
                    libc::EPROTONOSUPPORT,
                    format!(
                        "protocol version {v} not supported (this node speaks {})",
                        PROTO_VERSION
                    ),
                ));
            }
            r(Reply::Hello {
                v: PROTO_VERSION,
                node: node.name().to_string(),
                version: env!("CARGO_PKG_VERSION").into(),
                rds_protocol: "3.1".into(),
                pid: std::process::id(),
                owner_uid: ctx.owner_uid,
                addrs: node.addrs(),
            })
        }
        Request::Info => r(info(ctx, node, conn.peer)),
        Request::Stats => r(Reply::Stats {
            counters: counters(node),
        }),
        Request::CtlStats => r(Reply::Stats {
            counters: vec![
                ("ctl_refused".into(), ctx.refused.load(Ordering::Relaxed)),
                (
                    "ctl_stalled_closed".into(),
                    ctx.stalled.load(Ordering::Relaxed),
                ),
                (
                    "ctl_ring_faults".into(),
                    ctx.ring_faults.load(Ordering::Relaxed),
                ),
            ],
        }),
        Request::StatsReset => {
            node.reset_stats();
            r(Reply::Ok)
        }
        Request::TunablesGet => {
            let t = node.tunables();
            r(Reply::Tunables {
                values: TUNABLES
                    .iter()
                    .map(|d| (d.name.to_string(), d.get(&t)))
                    .collect(),
            })
        }
        Request::TunableSet { name, value } => {
            let Some(def) = TunableDef::find(&name) else {
                return r(Reply::error(
                    libc::ENOENT,
                    format!("unknown tunable '{name}'"),
                ));
            };
            let mut t = node.tunables();
            match def.set(&mut t, value) {
                Ok(()) => {
                    node.set_tunables(t);
                    r(Reply::Ok)
                }
                Err(e) => r(Reply::error(libc::EINVAL, e.to_string())),
            }
        }
        Request::TunableDefault { name } => {
            let mut t = node.tunables();
            let defaults = crate::tunables::Tunables::default();
            let defs: Vec<&TunableDef> = match &name {
                Some(n) => match TunableDef::find(n) {
                    Some(d) => vec![d],
                    None => return r(Reply::error(libc::ENOENT, format!("unknown tunable '{n}'"))),
                },
                None => TUNABLES.iter().collect(),
            };
            if name.is_none() {
                t = defaults;
            } else {
                for d in defs {
                    if let Err(e) = d.set(&mut t, d.default_value()) {
                        return r(Reply::error(libc::EINVAL, e.to_string()));
                    }
                }
            }
            node.set_tunables(t);
            r(Reply::Ok)
        }
        Request::ConnRestart { laddr, faddr } => {
            if node.restart_conn(laddr, faddr) {
                r(Reply::Ok)
            } else {
                r(Reply::error(
                    libc::ENOENT,
                    format!("no connection {laddr} -> {faddr}"),
                ))
            }
        }
        Request::ConnKill { laddr, faddr } => match node.kill_conn(laddr, faddr) {
            Some(n) => r(Reply::Dropped { messages: n }),
            None => r(Reply::error(
                libc::ENOENT,
                format!("no connection {laddr} -> {faddr}"),
            )),
        },
        Request::Shutdown => r(Reply::Ok),
        Request::RasExtract => r(super::ras::extract(ctx, node)),
        Request::TraceStart { .. } | Request::TraceStop => r(Reply::error(
            libc::EINVAL,
            "no trace runs on this connection",
        )),
        other => match conn.socks.as_mut() {
            None => r(no_client_sockets(&other)),
            Some(t) if matches!(other, Request::SockOpen) => t.open(node),
            Some(t) => t.call(other, data),
        },
    }
}
