//! The host daemon under attack, for the abuse suites: `rds-ctrl daemon tcp` in a process of
//! its own with a private runtime directory and config file (mode 0755, so that other users
//! reach its control socket), its figures read from `/proc/<pid>`, and programs run as other
//! users from copies they can reach (a clone below a 0700 directory is not theirs to enter).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rds_core::ctl::client::CtlClient;
use rds_core::ctl::InfoSnapshot;

use crate::workspace_bin as bin;

/// What `/proc/<pid>` says about a process.
#[derive(Debug, Clone, Copy)]
pub struct ProcFigures {
    /// Resident memory.
    pub rss_kib: u64,
    /// Mapped data (heap and anonymous mappings).
    pub data_kib: u64,
    /// Threads.
    pub threads: u64,
    /// Open descriptors.
    pub fds: u64,
    /// User plus system CPU time, in USER_HZ ticks (100 per second).
    pub cpu_ticks: u64,
}

/// The figures of process `pid`; panics when it is gone.
pub fn proc_figures(pid: u32) -> ProcFigures {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("process {pid} is gone: {e}"));
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name: state is field 3, utime 14, stime 15.
    let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    let cpu_ticks = rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    ProcFigures {
        rss_kib: field("VmRSS:"),
        data_kib: field("VmData:"),
        threads: field("Threads:"),
        fds,
        cpu_ticks,
    }
}

/// Samples a process's RSS until stopped; keeps the largest value.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl RssSampler {
    /// Starts sampling `pid` every 10 ms.
    pub fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !s.load(Ordering::Relaxed) {
                if let Ok(t) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                    if let Some(v) = t
                        .lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.split_whitespace().next())
                        .and_then(|v| v.parse::<u64>().ok())
                    {
                        peak = peak.max(v);
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        });
        RssSampler {
            stop,
            thread: Some(thread),
        }
    }

    /// The largest RSS seen, in KiB.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Waits until `f` holds; returns how long that took. Fails after `limit`, saying `what`.
#[track_caller]
pub fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    t0.elapsed()
}

/// Runs a command to completion within `limit` (killing it after) and returns its output.
pub fn run_bounded(mut c: Command, limit: Duration, what: &str) -> Output {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {what}: {e}"));
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{what} did not finish in {limit:?}:\n{}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The host daemon of one case. Dropping it stops it (SIGTERM, then SIGKILL) and removes its
/// directory.
pub struct HostDaemon {
    child: Child,
    /// Its process id.
    pub pid: u32,
    /// The address it owns.
    pub addr: Ipv4Addr,
    dir: tempfile::TempDir,
}

impl HostDaemon {
    /// Starts `rds-ctrl daemon tcp --addr addr`, with `ulimit -n nofile` when given and `conf`
    /// as its tunables file (`name = value` lines), and waits until it answers on its control
    /// socket.
    pub fn start(addr: Ipv4Addr, nofile: Option<u64>, conf: &str) -> HostDaemon {
        let dir = tempfile::tempdir().unwrap();
        // Other users reach the control socket (and their programs' copies) through it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("rds.conf"), conf).unwrap();
        let log = std::fs::File::create(dir.path().join("daemon.log")).unwrap();
        let mut c = crate::daemon_command(dir.path(), &addr.to_string(), nofile);
        c.stdout(Stdio::null()).stderr(log);
        let child = c.spawn().expect("spawning rds-ctrl daemon");
        let pid = child.id();
        let mut d = HostDaemon {
            child,
            pid,
            addr,
            dir,
        };
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("the daemon exited at start ({st}):\n{}", d.log());
            }
            if let Ok(c) = CtlClient::connect(&d.sock_path()) {
                assert_eq!(c.hello.pid, pid, "another daemon answers");
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "the daemon did not answer within 15 s:\n{}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    /// Its private directory (mode 0755).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its runtime directory.
    pub fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// Its control socket.
    pub fn sock_path(&self) -> PathBuf {
        self.run_dir().join("daemon.sock")
    }

    /// What it wrote on stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// Its figures now.
    pub fn proc(&self) -> ProcFigures {
        proc_figures(self.pid)
    }

    /// A control connection (hello answered); panics with the log when there is none.
    pub fn ctl(&self) -> CtlClient {
        CtlClient::connect(&self.sock_path())
            .unwrap_or_else(|e| panic!("control socket: {e}\n{}", self.log()))
    }

    /// Whether a new control connection is answered (hello) within `limit`, from a thread of
    /// its own so that a daemon that does not answer cannot hold the caller.
    pub fn answers_within(&self, limit: Duration) -> bool {
        let path = self.sock_path();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(CtlClient::connect(&path).is_ok());
        });
        rx.recv_timeout(limit).unwrap_or(false)
    }

    /// Every counter of the daemon (RDS, TCP, IB lists).
    pub fn stats(&self) -> HashMap<String, u64> {
        self.ctl()
            .stats()
            .unwrap_or_else(|e| panic!("stats: {e}\n{}", self.log()))
            .into_iter()
            .collect()
    }

    /// One counter; fails naming it when the daemon has no such counter.
    pub fn stat(&self, name: &str) -> u64 {
        let s = self.stats();
        *s.get(name)
            .unwrap_or_else(|| panic!("the daemon has no counter {name}"))
    }

    /// Its info snapshot.
    pub fn snapshot(&self) -> InfoSnapshot {
        self.ctl()
            .info()
            .unwrap_or_else(|e| panic!("info: {e}\n{}", self.log()))
    }

    /// A tool with this daemon's environment.
    pub fn tool(&self, name: &str) -> Command {
        self.tool_at(&bin(name))
    }

    /// [`HostDaemon::tool`] for a program at `path`.
    pub fn tool_at(&self, path: &Path) -> Command {
        let mut c = Command::new(path);
        c.env("RDS_RUNTIME_DIR", self.run_dir())
            .env("RDS_CONFIG", self.dir.path().join("rds.conf"))
            .env_remove("RDS_NO_DAEMON");
        c
    }

    /// The workspace program `name`, copied into this daemon's directory (once) so that any
    /// user can run it.
    pub fn copy_for_others(&self, name: &str) -> PathBuf {
        let copy = self.dir.path().join(name);
        if !copy.exists() {
            std::fs::copy(bin(name), &copy).unwrap_or_else(|e| panic!("copying {name}: {e}"));
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        copy
    }

    /// [`HostDaemon::copy_for_others`] of `name`, with this daemon's environment, to run as
    /// `uid` (and its group).
    pub fn tool_as(&self, name: &str, uid: u32) -> Command {
        let mut c = self.tool_at(&self.copy_for_others(name));
        c.uid(uid).gid(uid).current_dir(self.dir.path());
        c
    }

    /// A command line run through `setpriv` as `uid` (its group, no supplementary groups),
    /// with this daemon's environment: `pre` goes between `setpriv`'s options and the program
    /// (`--inh-caps`, ... or a wrapper such as `unshare -U -r`).
    pub fn setpriv(&self, uid: u32, opts: &[&str], wrap: &[&str], name: &str) -> Command {
        let mut c = self.tool_at(Path::new("setpriv"));
        c.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups")
            .args(opts)
            .args(wrap)
            .arg(self.copy_for_others(name))
            .current_dir(self.dir.path());
        c
    }

    /// Fails with the log when it died.
    pub fn assert_alive(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("the daemon died ({st}):\n{}", self.log());
        }
    }

    /// Sends SIGTERM and returns how long it took to exit; fails (after killing it) when it
    /// did not exit within `limit`.
    pub fn terminate_within(&mut self, limit: Duration) -> Duration {
        let _ = kill(Pid::from_raw(self.pid as i32), Signal::SIGTERM);
        let t0 = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) {
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "the daemon did not stop within {limit:?} of SIGTERM:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        t0.elapsed()
    }
}

