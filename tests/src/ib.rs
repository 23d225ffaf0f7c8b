//! Helpers for the RDS/IB interop tests (`tests/tests/interop_ib.rs`). The host has no RDMA
//! stack, so our IB node runs *inside a lab guest*: the test executable copies itself into
//! the guest's 9p share and runs one of its own ignored tests there, selected by
//! [`GUEST_ENV`]. The guest side prints one marker line per step (`IBSTEP <name> ...`) that
//! the host side waits for ([`crate::lab::GuestJob::wait_for_output`]) before it drives the
//! kernel's side with `rdstool`.

use anyhow::{bail, Context, Result};
use rds_core::{CtlMode, Node, NodeConfig, Transports};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use crate::lab::Lab;

/// The environment variable that makes the guest-side test run (its value names the role).
pub const GUEST_ENV: &str = "RDS_IB_GUEST";

/// Copies the running test executable into guest `g`'s share; returns its guest path.
pub fn install_self(lab: &Lab, g: usize, name: &str) -> Result<String> {
    let exe = std::env::current_exe().context("current_exe")?;
    let bytes = std::fs::read(&exe).with_context(|| format!("reading {}", exe.display()))?;
    lab.write_share(g, name, &bytes)
}

/// The guest command running test `test` of the installed executable `path` in `role`.
pub fn guest_cmd(path: &str, test: &str, role: &str, extra_env: &str) -> String {
    format!("{GUEST_ENV}={role} {extra_env} {path} --ignored --exact --nocapture --test-threads 1 {test}")
}

/// Starts our node for `addr` with the IB transport only (inside a guest, whose kernel
/// `rds_tcp` owns port 16385). Fails with the reason if IB does not run.
pub fn start_ib_node(addr: Ipv4Addr, seed: u64) -> Result<Node> {
    start_ib_node_with(&[IpAddr::V4(addr)], seed, CtlMode::Off)
}

/// [`start_ib_node`] for several addresses (IPv4 and/or IPv6) and a control socket mode
/// (`CtlMode::Named` serves `rds-info`; set `RDS_RUNTIME_DIR` in the guest first). The
/// tools' logger is installed first, so that `RDS_IB_DEBUG` (see [`debug_env`]) puts the
/// transport's log on stderr in the guest side too.
pub fn start_ib_node_with(addrs: &[IpAddr], seed: u64, ctl: CtlMode) -> Result<Node> {
    rds_cli::logger::init("rds-tests");
    let addr = *addrs.first().context("no address")?;
    let mut cfg = NodeConfig::new(addrs.iter().copied());
    cfg.ctl = ctl;
    cfg.seed = Some(seed);
    cfg.name = format!("ib-{addr}");
    cfg.transports = Transports {
        tcp: false,
        ib: true,
    };
    let node = Node::start(cfg).with_context(|| format!("starting our IB node on {addr}"))?;
    if let Some(why) = node.ib_unavailable() {
        bail!("IB transport unavailable in the guest: {why}");
    }
    if !node.ib_running() {
        bail!("IB transport not running");
    }
    Ok(node)
}

/// Prints a step marker for the host and flushes it to the job's output file.
pub fn step(name: &str, detail: &str) {
    println!("IBSTEP {name} {detail}");
    let _ = std::io::stdout().flush();
}

