//! The kernel interop lab: one or two qemu guests running the stock Debian kernel's RDS
//! (`rds`, `rds_tcp`, optionally `rds_rdma`, and `rdma_rxe`), attached to a bridge inside
//! the private network namespace `rdslab`. This module drives `tests/lab/lab.sh`; see
//! `tests/lab/README.md` for the topology, the job spool and `rdstool`.
//!
//! Contract:
//! - [`Lab::start`] needs root. It takes a machine-wide lock (an in-process mutex plus `flock`
//!   on [`LOCK_FILE`], the same lock `lab.sh selftest` takes), because the namespace, bridge and
//!   tap names are global: labs in one test binary, in concurrent test binaries or in other
//!   checkouts run one after the other. It stops leftovers of an earlier run, runs `lab.sh setup` (cached)
//!   and `lab.sh start N`, and fails with the script's output (including the guest console
//!   tail) if anything goes wrong. Dropping the [`Lab`] stops the guests and deletes the
//!   namespace (if the lab created it).
//! - Guest commands run through the 9p job spool: [`Lab::exec`] waits, [`Lab::spawn`] returns
//!   a [`GuestJob`] handle. Every wait is bounded by a timeout.
//! - Host-side code reaches the guests only from inside the `rdslab` namespace:
//!   [`Lab::in_netns`] / [`Lab::spawn_in_netns`] run closures on a thread that has joined it
//!   (threads spawned from that thread inherit it), [`Lab::ns_command`] builds a
//!   [`std::process::Command`] that runs inside it.
//!
//! Addresses: g1 = 198.18.0.2, g2 = 198.18.0.4 (guest `eth0`, also their `rxe0` GID 1);
//! host side (on `br0` in the namespace) = 198.18.0.1 and 198.18.0.3. These exist only in the
//! namespace; nothing is configured in the host's main namespace.

use anyhow::{anyhow, bail, Context, Result};
use std::fs;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Name of the lab's network namespace.
pub const NETNS: &str = "rdslab";
/// First host-side address (on `br0` inside the namespace); smaller than every guest's.
pub const HOST_ADDR1: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Second host-side address; between g1 (.2) and g2 (.4).
pub const HOST_ADDR2: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
/// Kernel RDS/TCP listener port in the guests.
pub use rds_core::abi::RDS_TCP_PORT;
/// Machine-wide lock serialising labs (`LAB_LOCK` overrides it, for lab.sh too).
pub const LOCK_FILE: &str = "/run/lock/rdslab.lock";

fn lock_file() -> PathBuf {
    match std::env::var_os("LAB_LOCK") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(LOCK_FILE),
    }
}

/// Address of guest `g` (1 or 2).
pub fn guest_addr(g: usize) -> Ipv4Addr {
    match g {
        1 => Ipv4Addr::new(198, 18, 0, 2),
        2 => Ipv4Addr::new(198, 18, 0, 4),
        _ => panic!("guest must be 1 or 2, got {g}"),
    }
}

/// Directory holding `lab.sh`, `rdstool.c` and the default cache and run directories.
pub fn lab_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("lab")
}

/// The lab's cache (downloaded packages, the kernel tree, the initramfs): `LAB_CACHE` when
/// set, as `lab.sh` reads it, else `cache/` in [`lab_dir`].
pub fn cache_dir() -> PathBuf {
    std::env::var_os("LAB_CACHE").map_or_else(|| lab_dir().join("cache"), PathBuf::from)
}

/// Options for [`Lab::start`].
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// Load the kernel's `rds_rdma` in the guests (`lab.ib=1`). With `false`, `rxe0` still
    /// exists but nothing in the kernel listens on the RDS/IB port, so a userspace stack can.
    pub ib: bool,
    /// `ACCEL` for lab.sh: `auto` (default when `None`), `tcg` or `kvm`.
    pub accel: Option<String>,
    /// How long the guests may take to print `LAB:READY`.
    pub boot_timeout: Duration,
    /// vCPUs per guest (`LAB_SMP` for lab.sh, 1..8); `None` leaves lab.sh's default (1, or
    /// `LAB_SMP` from the environment).
    pub smp: Option<u32>,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            ib: true,
            accel: None,
            boot_timeout: Duration::from_secs(120),
            smp: None,
        }
    }
}

