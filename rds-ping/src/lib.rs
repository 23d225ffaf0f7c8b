//! rds-ping: checks that an RDS peer answers, compatible with rds-ping of rds-tools 2.3.
//!
//! The command line and reply lines are the original's ([`opts`], [`report::line`]); the run
//! ends with an iputils-style summary (or one JSON object with `--json`) and never waits
//! forever: a ping counts as lost after `-W` seconds, `-w` bounds the whole run, and a peer
//! that never answers is given up on after [`ping::GIVE_UP_AFTER_LOST`] lost pings. The exit
//! status is 0 only when replies came and no ping failed with an error ([`exit_code`]).
//!
//! Sockets come from `rds_core::Socket::new` with the `--stack` choice: through the host
//! daemon when one owns the source address, else the kernel's RDS when loaded, else an
//! embedded node started in this process.

pub mod opts;
pub mod ping;
pub mod report;

use std::io::Write;
use std::os::fd::AsRawFd;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::opts::OptError;

/// Runs rds-ping with `args` (without the program name); returns the exit code.
pub fn main_with<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let o = match opts::parse(args) {
        Ok(o) => o,
        Err(OptError::Info(t)) => {
            print!("{t}");
            return 0;
        }
        Err(OptError::Usage(m)) => {
            eprint!("{}", opts::usage_text(&m));
            return 1;
        }
        Err(OptError::Fatal(m)) => {
            eprintln!("{}", m.trim_end());
            return 1;
        }
    };
    if let Err(m) = rds_cli::apply_stack("rds-ping", o.stack) {
        eprintln!("{m}");
        return 1;
    }
    let code = run(&o);
    // The embedded node's control socket goes with it, on every path that ends the run.
    rds_core::socket::shutdown_default_node();
    code
}

/// Runs the pings and prints the result; returns the exit code.
fn run(o: &opts::Opts) -> i32 {
    // Ctrl-C and SIGTERM end the run with its summary. They are taken through a signalfd,
    // blocked before the node's threads start so that none of them takes the signal.
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
    let sum = match ping::run(o, &mut io) {
        Ok(s) => s,
        Err(ping::Fatal(m)) => {
            eprintln!("{m}");
            return 1;
        }
    };
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
}
