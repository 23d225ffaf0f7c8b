//! `--stack kernel` on a host whose kernel has no RDS (this one; the lab's `lab_stack` test
//! covers a kernel-RDS host): one clear line naming the option and what to do, a non-zero exit
//! status, and nothing on stdout; a bad value is refused.

use std::time::Duration;

use assert_cmd::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let o = Command::cargo_bin("rds-ctrl")
        .unwrap()
        .env("RDS_NO_DAEMON", "1")
        .timeout(Duration::from_secs(30))
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
    if rds_core::kernel::loaded() {
        eprintln!("this host's kernel has RDS loaded: the refusal does not apply here");
        return;
    }
    let (code, out, err) = run(&["--stack", "kernel", "stats"]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(out, "");
    assert!(
        err.contains("--stack kernel: the kernel's RDS is not available")
            && err.contains("modprobe rds_tcp")
            && err.contains("--stack user"),
        "{err}"
    );
    let (code, _, err) = run(&["--stack", "kernal"]);
    assert_ne!(code, 0);
    assert!(err.contains("invalid stack 'kernal'"), "{err}");
}
