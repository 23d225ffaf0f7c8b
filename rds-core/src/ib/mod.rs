//! rdma-core (InfiniBand / RoCE verbs and the RDMA connection manager), loaded at run time.
//!
//! This is the foundation of the IB transport: our own minimal bindings ([`ffi`]), a loader that
//! opens `libibverbs.so.1` and `librdmacm.so.1` with `dlopen` (no link-time dependency, no
//! build script, no headers needed to build), and a safe layer over them, one file per verbs
//! object: [`device`] (device list, contexts), [`pd`] (protection domains, memory regions),
//! [`cq`] (completion queues and their channels), [`qp`] (queue pairs and work requests), [`cm`]
//! (the RDMA connection manager, over the raw handles of `handle`); [`error`] is what they share
//! and [`mem`] the memory applications hand to RDMA.
//!
//! Contract:
//! - The whole workspace builds and runs on a host without rdma-core. There, [`lib`] and
//!   [`availability`] return an [`IbUnavailable`] whose message says what to install; nothing
//!   else changes.
//! - [`lib`] opens the libraries once per process and keeps them loaded for its lifetime.
//! - The inline verbs of `verbs.h` (`post_send`, `post_recv`, `poll_cq`, `req_notify_cq`) go
//!   through the context's `ops` table exactly as the C headers do.
//! - The C declarations live in [`ffi`] only; the wrappers call them in `unsafe` blocks, each
//!   with a `// SAFETY:` note, and their public API is safe. libibverbs verbs are thread-safe,
//!   so the handles are `Send + Sync` and take `&self`. Resources are released in dependency order because every
//!   wrapper holds a reference-counted handle to what it was created from (a queue pair keeps
//!   its protection domain and completion queues alive, a protection domain its context, a
//!   connection manager id its event channel).
//! - The struct layouts are checked against the installed headers by `tests/ib_layout.rs`.

pub mod cm;
pub mod cq;
pub mod device;
pub mod error;
pub mod ffi;
mod handle;
pub mod mem;
pub mod pd;
pub mod qp;

use std::fmt;
use std::sync::OnceLock;

pub use cq::{Cq, WcOpcode, WcStatus, WorkCompletion};
pub use device::{
    Context, Device, DeviceAttr, DeviceList, Gid, LinkLayer, NodeType, PortAttr, PortState,
    Transport,
};
pub use error::{IbUnavailable, VerbsError};
pub use ffi::IbLib;
pub use mem::OutOfRange;
pub use pd::{Access, MemMr, Mr, Pd, Sge};
pub use qp::{PostError, Qp, QpCap, QpInit, RecvWr, SendOp, SendWr};

static LIB: OnceLock<Result<IbLib, IbUnavailable>> = OnceLock::new();

/// The process-wide rdma-core libraries, opened on first use and never unloaded.
///
/// # Errors
/// [`IbUnavailable::LibraryMissing`] / [`IbUnavailable::SymbolMissing`] when rdma-core's
/// run-time packages are absent or unusable (the same error on every call).
pub fn lib() -> Result<&'static IbLib, IbUnavailable> {
    LIB.get_or_init(IbLib::open).as_ref().map_err(Clone::clone)
}

/// One port of an RDMA device, as [`availability`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSummary {
    /// Port number (1-based).
    pub port: u8,
    /// Logical port state.
    pub state: PortState,
    /// InfiniBand or Ethernet (RoCE).
    pub link_layer: LinkLayer,
    /// Active MTU in bytes (256..4096), 0 if unknown.
    pub active_mtu: u32,
    /// Non-zero GID table entries (the first 16 at most).
    pub gids: Vec<Gid>,
}

/// One RDMA device, as [`availability`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSummary {
    /// Kernel device name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// Node type (RDS uses channel adapters only).
    pub node_type: NodeType,
    /// Transport type (RDS uses InfiniBand-transport devices: IB and RoCE, not iWARP).
    pub transport: Transport,
    /// Firmware version string, empty if the device could not be opened.
    pub fw_ver: String,
    /// Node GUID (host order), 0 if the device could not be opened.
    pub node_guid: u64,
    /// The ports, empty if the device could not be opened.
    pub ports: Vec<PortSummary>,
    /// Why the device could not be opened or queried, if so.
    pub error: Option<String>,
}

impl DeviceSummary {
    /// Whether RDS can run over this device: a channel adapter with the InfiniBand transport
    /// (InfiniBand or RoCE, as the kernel's `rds_rdma` requires) and at least one active port.
    pub fn usable_for_rds(&self) -> bool {
        self.error.is_none()
            && self.node_type == NodeType::Ca
            && self.transport == Transport::Ib
            && self.ports.iter().any(|p| p.state == PortState::Active)
    }
}

impl fmt::Display for DeviceSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({:?}, {:?})",
            self.name, self.node_type, self.transport
        )?;
        if let Some(e) = &self.error {
            return write!(f, ": {e}");
        }
        for p in &self.ports {
            write!(
                f,
                "; port {} {:?} {:?} mtu {}",
                p.port, p.state, p.link_layer, p.active_mtu
            )?;
        }
        Ok(())
    }
}

/// Which RDMA devices this host has, or why the IB transport is unavailable. Meant for
/// `rds-info` / `rds-ctrl` to say why IB is absent.
///
/// # Errors
/// Library problems (see [`lib`]), [`IbUnavailable::DeviceList`], or
/// [`IbUnavailable::NoKernelSupport`] / [`IbUnavailable::NoDevices`] when there is no device.
pub fn availability() -> Result<Vec<DeviceSummary>, IbUnavailable> {
    availability_with(lib()?)
}

/// [`availability`] with a given library instance (see [`IbLib::open_named`]).
///
/// # Errors
/// As [`availability`] (except the library errors, which [`IbLib::open_named`] returns).
pub fn availability_with(lib: &'static IbLib) -> Result<Vec<DeviceSummary>, IbUnavailable> {
    let list = DeviceList::new(lib).map_err(|e| IbUnavailable::DeviceList(e.to_string()))?;
    if !list.kernel_support() {
        return Err(IbUnavailable::NoKernelSupport);
    }
    if list.is_empty() {
        return Err(IbUnavailable::NoDevices);
    }
    Ok(list.iter().map(|d| summarize(&d)).collect())
}

fn summarize(dev: &Device<'_>) -> DeviceSummary {
    let mut s = DeviceSummary {
        name: dev.name(),
        node_type: dev.node_type(),
        transport: dev.transport(),
        fw_ver: String::new(),
        node_guid: 0,
        ports: Vec::new(),
        error: None,
    };
    let ctx = match dev.open() {
        Ok(c) => c,
        Err(e) => {
            s.error = Some(e.to_string());
            return s;
        }
    };
    let attr = match ctx.query_device() {
        Ok(a) => a,
        Err(e) => {
            s.error = Some(e.to_string());
            return s;
        }
    };
    s.fw_ver = attr.fw_ver.clone();
    s.node_guid = attr.node_guid;
    for port in 1..=attr.phys_port_cnt {
        match ctx.query_port(port) {
            Ok(pa) => {
                let n = pa.gid_tbl_len.clamp(0, 16);
                let gids = (0..n)
                    .filter_map(|i| ctx.query_gid(port, i).ok())
                    .filter(|g| !g.is_zero())
                    .collect();
                s.ports.push(PortSummary {
                    port,
                    state: pa.state,
                    link_layer: pa.link_layer,
                    active_mtu: pa.active_mtu,
                    gids,
                });
            }
            Err(e) => {
                s.error = Some(e.to_string());
                break;
            }
        }
    }
    s
}
