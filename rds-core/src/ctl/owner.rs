//! Who holds an address a node could not listen on.
//!
//! Contract: [`describe_addr_conflict`] is called after a listener on `ADDR:16385` failed with
//! `EADDRINUSE`. It asks every node this user can see ([`super::discover::discover`]) for its hello; the
//! first whose addresses contain `ADDR` is named (pid, program name from `/proc/PID/comm`, node
//! name) with what to do. When no node of ours owns it, the port is held by another program,
//! and the line says whether the kernel's `rds_tcp` module is loaded. It never fails: an
//! unreachable node is skipped.

use std::net::IpAddr;

use super::client::CtlClient;
use super::discover::discover;
use crate::wire::RDS_TCP_PORT;

/// The program name of process `pid` (`/proc/PID/comm`), if readable.
pub(crate) fn comm(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// One line saying who holds `ip:16385` and what to do, for a listener that failed with
/// `EADDRINUSE` (no trailing newline).
pub fn describe_addr_conflict(ip: IpAddr) -> String {
    let ip = crate::info::canonical(ip);
    let own = std::process::id();
    for ep in discover() {
        let Ok(c) = CtlClient::connect(&ep.path) else {
            continue;
        };
        let h = &c.hello;
        if h.pid == own || !h.addrs.iter().any(|&a| crate::info::canonical(a) == ip) {
            continue;
        }
        let prog = comm(h.pid).map_or_else(String::new, |p| format!(", {p}"));
        return format!(
            "{ip} is used by another RDS node (pid {}{prog}, node {}); load the daemon to share \
             it (rds-ctrl load tcp --addr {ip}) or pick another address",
            h.pid, h.node
        );
    }
    if std::path::Path::new("/sys/module/rds_tcp").exists() {
        format!(
            "port {RDS_TCP_PORT} on {ip} is held by another program (the kernel's rds_tcp \
             module is loaded)"
        )
    } else {
        format!("port {RDS_TCP_PORT} on {ip} is held by another program")
    }
}
