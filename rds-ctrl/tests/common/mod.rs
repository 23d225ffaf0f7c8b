//! Helpers for daemon tests: a private runtime directory and config file per test, `rds-ctrl`
//! commands with that environment, and a daemon guard that always unloads (and, failing that,
//! kills) the daemon it loaded.
#![allow(dead_code)]

use std::net::{IpAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use assert_cmd::Command;

/// A test's private environment.
pub struct Env {
    pub dir: tempfile::TempDir,
    /// `RDS_RUNTIME_DIR`.
    pub run: PathBuf,
    /// `RDS_CONFIG`.
    pub conf: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        // Other users (privilege tests) must reach the control socket.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let run = dir.path().join("run");
        let conf = dir.path().join("rds.conf");
        Env { dir, run, conf }
    }

    /// `rds-ctrl` with this environment.
    pub fn ctrl(&self) -> Command {
        let mut c = Command::cargo_bin("rds-ctrl").unwrap();
        self.apply(&mut c);
        c
    }

    /// Applies the environment to any command.
    pub fn apply(&self, c: &mut Command) {
        c.env_remove("COLUMNS");
        c.env("RDS_RUNTIME_DIR", &self.run)
            .env("RDS_CONFIG", &self.conf)
            .env_remove("RDS_NO_DAEMON")
            .timeout(Duration::from_secs(60));
    }

    /// Runs `rds-ctrl args…`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.ctrl().args(args).output().unwrap()
    }

    pub fn sock(&self) -> PathBuf {
        self.run.join("daemon.sock")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.run.join("daemon.log")).unwrap_or_default()
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts the exit status, showing the output on failure.
#[track_caller]
pub fn status(out: &Output, code: i32) -> String {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Whether something listens on `ip:16385` (binding it fails).
pub fn rds_port_taken(ip: IpAddr) -> bool {
    TcpListener::bind((ip, 16385)).is_err()
}

pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X"),
        Err(_) => false,
    }
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A loaded daemon; dropping it unloads it and makes sure nothing is left.
pub struct Daemon<'a> {
    pub env: &'a Env,
    pub pid: u32,
    pub addr: IpAddr,
}

impl<'a> Daemon<'a> {
    /// `rds-ctrl load --addr addr`.
    pub fn load(env: &'a Env, addr: &str) -> Daemon<'a> {
        let out = env.run(&["load", "--addr", addr]);
        let s = status(&out, 0);
        let pid: u32 = s
            .split("(pid ")
            .nth(1)
            .and_then(|r| r.split(')').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {s:?}"));
        Daemon {
            env,
            pid,
            addr: addr.parse().unwrap(),
        }
    }

    /// `rds-ctrl unload`, checking that nothing is left behind.
    pub fn unload(&mut self) {
        let out = self.env.run(&["unload"]);
        status(&out, 0);
        self.check_gone();
    }

    pub fn check_gone(&self) {
        assert!(
            !pid_alive(self.pid),
            "daemon process {} still runs",
            self.pid
        );
        assert!(!self.env.sock().exists(), "control socket left behind");
        wait_until("the RDS port to be free", Duration::from_secs(5), || {
            !rds_port_taken(self.addr)
        });
    }
}

impl Drop for Daemon<'_> {
    fn drop(&mut self) {
        if pid_alive(self.pid) {
            let _ = self.env.run(&["unload", "--timeout", "5"]);
        }
        if pid_alive(self.pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = std::fs::remove_file(self.env.sock());
        }
    }
}

/// A copy of `rds-ctrl` alone in a directory (for "tool not found" checks and fake tools).
pub fn lone_ctrl(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let dst = bin.join("rds-ctrl");
    std::fs::copy(assert_cmd::cargo::cargo_bin("rds-ctrl"), &dst).unwrap();
    dst
}
