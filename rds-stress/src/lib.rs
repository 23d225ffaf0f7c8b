//! rds-stress: RDS traffic generator and latency tester, compatible with the original C
//! rds-stress (options, output formats, control protocol and data messages), built on
//! `rds-core`.
//!
//! - [`opts`]: the command line, defaults and the original's validation messages.
//! - [`control`]: the TCP options exchange (V1/V2/V3 binary layouts and the JSON exchange).
//! - [`msg`]: the 63/96-byte request/ack header, the `-v` payload pattern and its check.
//! - [`task`]: one thread per task, each with its own RDS socket.
//! - [`stats`]: counters, histograms, percentiles and the `-c` CPU soakers.
//! - [`output`]: the exact output formats.
//! - [`plot`]: `--plot`, the run drawn as an SVG image from the same numbers.
//! - `run`: the active and passive roles and `--loopback`.
//! - `nodes`: the embedded nodes, shut down before the process exits.
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod control;
pub mod msg;
mod nodes;
pub mod opts;
pub mod output;
pub mod plot;
pub mod rdma_mode;
mod run;
pub mod stats;
mod sys;
pub mod task;

pub use opts::{command, Args};

/// rds-stress for [`rds_cli::start::main`].
pub const TOOL: rds_cli::start::Tool = rds_cli::start::Tool {
    name: "rds-stress",
    command,
    usage_status: rds_cli::USAGE_STATUS,
};

/// Parses the command line (the program name first) and applies its log level.
///
/// # Errors
/// Help and version (printed, status 0), usage errors (status 2, the original's).
pub fn parse(args: Vec<std::ffi::OsString>) -> Result<Args, rds_cli::Failure> {
    let a: Args = rds_cli::exit::parse(TOOL.name, args, TOOL.usage_status)?;
    a.log.apply();
    Ok(a)
}

/// Runs, shuts the embedded nodes down and returns the exit status: 0 after a complete run,
/// 130 or 143 after one ended by SIGINT or SIGTERM (the status of the original killed by the
/// signal).
///
/// # Errors
/// A fatal error, with the original's message and status (1).
pub fn run(args: Args) -> Result<u8, rds_cli::Failure> {
    let r = run::run(&args);
    nodes::shutdown_all();
    r.map(exit_status).map_err(rds_cli::Failure::from)
}

/// An exit status as the process reports it (its low eight bits).
fn exit_status(code: i32) -> u8 {
    (code & 0xff) as u8
}

impl From<opts::Fatal> for rds_cli::Failure {
    fn from(f: opts::Fatal) -> Self {
        rds_cli::Failure::new(exit_status(f.code), f.msg)
    }
}
