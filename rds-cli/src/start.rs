//! One way for every tool to start and stop: `main() -> ExitCode` is
//! `rds_cli::start::main(&TOOL, parse, run)`, which
//! 1. answers `--generate-completions SHELL` ([`crate::completions`]) from the tool's clap
//!    command;
//! 2. installs the logger ([`crate::logger::init`]; the tool's `parse` applies `-v` and
//!    `--log-level`);
//! 3. runs `run(parse(args))`: each returns an exit status or a [`Failure`];
//! 4. flushes standard output, prints the failure's text on standard error and exits with its
//!    status ([`finish`]).

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use crate::completions;
use crate::exit::Failure;

/// A tool as [`main`] runs it.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    /// Its name, the prefix of its messages (`rds-ping`).
    pub name: &'static str,
    /// Its clap command (for completions).
    pub command: fn() -> clap::Command,
    /// The exit status of a usage error.
    pub usage_status: u8,
}

/// Runs the tool with the process's arguments; see the module documentation.
pub fn main<A>(
    tool: &Tool,
    parse: impl FnOnce(Vec<OsString>) -> Result<A, Failure>,
    run: impl FnOnce(A) -> Result<u8, Failure>,
) -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    ExitCode::from(finish(start(tool, args, parse, run)))
}

/// Steps 1 to 3 of [`main`] with `args` (the program name first).
///
/// # Errors
/// The failure to report.
pub fn start<A>(
    tool: &Tool,
    args: Vec<OsString>,
    parse: impl FnOnce(Vec<OsString>) -> Result<A, Failure>,
    run: impl FnOnce(A) -> Result<u8, Failure>,
) -> Result<u8, Failure> {
    if let Some(name) = completions::requested(&args) {
        let shell = completions::shell(&name.to_string_lossy())
            .map_err(|m| Failure::line(tool.usage_status, tool.name, m))?;
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        completions::generate((tool.command)(), tool.name, shell, &mut out);
        return match out.flush() {
            Ok(()) => Ok(0),
            Err(e) => Err(Failure::of_io(tool.name, &e, 2)),
        };
    }
    crate::logger::init(tool.name);
    run(parse(args)?)
}

/// Step 4 of [`main`]: the exit status of `r`, after flushing standard output and printing
/// the failure's text.
pub fn finish(r: Result<u8, Failure>) -> u8 {
    match r {
        Ok(status) => status,
        Err(f) => {
            let _ = std::io::stdout().flush();
            if !f.msg.is_empty() {
                let _ = std::io::stderr().lock().write_all(f.msg.as_bytes());
            }
            f.status
        }
    }
}
