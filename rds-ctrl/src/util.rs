//! Small process helpers: finding sibling tools, detaching children, watching pids, logs.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use rds_cli::Negative;

/// Where a sibling tool (`rds-info`, `rds-ping`, `rds-trace`) was looked for.
#[derive(Debug)]
pub struct NotFound {
    /// The tool.
    pub name: String,
    /// The directory of `rds-ctrl` itself.
    pub dir: Option<PathBuf>,
}

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot find {}: looked ", self.name)?;
        if let Some(d) = &self.dir {
            write!(f, "next to rds-ctrl in {} and ", d.display())?;
        }
        write!(f, "in PATH; is it installed?")
    }
}

impl std::error::Error for NotFound {}

fn is_exec(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Finds a sibling tool: next to this executable first, else in `PATH`.
///
/// # Errors
/// [`NotFound`] when it is in neither place.
pub fn find_tool(name: &str) -> Result<PathBuf, NotFound> {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf));
    if let Some(d) = &dir {
        let p = d.join(name);
        if is_exec(&p) {
            return Ok(p);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            let p = d.join(name);
            if is_exec(&p) {
                return Ok(p);
            }
        }
    }
    Err(NotFound {
        name: name.into(),
        dir,
    })
}

/// Replaces this process with `program args…` (returns only on failure).
pub fn exec(program: &Path, args: &[OsString]) -> io::Error {
    use std::os::unix::process::CommandExt;
    Command::new(program).args(args).exec()
}

/// Starts `program args…` in a new session (detached from the terminal and its signals),
/// with no stdin and stdout/stderr appended to `log`. The child's pid is the program's.
///
/// # Errors
/// The log cannot be opened or the process cannot be started.
pub fn spawn_detached(program: &Path, args: &[OsString], log: &Path) -> io::Result<Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let err = out.try_clone()?;
    let me = std::env::current_exe()?;
    // Its lines go to `log`, not to the journal of a unit this command may run in: the
    // daemon writes them with their timestamps (see rds_cli::logger).
    Command::new(me)
        .arg("__exec-detached")
        .arg(program)
        .args(args)
        .env_remove("JOURNAL_STREAM")
        .env_remove("INVOCATION_ID")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
}

/// The hidden `__exec-detached` command: a new session, the stop signals back to their
/// default disposition (a command started in the background by a shell without job control,
/// or under `nohup`, inherits SIGINT ignored, and `trace stop`'s SIGINT would then not reach a
/// program that cannot catch what was ignored on entry, as a shell script), then `exec`.
pub fn exec_detached(program: &OsStr, args: &[OsString]) -> io::Error {
    let _ = nix::unistd::setsid();
    rds_core::process::default_stop_signals();
    exec(Path::new(program), args)
}

/// Prints one JSON document, indented as rds-info and rds-ping print theirs; returns exit
/// status 0.
///
/// # Errors
/// Write errors.
pub fn print_json(out: &mut dyn io::Write, doc: &serde_json::Value) -> anyhow::Result<u8> {
    writeln!(out, "{doc:#}")?;
    Ok(0)
}

/// Counters as one JSON object `{name: value}`.
pub fn counters_json<I: IntoIterator<Item = (String, u64)>>(counters: I) -> serde_json::Value {
    serde_json::Value::Object(
        counters
            .into_iter()
            .map(|(n, v)| (n, serde_json::Value::from(v)))
            .collect(),
    )
}

/// Whether `pid` is a live process (zombies count as gone).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => stat_state(&s).is_some_and(|st| st != 'Z' && st != 'X'),
        Err(_) => false,
    }
}

fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    // "pid (comm) state ..." where comm may contain spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

fn stat_state(stat: &str) -> Option<char> {
    stat_fields(stat)?.first()?.chars().next()
}

/// The executable name of `pid` (`/proc/<pid>/comm`).
pub fn pid_comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// How long `pid` has been running.
pub fn pid_uptime(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22 (starttime) is the 20th after the state field's predecessor ")".
    let start_ticks: u64 = stat_fields(&stat)?.get(19)?.parse().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&h| h > 0)? as u64;
    let up: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let started = start_ticks as f64 / hz as f64;
    Some(Duration::from_secs_f64((up - started).max(0.0)))
}

/// Waits until `pid` is gone; returns whether it went within `timeout`.
pub fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while pid_alive(pid) {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// `d h:mm:ss`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (days, h, m, sec) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if days > 0 {
        format!("{days}d {h:02}:{m:02}:{sec:02}")
    } else {
        format!("{h:02}:{m:02}:{sec:02}")
    }
}

/// The last `n` lines of a file from byte `from` on (for failure reports).
pub fn log_tail(path: &Path, from: u64, n: usize) -> String {
    let Ok(data) = std::fs::read(path) else {
        return String::new();
    };
    let start = (from as usize).min(data.len());
    let text = String::from_utf8_lossy(&data[start..]);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A file's length (0 if missing).
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_has_an_uptime() {
        let me = std::process::id();
        assert!(pid_alive(me));
        assert!(pid_uptime(me).is_some());
        assert!(!pid_alive(u32::MAX));
        assert_eq!(
            stat_state("12 (a b) c) S 1 2"),
            Some('S'),
            "comm with spaces and parentheses"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(human_duration(Duration::from_secs(3661)), "01:01:01");
        assert_eq!(human_duration(Duration::from_secs(90061)), "1d 01:01:01");
    }
}
