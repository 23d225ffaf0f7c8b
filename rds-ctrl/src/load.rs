//! `load` and `unload`: start the host daemon in the background and stop it.
//!
//! `load ofed` and `load aixib` (the AIX names for RDS over RoCE and over InfiniBand) both
//! load this stack's IB transport, which runs on RoCE and InfiniBand devices alike; where IB
//! is unavailable they refuse, and `load all` is the way to ask for TCP as well (IB where
//! available). On a host whose kernel runs RDS, `load` refuses and `unload` says how to unload
//! the kernel's modules.

use std::ffi::OsString;
use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rds_core::ctl::client::CtlClient;
use rds_core::ctl::{find_daemon, runtime_dir, Request, DAEMON_NAME};

use crate::daemon::IB_UNAVAILABLE;
use crate::kernel;
use crate::util::{self, Negative};
use crate::Transport;

/// The daemon's log file.
pub fn log_path() -> PathBuf {
    runtime_dir().join("daemon.log")
}

/// `load`.
///
/// # Errors
/// [`Negative`] when `ib` is asked for and the IB transport is unavailable here (nothing is
/// started); the daemon cannot be started, or it did not answer in time (it is then stopped
/// again).
pub fn load(
    out: &mut dyn Write,
    transport: Transport,
    addrs: &[IpAddr],
    timeout: Duration,
) -> anyhow::Result<u8> {
    let asked = match transport {
        Transport::Auto => "the RDS daemon",
        t => t.name(),
    };
    let transport = transport.stack();
    if let Some(ep) = find_daemon() {
        let pid = CtlClient::connect(&ep.path).map_or(0, |c| c.hello.pid);
        return Err(Negative(format!(
            "the RDS daemon is already loaded (pid {pid}, {})",
            ep.path.display()
        ))
        .into());
    }
    // The kernel's transports hold the ports this one needs.
    let kernel_holds = match transport {
        Transport::Tcp => kernel::kernel_tcp(),
        Transport::Ib => kernel::kernel_ib(),
        _ => kernel::kernel_tcp() || kernel::kernel_ib(),
    };
    if kernel_holds {
        return Err(Negative(format!("cannot load {asked}: {}", kernel::modules_note())).into());
    }
    // Why IB cannot run here, checked before anything starts.
    let ib_missing = match transport {
        Transport::Tcp => None,
        _ => rds_core::ib::availability().err(),
    };
    if let (Transport::Ib, Some(e)) = (transport, &ib_missing) {
        let all = if asked == "ib" {
            String::new()
        } else {
            "; 'rds-ctrl load all' runs TCP where IB is unavailable".to_string()
        };
        return Err(Negative(format!("cannot load {asked}: {IB_UNAVAILABLE}: {e}{all}")).into());
    }
    let dir = rds_core::ctl::ensure_runtime_dir()?;
    let log = log_path();
    let log_from = util::file_len(&log);
    let me = std::env::current_exe().context("locating rds-ctrl")?;
    let name = transport.name();
    let mut args: Vec<OsString> = vec!["daemon".into(), name.into()];
    for a in addrs {
        args.push("--addr".into());
        args.push(a.to_string().into());
    }
    let mut child = util::spawn_detached(&me, &args, &log)
        .with_context(|| format!("starting {} daemon", me.display()))?;
    let pid = child.id();
    let sock = dir.join(format!("{DAEMON_NAME}.sock"));
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let tail = util::log_tail(&log, log_from, 20);
            bail!(
                "the daemon failed to start ({status}); {}:\n{tail}",
                log.display()
            );
        }
        if let Ok(mut c) = CtlClient::connect(&sock) {
            if c.hello.pid == pid {
                let addrs = c
                    .hello
                    .addrs
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" ");
                let running = match c.info() {
                    Ok(snap) => {
                        let ib = rds_info::node::has_ib(&snap);
                        let tcp = snap.transports.iter().any(|t| t == "tcp");
                        match (tcp, ib) {
                            (true, true) => "tcp+ib",
                            (false, true) => "ib",
                            _ => "tcp",
                        }
                    }
                    Err(_) => name,
                };
                writeln!(
                    out,
                    "RDS daemon loaded (pid {pid}): transport {running} on {addrs}; control socket {}; log {}",
                    sock.display(),
                    log.display()
                )?;
                if let Some(e) = ib_missing.filter(|_| transport != Transport::Auto) {
                    log::warn!("{IB_UNAVAILABLE}: {e}; loaded TCP only");
                }
                return Ok(0);
            }
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let tail = util::log_tail(&log, log_from, 20);
            bail!(
                "the daemon (pid {pid}) did not answer within {} s and was stopped; {}:\n{tail}",
                timeout.as_secs(),
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `unload`: asks the daemon to stop and waits until its process and socket are gone.
///
/// # Errors
/// Not permitted, or the daemon did not stop in time.
pub fn unload(out: &mut dyn Write, timeout: Duration) -> anyhow::Result<u8> {
    let Some(ep) = find_daemon() else {
        if kernel::kernel_rds() {
            return Err(Negative(format!(
                "no RDS daemon of this stack is loaded; {}",
                kernel::modules_note()
            ))
            .into());
        }
        return Err(Negative("no RDS daemon is loaded".into()).into());
    };
    let mut c = CtlClient::connect(&ep.path).context("contacting the daemon")?;
    let pid = c.hello.pid;
    c.call_ok(&Request::Shutdown)
        .context("cannot unload the daemon")?;
    drop(c);
    let deadline = Instant::now() + timeout;
    loop {
        let gone = !util::pid_alive(pid);
        if gone && !ep.path.exists() {
            writeln!(out, "RDS daemon unloaded (pid {pid})")?;
            return Ok(0);
        }
        if Instant::now() >= deadline {
            bail!(
                "the daemon (pid {pid}) did not stop within {} s{}",
                timeout.as_secs(),
                if gone {
                    format!("; its socket {} is left behind", ep.path.display())
                } else {
                    String::new()
                }
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
