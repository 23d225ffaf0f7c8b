//! The preload library's logger behind the `log` facade, for its own messages and those of
//! `rds-core` in the program it is loaded into: one line per message on standard error,
//! `rds-preload[PID]: message`.
//!
//! Level: `RDS_LOG` (`error`, `warn`, `info`, `debug`, `trace` or `off`; default `warn`, so
//! that what must be said, a daemon gone or a forked child refused, is). `RDS_PRELOAD_LOG=1`
//! (any value but empty or `0`), this library's switch before the facade, is the same as
//! `RDS_LOG=debug` when `RDS_LOG` is not set. At debug level each intercepted call on an RDS
//! descriptor (and each `socket(AF_RDS)`) is a line `rds-preload[PID]: call(args) = result`.

use std::io::Write;
use std::sync::Once;

use log::{LevelFilter, Log, Metadata, Record};

struct Logger;

static LOGGER: Logger = Logger;

thread_local! {
    /// Set while this thread logs: standard error may itself be an RDS descriptor.
    static LOGGING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The level `RDS_LOG` and `RDS_PRELOAD_LOG` ask for.
fn level() -> LevelFilter {
    if let Some(l) = rds_core::env::log_level().and_then(|v| v.trim().parse::<LevelFilter>().ok()) {
        return l;
    }
    if rds_core::env::preload_log() {
        return LevelFilter::Debug;
    }
    LevelFilter::Warn
}

/// Installs the logger (once; a program that installed a logger of its own keeps it).
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(level());
        }
    });
}

impl Log for Logger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &Record<'_>) {
        if !self.enabled(r.metadata()) || LOGGING.with(|l| l.replace(true)) {
            return;
        }
        let line = format!("rds-preload[{}]: {}\n", std::process::id(), r.args());
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
        LOGGING.with(|l| l.set(false));
    }

    fn flush(&self) {}
}

/// Logs `call` and its result, a count or `-1 ERRNO`, at debug level.
pub fn call(call: impl FnOnce() -> String, r: &Result<isize, i32>) {
    init();
    if !log::log_enabled!(log::Level::Debug) {
        return;
    }
    let res = match r {
        Ok(n) => n.to_string(),
        Err(e) => format!("-1 {}", errno_name(*e)),
    };
    log::debug!("{} = {res}", call());
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
