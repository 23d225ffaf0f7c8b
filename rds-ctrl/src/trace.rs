//! `trace start|stop|report`: the rdsctrl front end of the capture engine. The capture itself
//! is `rds-trace` (the same engine behind both front ends): `start` runs
//! `rds-trace -w FILE -s SNAPLEN [--node NAME]` detached and records its pid in
//! `<runtime dir>/trace.pid`; `stop` interrupts it (SIGINT, as Ctrl-C would) and waits;
//! `report` runs `rds-trace -r FILE`.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rds_core::ctl::runtime_dir;

use crate::util::{self, Negative};

/// The trace's pid file.
pub fn pid_path() -> PathBuf {
    runtime_dir().join("trace.pid")
}

/// The trace's log (rds-trace's stderr and stdout).
pub fn log_path() -> PathBuf {
    runtime_dir().join("trace.log")
}

/// The pid of the running trace, if any (a stale pid file is removed).
pub fn running() -> Option<u32> {
    let path = pid_path();
    let pid: u32 = std::fs::read_to_string(&path).ok()?.trim().parse().ok()?;
    if util::pid_alive(pid) && util::pid_comm(pid).is_some_and(|c| c.starts_with("rds-trace")) {
        Some(pid)
    } else {
        let _ = std::fs::remove_file(&path);
        None
    }
}

/// `trace start FILE SNAPLEN`.
///
/// # Errors
/// rds-trace is missing, or it exits at once (its log is shown).
pub fn start(
    out: &mut dyn Write,
    file: &Path,
    snaplen: u32,
    node: Option<&str>,
) -> anyhow::Result<u8> {
    if let Some(pid) = running() {
        return Err(Negative(format!(
            "a trace is already running (pid {pid}); stop it with 'rds-ctrl trace stop'"
        ))
        .into());
    }
    let tool = util::find_tool("rds-trace")?;
    let file = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    rds_core::ctl::ensure_runtime_dir()?;
    let log = log_path();
    let log_from = util::file_len(&log);
    let mut args: Vec<OsString> = vec![
        "-w".into(),
        file.clone().into_os_string(),
        "-s".into(),
        snaplen.to_string().into(),
    ];
    if let Some(n) = node {
        args.push("--node".into());
        args.push(n.into());
    }
    let mut child = util::spawn_detached(&tool, &args, &log)
        .with_context(|| format!("starting {}", tool.display()))?;
    let pid = child.id();
    // A capture that cannot start (no node, no permission, bad file) ends at once.
    let deadline = std::time::Instant::now() + Duration::from_millis(500);
    while std::time::Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "rds-trace stopped at once ({status}):\n{}",
                util::log_tail(&log, log_from, 20)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(pid_path(), format!("{pid}\n"))
        .with_context(|| format!("writing {}", pid_path().display()))?;
    writeln!(
        out,
        "trace started (rds-trace pid {pid}): writing {} with snaplen {snaplen}; stop it with 'rds-ctrl trace stop'",
        file.display()
    )?;
    Ok(0)
}

/// `trace stop`.
///
/// # Errors
/// The process cannot be signalled or does not stop.
pub fn stop(out: &mut dyn Write, timeout: Duration) -> anyhow::Result<u8> {
    let Some(pid) = running() else {
        return Err(Negative("no trace is running".into()).into());
    };
    let log = log_path();
    let log_from = util::file_len(&log);
    let p = Pid::from_raw(pid as i32);
    kill(p, Signal::SIGINT).with_context(|| format!("signalling rds-trace (pid {pid})"))?;
    if !util::wait_gone(pid, timeout) {
        let _ = kill(p, Signal::SIGTERM);
        if !util::wait_gone(pid, Duration::from_secs(2)) {
            bail!("rds-trace (pid {pid}) did not stop");
        }
    }
    let _ = std::fs::remove_file(pid_path());
    writeln!(out, "trace stopped (rds-trace pid {pid})")?;
    let tail = util::log_tail(&log, log_from, 5);
    if !tail.is_empty() {
        writeln!(out, "{tail}")?;
    }
    Ok(0)
}

/// `trace report FILE`: replaces this process with `rds-trace -r FILE`.
///
/// # Errors
/// rds-trace is missing or cannot be run.
pub fn report(file: &Path) -> anyhow::Result<u8> {
    let tool = util::find_tool("rds-trace")?;
    let e = util::exec(&tool, &["-r".into(), file.as_os_str().to_owned()]);
    Err(anyhow::Error::new(e).context(format!("running {}", tool.display())))
}
