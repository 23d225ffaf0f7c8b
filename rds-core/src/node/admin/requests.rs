//! The node's own requests on its control socket: hello, the info snapshot (cut to fit a
//! frame, filtered for unprivileged peers), counters, tunables, connection restart and kill,
//! shutdown; trace sessions start here and run in [`super::trace`]; client-socket requests go
//! to the connection's socket table.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;

use super::event_loop::Conn;
use super::{denied, no_client_sockets, send, trace, Action, Ctx, Peer, INFO_LIST_MAX};
use crate::ctl::{InfoSnapshot, Reply, Request, MAX_JSON, PROTO_VERSION};
use crate::info::TransportKind;
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

/// The info snapshot for `peer`: everything for root and the owner; for another uid, only the
/// sockets (and their queue entries) its uid opened through this node. The lists are cut so
/// that the reply fits one frame.
fn info(ctx: &Ctx, node: &Node, peer: Peer) -> Reply {
    let mut snap = snapshot(node);
    if !peer.privileged {
        let mine: Vec<SocketAddr> = ctx
            .sockets
            .as_ref()
            .map_or_else(Vec::new, |s| s.bound_by(peer.uid));
        let has =
            |ip: std::net::IpAddr, port: u16| mine.iter().any(|a| a.ip() == ip && a.port() == port);
        snap.sockets
            .retain(|s| s.bound.is_some_and(|b| has(b.ip(), b.port())));
        for q in [&mut snap.send, &mut snap.retrans, &mut snap.recv] {
            q.retain(|m| has(m.laddr, m.lport));
        }
    }
    fit(snap)
}

/// Cuts the snapshot's lists until its reply fits [`MAX_JSON`].
fn fit(mut snap: InfoSnapshot) -> Reply {
    fn cut<T>(v: &mut Vec<T>, limit: usize, omitted: &mut u64) {
        if v.len() > limit {
            *omitted += (v.len() - limit) as u64;
            v.truncate(limit);
        }
    }
    let mut limit = INFO_LIST_MAX;
    loop {
        let o = &mut snap.omitted;
        cut(&mut snap.connections, limit, &mut o.connections);
        cut(&mut snap.sockets, limit, &mut o.sockets);
        cut(&mut snap.send, limit, &mut o.send);
        cut(&mut snap.retrans, limit, &mut o.retrans);
        cut(&mut snap.recv, limit, &mut o.recv);
        cut(&mut snap.tcp, limit, &mut o.tcp);
        let reply = Reply::Info(Box::new(snap));
        match serde_json::to_vec(&reply) {
            Ok(j) if j.len() <= MAX_JSON => return reply,
            Ok(_) if limit > 0 => {
                let Reply::Info(s) = reply else {
                    return Reply::error(libc::EIO, "snapshot lost");
                };
                snap = *s;
                limit /= 4;
            }
            Ok(j) => {
                return Reply::error(
                    libc::EMSGSIZE,
                    format!(
                        "the info snapshot does not fit a control frame ({} bytes)",
                        j.len()
                    ),
                )
            }
            Err(e) => return Reply::error(libc::EIO, format!("encoding the snapshot: {e}")),
        }
    }
}

fn counters(node: &Node) -> Vec<(String, u64)> {
    node.stats()
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect()
}

/// The transports the node runs ("tcp", "ib").
pub(super) fn transports(node: &Node) -> Vec<String> {
    [
        (node.tcp_running(), TransportKind::Tcp),
        (node.ib_running(), TransportKind::Ib),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, k)| k.name().to_string())
    .collect()
}

/// The node's state for `rds-info` (every socket and queue entry, uncut).
pub fn snapshot(node: &Node) -> InfoSnapshot {
    InfoSnapshot {
        connections: node.connections(),
        sockets: node.sockets(),
        send: node.send_queue(),
        retrans: node.retrans_queue(),
        recv: node.recv_queue(),
        tcp: node.tcp_sockets(),
        counters: counters(node),
        transports: transports(node),
        ib_unavailable: node.ib_unavailable(),
        ib_qps: node.ib_qps(),
        omitted: Default::default(),
    }
}
