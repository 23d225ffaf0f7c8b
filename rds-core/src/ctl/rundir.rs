//! The runtime directory, where nodes put their control sockets and lock files, and its
//! security: `/run/rds` for root, else `$XDG_RUNTIME_DIR/rds` (or `/tmp/rds-<uid>`);
//! `RDS_RUNTIME_DIR` ([`crate::env::RUNTIME_DIR`]) overrides both. A directory is used only
//! when it belongs to the user (or to root, for `/run/rds` and `RDS_RUNTIME_DIR`) and nobody
//! else may write to it ([`check_runtime_dir`]); a user's is created 0700.

use std::io;
use std::path::{Path, PathBuf};

/// The system daemon's runtime directory.
pub const SYSTEM_DIR: &str = "/run/rds";

/// The runtime directory of this process's nodes. `RDS_RUNTIME_DIR` overrides it (and is
/// then the only place searched), which keeps test daemons apart. The path is not checked
/// here: [`ensure_runtime_dir`] creates and checks it, [`check_runtime_dir`] checks it.
pub fn runtime_dir() -> PathBuf {
    if let Some(d) = crate::env::runtime_dir() {
        return d;
    }
    let uid = nix::unistd::geteuid().as_raw();
    if uid == 0 {
        return PathBuf::from(SYSTEM_DIR);
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("rds"),
        _ => PathBuf::from(format!("/tmp/rds-{uid}")),
    }
}

/// Whether root may own `dir` for this process: the system directory and `RDS_RUNTIME_DIR`
/// (a directory root set up for its daemon); a user's own directory must be the user's.
fn root_may_own(dir: &Path) -> bool {
    dir == Path::new(SYSTEM_DIR) || crate::env::runtime_dir().is_some_and(|d| d == dir)
}

/// Checks that `dir` is safe to serve or reach nodes in: a real directory (not a symbolic
/// link), owned by this process's effective uid (or by root, for [`SYSTEM_DIR`] and
/// `RDS_RUNTIME_DIR`), and writable by nobody else (no group or other write bit). Another
/// user who made the directory could otherwise put a fake node's socket in it.
///
/// # Errors
/// `PermissionDenied` naming the path, what is wrong and the fix; `NotFound` when it does not
/// exist.
pub fn check_runtime_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(dir)?;
    let me = nix::unistd::geteuid().as_raw();
    let refuse = |why: String| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing the RDS runtime directory {}: {why}",
                dir.display()
            ),
        )
    };
    if md.file_type().is_symlink() || !md.is_dir() {
        return Err(refuse(format!(
            "it is not a directory (or is a symbolic link); remove it, or set RDS_RUNTIME_DIR \
             to a directory of uid {me}"
        )));
    }
    if md.uid() != me && !(md.uid() == 0 && root_may_own(dir)) {
        return Err(refuse(format!(
            "it belongs to uid {}, not to uid {me}; another user may have made it to receive \
             your sockets: remove it (as root), or set RDS_RUNTIME_DIR to a directory of yours",
            md.uid()
        )));
    }
    if md.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "it is writable by group or others (mode {:o}); run 'chmod go-w {}' or remove it",
            md.mode() & 0o7777,
            dir.display()
        )));
    }
    Ok(())
}

/// Creates this process's runtime directory if needed (mode 0700 for a user, 0755 for root,
/// whose daemon's socket users must reach) and checks it ([`check_runtime_dir`]).
///
/// # Errors
/// The directory cannot be created, or fails the check.
pub fn ensure_runtime_dir() -> io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let dir = runtime_dir();
    let mode = if nix::unistd::geteuid().is_root() {
        0o755
    } else {
        0o700
    };
    if std::fs::symlink_metadata(&dir).is_err() {
        match std::fs::DirBuilder::new()
            .recursive(false)
            .mode(mode)
            .create(&dir)
        {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))?;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A missing parent (RDS_RUNTIME_DIR deep in a fresh tree): make the parents
                // as usual, then the directory itself with its mode.
                if let Some(parent) = dir.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                match std::fs::DirBuilder::new().mode(mode).create(&dir) {
                    Ok(()) => {
                        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))?
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("creating the RDS runtime directory {}: {e}", dir.display()),
                ))
            }
        }
    }
    check_runtime_dir(&dir)?;
    Ok(dir)
}

/// Directories where a user looks for nodes: the system daemon's first, then its own. Only
/// `RDS_RUNTIME_DIR` when set. A directory that fails [`check_runtime_dir`] is left out.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if crate::env::runtime_dir().is_none() {
        v.push(PathBuf::from(SYSTEM_DIR));
    }
    let own = runtime_dir();
    if !v.contains(&own) {
        v.push(own);
    }
    v.retain(|d| check_runtime_dir(d).is_ok());
    v
}

/// The lock file held by the node serving the control socket `sock` for its lifetime
/// (`<name>.lock` next to it).
pub fn lock_path(sock: &Path) -> PathBuf {
    sock.with_extension("lock")
}
