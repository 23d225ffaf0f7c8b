//! Helpers shared by the workspace-level tests (network namespaces, the kernel interop lab,
//! fault-injecting proxies, tshark). Each submodule documents its own contract.

pub mod faultnet;
pub mod ib;
pub mod interop;
pub mod lab;
pub mod manpage;
pub mod peer;

/// tshark on `PATH`, or `None` when it is missing and `RDS_SKIP_TSHARK=1` (the caller then
/// skips its tshark checks, with a printed SKIP). Without it and without that variable this
/// fails, saying how to install it (CI installs it: `.ci/deps.d/tshark.sh`).
pub fn tshark() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|d| d.join("tshark"))
        .find(|p| p.is_file());
    if found.is_none() {
        if std::env::var_os("RDS_SKIP_TSHARK").is_some_and(|v| v == "1") {
            eprintln!("SKIP: tshark is not installed and RDS_SKIP_TSHARK=1: tshark checks skipped");
        } else {
            panic!(
                "tshark is not installed: run .ci/deps.d/tshark.sh as root (Debian: apt-get \
                 install tshark), or set RDS_SKIP_TSHARK=1 to skip the tshark checks"
            );
        }
    }
    found
}
