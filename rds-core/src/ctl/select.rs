//! Choosing a node for a tool's `--node SELECTOR`, the same way in every tool.
//!
//! A selector is a node name (`daemon`, `embedded-4242-2`), an address the node owns
//! (`127.0.0.1`, IPv4-mapped IPv6 addresses match their IPv4 form) or the pid of the process
//! that runs it. A name is matched first, so a node is always reachable by its name. Without a
//! selector the daemon is chosen when it runs, else the only running node. [`choose`] (and
//! [`CtlClient::connect_node`], which connects to it) returns exactly one node or a
//! [`CtlError::NoNode`] whose text lists the candidates, worded by [`several_message`] and
//! [`no_match_message`] for every tool.

use std::net::IpAddr;

use super::client::{CtlClient, CtlError, NodeHello};
use super::discover::{discover, NodeEndpoint, DAEMON_NAME};
use crate::info::canonical;

/// How a selector names its nodes, for the messages.
pub const SELECTOR_SYNTAX: &str = "NAME|ADDRESS|PID";

/// A node [`discover`] found, with what it said about itself (`None` when it did not answer).
#[derive(Debug, Clone)]
pub struct RunningNode {
    /// Where it is.
    pub endpoint: NodeEndpoint,
    /// Its hello, if it answered.
    pub hello: Option<NodeHello>,
    /// The program name of its process (`/proc/PID/comm`), if readable.
    pub program: Option<String>,
}

impl RunningNode {
    /// The node's name (its control socket's stem, as `--node` takes it).
    pub fn name(&self) -> &str {
        &self.endpoint.name
    }

    /// Whether `ip` is one of the node's addresses.
    pub fn owns(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.hello
            .as_ref()
            .is_some_and(|h| h.addrs.iter().any(|&a| canonical(a) == ip))
    }

    /// The pid of the node's process, if it answered.
    pub fn pid(&self) -> Option<u32> {
        self.hello.as_ref().map(|h| h.pid)
    }

    /// `name (pid N PROGRAM, ADDR ADDR)`, or `name (not answering)`.
    pub fn describe(&self) -> String {
        let Some(h) = &self.hello else {
            return format!("{} (not answering)", self.name());
        };
        let mut s = format!("{} (pid {}", self.name(), h.pid);
        if let Some(p) = &self.program {
            s.push(' ');
            s.push_str(p);
        }
        for (i, a) in h.addrs.iter().enumerate() {
            s.push_str(if i == 0 { ", " } else { " " });
            s.push_str(&canonical(*a).to_string());
        }
        s.push(')');
        s
    }

    /// Asks the node at `endpoint` for its hello.
    pub fn probe(endpoint: NodeEndpoint) -> RunningNode {
        let hello = CtlClient::connect(&endpoint.path).ok().map(|c| c.hello);
        let program = hello.as_ref().and_then(|h| super::owner::comm(h.pid));
        RunningNode {
            endpoint,
            hello,
            program,
        }
    }
}

/// Every node this user can reach, with its hello.
pub fn running_nodes() -> Vec<RunningNode> {
    discover().into_iter().map(RunningNode::probe).collect()
}

/// The nodes `sel` names among `nodes`: the one of that name, else those owning that address,
/// else those of that pid.
pub fn matching<'a>(sel: &str, nodes: &'a [RunningNode]) -> Vec<&'a RunningNode> {
    if let Some(n) = nodes.iter().find(|n| n.name() == sel) {
        return vec![n];
    }
    if let Ok(ip) = sel.parse::<IpAddr>() {
        return nodes.iter().filter(|n| n.owns(ip)).collect();
    }
    if let Ok(pid) = sel.parse::<u32>() {
        return nodes.iter().filter(|n| n.pid() == Some(pid)).collect();
    }
    Vec::new()
}

/// The message for no running node at all.
pub fn none_running_message() -> String {
    "no RDS node is running (start one with 'rds-ctrl load', or run a tool that embeds one, \
     such as rds-stress)"
        .into()
}

/// The message for several candidate nodes: `several RDS nodes are running; choose one
/// with --node NAME|ADDRESS|PID: a (pid 1, 127.0.0.1), b (pid 2, 127.0.0.2)`. With `sel`,
/// the nodes are those it matched.
pub fn several_message(sel: Option<&str>, nodes: &[&RunningNode]) -> String {
    let list: Vec<String> = nodes.iter().map(|n| n.describe()).collect();
    match sel {
        None => format!(
            "several RDS nodes are running; choose one with --node {SELECTOR_SYNTAX}: {}",
            list.join(", ")
        ),
        Some(s) => format!(
            "several RDS nodes match '{s}'; choose one with --node {SELECTOR_SYNTAX}: {}",
            list.join(", ")
        ),
    }
}

/// The message for a selector that matches no running node.
pub fn no_match_message(sel: &str, nodes: &[RunningNode]) -> String {
    let what = if sel.parse::<IpAddr>().is_ok() {
        format!("no RDS node owns the address {sel}")
    } else if sel.parse::<u32>().is_ok() {
        format!("no RDS node is named '{sel}' or runs in process {sel}")
    } else {
        format!("no RDS node is named '{sel}'")
    };
    let list: Vec<String> = nodes.iter().map(RunningNode::describe).collect();
    format!("{what}; running nodes: {}", list.join(", "))
}