impl HostDaemon {
    /// The end of every attack: the daemon is alive, answers root and another user (uid
    /// 65533, through `rds-hostile-client hello`) within 5 s, and stops within 5 s of SIGTERM.
    #[track_caller]
    pub fn survives(mut self) {
        self.assert_alive();
        assert!(
            self.answers_within(Duration::from_secs(5)),
            "root's hello is not answered:\n{}",
            self.log()
        );
        let mut c = self.tool_as("rds-hostile-client", 65533);
        c.arg("hello").arg(self.sock_path());
        let out = run_bounded(c, Duration::from_secs(10), "hello as uid 65533");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.starts_with("done hello daemon"),
            "uid 65533 got no answer: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.terminate_within(Duration::from_secs(5));
    }
}

impl Drop for HostDaemon {
    fn drop(&mut self) {
        let pid = Pid::from_raw(self.pid as i32);
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = kill(pid, Signal::SIGTERM);
            let t0 = Instant::now();
            while matches!(self.child.try_wait(), Ok(None)) {
                if t0.elapsed() > Duration::from_secs(5) {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A program started by a test that holds what it made until its standard input closes
/// (`rds-hostile-client`, `rds-idle-sock`): its first line of output, and a handle that lets
/// it go.
pub struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its first line (without the newline).
    pub line: String,
}

impl Holder {
    /// Starts `c` and reads its first line (within 30 s). A copy of the program that a child
    /// forked meanwhile by a parallel test still holds open for writing (`ETXTBSY`, until that
    /// child execs) is tried again for up to 2 s.
    pub fn start(mut c: Command, what: &str) -> Holder {
        use std::io::BufRead;
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut tries = 0;
        let mut child = loop {
            match c.spawn() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                r => break r.unwrap_or_else(|e| panic!("spawning {what}: {e}")),
            }
        };
        let stdin = child.stdin.take();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        if line.is_empty() {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{what} printed nothing: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        Holder {
            child,
            stdin,
            line: line.trim_end().to_string(),
        }
    }

    /// Closes its standard input and waits (10 s at most) for it to exit.
    pub fn release(mut self) {
        self.stdin.take();
        let t0 = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) {
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
