//! Prerequisites of the rdma-core tests (`ib_layout`, `ib_runtime`): headers, run-time
//! libraries and a C compiler, installed by `.ci/deps.d/ibverbs-dev.sh` when run as root.

use std::path::{Path, PathBuf};
use std::process::Command;

use rds_core::ib;

pub const DEPS_SCRIPT: &str = ".ci/deps.d/ibverbs-dev.sh";

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("rds-core has a parent directory")
        .to_path_buf()
}

pub fn have_cc() -> bool {
    Command::new("cc")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

pub fn have_headers() -> bool {
    Path::new("/usr/include/infiniband/verbs.h").exists()
        && Path::new("/usr/include/rdma/rdma_cma.h").exists()
}

pub fn have_runtime_libs() -> bool {
    ib::IbLib::open().is_ok()
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Makes sure headers, libraries and cc are there: runs the deps script as root, otherwise
/// fails with a message naming it.
pub fn ensure_prereqs() {
    if have_cc() && have_headers() && have_runtime_libs() {
        return;
    }
    let script = repo_root().join(DEPS_SCRIPT);
    assert!(
        is_root(),
        "rdma-core headers/libraries or cc are missing and this is not root: run {DEPS_SCRIPT} \
         as root (installs libibverbs-dev, librdmacm-dev, gcc)"
    );
    let st = Command::new("bash")
        .arg(&script)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(st.success(), "{DEPS_SCRIPT} failed ({st})");
    assert!(
        have_cc() && have_headers() && have_runtime_libs(),
        "{DEPS_SCRIPT} ran but headers, libraries or cc are still missing"
    );
}