/// Result of a guest command.
#[derive(Clone, Debug)]
pub struct GuestOutput {
    /// Exit status (128+N if killed by signal N, 124 on the guest-side time limit).
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl GuestOutput {
    pub fn success(&self) -> bool {
        self.status == 0
    }

    /// `Ok(self)` if the status is 0, else an error carrying the output.
    pub fn check(self, what: &str) -> Result<GuestOutput> {
        if self.status == 0 {
            Ok(self)
        } else {
            Err(anyhow!(
                "{what}: exit status {}\n--- stdout ---\n{}--- stderr ---\n{}",
                self.status,
                self.stdout,
                self.stderr
            ))
        }
    }
}

static PROCESS_LOCK: Mutex<()> = Mutex::new(());
static JOB_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A running lab. Stops the guests when dropped.
pub struct Lab {
    guests: usize,
    dir: PathBuf,
    run: PathBuf,
    stopped: bool,
    _flock: fs::File,
    _guard: MutexGuard<'static, ()>,
}

fn run_dir() -> PathBuf {
    match std::env::var_os("LAB_RUN") {
        Some(p) => PathBuf::from(p),
        None => lab_dir().join("run"),
    }
}

fn lab_script(
    dir: &Path,
    args: &[&str],
    opts: Option<&LabOptions>,
) -> Result<std::process::Output> {
    let mut cmd = Command::new("bash");
    cmd.arg(dir.join("lab.sh")).args(args);
    if let Some(o) = opts {
        if let Some(a) = &o.accel {
            cmd.env("ACCEL", a);
        }
        if let Some(n) = o.smp {
            cmd.env("LAB_SMP", n.to_string());
        }
        cmd.env(
            "LAB_BOOT_TIMEOUT",
            o.boot_timeout.as_secs().max(1).to_string(),
        );
    }
    cmd.output()
        .with_context(|| format!("running lab.sh {}", args.join(" ")))
}

fn script_ok(out: std::process::Output, what: &str) -> Result<String> {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(stdout + &stderr)
    } else {
        bail!(
            "lab.sh {what} failed ({}):\n--- stdout ---\n{stdout}--- stderr ---\n{stderr}",
            out.status
        )
    }
}

impl Lab {
    /// [`Lab::start`] without the kernel's `rds_rdma` ([`LabOptions::ib`] false), printing
    /// how long the boot took. Panics when the lab cannot boot (a test fails, never skips).
    pub fn boot_without_rds_rdma(n_guests: usize) -> Lab {
        let t0 = Instant::now();
        let opts = LabOptions {
            ib: false,
            ..LabOptions::default()
        };
        let lab = Lab::start(n_guests, opts).expect("the kernel lab must boot");
        println!("lab booted in {:.1} s", t0.elapsed().as_secs_f64());
        lab
    }

