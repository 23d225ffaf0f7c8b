//! `contrib/rds-daemon.service` (issue 17 items 4 and 5): the unit passes
//! `systemd-analyze verify` (its `ExecStart` pointed at the built `rds-ctrl`, its
//! documentation found in the source tree's man pages) and keeps the limits and hardening the
//! daemon relies on. Without `systemd-analyze` (Debian package `systemd`, which
//! `.ci/deps.d/systemd.sh` installs) the first part fails, saying so. A release binary ends at
//! a panic on any of its threads (the workspace's `panic = "abort"`), which
//! `Restart=on-failure` relies on: a daemon whose I/O thread died must not live on without a
//! data path (a debug build unwinds, so that test runs with `--release` only and is ignored
//! otherwise).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn unit_text() -> String {
    std::fs::read_to_string(root().join("contrib/rds-daemon.service")).unwrap()
}

/// The `[Service]` settings of the unit: `(key, value)` in order.
fn service_settings(text: &str) -> Vec<(String, String)> {
    let mut in_service = false;
    let mut v = Vec::new();
    for l in text.lines().map(str::trim) {
        if l.starts_with('[') {
            in_service = l == "[Service]";
            continue;
        }
        if !in_service || l.is_empty() || l.starts_with('#') {
            continue;
        }
        if let Some((k, val)) = l.split_once('=') {
            v.push((k.trim().to_string(), val.trim().to_string()));
        }
    }
    v
}

#[test]
fn unit_keeps_limits_and_hardening() {
    let s = service_settings(&unit_text());
    let get = |k: &str| -> &str {
        s.iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("the unit sets no {k}="))
    };
    assert_eq!(get("Restart"), "on-failure");
    assert_eq!(get("LimitNOFILE"), "65536");
    assert_eq!(get("NoNewPrivileges"), "yes");
    assert_eq!(get("ProtectSystem"), "strict");
    assert_eq!(get("ProtectHome"), "yes");
    assert_eq!(get("PrivateTmp"), "yes");
    assert_eq!(get("RuntimeDirectory"), "rds");
    assert_eq!(get("RuntimeDirectoryMode"), "0755");
    assert_eq!(get("MemoryMax"), "1G");
    let families: Vec<&str> = get("RestrictAddressFamilies").split_whitespace().collect();
    assert_eq!(families, ["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"]);
    // RDS/IB needs /dev/infiniband: no private /dev, no device allow-list.
    for k in [
        "PrivateDevices",
        "DeviceAllow",
        "DevicePolicy",
        "ProtectClock",
    ] {
        assert!(
            s.iter().all(|(key, _)| key != k),
            "{k}= would close /dev/infiniband"
        );
    }
    let caps: Vec<&str> = get("CapabilityBoundingSet").split_whitespace().collect();
    assert_eq!(caps, ["CAP_IPC_LOCK", "CAP_SYS_NICE"]);
    // The memory cap leaves room for the node's default budget (at most 256 MiB) twice over.
    let budget = rds_core::node::default_mem_budget();
    assert!(budget * 2 <= 1 << 30, "default budget {budget}");
}

#[test]
fn unit_passes_systemd_analyze_verify() {
    let path = std::env::var_os("PATH").unwrap_or_default();
    assert!(
        std::env::split_paths(&path).any(|d| d.join("systemd-analyze").is_file()),
        "systemd-analyze is not installed: run .ci/deps.d/systemd.sh as root (Debian: apt-get \
         install systemd)"
    );
    let exe = std::env::current_exe().unwrap();
    let ctrl = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable in target/<profile>/deps")
        .join("rds-ctrl");
    assert!(
        ctrl.is_file(),
        "{} is missing: build the workspace first (cargo test --workspace --release)",
        ctrl.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let text = unit_text().replace("/usr/bin/rds-ctrl", &ctrl.to_string_lossy());
    let unit = dir.path().join("rds-daemon.service");
    std::fs::write(&unit, text).unwrap();
    // The Documentation= pages, from the source tree.
    for (page, sect) in [("rds-ctrl.8", "man8"), ("rds.7", "man7")] {
        let d = dir.path().join("man").join(sect);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(root().join("man").join(page), d.join(page)).unwrap();
    }
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .env("MANPATH", dir.path().join("man"))
        .env("SYSTEMD_LOG_LEVEL", "notice")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && err.trim().is_empty(),
        "systemd-analyze verify: {}\n{}{err}",
        o.status,
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
#[cfg_attr(debug_assertions, ignore = "a debug build unwinds: run with --release")]
fn a_panicking_thread_ends_a_release_binary() {
    use std::os::unix::process::ExitStatusExt;
    let o = Command::new(env!("CARGO_BIN_EXE_rds-idle-sock"))
        .arg("--panic-in-thread")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGABRT),
        "status {}: {err}",
        o.status
    );
    assert!(err.contains("a thread's panic (on purpose)"), "{err}");
}
