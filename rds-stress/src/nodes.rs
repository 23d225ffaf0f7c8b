//! The embedded nodes this process started, shut down before it exits so that their control
//! sockets leave the runtime directory: a `process::exit` (from the signal thread, the abort
//! timer or a task's fatal error) drops nothing.

use std::sync::Mutex;

use rds_core::{Node, WeakNode};

static NODES: Mutex<Vec<WeakNode>> = Mutex::new(Vec::new());

/// Remembers `n` for [`shutdown_all`] without keeping it running.
pub fn keep(n: &Node) {
    NODES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(n.downgrade());
}

/// Shuts down every embedded node this process started that still runs, and the default
/// node of its sockets.
pub fn shutdown_all() {
    let nodes = std::mem::take(&mut *NODES.lock().unwrap_or_else(|p| p.into_inner()));
    for n in nodes {
        n.shutdown();
    }
    rds_core::socket::shutdown_default_node();
}
