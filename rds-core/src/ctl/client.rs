//! A client of a node's control socket (used by `rds-info`, `rds-ctrl`, `rds-trace` and the
//! daemon backend of [`crate::Socket`]).

use std::io;
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use super::discover::DAEMON_NAME;
use super::frame::{read_frame, write_frame, FdReader, FrameError};
use super::schema::{InfoSnapshot, Reply, Request, PROTO_VERSION};

/// An error a node answered, or a failure to reach it.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// The node refused the request.
    #[error("{message}")]
    Node {
        /// errno.
        errno: i32,
        /// The node's explanation.
        message: String,
    },
    /// No node could be reached.
    #[error("{0}")]
    NoNode(String),
    /// The connection failed.
    #[error("control socket: {0}")]
    Io(#[from] io::Error),
    /// The node sent something unexpected.
    #[error("control socket: unexpected reply {0}")]
    Protocol(String),
    /// The node's end of the connection went away (end of stream, `EPIPE`, `ECONNRESET`):
    /// the node stopped or crashed. Its errno is `ECONNRESET`.
    #[error("the RDS {what} at {path} went away (stopped or crashed)", what = gone_what(path))]
    Gone {
        /// The control socket's path.
        path: PathBuf,
    },
}

fn gone_what(path: &Path) -> &'static str {
    if path.file_stem().is_some_and(|s| s == DAEMON_NAME) {
        "daemon"
    } else {
        "node"
    }
}

/// Whether an I/O error on the control connection means the node's end went away.
fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::NotConnected
    )
}

impl CtlError {
    /// The errno this error stands for.
    pub fn errno(&self) -> i32 {
        match self {
            CtlError::Node { errno, .. } => *errno,
            CtlError::NoNode(_) => libc::ENOENT,
            CtlError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            CtlError::Protocol(_) => libc::EPROTO,
            CtlError::Gone { .. } => libc::ECONNRESET,
        }
    }

    /// As an `io::Error` carrying the errno (for socket semantics).
    pub fn into_io(self) -> io::Error {
        match self {
            CtlError::Io(e) => e,
            other => io::Error::from_raw_os_error(other.errno()),
        }
    }

    /// Whether the node went away ([`CtlError::Gone`]).
    pub fn is_gone(&self) -> bool {
        matches!(self, CtlError::Gone { .. })
    }
}

/// What a node said about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeHello {
    /// Node name.
    pub node: String,
    /// rds-tools version.
    pub version: String,
    /// RDS protocol version.
    pub rds_protocol: String,
    /// Process id.
    pub pid: u32,
    /// Owner uid.
    pub owner_uid: u32,
    /// Addresses it owns.
    pub addrs: Vec<IpAddr>,
}

/// A connection to one node.
#[derive(Debug)]
pub struct CtlClient {
    stream: UnixStream,
    path: PathBuf,
    /// The node's identity.
    pub hello: NodeHello,
}

impl CtlClient {
    /// Connects to the socket at `path` and checks the protocol version.
    ///
    /// # Errors
    /// The socket is not reachable or speaks another version.
    pub fn connect(path: &Path) -> Result<Self, CtlError> {
        let stream = UnixStream::connect(path)?;
        let mut c = CtlClient {
            stream,
            path: path.to_path_buf(),
            hello: NodeHello {
                node: String::new(),
                version: String::new(),
                rds_protocol: String::new(),
                pid: 0,
                owner_uid: 0,
                addrs: Vec::new(),
            },
        };
        match c.call(&Request::Hello { v: PROTO_VERSION }, &[])?.0 {
            Reply::Hello {
                node,
                version,
                rds_protocol,
                pid,
                owner_uid,
                addrs,
                ..
            } => {
                c.hello = NodeHello {
                    node,
                    version,
                    rds_protocol,
                    pid,
                    owner_uid,
                    addrs,
                };
                Ok(c)
            }
            other => Err(CtlError::Protocol(format!("{other:?}"))),
        }
    }

    /// Sends a request and reads its reply. A [`Reply::Error`] becomes [`CtlError::Node`].
    ///
    /// # Errors
    /// See [`CtlError`].
    pub fn call(&mut self, req: &Request, data: &[u8]) -> Result<(Reply, Vec<u8>), CtlError> {
        let json = serde_json::to_vec(req).map_err(|e| CtlError::Protocol(e.to_string()))?;
        if let Err(e) = write_frame(&mut self.stream, &json, data) {
            // The node may have answered (an error) before closing: read it if it did.
            if is_gone(&e) {
                return match self.read_reply() {
                    Err(CtlError::Io(_)) | Ok(_) => Err(self.gone()),
                    Err(other) => Err(other),
                };
            }
            return Err(e.into());
        }
        self.read_reply()
    }

