//! rds-ping: checks that an RDS peer answers, compatible with rds-ping of rds-tools 2.3.
//!
//! The command line and reply lines are the original's ([`opts`], [`report::line`]); the run
//! ends with an iputils-style summary (or one JSON object with `--json`) and never waits
//! forever: a ping counts as lost after `-W` seconds, `-w` bounds the whole run, and a peer
//! that never answers is given up on after [`ping::GIVE_UP_AFTER_LOST`] lost pings. The exit
//! status is 0 only when replies came and no ping failed with an error ([`exit_code`]).
//!
//! Several destinations (or `-f FILE`, `-a`, `-u`) are pinged in parallel ([`multi`], over
//! the shared sockets of [`pool`], the list read and checked by [`targets`]) and end with one
//! line per destination, or a JSON array ([`report::multi_lines`], [`report::Totals`]); the
//! exit status is then 0 when every destination answered, 1 when one did not, 2 for a refused
//! command line or a failed setup ([`multi_exit_code`], [`ERROR_STATUS`]).
//!
//! Sockets come from `rds_core::Socket::new` with the `--stack` choice: through the host
//! daemon when one owns the source address, else the kernel's RDS when loaded, else an
//! embedded node started in this process.

pub mod multi;
pub mod opts;
pub mod ping;
pub mod pool;
pub mod report;
pub mod targets;

use std::io::Write;
use std::os::fd::AsRawFd;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::opts::OptError;

/// The exit status of an error in the several-destination form: a refused command line, a
/// destination list that cannot be read, a failed setup (as `rds_cli::error_status` gives
/// every error of the other tools). The one-destination form keeps the original's 1.
pub const ERROR_STATUS: i32 = rds_cli::USAGE_STATUS as i32;

/// Runs rds-ping with `args` (without the program name); returns the exit code.
pub fn main_with<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let o = match opts::parse(args.iter().cloned()) {
        Ok(o) => o,
        Err(e) => {
            let code = if opts::multi_form(&args) {
                ERROR_STATUS
            } else {
                1
            };
            return match e {
                OptError::Info(t) => {
                    print!("{t}");
                    0
                }
                OptError::Usage(m) => {
                    eprint!("{}", opts::usage_text(&m));
                    code
                }
                OptError::Fatal(m) => {
                    eprintln!("{}", m.trim_end());
                    code
                }
            };
        }
    };
    let error = if o.multi { ERROR_STATUS } else { 1 };
    if let Err(m) = rds_cli::apply_stack("rds-ping", o.stack) {
        eprintln!("{m}");
        return error;
    }
    let code = with_stop(|io| {
        if o.multi {
            run_multi(&o, io)
        } else {
            run(&o, io)
        }
    });
    // The embedded node's control socket goes with it, on every path that ends the run.
    rds_core::socket::shutdown_default_node();
    code
}

/// Runs `f` with stdout, stderr and Ctrl-C (and SIGTERM) as the way to stop: the signals are
/// taken through a signalfd, blocked before the node's threads start so that none of them
/// takes the signal.
fn with_stop(f: impl FnOnce(&mut ping::Io<'_>) -> i32) -> i32 {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGINT);
    mask.add(Signal::SIGTERM);
    let sfd = mask.thread_block().ok().and_then(|()| {
        SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC).ok()
    });
    let stop_fd = sfd.as_ref().map(AsRawFd::as_raw_fd);
    let mut stop = || {
        sfd.as_ref()
            .is_some_and(|s| matches!(s.read_signal(), Ok(Some(_))))
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut err = std::io::stderr();
    let mut io = ping::Io {
        out: &mut out,
        err: &mut err,
        stop_fd,
        stop: &mut stop,
    };
    f(&mut io)
}

/// Runs the pings of the one-destination form and prints the result; returns the exit code.
fn run(o: &opts::Opts, io: &mut ping::Io<'_>) -> i32 {
    let sum = match ping::run(o, io) {
        Ok(s) => s,
        Err(ping::Fatal(m)) => {
            eprintln!("{m}");
            return 1;
        }
    };
    let out = &mut io.out;
    if o.json {
        match serde_json::to_string_pretty(&sum) {
            Ok(j) => {
                let _ = writeln!(out, "{j}");
            }
            Err(e) => {
                eprintln!("rds-ping: cannot encode the result: {e}");
                return 1;
            }
        }
    } else {
        let _ = write!(out, "{}", report::summary_text(&sum));
    }
    let _ = out.flush();
    exit_code(&sum)
}

/// Runs the several-destination form and prints one line (or JSON object) per destination.
fn run_multi(o: &opts::Opts, io: &mut ping::Io<'_>) -> i32 {
    let sums = match multi::run(o, io) {
        Ok(s) => s,
        Err(ping::Fatal(m)) => {
            eprintln!("{m}");
            return ERROR_STATUS;
        }
    };
    let out = &mut io.out;
    if o.json {
        let list: Vec<report::Totals> = sums
            .iter()
            .filter(|s| report::shown(o.show, s))
            .map(report::Totals::from)
            .collect();
        match serde_json::to_string_pretty(&list) {
            Ok(j) => {
                let _ = writeln!(out, "{j}");
            }
            Err(e) => {
                eprintln!("rds-ping: cannot encode the result: {e}");
                return ERROR_STATUS;
            }
        }
    } else {
        let _ = write!(out, "{}", report::multi_lines(&sums, o.show));
    }
    let _ = out.flush();
    multi_exit_code(&sums)
}

/// The exit status of the several-destination form: 0 when every destination answered and
/// no ping failed with an error, else 1.
pub fn multi_exit_code(sums: &[report::Summary]) -> i32 {
    i32::from(!sums.iter().all(|s| report::answered(s) && s.errors == 0))
}

/// The exit status of a run: 1 when no reply came or a ping failed with an error (the
/// daemon went away, the socket failed), else 0.
pub fn exit_code(sum: &report::Summary) -> i32 {
    i32::from(sum.received + sum.duplicates == 0 || sum.errors > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_make_the_exit_status_one() {
        let mut s = report::Summary {
            transmitted: 8,
            received: 5,
            ..Default::default()
        };
        assert_eq!(exit_code(&s), 0);
        // The daemon went away after five replies: three ERROR lines.
        s.errors = 3;
        assert_eq!(exit_code(&s), 1);
        s.errors = 0;
        s.received = 0;
        assert_eq!(exit_code(&s), 1);
    }

    #[test]
    fn every_destination_must_answer() {
        let ok = report::Summary {
            transmitted: 3,
            received: 1,
            ..Default::default()
        };
        let silent = report::Summary {
            transmitted: 3,
            ..Default::default()
        };
        let failing = report::Summary {
            errors: 1,
            ..ok.clone()
        };
        assert_eq!(multi_exit_code(&[ok.clone(), ok.clone()]), 0);
        assert_eq!(multi_exit_code(&[ok.clone(), silent]), 1);
        assert_eq!(multi_exit_code(&[ok, failing]), 1);
        assert_eq!(ERROR_STATUS, 2);
    }
}