/// The node `sel` selects, or without a selector the daemon if it runs, else the only node.
///
/// # Errors
/// [`CtlError::NoNode`] when no node runs, none matches, or several do (the message lists
/// them).
pub fn choose(sel: Option<&str>) -> Result<NodeEndpoint, CtlError> {
    let eps = discover();
    // A name (or no selector with the daemon or a single node) needs no hello.
    let quick = match sel {
        Some(s) => eps.iter().find(|e| e.name == s),
        None => eps
            .iter()
            .find(|e| e.name == DAEMON_NAME)
            .or(if eps.len() == 1 { eps.first() } else { None }),
    };
    if let Some(e) = quick {
        return Ok(e.clone());
    }
    if eps.is_empty() {
        return Err(CtlError::NoNode(none_running_message()));
    }
    let nodes: Vec<RunningNode> = eps.into_iter().map(RunningNode::probe).collect();
    pick(sel, &nodes)
}

/// [`choose`] among `nodes` already gathered.
///
/// # Errors
/// As [`choose`].
pub fn pick(sel: Option<&str>, nodes: &[RunningNode]) -> Result<NodeEndpoint, CtlError> {
    if nodes.is_empty() {
        return Err(CtlError::NoNode(none_running_message()));
    }
    let found: Vec<&RunningNode> = match sel {
        Some(s) => matching(s, nodes),
        None => match nodes.iter().find(|n| n.name() == DAEMON_NAME) {
            Some(d) => vec![d],
            None => nodes.iter().collect(),
        },
    };
    match found.as_slice() {
        [one] => Ok(one.endpoint.clone()),
        [] => Err(CtlError::NoNode(no_match_message(sel.unwrap_or(""), nodes))),
        many => Err(CtlError::NoNode(several_message(sel, many))),
    }
}

impl CtlClient {
    /// Connects to the node `sel` selects (a name, an address it owns or its pid), or, without
    /// a selector, to the daemon if it runs, else to the only running node ([`choose`]).
    ///
    /// # Errors
    /// [`CtlError::NoNode`] when no node runs, none matches, or several do and none is the
    /// daemon (the message lists them); the connection's errors.
    pub fn connect_node(sel: Option<&str>) -> Result<Self, CtlError> {
        Self::connect(&choose(sel)?.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn node(name: &str, pid: u32, addrs: &[&str]) -> RunningNode {
        RunningNode {
            endpoint: NodeEndpoint {
                name: name.into(),
                path: PathBuf::from(format!("/run/rds/{name}.sock")),
            },
            hello: Some(NodeHello {
                node: name.into(),
                version: "0.1.0".into(),
                rds_protocol: "4.1".into(),
                pid,
                owner_uid: 1000,
                addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
            }),
            program: None,
        }
    }

    fn names(v: &[&RunningNode]) -> Vec<String> {
        v.iter().map(|n| n.name().to_string()).collect()
    }

    #[test]
    fn by_name_address_and_pid() {
        let nodes = vec![
            node("embedded-7", 7, &["127.0.0.1"]),
            node("embedded-7-2", 7, &["127.0.0.2"]),
            node("embedded-9", 9, &["::1"]),
            node("daemon", 5, &["127.0.0.3", "10.0.0.1"]),
        ];
        assert_eq!(names(&matching("embedded-7-2", &nodes)), ["embedded-7-2"]);
        assert_eq!(names(&matching("127.0.0.2", &nodes)), ["embedded-7-2"]);
        assert_eq!(names(&matching("::ffff:127.0.0.1", &nodes)), ["embedded-7"]);
        assert_eq!(names(&matching("10.0.0.1", &nodes)), ["daemon"]);
        assert_eq!(
            names(&matching("7", &nodes)),
            ["embedded-7", "embedded-7-2"]
        );
        assert_eq!(names(&matching("9", &nodes)), ["embedded-9"]);
        assert!(matching("127.0.0.9", &nodes).is_empty());
        assert!(matching("nope", &nodes).is_empty());
    }

    #[test]
    fn messages() {
        let nodes = vec![
            node("embedded-7", 7, &["127.0.0.1"]),
            node("embedded-7-2", 7, &["127.0.0.2"]),
        ];
        let err = |sel| match pick(sel, &nodes) {
            Err(CtlError::NoNode(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            err(None),
            "several RDS nodes are running; choose one with --node NAME|ADDRESS|PID: \
             embedded-7 (pid 7, 127.0.0.1), embedded-7-2 (pid 7, 127.0.0.2)"
        );
        assert_eq!(
            err(Some("7")),
            "several RDS nodes match '7'; choose one with --node NAME|ADDRESS|PID: \
             embedded-7 (pid 7, 127.0.0.1), embedded-7-2 (pid 7, 127.0.0.2)"
        );
        assert_eq!(
            err(Some("127.0.0.5")),
            "no RDS node owns the address 127.0.0.5; running nodes: embedded-7 (pid 7, \
             127.0.0.1), embedded-7-2 (pid 7, 127.0.0.2)"
        );
        assert_eq!(
            err(Some("x")),
            "no RDS node is named 'x'; running nodes: embedded-7 (pid 7, 127.0.0.1), \
             embedded-7-2 (pid 7, 127.0.0.2)"
        );
        assert_eq!(
            pick(Some("127.0.0.2"), &nodes).unwrap().name,
            "embedded-7-2"
        );
        let mut named = node("embedded-7", 7, &["127.0.0.1", "::1"]);
        named.program = Some("rds-stress".into());
        assert_eq!(
            named.describe(),
            "embedded-7 (pid 7 rds-stress, 127.0.0.1 ::1)"
        );
        let mut with_daemon = nodes.clone();
        with_daemon.push(node("daemon", 1, &[]));
        assert_eq!(pick(None, &with_daemon).unwrap().name, "daemon");
        assert!(matches!(pick(None, &[]), Err(CtlError::NoNode(_))));
    }
}
