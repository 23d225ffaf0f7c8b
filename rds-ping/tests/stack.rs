//! `--stack` on a host whose kernel has no RDS (this one; the lab tests cover a kernel-RDS
//! host): `kernel` fails at once with one clear line and exit 1, a bad value names the option,
//! `auto` and `user` fall back to an embedded node that pings a node of ours.
//!
//! Addresses: 127.23.1.x.

use std::net::IpAddr;
use std::time::Duration;

use assert_cmd::Command;
use rds_core::{CtlMode, Node, NodeConfig};

fn ping(args: &[&str]) -> (i32, String, String) {
    let o = Command::cargo_bin("rds-ping")
        .unwrap()
        .env("RDS_NO_DAEMON", "1")
        .timeout(Duration::from_secs(60))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

#[test]
fn stack_kernel_without_kernel_rds_and_fallbacks() {
    assert!(
        !rds_core::kernel::loaded(),
        "this host's kernel has RDS loaded, and this test checks the refusal and the fallbacks \
         without it: run the tests on a host without the kernel's RDS (modprobe -r rds_tcp \
         rds_rdma rds); the lab's lab_stack test covers a kernel-RDS host"
    );
    let (code, out, err) = ping(&["--stack", "kernel", "-c", "1", "127.23.1.2"]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out, "");
    assert!(
        err.starts_with("rds-ping: --stack kernel: the kernel's RDS is not available"),
        "{err}"
    );
    assert!(err.contains("modprobe rds_tcp"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let (code, _, err) = ping(&["--stack", "kernal", "127.23.1.2"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("--stack: invalid stack 'kernal'"), "{err}");

    let mut cfg = NodeConfig::new(["127.23.1.2".parse::<IpAddr>().unwrap()]);
    cfg.ctl = CtlMode::Off;
    let _peer = Node::start(cfg).unwrap();
    for stack in ["auto", "user"] {
        let (code, out, err) = ping(&[
            "--stack",
            stack,
            "-I",
            "127.23.1.1",
            "-c",
            "2",
            "-i",
            "0.05",
            "127.23.1.2",
        ]);
        assert_eq!(code, 0, "--stack {stack}: {out}{err}");
        assert_eq!(out.lines().filter(|l| is_reply(l)).count(), 2, "{out}");
    }
}

/// A reply line of rds-ping: `%4u: %u usec`.
fn is_reply(l: &str) -> bool {
    l.ends_with(" usec")
        && l.trim_start()
            .split(':')
            .next()
            .is_some_and(|n| n.parse::<u64>().is_ok())
}