    /// Set up (cached) and boot `n_guests` (1 or 2) guests in agent mode and wait until they
    /// are ready. Fails, never skips: not root, a failed download or a guest that does not
    /// boot are errors.
    pub fn start(n_guests: usize, opts: LabOptions) -> Result<Lab> {
        if !(1..=2).contains(&n_guests) {
            bail!("the lab has 1 or 2 guests, not {n_guests}");
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("the kernel interop lab must run as root (network namespaces, taps, qemu)");
        }
        let guard = PROCESS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let dir = lab_dir();
        let run = run_dir();
        fs::create_dir_all(&run).with_context(|| format!("creating {}", run.display()))?;
        let lock_path = lock_file();
        if let Some(parent) = lock_path.parent() {
            fs::create_dir_all(parent).ok();
        }
        let lockf = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("opening the lab lock file {}", lock_path.display()))?;
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(lockf.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!(
                "flock on {}: {}",
                lock_path.display(),
                std::io::Error::last_os_error()
            );
        }
        // Leftovers of a crashed run are ours to clean up while we hold the lock.
        script_ok(lab_script(&dir, &["stop"], None)?, "stop")?;
        script_ok(lab_script(&dir, &["setup"], Some(&opts))?, "setup")?;
        let n = n_guests.to_string();
        let ib = format!("--ib={}", u8::from(opts.ib));
        let mut lab = Lab {
            guests: n_guests,
            dir,
            run,
            stopped: false,
            _flock: lockf,
            _guard: guard,
        };
        if let Err(e) = script_ok(
            lab_script(&lab.dir, &["start", &n, &ib], Some(&opts))?,
            "start",
        ) {
            lab.stopped = true; // lab.sh start cleans up after a failed boot
            return Err(e);
        }
        Ok(lab)
    }

    /// Number of running guests.
    pub fn guests(&self) -> usize {
        self.guests
    }

    /// Address of guest `g` (1 or 2).
    pub fn guest_addr(&self, g: usize) -> Ipv4Addr {
        self.check_guest(g);
        guest_addr(g)
    }

    fn check_guest(&self, g: usize) {
        assert!(
            g >= 1 && g <= self.guests,
            "guest {g} is not running ({} guest(s))",
            self.guests
        );
    }

    /// Host directory shared with guest `g` (seen as `/mnt/share` in the guest).
    pub fn share_dir(&self, g: usize) -> PathBuf {
        self.check_guest(g);
        self.run.join(format!("g{g}")).join("share")
    }

    fn jobs_dir(&self, g: usize) -> PathBuf {
        self.share_dir(g).join("jobs")
    }

    /// The pid of guest `g`'s qemu (its pidfile), if it has one.
    pub fn qemu_pid(&self, g: usize) -> Option<u32> {
        self.check_guest(g);
        fs::read_to_string(self.run.join(format!("g{g}")).join("qemu.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The guest's console log so far (kernel messages, LAB markers, agent errors).
    pub fn console_log(&self, g: usize) -> String {
        self.check_guest(g);
        fs::read_to_string(self.run.join(format!("g{g}")).join("console.log")).unwrap_or_default()
    }

    /// Put `bytes` into guest `g`'s share as `name` (mode 0755) and return its path in the
    /// guest (`/mnt/share/NAME`). Host-built glibc-dynamic programs run there.
    pub fn write_share(&self, g: usize, name: &str, bytes: &[u8]) -> Result<String> {
        if name.is_empty() || name.contains('/') || name == "jobs" || name.starts_with('.') {
            bail!("bad share file name {name:?}");
        }
        let dir = self.share_dir(g);
        let tmp = dir.join(format!(".{name}.tmp"));
        {
            let mut f =
                fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
            f.write_all(bytes)?;
            f.sync_all()?;
        }
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
        fs::rename(&tmp, dir.join(name))?;
        Ok(format!("/mnt/share/{name}"))
    }

    /// Start `cmd` (a shell command for the guest's busybox sh) in guest `g` in the
    /// background. The guest kills it after `timeout`.
    pub fn spawn(&self, g: usize, cmd: &str, timeout: Duration) -> Result<GuestJob> {
        self.check_guest(g);
        let secs = timeout.as_secs_f64().ceil().max(1.0) as u64;
        let id = format!(
            "r{}-{}-{}",
            std::process::id(),
            JOB_COUNTER.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        );
        let dir = self.jobs_dir(g);
        let tmp = dir.join(format!("{id}.job.tmp"));
        fs::write(&tmp, format!("#lab-timeout={secs}\n{cmd}\n"))
            .with_context(|| format!("writing job {}", tmp.display()))?;
        fs::rename(&tmp, dir.join(format!("{id}.job")))?;
        Ok(GuestJob {
            guest: g,
            id,
            dir,
            timeout: Duration::from_secs(secs),
            started: Instant::now(),
            pidfile: self.run.join(format!("g{g}")).join("qemu.pid"),
            done: false,
        })
    }

    /// Run `cmd` in guest `g` and wait for it (at most `timeout`, plus a grace period).
    /// A non-zero exit status is not an error; see [`GuestOutput::check`].
    pub fn exec(&self, g: usize, cmd: &str, timeout: Duration) -> Result<GuestOutput> {
        self.spawn(g, cmd, timeout)?.wait()
    }

    /// [`Lab::exec`] that fails on a non-zero exit status.
    pub fn exec_ok(&self, g: usize, cmd: &str, timeout: Duration) -> Result<GuestOutput> {
        self.exec(g, cmd, timeout)?
            .check(&format!("guest g{g}: {cmd}"))
    }

    /// Fails unless guest `g`'s kernel lists an RDS connection to guest `peer` over
    /// InfiniBand (`rdstool info conns`).
    pub fn expect_kernel_ib_conn(&self, g: usize, peer: usize, timeout: Duration) -> Result<()> {
        let (me, other) = (self.guest_addr(g), self.guest_addr(peer));
        let conns = self.exec_ok(g, "rdstool info conns", timeout)?.stdout;
        if !conns
            .lines()
            .any(|l| l.starts_with(&format!("{me} {other} ")) && l.contains(" infiniband "))
        {
            bail!("g{g}'s kernel has no infiniband connection to {other}:\n{conns}");
        }
        Ok(())
    }

    /// Run `f` on a new thread inside the `rdslab` network namespace and return its result.
    pub fn in_netns<F, T>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let h = self.spawn_in_netns(f)?;
        h.join()
            .map_err(|_| anyhow!("the closure running in netns {NETNS} panicked"))
    }

    /// Start `f` on a new thread inside the `rdslab` network namespace. Threads that `f`
    /// spawns inherit the namespace.
    pub fn spawn_in_netns<F, T>(&self, f: F) -> Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        spawn_in_netns(NETNS, f)
    }

    /// A `Command` that runs `program` inside the namespace (`ip netns exec rdslab ...`).
    pub fn ns_command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", NETNS, program]);
        c
    }

    /// Run `lab.sh` with `args` against this lab (for example `["check"]`).
    pub fn lab_sh(&self, args: &[&str]) -> Result<std::process::Output> {
        lab_script(&self.dir, args, None)
    }

    /// The kernel-only checks of `lab.sh check` (all of them with two guests). Returns the
    /// report; fails if any check fails.
    pub fn run_kernel_checks(&self) -> Result<String> {
        script_ok(self.lab_sh(&["check"])?, "check")
    }

    /// Stop the guests now (also done on drop).
    pub fn stop(mut self) -> Result<()> {
        self.stopped = true;
        script_ok(lab_script(&self.dir, &["stop"], None)?, "stop").map(|_| ())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !self.stopped {
            self.stopped = true;
            if let Ok(out) = lab_script(&self.dir, &["stop"], None) {
                if !out.status.success() {
                    eprintln!("lab: stop failed: {}", String::from_utf8_lossy(&out.stderr));
                }
            }
        }
    }
}

