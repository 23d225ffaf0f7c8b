//! The environment variables of rds-tools, each named once with what it does. Every reader in
//! the library, the tools and the preload library calls the function here, so a variable's
//! name and how its value counts (set at all, or set and not empty) are decided in one place;
//! the man pages document them for users (`rds(7)`, `rds-ctrl(8)`, `rds-preload(8)`).
//!
//! Standard variables (`XDG_RUNTIME_DIR`, `XDG_CONFIG_HOME`, `HOME`, `PATH`, `COLUMNS`) are
//! read where they are used; the knobs of test and benchmark harnesses are named there.

use std::ffi::OsString;
use std::path::PathBuf;

/// `RDS_NO_DAEMON`: set (to anything, even empty), sockets never go through the daemon: an
/// unbound socket binds on an embedded node of this process, `--stack auto` does not ask the
/// daemon, and the preload library's `RDS_INFO_*` tables of an unbound socket are this
/// process's.
pub const NO_DAEMON: &str = "RDS_NO_DAEMON";
/// `RDS_NO_RING`: set, a socket served by the daemon sends and receives through requests on
/// its control connection instead of a shared-memory ring.
pub const NO_RING: &str = "RDS_NO_RING";
/// `RDS_RUNTIME_DIR`: when set and not empty, the directory of control sockets, instead of
/// `/run/rds` (root) or `$XDG_RUNTIME_DIR/rds`; it is then the only directory searched for
/// nodes (test daemons are kept apart this way).
pub const RUNTIME_DIR: &str = "RDS_RUNTIME_DIR";
/// `RDS_CONFIG`: when set and not empty, the path of the persistent tunables file that
/// `rds-ctrl` edits and the daemon reads at start.
pub const CONFIG: &str = "RDS_CONFIG";
/// `RDS_CTRL_ROOT`: when set and not empty, the root directory under which `rds-ctrl` finds
/// a kernel host's `proc/sys/net/rds` and `etc/sysctl.d` (tests use a temporary one).
pub const CTRL_ROOT: &str = "RDS_CTRL_ROOT";
/// `RDS_IB_DEBUG`: set, the RDS/IB transport logs its connection steps to standard error.
pub const IB_DEBUG: &str = "RDS_IB_DEBUG";
/// `RDS_PRELOAD_LOG`: set to anything but empty or `0`, the preload library logs one line per
/// intercepted call on an RDS descriptor to standard error.
pub const PRELOAD_LOG: &str = "RDS_PRELOAD_LOG";

/// `RDS_LOG`: the level of log messages (`error`, `warn`, `info`, `debug`, `trace`), for the
/// tools, the daemon, the preload library and the library under them.
pub const LOG: &str = "RDS_LOG";

/// [`LOG`], when set and not blank (as given: the reader judges it).
pub fn log_level() -> Option<String> {
    value(LOG)
        .map(|v| v.to_string_lossy().into_owned())
        .filter(|v| !v.trim().is_empty())
}

/// Whether [`NO_DAEMON`] is set.
pub fn no_daemon() -> bool {
    is_set(NO_DAEMON)
}

/// Whether [`NO_RING`] is set.
pub fn no_ring() -> bool {
    is_set(NO_RING)
}

/// [`RUNTIME_DIR`], when set and not empty.
pub fn runtime_dir() -> Option<PathBuf> {
    path(RUNTIME_DIR)
}

/// [`CONFIG`], when set and not empty.
pub fn config() -> Option<PathBuf> {
    path(CONFIG)
}

/// [`CTRL_ROOT`], when set and not empty.
pub fn ctrl_root() -> Option<PathBuf> {
    path(CTRL_ROOT)
}

/// Whether [`IB_DEBUG`] is set.
pub fn ib_debug() -> bool {
    is_set(IB_DEBUG)
}

/// Whether [`PRELOAD_LOG`] asks for logging (set, not empty, not `0`).
pub fn preload_log() -> bool {
    value(PRELOAD_LOG).is_some_and(|v| !v.is_empty() && v != "0")
}

fn value(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

fn is_set(name: &str) -> bool {
    value(name).is_some()
}

fn path(name: &str) -> Option<PathBuf> {
    value(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}
