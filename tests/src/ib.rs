//! Helpers for the RDS/IB interop tests (`tests/tests/interop_ib.rs`). The host has no RDMA
//! stack, so our IB node runs *inside a lab guest*: the test executable copies itself into
//! the guest's 9p share and runs one of its own ignored tests there, selected by
//! [`GUEST_ENV`]. The guest side prints one marker line per step (`IBSTEP <name> ...`) that
//! the host side waits for ([`crate::lab::GuestJob::wait_for_output`]) before it drives the
//! kernel's side with `rdstool`.

use anyhow::{bail, Context, Result};
use rds_core::{CtlMode, Node, NodeConfig, Transports};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
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
    let mut cfg = NodeConfig::new([IpAddr::V4(addr)]);
    cfg.ctl = CtlMode::Off;
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
    let root = crate::lab::lab_dir().join("cache/kernel/root/lib/modules");
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