/// Start `f` on a new thread that first joins the network namespace `/var/run/netns/NAME`.
/// Fails if the namespace cannot be joined (the thread then runs nothing).
pub fn spawn_in_netns<F, T>(name: &str, f: F) -> Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let path = PathBuf::from("/var/run/netns").join(name);
    let file = fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let (tx, rx) = mpsc::channel::<std::result::Result<(), String>>();
    let handle = std::thread::Builder::new()
        .name(format!("netns-{name}"))
        .spawn(move || {
            // SAFETY: setns on a namespace file descriptor we own; it affects this thread only.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            drop(file);
            if rc != 0 {
                let _ = tx.send(Err(std::io::Error::last_os_error().to_string()));
                // Never run `f` outside the namespace.
                panic!("setns failed");
            }
            let _ = tx.send(Ok(()));
            f()
        })
        .context("spawning the netns thread")?;
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => {
            let _ = handle.join();
            bail!("setns into {}: {e}", path.display())
        }
        Err(e) => bail!("netns thread did not report: {e}"),
    }
}

/// A background job in a guest, started by [`Lab::spawn`]. Dropping an unfinished job kills
/// it.
pub struct GuestJob {
    guest: usize,
    id: String,
    dir: PathBuf,
    timeout: Duration,
    started: Instant,
    pidfile: PathBuf,
    done: bool,
}

