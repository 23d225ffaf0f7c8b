//! Finding the nodes a user can reach: the control sockets in the runtime directories
//! ([`search_dirs`], the system daemon's first), skipping and removing the
//! socket files of dead nodes (nobody holds their `<node>.lock`), and the daemon's endpoint.

use std::io;
use std::path::{Path, PathBuf};

use super::rundir::{lock_path, runtime_dir, search_dirs};

/// The daemon's node name.
pub const DAEMON_NAME: &str = "daemon";

/// Whether the socket file `sock` is a dead node's: nobody holds its lock file. A lock file
/// this user cannot open counts as held.
fn is_stale(sock: &Path) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    match std::fs::File::open(lock_path(sock)) {
        Ok(f) => Flock::lock(f, FlockArg::LockSharedNonblock).is_ok(),
        // No lock file: a leftover; stale when nothing listens.
        Err(e) if e.kind() == io::ErrorKind::NotFound => matches!(
            std::os::unix::net::UnixStream::connect(sock),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused
        ),
        Err(_) => false,
    }
}

/// A node that serves a control socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEndpoint {
    /// Node name (the socket file's stem).
    pub name: String,
    /// Socket path.
    pub path: PathBuf,
}

/// Lists the control sockets a user can see (stale files of dead nodes are skipped, and
/// removed when they are ours and no node holds their lock).
pub fn discover() -> Vec<NodeEndpoint> {
    let mut v = Vec::new();
    let own = runtime_dir();
    for dir in search_dirs() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut found: Vec<_> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "sock"))
            .collect();
        found.sort();
        for path in found {
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if v.iter().any(|e: &NodeEndpoint| e.name == name) {
                continue;
            }
            if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                v.push(NodeEndpoint { name, path });
            } else if dir == own && is_stale(&path) {
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_file(lock_path(&path));
            }
        }
    }
    v
}

/// The daemon's endpoint, if one runs (the system daemon's `/run/rds/daemon.sock` first).
pub fn find_daemon() -> Option<NodeEndpoint> {
    for dir in search_dirs() {
        let path = dir.join(format!("{DAEMON_NAME}.sock"));
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            return Some(NodeEndpoint {
                name: DAEMON_NAME.into(),
                path,
            });
        }
    }
    None
}
