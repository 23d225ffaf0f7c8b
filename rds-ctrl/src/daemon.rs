//! The host daemon: one RDS node named `daemon` that owns the host's addresses, so that every
//! tool and application on the host shares its connections (client sockets reach it over its
//! control socket).
//!
//! `rds-ctrl daemon` runs it in the foreground (systemd: `contrib/rds-daemon.service`);
//! `rds-ctrl load` starts the same command detached. Start-up: the persistent tunables file
//! is applied to the defaults, the node starts on the addresses given (or on every configured
//! unicast address whose port 16385 is free), and the control socket is served. It stops on
//! SIGTERM or SIGINT, or on a `Shutdown` request (`rds-ctrl unload`); stopping closes the
//! connections and removes the control socket. It logs through the `log` facade, as the
//! library does, with the daemon's lines ([`rds_cli::logger::daemon`]): on stderr,
//! `YYYY-MM-DD HH:MM:SS rds-ctrl daemon[PID]: message` (the log file of `rds-ctrl load`), or
//! under systemd `<N>message` with the journald priority N; level `info` unless `RDS_LOG` or
//! `--log-level` say otherwise.

use std::net::{IpAddr, TcpListener};
use std::os::fd::AsFd;
use std::time::Duration;

use anyhow::{bail, Context};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use rds_core::abi::{RDS_IB_PORT_V4, RDS_IB_PORT_V6, RDS_TCP_PORT};
use rds_core::ctl::DAEMON_NAME;
use rds_core::tunables::Tunables;
use rds_core::{CtlMode, Node, NodeConfig, Transports};

use crate::config::{self, Config};
use crate::util::Negative;
use crate::Transport;

/// The start of the message for an unavailable IB transport (the reason follows).
pub const IB_UNAVAILABLE: &str = "the IB transport is unavailable";

/// The transports a node runs, as `load` and the log say it: `tcp`, `ib` or `tcp+ib`.
pub fn transport_names(node: &Node) -> &'static str {
    match (node.tcp_running(), node.ib_running()) {
        (true, true) => "tcp+ib",
        (false, true) => "ib",
        (true, false) => "tcp",
        (false, false) => "none",
    }
}

/// The host's configured unicast addresses (interfaces up; IPv6 link-local addresses are left
/// out as they need a scope).
pub fn host_addrs() -> Vec<IpAddr> {
    let Ok(ifs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut v: Vec<IpAddr> = Vec::new();
    for i in ifs {
        if !i.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP) {
            continue;
        }
        let Some(a) = i.address else { continue };
        let ip = if let Some(s) = a.as_sockaddr_in() {
            IpAddr::V4(s.ip())
        } else if let Some(s) = a.as_sockaddr_in6() {
            IpAddr::V6(s.ip())
        } else {
            continue;
        };
        let link_local = matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
        let v4_bcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
        if ip.is_unspecified() || ip.is_multicast() || link_local || v4_bcast || v.contains(&ip) {
            continue;
        }
        v.push(ip);
    }
    v
}

/// Reads the persistent tunables (what is wrong in the file is logged as warnings).
pub fn persistent_tunables() -> Tunables {
    let path = config::path();
    let mut t = Tunables::default();
    match Config::load(&path) {
        Ok((c, warnings)) => {
            for w in warnings {
                log::warn!("{}: {w} (ignored)", path.display());
            }
            let n = c.settings().len();
            for w in c.apply(&mut t) {
                log::warn!("{}: {w} (ignored)", path.display());
            }
            if n > 0 {
                log::info!("applied {n} persistent tunable(s) from {}", path.display());
            }
        }
        Err(e) => log::warn!("cannot read {}: {e} (using defaults)", path.display()),
    }
    t
}

/// Runs the daemon until a signal or a shutdown request. `detach` starts a new session
/// first (used by `rds-ctrl load`).
///
/// # Errors
/// The node cannot start: an address is not configured here, port 16385 is taken (for
/// example by the kernel's `rds_tcp`), or a daemon already runs; [`Negative`] when `ib` was
/// asked for and the IB transport is unavailable here.
pub fn run(addrs: &[IpAddr], detach: bool, transport: Transport) -> anyhow::Result<u8> {
    if detach {
        let _ = nix::unistd::setsid();
    }
    let transport = transport.stack();
    let transports = match transport {
        Transport::Tcp => Transports {
            tcp: true,
            ib: false,
        },
        Transport::Ib => {
            if let Err(e) = rds_core::ib::availability() {
                return Err(Negative(format!("{IB_UNAVAILABLE}: {e}")).into());
            }
            Transports {
                tcp: false,
                ib: true,
            }
        }
        _ => Transports {
            tcp: true,
            ib: true,
        },
    };
    // Signals are taken through a signalfd: block them before any thread starts.
    let stop = rds_cli::StopSignals::block().context("blocking SIGTERM/SIGINT")?;

    let tunables = persistent_tunables();
    let addrs: Vec<IpAddr> = if addrs.is_empty() && !transports.tcp {
        host_addrs()
    } else if addrs.is_empty() {
        let mut usable = Vec::new();
        for ip in host_addrs() {
            match TcpListener::bind((ip, RDS_TCP_PORT)) {
                Ok(_) => usable.push(ip),
                Err(e) => log::info!("skipping {ip}: port {RDS_TCP_PORT}: {e}"),
            }
        }
        if usable.is_empty() {
            bail!("no usable address: every configured address has port {RDS_TCP_PORT} taken (is the kernel's rds_tcp loaded?)");
        }
        usable
    } else {
        addrs.to_vec()
    };
    let cfg = NodeConfig {
        addrs: addrs.clone(),
        tunables,
        seed: None,
        name: DAEMON_NAME.into(),
        ctl: CtlMode::Named(DAEMON_NAME.into()),
        transports,
        client_sockets: Some(rds_core::socket::host::service()),
    };
    let node = Node::start(cfg).with_context(|| {
        format!(
            "cannot start the node on {}",
            addrs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    if let Some(why) = node.ib_unavailable() {
        if transport == Transport::Ib {
            return Err(Negative(format!("{IB_UNAVAILABLE}: {why}")).into());
        }
        if transport == Transport::Auto {
            log::info!("{IB_UNAVAILABLE} ({why}): running TCP");
        } else {
            log::warn!("{IB_UNAVAILABLE}: {why}; running TCP only");
        }
    }
    let ports = match (node.tcp_running(), node.ib_running()) {
        (true, false) => format!("port {RDS_TCP_PORT}"),
        (false, true) => {
            format!("RDMA CM port {RDS_IB_PORT_V4} for IPv4, {RDS_IB_PORT_V6} for IPv6")
        }
        _ => format!(
            "port {RDS_TCP_PORT}; RDMA CM port {RDS_IB_PORT_V4} for IPv4, {RDS_IB_PORT_V6} for IPv6"
        ),
    };
    log::info!(
        "started: transport {} on {} ({ports}), control socket {}",
        transport_names(&node),
        addrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" "),
        node.ctl_path()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    loop {
        if !node.is_running() {
            log::info!("stopped by a shutdown request");
            break;
        }
        let mut fds = [PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
        let ready = nix::poll::poll(&mut fds, PollTimeout::from(200u16)).unwrap_or(0);
        if ready > 0 {
            if let Some(sig) = stop.take() {
                log::info!("{} received, stopping", sig.as_str());
                node.shutdown();
                break;
            }
        }
    }
    // A shutdown request stops the node on another thread; let it finish closing.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while node.tcp_connection_count() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    log::info!("stopped");
    Ok(0)
}