    /// [`CtlClient::call`], keeping the descriptors that come with the reply
    /// (`SCM_RIGHTS`, in the order sent).
    ///
    /// # Errors
    /// See [`CtlError`].
    pub fn call_fds(
        &mut self,
        req: &Request,
    ) -> Result<(Reply, Vec<u8>, Vec<std::os::fd::OwnedFd>), CtlError> {
        let json = serde_json::to_vec(req).map_err(|e| CtlError::Protocol(e.to_string()))?;
        if let Err(e) = write_frame(&mut self.stream, &json, &[]) {
            return Err(if is_gone(&e) { self.gone() } else { e.into() });
        }
        let mut r = FdReader::new(&self.stream);
        let (json, data) = match read_frame(&mut r) {
            Ok(f) => f,
            Err(FrameError::Closed) => return Err(self.gone()),
            Err(FrameError::Io(e)) if is_gone(&e) => return Err(self.gone()),
            Err(FrameError::Io(e)) => return Err(CtlError::Io(e)),
            Err(e) => return Err(CtlError::Protocol(e.to_string())),
        };
        let fds = std::mem::take(&mut r.fds);
        let reply: Reply =
            serde_json::from_slice(&json).map_err(|e| CtlError::Protocol(e.to_string()))?;
        match reply {
            Reply::Error { errno, message } => Err(CtlError::Node { errno, message }),
            r => Ok((r, data, fds)),
        }
    }

    /// The path of the node's control socket.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The connection, for a request that passes a descriptor ([`super::frame::write_frame_with_fd`])
    /// or a stop sent from another thread (`try_clone`).
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    fn gone(&self) -> CtlError {
        CtlError::Gone {
            path: self.path.clone(),
        }
    }

    /// Reads the next frame from the node (trace streaming).
    ///
    /// # Errors
    /// See [`CtlError`]; the end of the stream is [`CtlError::Gone`].
    pub fn read_reply(&mut self) -> Result<(Reply, Vec<u8>), CtlError> {
        let (json, data) = match read_frame(&mut self.stream) {
            Ok(f) => f,
            Err(FrameError::Closed) => return Err(self.gone()),
            Err(FrameError::Io(e)) if is_gone(&e) => return Err(self.gone()),
            Err(FrameError::Io(e)) => return Err(CtlError::Io(e)),
            Err(e) => return Err(CtlError::Protocol(e.to_string())),
        };
        let reply: Reply =
            serde_json::from_slice(&json).map_err(|e| CtlError::Protocol(e.to_string()))?;
        match reply {
            Reply::Error { errno, message } => Err(CtlError::Node { errno, message }),
            r => Ok((r, data)),
        }
    }

    /// Sends a request without waiting for a reply (ending a trace).
    ///
    /// # Errors
    /// I/O errors.
    pub fn send_only(&mut self, req: &Request) -> Result<(), CtlError> {
        let json = serde_json::to_vec(req).map_err(|e| CtlError::Protocol(e.to_string()))?;
        match write_frame(&mut self.stream, &json, &[]) {
            Err(e) if is_gone(&e) => Err(self.gone()),
            r => Ok(r?),
        }
    }

    /// Expects [`Reply::Ok`].
    ///
    /// # Errors
    /// See [`CtlError`].
    pub fn call_ok(&mut self, req: &Request) -> Result<(), CtlError> {
        match self.call(req, &[])?.0 {
            Reply::Ok => Ok(()),
            other => Err(CtlError::Protocol(format!("{other:?}"))),
        }
    }

    /// The node's info snapshot.
    ///
    /// # Errors
    /// See [`CtlError`].
    pub fn info(&mut self) -> Result<InfoSnapshot, CtlError> {
        match self.call(&Request::Info, &[])?.0 {
            Reply::Info(i) => Ok(*i),
            other => Err(CtlError::Protocol(format!("{other:?}"))),
        }
    }

    /// Tunables `(name, value)`.
    ///
    /// # Errors
    /// See [`CtlError`].
    pub fn tunables(&mut self) -> Result<Vec<(String, u64)>, CtlError> {
        match self.call(&Request::TunablesGet, &[])?.0 {
            Reply::Tunables { values } => Ok(values),
            other => Err(CtlError::Protocol(format!("{other:?}"))),
        }
    }

    /// Counters `(name, value)`.
    ///
    /// # Errors
    /// See [`CtlError`].
    pub fn stats(&mut self) -> Result<Vec<(String, u64)>, CtlError> {
        match self.call(&Request::Stats, &[])?.0 {
            Reply::Stats { counters } => Ok(counters),
            other => Err(CtlError::Protocol(format!("{other:?}"))),
        }
    }
}
