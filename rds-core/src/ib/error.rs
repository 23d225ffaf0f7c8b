//! The errors of the rdma-core layer and what every verbs wrapper shares: why the transport is
//! unavailable on this host, the error of a failed call, the checks of a C return code, and the
//! macro that turns a C enum into a Rust enum with an `Unknown` variant.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::io;
use std::os::fd::RawFd;

/// A failed verbs call.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {source}")]
pub struct VerbsError {
    /// The C function that failed (`ibv_create_cq`, `post_send`, ...).
    pub op: &'static str,
    /// The errno it reported.
    #[source]
    pub source: io::Error,
}

impl VerbsError {
    pub(crate) fn new(op: &'static str, source: io::Error) -> Self {
        VerbsError { op, source }
    }

    /// From `errno` after a call that returned NULL or -1.
    pub(crate) fn errno(op: &'static str) -> Self {
        let e = io::Error::last_os_error();
        let source = if e.raw_os_error() == Some(0) {
            io::Error::other("failed without an errno")
        } else {
            e
        };
        VerbsError { op, source }
    }

    /// From a return code that is an errno value (positive), or -1 with `errno` set, or a
    /// negative errno.
    pub(crate) fn rc(op: &'static str, rc: c_int) -> Self {
        if rc > 0 {
            return VerbsError::new(op, io::Error::from_raw_os_error(rc));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(n) if n != 0 && rc == -1 => VerbsError::new(op, e),
            _ if rc < -1 => VerbsError::new(op, io::Error::from_raw_os_error(-rc)),
            _ => VerbsError::new(op, io::Error::other(format!("failed with {rc}"))),
        }
    }

    /// An argument problem found before calling the library.
    pub(crate) fn invalid(op: &'static str, what: impl Into<String>) -> Self {
        VerbsError::new(op, io::Error::new(io::ErrorKind::InvalidInput, what.into()))
    }
}

pub(crate) fn check(op: &'static str, rc: c_int) -> Result<(), VerbsError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(VerbsError::rc(op, rc))
    }
}

pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd this module owns (a channel fd); F_GETFL has no pointer argument.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; F_SETFL takes an int.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn c_chars_to_string(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident : $raw:ty { $($(#[$vm:meta])* $v:ident = $c:path),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $v,)*
            /// A value this binding does not know.
            Unknown($raw),
        }
        impl From<$raw> for $name {
            fn from(raw: $raw) -> Self {
                match raw {
                    $(x if x == $c => $name::$v,)*
                    other => $name::Unknown(other),
                }
            }
        }
        impl From<$name> for $raw {
            fn from(v: $name) -> $raw {
                match v {
                    $($name::$v => $c,)*
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}

pub(crate) use c_enum;

/// Why the IB transport is not available on this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IbUnavailable {
    /// A shared library could not be opened.
    #[error("{library} not found: install {package} ({detail})")]
    LibraryMissing {
        /// The library file name (`libibverbs.so.1`, `librdmacm.so.1`).
        library: String,
        /// The Debian package(s) that ship it.
        package: &'static str,
        /// The loader's message.
        detail: String,
    },
    /// A library was opened but lacks a function we call (rdma-core too old or broken).
    #[error("{library} has no symbol {symbol}: rdma-core too old? ({detail})")]
    SymbolMissing {
        /// The library file name.
        library: String,
        /// The missing function.
        symbol: &'static str,
        /// The loader's message.
        detail: String,
    },
    /// `ibv_get_device_list` failed (for example the kernel has no `ib_uverbs` support).
    #[error("cannot list RDMA devices: {0}")]
    DeviceList(String),
    /// The libraries work but the kernel has no RDMA verbs support at all (no
    /// `/sys/class/infiniband_verbs`: `ib_uverbs` not loaded, no RDMA driver).
    #[error("no RDMA devices: the kernel has no RDMA verbs support (no HCA driver; for soft-RoCE: modprobe rdma_rxe ib_uverbs rdma_ucm, then `rdma link add rxe0 type rxe netdev eth0`)")]
    NoKernelSupport,
    /// The libraries work but the host has no RDMA device (no HCA, no `rdma_rxe` / `siw` link).
    #[error("no RDMA devices (no HCA, and no soft-RoCE link such as `rdma link add rxe0 type rxe netdev eth0`)")]
    NoDevices,
}
