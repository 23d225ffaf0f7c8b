//! `--stack kernel` on a host whose kernel has no RDS (this one; the lab's `lab_stack` test
//! covers a kernel-RDS host), for rds-info, rds-stress, rds-trace and rds-ctrl: one clear line
//! naming the option and what to do, the tool's exit status, and nothing on stdout; a bad value
//! is refused. (rds-ping's own `tests/stack.rs` also checks its fallbacks.)
//!
//! Addresses: 127.23.2.x.

use std::path::{Path, PathBuf};
use std::process::Command;

fn run(tool: &str, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(rds_tests::workspace_bin(tool))
        .env("RDS_NO_DAEMON", "1")
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn stack_kernel_refused_without_kernel_rds() {
    assert!(
        !rds_core::kernel::loaded(),
        "this host's kernel has RDS loaded, and this test checks the refusal without it: run \
         the tests on a host without the kernel's RDS (modprobe -r rds_tcp rds_rdma rds); \
         the lab's lab_stack test covers a kernel-RDS host"
    );
    let dir = tempfile::tempdir().unwrap();
    let pcap: PathBuf = dir.path().join("stack-kernel.pcap");
    let pcap = pcap.to_str().unwrap();
    // (tool, arguments, exit status): usage-class tools exit 2, the others 1.
    let cases: [(&str, &[&str], i32); 4] = [
        ("rds-info", &["--stack", "kernel"], 1),
        (
            "rds-stress",
            &["--stack", "kernel", "-r", "127.23.2.1", "-p", "4000"],
            1,
        ),
        ("rds-trace", &["-w", pcap, "--stack", "kernel"], 2),
        ("rds-ctrl", &["--stack", "kernel", "stats"], 2),
    ];
    for (tool, args, want) in cases {
        let (code, out, err) = run(tool, args);
        assert_eq!(code, want, "{tool}: {out}{err}");
        assert_eq!(out, "", "{tool}");
        assert!(
            err.contains("--stack kernel: the kernel's RDS is not available")
                && err.contains("modprobe rds_tcp")
                && err.contains("--stack user"),
            "{tool}: {err}"
        );
        let (code, _, err) = run(tool, &["--stack", "kernal"]);
        assert_ne!(code, 0, "{tool}");
        assert!(err.contains("invalid stack 'kernal'"), "{tool}: {err}");
    }
    // rds-trace refused before it created the capture file.
    assert!(!Path::new(pcap).exists());
}