/// Waits until `f` holds, polling every 20 ms, at most `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Result<()> {
    let dl = Instant::now() + timeout;
    while !f() {
        if Instant::now() >= dl {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Loads the kernel's `rds_rdma` in guest `g` of a lab booted without it (`--ib=0` removes
/// the module file from the guests, so it is copied in from the lab's kernel tree through the
/// share and loaded with `insmod` after its dependencies).
pub fn load_kernel_rds_rdma(lab: &Lab, g: usize) -> Result<()> {
    let root = crate::lab::cache_dir().join("kernel/root/lib/modules");
    let ko = find_file(&root, "rds_rdma.ko", 6)
        .with_context(|| format!("rds_rdma.ko not found under {}", root.display()))?;
    let bytes = std::fs::read(&ko).with_context(|| format!("reading {}", ko.display()))?;
    let path = lab.write_share(g, "rds_rdma.ko", &bytes)?;
    lab.exec_ok(
        g,
        &format!(
            "modprobe -a configfs ib_core ib_cm iw_cm rdma_cm && insmod {path} && test -d /proc/sys/net/rds/ib"
        ),
        Duration::from_secs(60),
    )?;
    Ok(())
}

fn find_file(dir: &std::path::Path, name: &str, depth: usize) -> Option<std::path::PathBuf> {
    let rd = std::fs::read_dir(dir).ok()?;
    let mut subdirs = Vec::new();
    for e in rd.flatten() {
        let p = e.path();
        if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
        if depth > 0 && e.file_type().is_ok_and(|t| t.is_dir()) {
            subdirs.push(p);
        }
    }
    subdirs
        .into_iter()
        .find_map(|d| find_file(&d, name, depth - 1))
}

/// `RDS_IB_DEBUG=1` on the host: the extra guest environment and the stderr redirection that
/// put our transport's CM log into a guest job's output.
pub fn debug_env() -> (&'static str, &'static str) {
    if std::env::var_os("RDS_IB_DEBUG").is_some() {
        (" RDS_IB_DEBUG=1", " 2>&1")
    } else {
        ("", "")
    }
}

/// Guest side: waits (at most `timeout`) until the host writes `name` into the share.
pub fn wait_go(name: &str, timeout: Duration) -> Result<()> {
    let p = std::path::Path::new("/mnt/share").join(name);
    wait_until(&format!("{}", p.display()), timeout, || p.exists())
}

/// A socket of the *kernel's* RDS (`AF_RDS`), for a guest role that drives the kernel where
/// `rdstool` cannot (it speaks IPv4 only): IPv4 or IPv6, transport preset before `bind`.
/// Blocking calls are bounded by `SO_RCVTIMEO` / `SO_SNDTIMEO`.
#[derive(Debug)]
pub struct KernelRds {
    fd: std::os::fd::OwnedFd,
}

pub use rds_core::abi::RDS_TRANS_IB;
use rds_core::abi::{AF_RDS, SOL_RDS, SO_RDS_TRANSPORT};

fn sockaddr_of(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in.
            unsafe { std::ptr::write(std::ptr::addr_of_mut!(ss).cast::<libc::sockaddr_in>(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in6.
            unsafe {
                std::ptr::write(
                    std::ptr::addr_of_mut!(ss).cast::<libc::sockaddr_in6>(),
                    sin6,
                )
            };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn addr_from(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read(std::ptr::addr_of!(*ss).cast::<libc::sockaddr_in>()) };
            Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes())),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read(std::ptr::addr_of!(*ss).cast::<libc::sockaddr_in6>()) };
            Some(SocketAddr::new(
                IpAddr::V6(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                u16::from_be(sin6.sin6_port),
            ))
        }
        _ => None,
    }
}

fn cvt(r: libc::c_int, what: &str) -> Result<libc::c_int> {
    if r < 0 {
        Err(std::io::Error::last_os_error()).with_context(|| what.to_string())
    } else {
        Ok(r)
    }
}

impl KernelRds {
    /// A kernel RDS socket with `transport` preset, bound to `addr`, with send and receive
    /// buffers of `buf` bytes (`SO_SNDBUFFORCE` / `SO_RCVBUFFORCE`, root).
    pub fn bind(addr: SocketAddr, transport: libc::c_int, buf: usize) -> Result<KernelRds> {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: plain socket(2); the result is checked before use.
        let fd = cvt(
            unsafe { libc::socket(AF_RDS, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) },
            "socket(AF_RDS)",
        )?;
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        let s = KernelRds {
            fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
        };
        let fd = s.fd.as_raw_fd();
        s.setopt(SOL_RDS, SO_RDS_TRANSPORT, transport, "SO_RDS_TRANSPORT")?;
        let b = buf.min(i32::MAX as usize) as libc::c_int;
        s.setopt(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, b, "SO_SNDBUFFORCE")?;
        s.setopt(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, b, "SO_RCVBUFFORCE")?;
        let (ss, len) = sockaddr_of(addr);
        // SAFETY: ss holds a valid sockaddr of `len` bytes.
        cvt(
            unsafe { libc::bind(fd, std::ptr::addr_of!(ss).cast(), len) },
            &format!("bind {addr}"),
        )?;
        Ok(s)
    }

    fn setopt(
        &self,
        level: libc::c_int,
        name: libc::c_int,
        v: libc::c_int,
        what: &str,
    ) -> Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: v is a valid c_int for the duration of the call.
        cvt(
            unsafe {
                libc::setsockopt(
                    self.fd.as_raw_fd(),
                    level,
                    name,
                    std::ptr::addr_of!(v).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            },
            what,
        )?;
        Ok(())
    }

    fn set_timeout(&self, name: libc::c_int, t: Duration) -> Result<()> {
        use std::os::fd::AsRawFd;
        let t = t.max(Duration::from_millis(1));
        let tv = libc::timeval {
            tv_sec: t.as_secs().min(1 << 30) as libc::time_t,
            tv_usec: t.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: tv is a valid timeval for the duration of the call.
        cvt(
            unsafe {
                libc::setsockopt(
                    self.fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    name,
                    std::ptr::addr_of!(tv).cast(),
                    std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                )
            },
            "SO_RCVTIMEO/SO_SNDTIMEO",
        )?;
        Ok(())
    }

    /// Sends `data` to `to`, waiting at most `timeout` for room (or an uncongested port).
    pub fn send_to(&self, data: &[u8], to: SocketAddr, timeout: Duration) -> Result<()> {
        use std::os::fd::AsRawFd;
        self.set_timeout(libc::SO_SNDTIMEO, timeout)?;
        let (ss, len) = sockaddr_of(to);
        // SAFETY: data and ss are valid for the stated lengths during the call.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                data.as_ptr().cast(),
                data.len(),
                0,
                std::ptr::addr_of!(ss).cast(),
                len,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("sendto {to} ({} bytes)", data.len()));
        }
        if n as usize != data.len() {
            bail!("short send to {to}: {n} of {} bytes", data.len());
        }
        Ok(())
    }

    /// Receives one message into `buf` within `timeout`: its length (the message's, which
    /// may exceed `buf`: MSG_TRUNC) and source.
    pub fn recv_from(&self, buf: &mut [u8], timeout: Duration) -> Result<(usize, SocketAddr)> {
        use std::os::fd::AsRawFd;
        self.set_timeout(libc::SO_RCVTIMEO, timeout)?;
        // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: buf, ss and len are valid for writing during the call.
        let n = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
                std::ptr::addr_of_mut!(ss).cast(),
                &mut len,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error()).context("recvfrom");
        }
        let from = addr_from(&ss).context("recvfrom: no source address")?;
        Ok((n as usize, from))
    }
}