/// Grace period on top of a job's own time limit before the host gives up waiting.
const HOST_GRACE: Duration = Duration::from_secs(15);

impl GuestJob {
    fn path(&self, ext: &str) -> PathBuf {
        self.dir.join(format!("{}{ext}", self.id))
    }

    /// The guest this job runs in.
    pub fn guest(&self) -> usize {
        self.guest
    }

    /// The spool id (file names `jobs/ID.*` in the share).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Has the job finished (its status file exists)?
    pub fn is_finished(&self) -> bool {
        self.path(".rc").exists()
    }

    /// Standard output written so far.
    pub fn stdout_so_far(&self) -> String {
        fs::read_to_string(self.path(".out")).unwrap_or_default()
    }

    fn qemu_alive(&self) -> bool {
        match fs::read_to_string(&self.pidfile) {
            Ok(p) => Path::new(&format!("/proc/{}", p.trim())).exists(),
            Err(_) => false,
        }
    }

    /// Wait until the job's standard output contains `pattern` (e.g. a "bound" line).
    /// Fails if the job ends first or `timeout` passes.
    pub fn wait_for_output(&self, pattern: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.stdout_so_far().contains(pattern) {
                return Ok(());
            }
            if self.is_finished() {
                let err = fs::read_to_string(self.path(".err")).unwrap_or_default();
                bail!(
                    "guest g{} job {} ended before printing {pattern:?}:\n{}{}",
                    self.guest,
                    self.id,
                    self.stdout_so_far(),
                    err
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "guest g{} job {}: no {pattern:?} within {:?}; output so far:\n{}",
                    self.guest,
                    self.id,
                    timeout,
                    self.stdout_so_far()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ask the guest to kill the job (its whole process group).
    pub fn kill(&self) {
        let _ = fs::write(self.path(".kill"), b"");
    }

    /// Wait for the job to end and collect its output. Bounded by the job's time limit plus
    /// a grace period; a job that overruns is killed and reported as an error.
    pub fn wait(mut self) -> Result<GuestOutput> {
        let deadline = self.started + self.timeout + HOST_GRACE;
        let mut next_alive_check = Instant::now() + Duration::from_secs(1);
        while !self.is_finished() {
            if Instant::now() >= deadline {
                self.kill();
                bail!(
                    "guest g{} job {} did not finish within {:?}; output so far:\n{}",
                    self.guest,
                    self.id,
                    self.timeout + HOST_GRACE,
                    self.stdout_so_far()
                );
            }
            if Instant::now() >= next_alive_check {
                next_alive_check += Duration::from_secs(1);
                if !self.qemu_alive() && !self.is_finished() {
                    bail!("guest g{} died while running job {}", self.guest, self.id);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let rc = fs::read_to_string(self.path(".rc"))?;
        let status: i32 = rc
            .trim()
            .parse()
            .with_context(|| format!("bad status file content {rc:?}"))?;
        let out = GuestOutput {
            status,
            stdout: fs::read_to_string(self.path(".out")).unwrap_or_default(),
            stderr: fs::read_to_string(self.path(".err")).unwrap_or_default(),
        };
        self.done = true;
        for ext in [".run", ".out", ".err", ".rc", ".kill", ".job"] {
            let _ = fs::remove_file(self.path(ext));
        }
        Ok(out)
    }
}

impl Drop for GuestJob {
    fn drop(&mut self) {
        if !self.done && !self.is_finished() {
            self.kill();
        }
    }
}
