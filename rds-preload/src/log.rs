//! `RDS_PRELOAD_LOG=1`: one stderr line per intercepted call on an RDS descriptor (and per
//! `socket(AF_RDS)`), `rds-preload[pid]: call(args) = result`.

use std::sync::OnceLock;

/// Whether logging is on (read once from the environment).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(rds_core::env::preload_log)
}

/// Logs `call` and its result: a count, or `-1 ERRNO (text)`.
pub fn call(call: impl FnOnce() -> String, r: &Result<isize, i32>) {
    if !enabled() {
        return;
    }
    thread_local! {
        /// Set while this thread logs: standard error may itself be an RDS descriptor.
        static LOGGING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if LOGGING.with(|l| l.replace(true)) {
        return;
    }
    let call = call();
    let res = match r {
        Ok(n) => n.to_string(),
        Err(e) => format!("-1 {}", errno_name(*e)),
    };
    eprintln!("rds-preload[{}]: {call} = {res}", std::process::id());
    LOGGING.with(|l| l.set(false));
}

/// Says something once per process on stderr (always, not only with logging on).
pub fn warn(msg: &str) {
    eprintln!("rds-preload[{}]: {msg}", std::process::id());
}

/// The symbolic name of an errno this library returns (the number otherwise).
pub fn errno_name(e: i32) -> String {
    let n = match e {
        libc::EAGAIN => "EAGAIN",
        libc::EINVAL => "EINVAL",
        libc::ENOTCONN => "ENOTCONN",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ESOCKTNOSUPPORT => "ESOCKTNOSUPPORT",
        libc::ENOPROTOOPT => "ENOPROTOOPT",
        libc::ENOSPC => "ENOSPC",
        libc::ENOBUFS => "ENOBUFS",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EDESTADDRREQ => "EDESTADDRREQ",
        libc::EBADF => "EBADF",
        libc::EBADFD => "EBADFD",
        libc::ENOTTY => "ENOTTY",
        libc::EFAULT => "EFAULT",
        libc::ENETDOWN => "ENETDOWN",
        libc::ECONNRESET => "ECONNRESET",
        libc::EMFILE => "EMFILE",
        libc::ENOSYS => "ENOSYS",
        _ => return e.to_string(),
    };
    n.to_string()
}