/// An address the host passed to a guest role in the environment variable `name`.
pub fn ip_env(name: &str) -> Result<Ipv4Addr> {
    std::env::var(name)
        .with_context(|| format!("{name} not set"))?
        .parse()
        .with_context(|| format!("{name} is not an IPv4 address"))
}

/// A socket of `node` on the IB transport, bound to `addr`.
pub fn ib_socket(node: &Node, addr: SocketAddr) -> Result<rds_core::Socket> {
    let s = rds_core::Socket::with_node(node);
    s.set_transport(rds_core::proto::TransportKind::Ib)
        .context("set_transport(Ib)")?;
    s.bind(addr).with_context(|| format!("bind {addr}"))?;
    Ok(s)
}

/// A binary of the workspace built with the running test (`target/<profile>/name`).
pub fn release_bin(name: &str) -> Result<std::path::PathBuf> {
    let exe = std::env::current_exe().context("current_exe")?;
    let b = exe
        .parent()
        .and_then(std::path::Path::parent)
        .context("test executable not in target/<profile>/deps")?
        .join(name);
    if !b.is_file() {
        bail!(
            "{} is missing: build the workspace first (cargo test --workspace --release, or \
             cargo build --release -p {name})",
            b.display()
        );
    }
    Ok(b)
}

/// The node's non-zero counters, `name=value` separated by spaces (for step reports).
pub fn nonzero_stats(node: &Node) -> String {
    node.stats()
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The kernel's view in both guests for a failure report: RDS/rxe kernel messages, RDS
/// connections and non-zero counters, then `extra` (a shell command) if not empty.
pub fn diag(lab: &Lab, extra: &str) -> String {
    let mut s = String::new();
    let cmd = format!(
        "dmesg | grep -i -E 'rds|rxe|infiniband' | tail -n 30; rdstool info conns; \
         rdstool info counters | grep -v ' 0$'; {extra}"
    );
    for g in 1..=lab.guests() {
        if let Ok(o) = lab.exec(g, &cmd, Duration::from_secs(30)) {
            s += &format!("--- g{g} ---\n{}{}\n", o.stdout, o.stderr);
        }
    }
    s
}

/// The host side of a test whose guests run our IB node: `None` inside a guest (where the
/// test executable runs only its guest roles); on the host, two guests booted without the
/// kernel's `rds_rdma` (`--ib=0`), and when the boot started. Panics when the lab cannot boot:
/// lab tests fail, never skip.
pub fn host_lab() -> Option<(Lab, Instant)> {
    if std::env::var_os(GUEST_ENV).is_some() {
        return None;
    }
    let t0 = Instant::now();
    let opts = crate::lab::LabOptions {
        ib: false,
        ..crate::lab::LabOptions::default()
    };
    Some((Lab::start(2, opts).expect("the kernel lab must boot"), t0))
}
