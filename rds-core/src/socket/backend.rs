//! What serves a bound socket ([`Backend`]) and how it is chosen at bind: the node named at
//! creation if there is one, else in the order the process's [`StackChoice`] says (set once
//! per process by a tool's `--stack`, [`set_stack`]).
//!
//! `auto` (the default): the host daemon when it runs and owns the address, else the kernel's
//! RDS when the kernel has it loaded, else the process's embedded node. `kernel`: the kernel
//! only. `user`: the daemon or the embedded node, never the kernel. `RDS_NO_DAEMON` leaves the
//! daemon out.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use super::embedded::Embedded;
use super::kernel;
use super::preset::{Preset, Timing};
use super::remote::Remote;
use crate::kernel::KernelSocket;
use crate::node::Node;

/// What serves a bound socket, chosen once at bind.
#[derive(Debug)]
pub(super) enum Backend {
    /// A node in this process (the one named at creation, or the default embedded node).
    Embedded(Embedded),
    /// The host daemon's node, reached over its control socket.
    Daemon(Remote),
    /// The running kernel's RDS (`AF_RDS`).
    Kernel(KernelSocket),
}

impl Backend {
    /// Binds a socket to `addr` (canonical, unicast) on `node` if named, else on the first
    /// backend of the process's choice that takes it, handing it the options set so far;
    /// returns the backend and the bound address.
    pub(super) fn bind(
        node: Option<&Node>,
        addr: SocketAddr,
        p: &Preset,
        t: Timing,
    ) -> io::Result<(Backend, SocketAddr)> {
        if let Some(n) = node {
            let (e, bound) = Embedded::bind(n.clone(), addr, p)?;
            return Ok((Backend::Embedded(e), bound));
        }
        if stack() != StackChoice::Kernel && !crate::env::no_daemon() {
            // `None`: no daemon runs, or it does not own the address.
            if let Some((r, bound)) = Remote::bind_preset(addr, p, t.timestamps)? {
                return Ok((Backend::Daemon(r), bound));
            }
        }
        if kernel_preferred() {
            let (k, bound) = kernel::bind(addr, p, t)?;
            return Ok((Backend::Kernel(k), bound));
        }
        let (e, bound) = Embedded::bind_default(addr, p)?;
        Ok((Backend::Embedded(e), bound))
    }
}

/// Which RDS stack serves the sockets a process makes with [`super::Socket::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StackChoice {
    /// The daemon if it owns the address, else the kernel's RDS if loaded, else an embedded
    /// node.
    #[default]
    Auto,
    /// This project's stack only: the daemon or an embedded node.
    User,
    /// The running kernel's RDS (`AF_RDS`) only.
    Kernel,
}

impl StackChoice {
    /// The option value: `auto`, `user` or `kernel`.
    pub fn name(self) -> &'static str {
        match self {
            StackChoice::Auto => "auto",
            StackChoice::User => "user",
            StackChoice::Kernel => "kernel",
        }
    }
}

impl std::str::FromStr for StackChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<StackChoice, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(StackChoice::Auto),
            "user" | "userspace" => Ok(StackChoice::User),
            "kernel" => Ok(StackChoice::Kernel),
            _ => Err(format!(
                "invalid stack '{s}': use kernel (the kernel's RDS), user (this project's \
                 daemon or an embedded node) or auto"
            )),
        }
    }
}

static STACK: AtomicU8 = AtomicU8::new(0);

/// Chooses the stack for the sockets this process makes from now on.
pub fn set_stack(s: StackChoice) {
    STACK.store(s as u8, Ordering::Relaxed);
}

/// The stack chosen with [`set_stack`] ([`StackChoice::Auto`] unless set).
pub fn stack() -> StackChoice {
    match STACK.load(Ordering::Relaxed) {
        1 => StackChoice::User,
        2 => StackChoice::Kernel,
        _ => StackChoice::Auto,
    }
}

/// Whether the kernel has RDS, read once per process.
fn kernel_loaded() -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(crate::kernel::loaded)
}

/// Whether sockets made with [`super::Socket::new`] go to the kernel's RDS (unless, for
/// `auto`, the daemon owns their address): `kernel`, or `auto` on a host whose kernel has RDS
/// loaded. A tool then starts no embedded node of its own.
pub fn kernel_preferred() -> bool {
    match stack() {
        StackChoice::Kernel => true,
        StackChoice::Auto => kernel_loaded(),
        StackChoice::User => false,
    }
}
