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

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsRawFd;

use rds_cli::Failure;

use crate::opts::OptError;

/// The exit status of an error in the several-destination form: a refused command line, a
/// destination list that cannot be read, a failed setup (as `rds_cli::error_status` gives
/// every error of the other tools). The one-destination form keeps the original's 1.
pub const ERROR_STATUS: i32 = rds_cli::USAGE_STATUS as i32;

/// rds-ping for [`rds_cli::start::main`]: a usage error exits 1, as the original's (2 in the
/// several-destination form, which [`parse`] tells).
pub const TOOL: rds_cli::start::Tool = rds_cli::start::Tool {
    name: "rds-ping",
    command: opts::command,
    usage_status: 1,
};

/// The exit status of an error in the form `multi` says: 2 with several destinations, the
/// original's 1 with one.
fn error_status(multi: bool) -> u8 {
    if multi {
        ERROR_STATUS as u8
    } else {
        1
    }
}

/// Parses and checks the command line (the program name first) and applies its log level.
///
/// # Errors
/// Help or version (printed, status 0); a refused command line with the original's messages
/// and usage block, status 1, or 2 in the several-destination form ([`opts::multi_form`]).
pub fn parse(args: Vec<OsString>) -> Result<opts::Opts, Failure> {
    let args = args.get(1..).unwrap_or_default();
    match opts::parse(args.iter().cloned()) {
        Ok(o) => {
            rds_cli::logger::set_command_line(0, o.log_level);
            Ok(o)
        }
        Err(e) => {
            let code = error_status(opts::multi_form(args));
            Err(match e {
                OptError::Info(t) => {
                    print!("{t}");
                    Failure::quiet(0)
                }
                OptError::Usage(m) => Failure::new(code, opts::usage_text(&m)),
                OptError::Fatal(m) => Failure::new(code, format!("{}\n", m.trim_end())),
            })
        }
    }
}

/// Pings as `o` says and prints the result; returns the exit status ([`exit_code`], or
/// [`multi_exit_code`] with several destinations).
///
/// # Errors
/// The stack or the sockets cannot be set up: status 1, or 2 with several destinations.
pub fn run(o: opts::Opts) -> Result<u8, Failure> {
    let error = error_status(o.multi);
    rds_cli::apply_stack(TOOL.name, o.stack).map_err(|m| Failure::new(error, format!("{m}\n")))?;
    let r = with_stop(|io| {
        if o.multi {
            run_multi(&o, io)
        } else {
            run_one(&o, io)
        }
    });
    // The embedded node's control socket goes with it, on every path that ends the run.
    rds_core::socket::shutdown_default_node();
    r.map(|code| code as u8)
}

/// Runs `f` with stdout, stderr and Ctrl-C (and SIGTERM) as the way to stop: the signals are
/// taken through a signalfd ([`rds_cli::StopSignals`]), blocked before the node's threads
/// start so that none of them takes the signal.
fn with_stop<T>(f: impl FnOnce(&mut ping::Io<'_>) -> T) -> T {
    let sfd = rds_cli::StopSignals::block().ok();
    let stop_fd = sfd.as_ref().map(AsRawFd::as_raw_fd);
    let mut stop = || sfd.as_ref().is_some_and(|s| s.take().is_some());
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
fn run_one(o: &opts::Opts, io: &mut ping::Io<'_>) -> Result<i32, Failure> {
    let sum = ping::run(o, io).map_err(|ping::Fatal(m)| Failure::new(1, format!("{m}\n")))?;
    let out = &mut io.out;
    if o.json {
        let j = serde_json::to_string_pretty(&sum).map_err(|e| {
            Failure::line(1, TOOL.name, format_args!("cannot encode the result: {e}"))
        })?;
        let _ = writeln!(out, "{j}");
    } else {
        let _ = write!(out, "{}", report::summary_text(&sum));
    }
    let _ = out.flush();
    Ok(exit_code(&sum))
}

/// Runs the several-destination form and prints one line (or JSON object) per destination.
fn run_multi(o: &opts::Opts, io: &mut ping::Io<'_>) -> Result<i32, Failure> {
    let error = error_status(true);
    let sums = multi::run(o, io).map_err(|ping::Fatal(m)| Failure::new(error, format!("{m}\n")))?;
    let out = &mut io.out;
    if o.json {
        let list: Vec<report::Totals> = sums
            .iter()
            .filter(|s| report::shown(o.show, s))
            .map(report::Totals::from)
            .collect();
        let j = serde_json::to_string_pretty(&list).map_err(|e| {
            Failure::line(
                error,
                TOOL.name,
                format_args!("cannot encode the result: {e}"),
            )
        })?;
        let _ = writeln!(out, "{j}");
    } else {
        let _ = write!(out, "{}", report::multi_lines(&sums, o.show));
    }
    let _ = out.flush();
    Ok(multi_exit_code(&sums))
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
    fn completions_offer_the_options() {
        rds_cli::completions::assert_offers(
            &opts::command(),
            "rds-ping",
            &[
                "-c",
                "-n",
                "-i",
                "-I",
                "-Q",
                "-w",
                "-W",
                "--json",
                "-f",
                "--alive",
                "--log-level",
            ],
        );
    }

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
