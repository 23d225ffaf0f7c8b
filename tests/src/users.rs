//! Running something as another local user (uid 65534, `nobody`) from a test, wherever the
//! workspace is cloned. A clone may sit below a directory only root can enter (root's home
//! on Debian, or a `mktemp -d` directory, both mode 0700), so what the other user runs (a
//! workspace binary, a test executable) is copied into a [`Reachable`] directory first, and
//! the child starts in `/`.
//!
//! Contract: [`require_root`] fails the calling test (it never returns early as a pass);
//! [`Reachable`] is a fresh directory of mode 0755 under the system's temporary directory,
//! removed with everything in it when dropped; [`command_as`] sets the uid, the gid (the
//! same number; std clears the supplementary groups when root drops to another uid) and `/`
//! as the working directory.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The unprivileged uid (and gid) the privilege tests run their children as.
pub const NOBODY: u32 = 65534;

/// Fails the calling test with what to do unless this process runs as root. `what` says what
/// the test does that needs root.
///
/// # Panics
/// Not root.
#[track_caller]
pub fn require_root(what: &str) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root ({what}): run it as root, as CI runs scripts/test-all.sh"
    );
}

/// A fresh directory every user can enter and read (0755), for copies of what another user
/// runs; removed when dropped.
pub struct Reachable {
    dir: tempfile::TempDir,
}

impl Reachable {
    /// Creates the directory and checks that every directory above it lets others pass.
    ///
    /// # Panics
    /// It cannot be created, or a directory above it is closed to others (a `TMPDIR` below a
    /// private directory).
    pub fn new() -> Reachable {
        let dir = tempfile::tempdir().expect("creating a temporary directory");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod 0755 of the temporary directory");
        for a in dir.path().ancestors().skip(1) {
            let mode = std::fs::metadata(a)
                .unwrap_or_else(|e| panic!("{}: {e}", a.display()))
                .permissions()
                .mode();
            assert!(
                mode & 0o001 != 0,
                "{} (mode {:o}) is closed to other users, so a copy below it is too: set TMPDIR \
                 to a directory they can reach",
                a.display(),
                mode & 0o777
            );
        }
        Reachable { dir }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Copies the file `src` into the directory under its own name, mode 0755, and returns
    /// the copy's path.
    ///
    /// # Panics
    /// The copy fails.
    pub fn copy(&self, src: &Path) -> PathBuf {
        let name = src
            .file_name()
            .unwrap_or_else(|| panic!("{} names no file", src.display()));
        let dst = self.dir.path().join(name);
        std::fs::copy(src, &dst)
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", src.display(), dst.display()));
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod 0755 {}: {e}", dst.display()));
        dst
    }
}

impl Default for Reachable {
    fn default() -> Self {
        Reachable::new()
    }
}

/// `program` run as `uid` (gid the same number) from `/`.
pub fn command_as(uid: u32, program: impl AsRef<OsStr>) -> Command {
    let mut c = Command::new(program);
    c.uid(uid).gid(uid).current_dir("/");
    c
}
