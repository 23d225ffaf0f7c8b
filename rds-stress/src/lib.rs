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
pub mod rdma;
mod run;
pub mod stats;
mod sys;
pub mod task;

pub use opts::{command, Args};

use clap::Parser;

/// Parses the process arguments, runs, and returns the exit code (usage errors 2, fatal
/// errors 1, as the original; 130 or 143 after a run ended by SIGINT or SIGTERM, the status of
/// the original killed by the signal).
pub fn main_code() -> i32 {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            if !e.use_stderr() {
                let _ = e.print();
                return 0;
            }
            eprint!(
                "{}",
                rds_cli::usage_message("rds-stress", &e.render().to_string())
            );
            return i32::from(rds_cli::USAGE_STATUS);
        }
    };
    let r = run::run(&args);
    nodes::shutdown_all();
    match r {
        Ok(code) => code,
        Err(f) => {
            use std::io::Write;
            let _ = std::io::stdout().flush();
            eprint!("{}", f.msg);
            f.code
        }
    }
}
